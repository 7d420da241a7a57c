//! Guest RAM as KVM memslots that grow with use.
//!
//! Guest RAM is reserved at its full size (host RAM plus swap by default)
//! as one contiguous host mapping and one contiguous guest-physical range
//! from `PHYS_BASE`, but KVM only learns about what frames are handed out:
//! slot 0 covers the first `FIRST_SLOT` bytes and each further slot doubles
//! the covered size (4, 8, 16, 32 GiB, …), registered when the frame
//! allocator's high-water mark first crosses into it. KVM's per-slot
//! metadata (rmaps on shadow paging, 8 bytes per 4 KiB page, allocated and
//! zeroed at registration) then scales with what the program uses, not
//! with the reservation, which matters because every forked child and every
//! exec builds a VM. A 1 TiB reservation needs 9 slots (KVM allows
//! hundreds). Slots only ever get added while the program runs (no vCPU
//! pause needed); the memslot-cycle read strategy removes and re-adds them
//! all with the vCPUs paused.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use kvm_bindings::kvm_userspace_memory_region;

use crate::ram::PHYS_BASE;

/// Bytes covered by slot 0.
pub const FIRST_SLOT: u64 = 4 << 30;
/// `KVM_SET_USER_MEMORY_REGION`.
const KVM_SET_USER_MEMORY_REGION: libc::c_ulong = 0x4020_ae46;

/// Offset and length (bytes from the start of guest RAM) of `slot` for a
/// reservation of `size` bytes; `None` past the end.
pub fn slot_range(size: u64, slot: u32) -> Option<(u64, u64)> {
    let (start, end) = if slot == 0 {
        (0, FIRST_SLOT)
    } else {
        let start = FIRST_SLOT.checked_shl(slot - 1)?;
        (start, start.checked_mul(2)?)
    };
    (start < size).then(|| (start, end.min(size) - start))
}

/// Number of slots that cover the first `bytes` bytes.
pub fn slots_for(size: u64, bytes: u64) -> u32 {
    let mut n = 0;
    while let Some((off, _)) = slot_range(size, n) {
        if off >= bytes {
            break;
        }
        n += 1;
    }
    n.max(1)
}

/// The VM the slots are registered with, in this process.
struct Link {
    vm_fd: i32,
    flags: u32,
    pid: i32,
    registered: u32,
}

/// Which slots exist for one guest RAM.
pub struct Memslots {
    size: u64,
    host_base: u64,
    /// Bytes of guest RAM that must be visible to KVM (the allocator's
    /// high-water mark).
    needed: AtomicU64,
    /// Bytes registered with this process's VM (fast path of `cover`).
    covered: AtomicU64,
    link: Mutex<Option<Link>>,
}

fn set_region(vm_fd: i32, slot: u32, flags: u32, gpa: u64, len: u64, hva: u64) -> io::Result<()> {
    let region = kvm_userspace_memory_region {
        slot,
        flags,
        guest_phys_addr: gpa,
        memory_size: len,
        userspace_addr: hva,
    };
    // SAFETY: the ioctl reads the region struct; the host range is our own
    // guest RAM mapping, which lives for the whole run.
    if unsafe { libc::ioctl(vm_fd, KVM_SET_USER_MEMORY_REGION, &region) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Memslots {
    /// Slots for guest RAM of `size` bytes mapped at host `host_base`.
    pub fn new(size: u64, host_base: u64) -> Memslots {
        Memslots {
            size,
            host_base,
            needed: AtomicU64::new(0),
            covered: AtomicU64::new(0),
            link: Mutex::new(None),
        }
    }

    fn register_up_to(&self, link: &mut Link, n: u32) -> io::Result<()> {
        while link.registered < n {
            let s = link.registered;
            let (off, len) = slot_range(self.size, s)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
            set_region(
                link.vm_fd,
                s,
                link.flags,
                PHYS_BASE + off,
                len,
                self.host_base + off,
            )?;
            link.registered += 1;
            self.covered.store(off + len, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Registers the slots the used RAM needs with the VM `vm_fd` (a new VM,
    /// or the same one after `detach`); slots added later get `flags` too.
    pub fn attach(&self, vm_fd: i32, flags: u32) -> io::Result<()> {
        let mut g = self.link.lock().expect("memslot lock");
        let mut link = Link {
            vm_fd,
            flags,
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() },
            registered: 0,
        };
        self.covered.store(0, Ordering::SeqCst);
        let n = slots_for(self.size, self.needed.load(Ordering::SeqCst));
        let r = self.register_up_to(&mut link, n);
        *g = Some(link);
        r
    }

    /// Removes every registered slot (the vCPUs must be paused; `attach`
    /// re-adds them).
    pub fn detach(&self) -> io::Result<()> {
        let mut g = self.link.lock().expect("memslot lock");
        let Some(link) = g.take() else {
            return Ok(());
        };
        self.covered.store(0, Ordering::SeqCst);
        for s in 0..link.registered {
            let (off, _) = slot_range(self.size, s).unwrap_or((0, 0));
            set_region(link.vm_fd, s, 0, PHYS_BASE + off, 0, self.host_base + off)?;
        }
        Ok(())
    }

    /// Makes the first `bytes` bytes of guest RAM visible to KVM before any
    /// guest page table points into them.
    pub fn cover(&self, bytes: u64) -> io::Result<()> {
        self.needed.fetch_max(bytes, Ordering::SeqCst);
        if self.covered.load(Ordering::SeqCst) >= bytes {
            return Ok(());
        }
        let mut g = self.link.lock().expect("memslot lock");
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        match g.as_mut() {
            // A forked child's copy still names the parent's VM until the
            // child attaches its own.
            Some(link) if link.pid == me => self.register_up_to(link, slots_for(self.size, bytes)),
            _ => Ok(()),
        }
    }

    /// Global frame offset of frame `offset` of slot `slot` (dirty-ring
    /// entries name slot and offset), if the slot is ours.
    pub fn frame_offset(&self, slot: u32, offset: u64) -> Option<u64> {
        slot_range(self.size, slot).map(|(off, _)| off / crate::ram::PAGE + offset)
    }

    /// Registered slots and their (offset, length) in bytes.
    pub fn registered(&self) -> Vec<(u32, u64, u64)> {
        let n = self
            .link
            .lock()
            .expect("memslot lock")
            .as_ref()
            .map_or(0, |l| l.registered);
        (0..n)
            .filter_map(|s| slot_range(self.size, s).map(|(o, l)| (s, o, l)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_double_and_end_at_the_reservation() {
        let g = 1u64 << 30;
        assert_eq!(slot_range(24 * g, 0), Some((0, 4 * g)));
        assert_eq!(slot_range(24 * g, 1), Some((4 * g, 4 * g)));
        assert_eq!(slot_range(24 * g, 2), Some((8 * g, 8 * g)));
        assert_eq!(slot_range(24 * g, 3), Some((16 * g, 8 * g)));
        assert_eq!(slot_range(24 * g, 4), None);
        assert_eq!(slot_range(g, 0), Some((0, g)));
        assert_eq!(slot_range(g, 1), None);
        assert_eq!(slot_range(24 * g, 200), None);
        assert_eq!(slots_for(24 * g, 0), 1);
        assert_eq!(slots_for(24 * g, 4 * g), 1);
        assert_eq!(slots_for(24 * g, 4 * g + 4096), 2);
        assert_eq!(slots_for(24 * g, 24 * g), 4);
        assert_eq!(slots_for(1 << 40, 1 << 40), 9);
    }

    #[test]
    fn dirty_ring_offsets_map_to_global_frames() {
        let m = Memslots::new(24 << 30, 0);
        assert_eq!(m.frame_offset(0, 5), Some(5));
        assert_eq!(m.frame_offset(1, 5), Some((4 << 30) / 4096 + 5));
        assert_eq!(m.frame_offset(9, 0), None);
    }
}
