//! The ACPI PCI hotplug controller (Cloud Hypervisor's `\_SB_.PHPR`): a
//! 16-byte MMIO register block the DSDT's AML reads and writes on the
//! guest's behalf. Linux's `acpiphp` driver never touches it directly; it
//! evaluates the AML, which does:
//!
//! ```text
//! GED interrupt -> _EVT -> \_SB_.PCI0.PCNT:
//!     Notify (Snnn, 1 "device check")   for each bit of PCIU (slots added)
//!     Notify (Snnn, 3 "eject request")  for each bit of PCID (slots to remove)
//! acpiphp, done with the slot's driver -> Snnn._EJ0 -> PHPR.PCEJ:
//!     B0EJ = 1 << slot                  (the guest let the device go)
//! ```
//!
//! | offset | register | access |
//! |---|---|---|
//! | 0x0 | PCIU: slots added since the last read | read-to-clear |
//! | 0x4 | PCID: slots whose removal is requested, since the last read | read-to-clear |
//! | 0x8 | B0EJ: slots the guest ejects | write (reads 0) |
//! | 0xc | PSEG: selected PCI segment | read/write |
//!
//! Only segment 0 exists; with another segment selected PCIU and PCID read
//! 0 and B0EJ writes are ignored. Ejects are recorded here and signalled
//! on an eventfd; the VMM tears the device down on its own thread, never
//! on the vCPU that wrote B0EJ. Nothing here waits for the guest: a
//! removal stays pending ([`PciHotplug::removal_pending`]) until the guest
//! ejects the slot, however long that takes.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use vmm_sys_util::eventfd::EventFd;

use crate::BusDevice;

/// Offset of PCIU (slots added).
pub const PCIU: u64 = 0x0;
/// Offset of PCID (slots to be removed).
pub const PCID: u64 = 0x4;
/// Offset of B0EJ (slots ejected by the guest).
pub const B0EJ: u64 = 0x8;
/// Offset of PSEG (segment selector).
pub const PSEG: u64 = 0xc;
/// Size of the register block.
pub const REGISTERS_SIZE: u64 = 0x10;
/// Slots that can be hot-plugged: 1-31 (slot 0 is the host bridge).
pub const HOTPLUG_SLOTS: u32 = !1;

#[derive(Default)]
struct State {
    /// PCIU: added, not yet read by the guest.
    up: u32,
    /// PCID: removal requested, not yet read by the guest.
    down: u32,
    /// Removal requested and not yet ejected (read or not).
    pending: u32,
    /// Ejected by the guest, not yet taken by the VMM.
    ejected: u32,
    segment: u32,
}

/// The controller's state, shared by the register block (vCPUs) and the
/// VMM thread.
pub struct PciHotplug {
    state: Mutex<State>,
    eject_evt: EventFd,
}

impl PciHotplug {
    /// A controller with nothing pending.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            state: Mutex::new(State::default()),
            eject_evt: EventFd::new(libc::EFD_NONBLOCK)?,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that a device appeared in `slot` (the guest learns it at
    /// its next PCIU read). Forgets any earlier request or eject of that
    /// slot: they were about the device that left it.
    pub fn device_added(&self, slot: u8) {
        let bit = slot_bit(slot);
        let mut s = self.state();
        s.up |= bit;
        s.down &= !bit;
        s.pending &= !bit;
        s.ejected &= !bit;
    }

    /// Asks the guest to give up the device in `slot` (PCID). Asking again
    /// while the removal is pending asks the guest again.
    pub fn request_removal(&self, slot: u8) {
        let bit = slot_bit(slot);
        let mut s = self.state();
        s.down |= bit;
        s.pending |= bit;
        s.up &= !bit;
    }

    /// Whether the removal of `slot` was requested and the guest has not
    /// ejected it yet.
    pub fn removal_pending(&self, slot: u8) -> bool {
        self.state().pending & slot_bit(slot) != 0
    }

    /// Slots the guest ejected since the last call, as a bitmap. Their
    /// requests are fulfilled: a PCID bit the guest has not read yet is
    /// withdrawn, so a later device in the slot is not asked to leave.
    pub fn take_ejected(&self) -> u32 {
        let _ = self.eject_evt.read();
        let mut s = self.state();
        let ejected = std::mem::take(&mut s.ejected);
        s.down &= !ejected;
        s.pending &= !ejected;
        ejected
    }

    /// Readable whenever the guest ejected a slot.
    pub fn eject_event(&self) -> &EventFd {
        &self.eject_evt
    }

    fn read_register(&self, reg: u64) -> u32 {
        let mut s = self.state();
        let segment0 = s.segment == 0;
        match reg {
            PCIU if segment0 => std::mem::take(&mut s.up),
            PCID if segment0 => std::mem::take(&mut s.down),
            PSEG => s.segment,
            _ => 0,
        }
    }

    fn write_register(&self, reg: u64, value: u32) {
        let mut s = self.state();
        match reg {
            PSEG => s.segment = value,
            B0EJ if s.segment == 0 => {
                let bits = value & HOTPLUG_SLOTS;
                if bits != value {
                    log::warn!("PCI hotplug: the guest ejected the host bridge slot; ignored");
                }
                if bits != 0 {
                    s.ejected |= bits;
                    drop(s);
                    if let Err(e) = self.eject_evt.write(1) {
                        log::error!("PCI hotplug: signalling an eject: {e}");
                    }
                }
            }
            _ => {}
        }
    }
}

fn slot_bit(slot: u8) -> u32 {
    1u32.checked_shl(u32::from(slot)).unwrap_or(0) & HOTPLUG_SLOTS
}

/// The register block on the MMIO bus.
pub struct PciHotplugRegisters(pub Arc<PciHotplug>);

impl BusDevice for PciHotplugRegisters {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        let reg = offset & !3;
        let at = (offset & 3) as usize;
        if at + data.len() > 4 {
            log::warn!(
                "PCI hotplug: {}-byte read at {offset:#x} crosses a register",
                data.len()
            );
            return;
        }
        let value = self.0.read_register(reg).to_le_bytes();
        data.copy_from_slice(&value[at..at + data.len()]);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        // The AML's fields are DWordAcc: anything else is not ours.
        match <[u8; 4]>::try_from(data) {
            Ok(v) if offset & 3 == 0 => self.0.write_register(offset, u32::from_le_bytes(v)),
            _ => log::warn!(
                "PCI hotplug: {}-byte write at {offset:#x} ignored (registers are 32-bit)",
                data.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> (Arc<PciHotplug>, PciHotplugRegisters) {
        let hp = Arc::new(PciHotplug::new().unwrap());
        (hp.clone(), PciHotplugRegisters(hp))
    }

    fn read32(r: &mut PciHotplugRegisters, offset: u64) -> u32 {
        let mut b = [0u8; 4];
        r.read(offset, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn up_and_down_bitmaps_are_read_to_clear() {
        let (hp, mut r) = regs();
        hp.device_added(3);
        hp.device_added(31);
        assert_eq!(read32(&mut r, PCIU), 1 << 3 | 1 << 31);
        assert_eq!(read32(&mut r, PCIU), 0);
        hp.request_removal(3);
        assert_eq!(read32(&mut r, PCIU), 0);
        assert_eq!(read32(&mut r, PCID), 1 << 3);
        assert_eq!(read32(&mut r, PCID), 0);
        // Slot 0 (host bridge) and slots past 31 never show.
        hp.device_added(0);
        hp.device_added(40);
        assert_eq!(read32(&mut r, PCIU), 0);
    }

    #[test]
    fn removal_cancels_a_pending_add_and_an_add_forgets_an_old_eject() {
        let (hp, mut r) = regs();
        hp.device_added(5);
        hp.request_removal(5);
        assert_eq!(read32(&mut r, PCIU), 0);
        assert_eq!(read32(&mut r, PCID), 1 << 5);
        r.write(B0EJ, &(1u32 << 5).to_le_bytes());
        hp.device_added(5);
        assert_eq!(hp.take_ejected(), 0);
    }

    #[test]
    fn eject_is_recorded_and_signalled_on_the_eventfd() {
        let (hp, mut r) = regs();
        hp.request_removal(7);
        assert_eq!(
            hp.eject_event().read().map_err(|e| e.kind()),
            Err(io::ErrorKind::WouldBlock),
            "a request alone signals nothing"
        );
        r.write(B0EJ, &(1u32 << 7).to_le_bytes());
        assert_eq!(hp.eject_event().read().unwrap(), 1);
        assert_eq!(hp.take_ejected(), 1 << 7);
        assert_eq!(hp.take_ejected(), 0);
        // B0EJ reads as 0.
        assert_eq!(read32(&mut r, B0EJ), 0);
    }

    #[test]
    fn a_removal_stays_pending_until_the_guest_ejects_and_can_be_asked_again() {
        let (hp, mut r) = regs();
        hp.device_added(2);
        assert!(!hp.removal_pending(2));
        hp.request_removal(2);
        assert!(hp.removal_pending(2));
        assert_eq!(read32(&mut r, PCID), 1 << 2);
        // The guest read the request but did not eject: still pending, and
        // nothing is waiting for it.
        assert!(hp.removal_pending(2));
        assert_eq!(hp.take_ejected(), 0);
        // Asking again shows the slot in PCID again.
        hp.request_removal(2);
        assert_eq!(read32(&mut r, PCID), 1 << 2);
        r.write(B0EJ, &(1u32 << 2).to_le_bytes());
        assert_eq!(hp.take_ejected(), 1 << 2);
        assert!(!hp.removal_pending(2));
    }

    #[test]
    fn an_eject_withdraws_an_unread_request_so_the_next_device_in_the_slot_stays() {
        let (hp, mut r) = regs();
        hp.request_removal(4);
        assert_eq!(read32(&mut r, PCID), 1 << 4);
        // Asked again after the guest's read, then the guest ejects (for
        // the first request): the second PCID bit must not outlive it.
        hp.request_removal(4);
        r.write(B0EJ, &(1u32 << 4).to_le_bytes());
        assert_eq!(hp.take_ejected(), 1 << 4);
        assert_eq!(read32(&mut r, PCID), 0);
        hp.device_added(4);
        assert!(!hp.removal_pending(4));
        assert_eq!(read32(&mut r, PCIU), 1 << 4);
        assert_eq!(read32(&mut r, PCID), 0);
    }

    #[test]
    fn an_add_forgets_a_pending_removal_of_the_slot() {
        let (hp, _r) = regs();
        hp.request_removal(6);
        hp.device_added(6);
        assert!(!hp.removal_pending(6));
    }

    #[test]
    fn ejecting_the_host_bridge_or_on_another_segment_is_ignored() {
        let (hp, mut r) = regs();
        r.write(B0EJ, &1u32.to_le_bytes());
        assert_eq!(hp.take_ejected(), 0);
        hp.device_added(4);
        r.write(PSEG, &1u32.to_le_bytes());
        assert_eq!(read32(&mut r, PSEG), 1);
        assert_eq!(read32(&mut r, PCIU), 0, "segment 1 has no slots");
        r.write(B0EJ, &(1u32 << 4).to_le_bytes());
        assert_eq!(hp.take_ejected(), 0);
        r.write(PSEG, &0u32.to_le_bytes());
        assert_eq!(read32(&mut r, PCIU), 1 << 4, "still pending on segment 0");
    }

    #[test]
    fn odd_accesses_neither_panic_nor_change_state() {
        let (hp, mut r) = regs();
        hp.device_added(9);
        // A byte read of PCIU's second byte sees bit 9 (and clears PCIU).
        let mut b = [0u8; 1];
        r.read(PCIU + 1, &mut b);
        assert_eq!(b[0], 1 << 1);
        let mut b = [0xaau8; 4];
        r.read(PCIU + 2, &mut b);
        assert_eq!(b, [0; 4]);
        r.write(B0EJ, &[0xff, 0xff]);
        r.write(B0EJ + 1, &[0xff; 4]);
        r.read(REGISTERS_SIZE + 8, &mut b);
        assert_eq!(hp.take_ejected(), 0);
    }
}
