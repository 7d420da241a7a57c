//! SMBIOS 3.x tables (DMTF DSP0134): what the guest reads its machine
//! identity from, `dmidecode` and `/sys/class/dmi/id/*` in Linux.
//!
//! ```text
//! SMBIOS_START     64-bit entry point "_SM3_" (24 bytes): version 3.2.0,
//!                  structure table length and address
//! SMBIOS_START+32  structure table:
//!                    type 0    BIOS information
//!                    type 1    system information (manufacturer, product,
//!                              version, serial number, UUID, SKU, family)
//!                    type 3    chassis (only with an asset tag)
//!                    type 11   OEM strings (only when there are some)
//!                    type 127  end of table
//! ```
//!
//! Each structure is a formatted area (type, length, handle, fields; a
//! string field holds the 1-based number of a string in the set that
//! follows, 0 for none) and a string set: NUL-terminated strings, ended by
//! one more NUL, or two NULs when the structure has no strings.
//!
//! The contents follow upstream Cloud Hypervisor (v53), so a guest sees the
//! same `sys_vendor` ("Cloud Hypervisor"), `product_name`
//! ("cloud-hypervisor"), BIOS vendor and version, and the same optional
//! fields. Where upstream would write a broken table (a string with a NUL,
//! an empty string, more than 255 strings in one structure, tables larger
//! than their area) this module refuses with an error instead.
//!
//! Linux (`dmi_scan_machine`, non-EFI) maps 0xF0000..0x100000 once and
//! looks for "_SM3_" on every 16-byte boundary; the entry point is in that
//! window ([`layout::SMBIOS_START`]), and the structures follow it inside
//! [`layout::SMBIOS_END`].

use vm_memory::{Bytes, GuestAddress, GuestMemory, GuestMemoryError};

use crate::checksum::checksum_byte;
use crate::layout;

/// The manufacturer in type 1 when none is configured (upstream's).
pub const DEFAULT_SYSTEM_MANUFACTURER: &str = "Cloud Hypervisor";
/// The product name in type 1 when none is configured (upstream's).
pub const DEFAULT_SYSTEM_PRODUCT_NAME: &str = "cloud-hypervisor";
/// The BIOS vendor in type 0 (upstream's).
pub const BIOS_VENDOR: &str = "cloud-hypervisor";
/// The BIOS version in type 0 (upstream's).
pub const BIOS_VERSION: &str = "0";
/// Most OEM strings: type 11 counts them in one byte, and a string number
/// is one byte.
pub const MAX_OEM_STRINGS: usize = 255;

/// Length of the SMBIOS 3.0 (64-bit) entry point.
const ENTRY_POINT_LEN: usize = 0x18;
/// Offset of the structure table from [`layout::SMBIOS_START`] (the entry
/// point, rounded up to a paragraph).
const TABLE_OFFSET: u64 = 0x20;
/// The largest structure table that fits the area.
pub const MAX_TABLE_LEN: usize =
    (layout::SMBIOS_END - layout::SMBIOS_START - TABLE_OFFSET) as usize;

/// SMBIOS version 3.2.0 (upstream's), entry point revision 1 (3.0 format).
const VERSION_MAJOR: u8 = 3;
const VERSION_MINOR: u8 = 2;
const VERSION_DOCREV: u8 = 0;
const ENTRY_POINT_REVISION: u8 = 1;

/// Structure types.
const TYPE_BIOS: u8 = 0;
const TYPE_SYSTEM: u8 = 1;
const TYPE_CHASSIS: u8 = 3;
const TYPE_OEM_STRINGS: u8 = 11;
const TYPE_END: u8 = 127;

/// Formatted-area lengths: type 0 in its 3.1+ form (with the extended ROM
/// size), type 1 in its 2.4+ form, type 3 without contained elements.
const BIOS_LEN: usize = 0x1a;
const SYSTEM_LEN: usize = 0x1b;
const CHASSIS_LEN: usize = 0x15;
const OEM_STRINGS_LEN: usize = 0x05;
const END_LEN: usize = 0x04;

/// Type 0 characteristics: PCI is supported (bit 7).
const BIOS_CHARACTERISTICS: u64 = 1 << 7;
/// Type 0 characteristics extension byte 2: the table describes a virtual
/// machine (bit 4).
const BIOS_CHARACTERISTICS_EXT2: u8 = 1 << 4;
/// "Not supported" for the BIOS and embedded-controller release numbers.
const RELEASE_NOT_SUPPORTED: u8 = 0xff;
/// Type 1 wake-up type "Unknown" (upstream's).
const WAKE_UP_UNKNOWN: u8 = 0x02;
/// Type 3 chassis type, boot-up, power supply and thermal states
/// "Unknown", security status "None" (upstream's).
const CHASSIS_TYPE_UNKNOWN: u8 = 0x02;
const STATE_UNKNOWN: u8 = 0x02;
const SECURITY_NONE: u8 = 0x03;

/// Bytes of the table that do not depend on the configured strings, at
/// most: every formatted area, the fixed BIOS strings, the default system
/// manufacturer and product name, and every string-set terminator.
const FIXED_LEN: usize = BIOS_LEN
    + BIOS_VENDOR.len()
    + 1
    + BIOS_VERSION.len()
    + 1
    + 1
    + SYSTEM_LEN
    + DEFAULT_SYSTEM_MANUFACTURER.len()
    + 1
    + DEFAULT_SYSTEM_PRODUCT_NAME.len()
    + 1
    + 1
    + CHASSIS_LEN
    + 1
    + OEM_STRINGS_LEN
    + 1
    + END_LEN
    + 2;
/// How many bytes the configured strings may take together, each with its
/// terminating NUL: any configuration within this fits the area. (The VM
/// configuration checks the same bound, so a configuration that passed
/// validation never fails here.)
pub const MAX_STRING_BYTES: usize = 16_000;
const _: () = assert!(FIXED_LEN + MAX_STRING_BYTES <= MAX_TABLE_LEN);
// The entry point and the table stay inside the SMBIOS area.
const _: () =
    assert!(layout::SMBIOS_START + TABLE_OFFSET + MAX_TABLE_LEN as u64 <= layout::SMBIOS_END);
const _: () = assert!(ENTRY_POINT_LEN as u64 <= TABLE_OFFSET);

/// The machine identity the tables describe. `None` or an empty string
/// leaves a field unset (string number 0), except the manufacturer and
/// product name, which then take upstream's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmbiosConfig {
    /// Type 1 manufacturer (`sys_vendor`); default [`DEFAULT_SYSTEM_MANUFACTURER`].
    pub manufacturer: Option<String>,
    /// Type 1 product name (`product_name`); default [`DEFAULT_SYSTEM_PRODUCT_NAME`].
    pub product_name: Option<String>,
    /// Type 1 version (`product_version`).
    pub version: Option<String>,
    /// Type 1 serial number (`product_serial`); cloud-init's NoCloud
    /// datasource reads its seed from here ("ds=nocloud;s=...").
    pub serial_number: Option<String>,
    /// Type 1 UUID in RFC 4122 byte order (as written, "00112233-4455-...";
    /// stored in SMBIOS byte order). None: all zeros, "not present".
    pub uuid: Option<[u8; 16]>,
    /// Type 1 SKU number (`product_sku`).
    pub sku_number: Option<String>,
    /// Type 1 family (`product_family`).
    pub family: Option<String>,
    /// Type 3 asset tag (`chassis_asset_tag`); a type 3 structure is written
    /// only when this is set, as upstream does.
    pub chassis_asset_tag: Option<String>,
    /// Type 11 strings, in order; none: no type 11 structure.
    pub oem_strings: Vec<String>,
}

/// Errors while building or writing the SMBIOS tables.
#[derive(Debug, thiserror::Error)]
pub enum SmbiosError {
    /// A string contains a NUL byte, which would end it (and its set) early.
    #[error("SMBIOS {field}: a string may not contain a NUL byte")]
    NulInString {
        /// The configuration field, e.g. `system_serial_number` or `oem_strings[2]`.
        field: String,
    },
    /// An OEM string is empty: type 11 cannot hold one (an empty string
    /// would end the string set).
    #[error("SMBIOS oem_strings[{0}] is empty; an SMBIOS string cannot be empty")]
    EmptyOemString(usize),
    /// More OEM strings than type 11 can count.
    #[error("{0} OEM strings do not fit one SMBIOS structure (at most {MAX_OEM_STRINGS})")]
    TooManyOemStrings(usize),
    /// The configured strings take more room than the area has.
    #[error(
        "the SMBIOS tables need {needed} bytes but only {available} fit below 1 MiB \
         (shorten the serial number, OEM strings or other platform strings)"
    )]
    TooLarge {
        /// Bytes of the structure table.
        needed: usize,
        /// [`MAX_TABLE_LEN`].
        available: usize,
    },
    /// Writing the tables to guest memory failed.
    #[error("writing the SMBIOS tables: {0}")]
    GuestMemory(#[from] GuestMemoryError),
}

/// The built tables: the entry point and the structure table it points at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmbiosTables {
    /// Guest address of the entry point.
    pub entry_point_addr: u64,
    /// The 64-bit entry point, checksummed.
    pub entry_point: [u8; ENTRY_POINT_LEN],
    /// Guest address of the structure table.
    pub table_addr: u64,
    /// Every structure, type 127 last.
    pub table: Vec<u8>,
}

/// An RFC 4122 UUID in the byte order SMBIOS 2.6+ stores it: the first
/// three fields (time_low, time_mid, time_hi_and_version) little-endian,
/// the rest as is. Linux and dmidecode print it back as written.
pub fn uuid_to_smbios_order(uuid: [u8; 16]) -> [u8; 16] {
    let mut out = uuid;
    out[0..4].reverse();
    out[4..6].reverse();
    out[6..8].reverse();
    out
}

/// The string set of one structure.
#[derive(Default)]
struct StringSet {
    bytes: Vec<u8>,
    count: u8,
}

impl StringSet {
    /// Appends `s` and returns its string number; 0 (no string) for `None`
    /// or an empty string.
    fn add(&mut self, field: &str, s: Option<&str>) -> Result<u8, SmbiosError> {
        let Some(s) = s.filter(|s| !s.is_empty()) else {
            return Ok(0);
        };
        if s.as_bytes().contains(&0) {
            return Err(SmbiosError::NulInString {
                field: field.to_owned(),
            });
        }
        // Every structure here has at most MAX_OEM_STRINGS strings (type 11
        // is checked before; the others have at most six).
        self.count = self.count.saturating_add(1);
        self.bytes.extend_from_slice(s.as_bytes());
        self.bytes.push(0);
        Ok(self.count)
    }

    /// The set as it follows the formatted area.
    fn terminated(mut self) -> Vec<u8> {
        if self.bytes.is_empty() {
            self.bytes.push(0);
        }
        self.bytes.push(0);
        self.bytes
    }
}

/// Appends one structure: `formatted` (type, length and handle are filled
/// in here) and its strings.
fn push_structure(table: &mut Vec<u8>, mut formatted: Vec<u8>, handle: u16, strings: StringSet) {
    formatted[1] = formatted.len() as u8; // every formatted area here is < 256 bytes
    formatted[2..4].copy_from_slice(&handle.to_le_bytes());
    table.extend_from_slice(&formatted);
    table.extend_from_slice(&strings.terminated());
}

fn bios_information(handle: u16, table: &mut Vec<u8>) -> Result<(), SmbiosError> {
    let mut s = StringSet::default();
    let mut f = vec![0u8; BIOS_LEN];
    f[0] = TYPE_BIOS;
    f[4] = s.add("bios_vendor", Some(BIOS_VENDOR))?;
    f[5] = s.add("bios_version", Some(BIOS_VERSION))?;
    // 6..8: BIOS starting segment, 8: release date (none), 9: ROM size: 0.
    f[0x0a..0x12].copy_from_slice(&BIOS_CHARACTERISTICS.to_le_bytes());
    f[0x13] = BIOS_CHARACTERISTICS_EXT2;
    f[0x14..0x18].fill(RELEASE_NOT_SUPPORTED);
    // 0x18..0x1a: extended ROM size, 0.
    push_structure(table, f, handle, s);
    Ok(())
}

fn system_information(
    cfg: &SmbiosConfig,
    handle: u16,
    table: &mut Vec<u8>,
) -> Result<(), SmbiosError> {
    let or_default = |v: &Option<String>, d: &'static str| -> String {
        v.as_deref()
            .filter(|v| !v.is_empty())
            .unwrap_or(d)
            .to_owned()
    };
    let mut s = StringSet::default();
    let mut f = vec![0u8; SYSTEM_LEN];
    f[0] = TYPE_SYSTEM;
    f[4] = s.add(
        "system_manufacturer",
        Some(&or_default(&cfg.manufacturer, DEFAULT_SYSTEM_MANUFACTURER)),
    )?;
    f[5] = s.add(
        "system_product_name",
        Some(&or_default(&cfg.product_name, DEFAULT_SYSTEM_PRODUCT_NAME)),
    )?;
    f[6] = s.add("system_version", cfg.version.as_deref())?;
    f[7] = s.add("system_serial_number", cfg.serial_number.as_deref())?;
    if let Some(uuid) = cfg.uuid {
        f[8..24].copy_from_slice(&uuid_to_smbios_order(uuid));
    }
    f[24] = WAKE_UP_UNKNOWN;
    f[25] = s.add("system_sku_number", cfg.sku_number.as_deref())?;
    f[26] = s.add("system_family", cfg.family.as_deref())?;
    push_structure(table, f, handle, s);
    Ok(())
}

fn chassis(asset_tag: &str, handle: u16, table: &mut Vec<u8>) -> Result<(), SmbiosError> {
    let mut s = StringSet::default();
    let mut f = vec![0u8; CHASSIS_LEN];
    f[0] = TYPE_CHASSIS;
    // 4: manufacturer, 6: version, 7: serial number: none.
    f[5] = CHASSIS_TYPE_UNKNOWN;
    f[8] = s.add("chassis_asset_tag", Some(asset_tag))?;
    f[9] = STATE_UNKNOWN; // boot-up
    f[0x0a] = STATE_UNKNOWN; // power supply
    f[0x0b] = STATE_UNKNOWN; // thermal
    f[0x0c] = SECURITY_NONE;
    // 0x0d..0x11 OEM-defined, 0x11 height, 0x12 power cords, 0x13..0x15
    // contained elements (count 0, record length 0).
    push_structure(table, f, handle, s);
    Ok(())
}

fn oem_strings(strings: &[String], handle: u16, table: &mut Vec<u8>) -> Result<(), SmbiosError> {
    if strings.len() > MAX_OEM_STRINGS {
        return Err(SmbiosError::TooManyOemStrings(strings.len()));
    }
    let mut s = StringSet::default();
    for (i, o) in strings.iter().enumerate() {
        if o.is_empty() {
            return Err(SmbiosError::EmptyOemString(i));
        }
        s.add(&format!("oem_strings[{i}]"), Some(o))?;
    }
    let mut f = vec![0u8; OEM_STRINGS_LEN];
    f[0] = TYPE_OEM_STRINGS;
    f[4] = s.count;
    push_structure(table, f, handle, s);
    Ok(())
}

/// Builds the entry point and structure table for `cfg`, placed in the
/// layout's SMBIOS area.
pub fn build_smbios(cfg: &SmbiosConfig) -> Result<SmbiosTables, SmbiosError> {
    let mut table = Vec::new();
    let mut handle = 0u16;
    let mut next = || {
        handle += 1;
        handle
    };
    bios_information(next(), &mut table)?;
    system_information(cfg, next(), &mut table)?;
    if let Some(tag) = cfg.chassis_asset_tag.as_deref().filter(|t| !t.is_empty()) {
        chassis(tag, next(), &mut table)?;
    }
    if !cfg.oem_strings.is_empty() {
        oem_strings(&cfg.oem_strings, next(), &mut table)?;
    }
    let mut end = vec![0u8; END_LEN];
    end[0] = TYPE_END;
    push_structure(&mut table, end, next(), StringSet::default());
    if table.len() > MAX_TABLE_LEN {
        return Err(SmbiosError::TooLarge {
            needed: table.len(),
            available: MAX_TABLE_LEN,
        });
    }

    let table_addr = layout::SMBIOS_START + TABLE_OFFSET;
    let mut ep = [0u8; ENTRY_POINT_LEN];
    ep[0..5].copy_from_slice(b"_SM3_");
    ep[6] = ENTRY_POINT_LEN as u8;
    ep[7] = VERSION_MAJOR;
    ep[8] = VERSION_MINOR;
    ep[9] = VERSION_DOCREV;
    ep[10] = ENTRY_POINT_REVISION;
    // 11: reserved. The "maximum size" is the table's exact length.
    ep[12..16].copy_from_slice(&(table.len() as u32).to_le_bytes());
    ep[16..24].copy_from_slice(&table_addr.to_le_bytes());
    ep[5] = checksum_byte(&ep);
    Ok(SmbiosTables {
        entry_point_addr: layout::SMBIOS_START,
        entry_point: ep,
        table_addr,
        table,
    })
}

/// Builds the tables for `cfg` and writes them into guest memory; returns
/// the structure table's length.
pub fn write_smbios<M: GuestMemory>(mem: &M, cfg: &SmbiosConfig) -> Result<usize, SmbiosError> {
    let t = build_smbios(cfg)?;
    mem.write_slice(&t.table, GuestAddress(t.table_addr))?;
    mem.write_slice(&t.entry_point, GuestAddress(t.entry_point_addr))?;
    Ok(t.table.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::sum;
    use crate::test_util::mem;
    use vm_memory::GuestMemoryMmap;

    const UUID: &str = "4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6";
    const UUID_RFC: [u8; 16] = [
        0x4e, 0xc6, 0xf2, 0xa8, 0x1b, 0x2c, 0x4d, 0x3e, 0x8f, 0x90, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5,
        0xf6,
    ];

    /// One parsed structure: type, handle, formatted area, strings.
    #[derive(Debug)]
    struct Structure {
        kind: u8,
        handle: u16,
        formatted: Vec<u8>,
        strings: Vec<String>,
    }

    impl Structure {
        /// The string a field's number names (None for 0).
        fn string(&self, offset: usize) -> Option<&str> {
            match self.formatted[offset] {
                0 => None,
                n => Some(self.strings[usize::from(n) - 1].as_str()),
            }
        }
    }

    /// Finds the entry point as Linux's dmi_scan_machine does (16-byte
    /// steps through 0xF0000..0x100000, anchor, length 24..=32, checksum).
    fn scan(mem: &GuestMemoryMmap) -> Option<u64> {
        (0xf_0000u64..0x10_0000).step_by(16).find(|&a| {
            let mut p = [0u8; 32];
            let len = if a + 32 <= 0x10_0000 { 32 } else { 16 };
            mem.read_slice(&mut p[..len], GuestAddress(a)).unwrap();
            &p[0..5] == b"_SM3_"
                && (24..=32).contains(&p[6])
                && usize::from(p[6]) <= len
                && sum(&p[..usize::from(p[6])]) == 0
        })
    }

    /// Walks the structure table as Linux's dmi_decode does; asserts every
    /// structure is well formed and the table ends exactly after type 127.
    fn parse(t: &[u8]) -> Vec<Structure> {
        let mut out = Vec::new();
        let mut off = 0;
        loop {
            assert!(off + 4 <= t.len(), "structure header past the end");
            let len = usize::from(t[off + 1]);
            assert!(len >= 4 && off + len <= t.len(), "bad length at {off}");
            let formatted = t[off..off + len].to_vec();
            let set_start = off + len;
            let set_end = (set_start..t.len() - 1)
                .find(|&i| t[i] == 0 && t[i + 1] == 0)
                .expect("string set terminated");
            let strings: Vec<String> = if set_end == set_start {
                Vec::new()
            } else {
                t[set_start..set_end]
                    .split(|b| *b == 0)
                    .map(|s| String::from_utf8(s.to_vec()).unwrap())
                    .collect()
            };
            assert!(strings.iter().all(|s| !s.is_empty()));
            let s = Structure {
                kind: t[off],
                handle: u16::from_le_bytes([t[off + 2], t[off + 3]]),
                formatted,
                strings,
            };
            off = set_end + 2;
            let last = s.kind == TYPE_END;
            out.push(s);
            if last {
                assert_eq!(off, t.len(), "bytes after type 127");
                return out;
            }
        }
    }

    /// Writes `cfg`, finds the entry point by scanning and returns the
    /// structures it points at.
    fn written(cfg: &SmbiosConfig) -> Vec<Structure> {
        let m = mem();
        write_smbios(&m, cfg).unwrap();
        let ep_addr = scan(&m).expect("entry point found by the scan");
        let mut ep = [0u8; ENTRY_POINT_LEN];
        m.read_slice(&mut ep, GuestAddress(ep_addr)).unwrap();
        assert_eq!((ep[7], ep[8], ep[9], ep[10]), (3, 2, 0, 1));
        let len = u32::from_le_bytes(ep[12..16].try_into().unwrap()) as usize;
        let addr = u64::from_le_bytes(ep[16..24].try_into().unwrap());
        assert!(addr >= ep_addr + ENTRY_POINT_LEN as u64);
        assert!(addr + len as u64 <= layout::SMBIOS_END);
        let mut t = vec![0u8; len];
        m.read_slice(&mut t, GuestAddress(addr)).unwrap();
        parse(&t)
    }

    fn full() -> SmbiosConfig {
        SmbiosConfig {
            manufacturer: Some("ManuX".into()),
            product_name: Some("ProdY".into()),
            version: Some("Ver1".into()),
            serial_number: Some("ds=nocloud;s=http://10.0.0.1/".into()),
            uuid: Some(UUID_RFC),
            sku_number: Some("SKU9".into()),
            family: Some("FamZ".into()),
            chassis_asset_tag: Some("TAG7".into()),
            oem_strings: vec!["o1".into(), "io.systemd.credential:x=y".into()],
        }
    }

    #[test]
    fn a_linux_style_scan_finds_the_entry_point_with_a_valid_checksum() {
        let m = mem();
        write_smbios(&m, &SmbiosConfig::default()).unwrap();
        assert_eq!(scan(&m), Some(layout::SMBIOS_START));
        let t = build_smbios(&full()).unwrap();
        assert_eq!(sum(&t.entry_point), 0);
        assert_eq!(t.entry_point[6], 24);
        assert_eq!(t.table_addr % 16, 0);
    }

    #[test]
    fn defaults_are_upstreams_bios_and_system_strings() {
        let s = written(&SmbiosConfig::default());
        let kinds: Vec<u8> = s.iter().map(|s| s.kind).collect();
        assert_eq!(kinds, vec![TYPE_BIOS, TYPE_SYSTEM, TYPE_END]);
        let handles: Vec<u16> = s.iter().map(|s| s.handle).collect();
        assert_eq!(handles, vec![1, 2, 3]);

        let bios = &s[0];
        assert_eq!(bios.formatted.len(), BIOS_LEN);
        assert_eq!(bios.string(4), Some("cloud-hypervisor"));
        assert_eq!(bios.string(5), Some("0"));
        assert_eq!(bios.string(8), None, "no release date");
        let ch = u64::from_le_bytes(bios.formatted[0x0a..0x12].try_into().unwrap());
        assert_eq!(ch, 1 << 7, "PCI supported");
        assert_eq!(bios.formatted[0x13], 1 << 4, "virtual machine");
        assert_eq!(bios.formatted[0x14], 0xff, "no BIOS release number");

        let sys = &s[1];
        assert_eq!(sys.formatted.len(), SYSTEM_LEN);
        assert_eq!(sys.string(4), Some("Cloud Hypervisor"));
        assert_eq!(sys.string(5), Some("cloud-hypervisor"));
        for field in [6, 7, 25, 26] {
            assert_eq!(sys.string(field), None, "field {field:#x}");
        }
        assert_eq!(&sys.formatted[8..24], &[0u8; 16], "no UUID");
        assert_eq!(sys.formatted[24], WAKE_UP_UNKNOWN);
        assert!(s[2].strings.is_empty());
    }

    #[test]
    fn every_configured_field_reads_back() {
        let s = written(&full());
        let kinds: Vec<u8> = s.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            vec![
                TYPE_BIOS,
                TYPE_SYSTEM,
                TYPE_CHASSIS,
                TYPE_OEM_STRINGS,
                TYPE_END
            ]
        );
        let sys = &s[1];
        assert_eq!(sys.string(4), Some("ManuX"));
        assert_eq!(sys.string(5), Some("ProdY"));
        assert_eq!(sys.string(6), Some("Ver1"));
        assert_eq!(sys.string(7), Some("ds=nocloud;s=http://10.0.0.1/"));
        assert_eq!(sys.string(25), Some("SKU9"));
        assert_eq!(sys.string(26), Some("FamZ"));

        let chassis = &s[2];
        assert_eq!(chassis.formatted.len(), CHASSIS_LEN);
        assert_eq!(chassis.string(8), Some("TAG7"));
        assert_eq!(chassis.string(4), None, "no chassis manufacturer");
        assert_eq!(chassis.formatted[5], CHASSIS_TYPE_UNKNOWN);
        assert_eq!(&chassis.formatted[9..13], &[2, 2, 2, 3]);

        let oem = &s[3];
        assert_eq!(oem.formatted[4], 2, "count");
        assert_eq!(oem.strings, vec!["o1", "io.systemd.credential:x=y"]);
        let handles: Vec<u16> = s.iter().map(|s| s.handle).collect();
        assert_eq!(handles, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn the_uuid_is_stored_in_smbios_byte_order_and_prints_back_as_written() {
        let s = written(&full());
        let u = &s[1].formatted[8..24];
        // What upstream v53 writes for the same UUID.
        assert_eq!(
            u,
            &[
                0xa8, 0xf2, 0xc6, 0x4e, 0x2c, 0x1b, 0x3e, 0x4d, 0x8f, 0x90, 0xa1, 0xb2, 0xc3, 0xd4,
                0xe5, 0xf6
            ]
        );
        // Linux's %pUl (SMBIOS >= 2.6): first three fields little-endian.
        let printed = format!(
            "{:08x}-{:04x}-{:04x}-{}-{}",
            u32::from_le_bytes(u[0..4].try_into().unwrap()),
            u16::from_le_bytes(u[4..6].try_into().unwrap()),
            u16::from_le_bytes(u[6..8].try_into().unwrap()),
            u[8..10]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
            u[10..16]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        );
        assert_eq!(printed, UUID);
    }

    #[test]
    fn empty_strings_are_unset_fields_and_defaults_stay() {
        let cfg = SmbiosConfig {
            manufacturer: Some(String::new()),
            serial_number: Some(String::new()),
            chassis_asset_tag: Some(String::new()),
            ..Default::default()
        };
        let s = written(&cfg);
        assert_eq!(s.len(), 3, "no chassis for an empty asset tag");
        assert_eq!(s[1].string(4), Some("Cloud Hypervisor"));
        assert_eq!(s[1].string(7), None);
    }

    #[test]
    fn matches_upstream_v53_byte_for_byte() {
        // Upstream v53's table for the same configuration (dumped from its
        // guest memory), except type 0: upstream writes the 2.3-era 0x14
        // bytes, this module the 3.1+ form (release numbers "not
        // supported", extended ROM size 0), which Linux reads alike.
        let t = build_smbios(&SmbiosConfig {
            serial_number: Some("abc".into()),
            uuid: Some(UUID_RFC),
            oem_strings: vec!["x".into()],
            ..Default::default()
        })
        .unwrap();
        // Type 0: formatted area, "cloud-hypervisor\0", "0\0", set terminator.
        let type0_len = BIOS_LEN + 17 + 2 + 1;
        let upstream_rest: &[u8] = b"\x01\x1b\x02\x00\x01\x02\x00\x03\
            \xa8\xf2\xc6\x4e\x2c\x1b\x3e\x4d\x8f\x90\xa1\xb2\xc3\xd4\xe5\xf6\x02\x00\x00\
            Cloud Hypervisor\0cloud-hypervisor\0abc\0\0\
            \x0b\x05\x03\x00\x01x\0\0\
            \x7f\x04\x04\x00\0\0";
        assert_eq!(&t.table[type0_len..], upstream_rest);
        assert_eq!(&t.table[0..4], &[0, BIOS_LEN as u8, 1, 0]);
    }

    #[test]
    fn strings_with_nul_bytes_are_rejected_naming_the_field() {
        let cfg = SmbiosConfig {
            serial_number: Some("a\0b".into()),
            ..Default::default()
        };
        let e = build_smbios(&cfg).unwrap_err();
        assert!(e.to_string().contains("system_serial_number"), "{e}");
        let cfg = SmbiosConfig {
            oem_strings: vec!["ok".into(), "b\0ad".into()],
            ..Default::default()
        };
        let e = build_smbios(&cfg).unwrap_err();
        assert!(e.to_string().contains("oem_strings[1]"), "{e}");
        let cfg = SmbiosConfig {
            oem_strings: vec!["ok".into(), String::new()],
            ..Default::default()
        };
        assert!(matches!(
            build_smbios(&cfg),
            Err(SmbiosError::EmptyOemString(1))
        ));
    }

    #[test]
    fn too_many_oem_strings_are_rejected_and_the_most_fit() {
        let many = |n: usize| SmbiosConfig {
            oem_strings: (0..n).map(|i| format!("s{i}")).collect(),
            ..Default::default()
        };
        let s = written(&many(MAX_OEM_STRINGS));
        assert_eq!(s[2].formatted[4], 255);
        assert_eq!(s[2].strings.len(), 255);
        assert_eq!(s[2].strings[254], "s254");
        let e = build_smbios(&many(MAX_OEM_STRINGS + 1)).unwrap_err();
        assert!(matches!(e, SmbiosError::TooManyOemStrings(256)), "{e}");
        assert!(e.to_string().contains("at most 255"), "{e}");
    }

    #[test]
    fn strings_up_to_the_budget_fit_and_longer_ones_are_rejected() {
        // The worst case for the budget: every field set, the manufacturer
        // and product name replaced (their defaults not counted), and all
        // of MAX_STRING_BYTES used.
        let mut cfg = full();
        let used: usize = [
            &cfg.manufacturer,
            &cfg.product_name,
            &cfg.version,
            &cfg.serial_number,
            &cfg.sku_number,
            &cfg.family,
            &cfg.chassis_asset_tag,
        ]
        .iter()
        .map(|s| s.as_ref().map_or(0, |s| s.len() + 1))
        .sum::<usize>()
            + cfg.oem_strings.iter().map(|s| s.len() + 1).sum::<usize>();
        cfg.oem_strings
            .push("x".repeat(MAX_STRING_BYTES - used - 1));
        let t = build_smbios(&cfg).unwrap();
        assert!(t.table.len() <= MAX_TABLE_LEN);
        let s = written(&cfg);
        assert_eq!(s[3].strings.len(), 3);

        let big = SmbiosConfig {
            serial_number: Some("y".repeat(MAX_TABLE_LEN)),
            ..Default::default()
        };
        let e = build_smbios(&big).unwrap_err();
        match e {
            SmbiosError::TooLarge { needed, available } => {
                assert!(needed > available);
                assert_eq!(available, MAX_TABLE_LEN);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn writing_outside_guest_memory_fails() {
        let m = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0x10_0000), 0x1000)]).unwrap();
        assert!(matches!(
            write_smbios(&m, &SmbiosConfig::default()),
            Err(SmbiosError::GuestMemory(_))
        ));
    }
}
