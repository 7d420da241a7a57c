//! ACPI PCI hotplug, as Cloud Hypervisor describes it: the controller
//! `\_SB_.PHPR` (its registers, see `devices::pci::hotplug`), one slot
//! object per hot-pluggable slot of `PCI0`, and the method the GED's
//! `_EVT` calls when the VMM signals "PCI devices changed". Linux's
//! `acpiphp` registers a hotplug slot for every ejectable `Snnn` and acts
//! on the notifications.
//!
//! ```text
//! Device (\_SB_.PHPR)  PNP0A06, _STA 0x0B, _CRS: the register block
//!     Mutex (BLCK)
//!     Field { PCIU 32, PCID 32, B0EJ 32, PSEG 32 }  (DWordAcc, WriteAsZeros)
//!     Method (PCEJ, 2)   PSEG = Arg1; B0EJ = 1 << Arg0
//! In \_SB_.PCI0, for n in 1..=31:
//!     Device (Snnn) { _SUN n, _ADR n << 16, Method (_EJ0, 1) { PCEJ (_SUN, _SEG) } }
//!     Method (DVNT, 2)   for each slot bit in Arg0: Notify (Snnn, Arg1)
//!     Method (PCNT, 0)   PSEG = _SEG; DVNT (PCIU, 1); DVNT (PCID, 3)
//! ```
//!
//! Slots have no `_STA` (as upstream's): the guest reads the slot's
//! vendor ID to see whether a device is there.

use acpi_tables::aml::{
    Acquire, AddressSpace, AddressSpaceCacheable, And, Arg, Device, EISAName, Equal, Field,
    FieldAccessType, FieldEntry, FieldLockRule, FieldUpdateRule, If, Local, Method, MethodCall,
    Mutex, Name, Notify, OpRegion, OpRegionSpace, Path, Release, ResourceTemplate, Return,
    ShiftLeft, Store, ONE, ZERO,
};
use acpi_tables::Aml;

use super::aml_bytes;

/// First and last hot-pluggable slot (slot 0 is the host bridge).
const SLOTS: std::ops::RangeInclusive<u8> = 1..=31;
/// `Notify` codes (ACPI 6.5 table 5.166).
const NOTIFY_DEVICE_CHECK: u8 = 1;
const NOTIFY_EJECT_REQUEST: u8 = 3;

/// `\_SB_.PHPR` for the register block at `base` (`size` bytes), for the
/// DSDT's `\_SB_` scope.
pub(super) fn controller(base: u64, size: u64) -> Vec<u8> {
    let crs = AddressSpace::<u64>::new_memory(
        AddressSpaceCacheable::NotCacheable,
        true,
        base,
        base + (size - 1),
        None,
    );
    let b0ej = Path::new("B0EJ");
    let pseg = Path::new("PSEG");
    let base = base as usize;
    let size = size as usize;
    aml_bytes(&Device::new(
        Path::new("PHPR"),
        vec![
            &Name::new(Path::new("_HID"), &EISAName::new("PNP0A06")),
            &Name::new(Path::new("_STA"), &0x0bu8),
            &Name::new(Path::new("_UID"), &"PCI Hotplug Controller"),
            &Mutex::new(Path::new("BLCK"), 0),
            &Name::new(Path::new("_CRS"), &ResourceTemplate::new(vec![&crs])),
            &OpRegion::new(Path::new("PCST"), OpRegionSpace::SystemMemory, &base, &size),
            &Field::new(
                Path::new("PCST"),
                FieldAccessType::DWord,
                FieldLockRule::NoLock,
                FieldUpdateRule::WriteAsZeroes,
                vec![
                    FieldEntry::Named(*b"PCIU", 32),
                    FieldEntry::Named(*b"PCID", 32),
                    FieldEntry::Named(*b"B0EJ", 32),
                    FieldEntry::Named(*b"PSEG", 32),
                ],
            ),
            &Method::new(
                Path::new("PCEJ"),
                2,
                true,
                vec![
                    &Acquire::new(Path::new("BLCK"), 0xffff),
                    &Store::new(&pseg, &Arg(1)),
                    &ShiftLeft::new(&b0ej, &ONE, &Arg(0)),
                    &Release::new(Path::new("BLCK")),
                    &Return::new(&ZERO),
                ],
            ),
        ],
    ))
}

fn slot(n: u8) -> Vec<u8> {
    let adr = u32::from(n) << 16;
    let sun = Path::new("_SUN");
    let seg = Path::new("_SEG");
    aml_bytes(&Device::new(
        Path::new(&format!("S{n:03}")),
        vec![
            &Name::new(Path::new("_SUN"), &n),
            &Name::new(Path::new("_ADR"), &adr),
            &Method::new(
                Path::new("_EJ0"),
                1,
                true,
                vec![&MethodCall::new(
                    Path::new("\\_SB_.PHPR.PCEJ"),
                    vec![&sun, &seg],
                )],
            ),
        ],
    ))
}

fn notify_slots() -> Vec<u8> {
    let mut body = Vec::new();
    for n in SLOTS {
        let mask = 1u32 << n;
        let object = Path::new(&format!("S{n:03}"));
        body.extend(aml_bytes(&And::new(&Local(0), &Arg(0), &mask)));
        body.extend(aml_bytes(&If::new(
            &Equal::new(&Local(0), &mask),
            vec![&Notify::new(&object, &Arg(1))],
        )));
    }
    aml_bytes(&Method::new(
        Path::new("DVNT"),
        2,
        true,
        vec![&RawAml(body)],
    ))
}

fn scan_method() -> Vec<u8> {
    let pciu = Path::new("\\_SB_.PHPR.PCIU");
    let pcid = Path::new("\\_SB_.PHPR.PCID");
    aml_bytes(&Method::new(
        Path::new("PCNT"),
        0,
        true,
        vec![
            &Acquire::new(Path::new("\\_SB_.PHPR.BLCK"), 0xffff),
            &Store::new(&Path::new("\\_SB_.PHPR.PSEG"), &Path::new("_SEG")),
            &MethodCall::new(Path::new("DVNT"), vec![&pciu, &NOTIFY_DEVICE_CHECK]),
            &MethodCall::new(Path::new("DVNT"), vec![&pcid, &NOTIFY_EJECT_REQUEST]),
            &Release::new(Path::new("\\_SB_.PHPR.BLCK")),
        ],
    ))
}

/// The slot objects and `DVNT`/`PCNT`, to go inside `PCI0`.
pub(super) fn bridge_objects() -> Vec<u8> {
    let mut bytes: Vec<u8> = SLOTS.flat_map(slot).collect();
    bytes.extend(notify_slots());
    bytes.extend(scan_method());
    bytes
}

/// Already encoded AML, as a term of a larger object.
pub(super) struct RawAml(pub Vec<u8>);

impl Aml for RawAml {
    fn to_aml_bytes(&self, sink: &mut dyn acpi_tables::AmlSink) {
        for b in &self.0 {
            sink.byte(*b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::contains;
    use super::*;

    #[test]
    fn controller_has_the_register_fields_and_the_eject_method() {
        let b = controller(0xe010_0000, 0x10);
        assert!(contains(&b, b"PHPR"));
        assert!(
            contains(&b, &[0x0c, 0x41, 0xd0, 0x0a, 0x06]),
            "EISAID PNP0A06"
        );
        // OperationRegion (PCST, SystemMemory, 0xe0100000, 0x10)
        assert!(contains(
            &b,
            &[0x5b, 0x80, b'P', b'C', b'S', b'T', 0, 0x0c, 0, 0, 0x10, 0xe0, 0x0a, 0x10]
        ));
        // Field (PCST, DWordAcc, NoLock, WriteAsZeros) { PCIU 32, PCID 32, B0EJ 32, PSEG 32 }
        let mut field = b"PCST".to_vec();
        field.push(0x03 | (2 << 5));
        for name in [b"PCIU", b"PCID", b"B0EJ", b"PSEG"] {
            field.extend_from_slice(name);
            field.push(32);
        }
        assert!(contains(&b, &field));
        assert!(
            contains(&b, &[b'P', b'C', b'E', b'J', 0x0a]),
            "PCEJ, 2 args, serialized"
        );
        assert!(
            contains(&b, &[0x5b, 0x01, b'B', b'L', b'C', b'K', 0]),
            "Mutex BLCK"
        );
        // ShiftLeft (One, Arg1... Arg0, B0EJ)
        assert!(contains(&b, &[0x79, 0x01, 0x68, b'B', b'0', b'E', b'J']));
    }

    #[test]
    fn every_slot_but_the_host_bridge_is_ejectable_and_notified() {
        let b = bridge_objects();
        assert!(!contains(&b, b"S000"));
        for n in 1u8..=31 {
            let name = format!("S{n:03}");
            assert!(contains(&b, name.as_bytes()), "{name}");
            // Name (_ADR, n << 16) as a DWordConst.
            let mut adr = vec![0x08, b'_', b'A', b'D', b'R', 0x0c];
            adr.extend_from_slice(&(u32::from(n) << 16).to_le_bytes());
            assert!(contains(&b, &adr), "{name} _ADR");
        }
        assert_eq!(
            b.windows(4).filter(|w| w == b"_EJ0").count(),
            31,
            "one _EJ0 per slot"
        );
        assert!(contains(&b, &[b'D', b'V', b'N', b'T', 0x0a]));
        assert!(contains(&b, &[b'P', b'C', b'N', b'T', 0x08]));
        // Notify (S031, Arg1)
        assert!(contains(&b, &[0x86, b'S', b'0', b'3', b'1', 0x69]));
    }
}
