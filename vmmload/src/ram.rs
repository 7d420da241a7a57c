//! Guest physical memory: one anonymous host mapping registered as a KVM
//! memslot, a frame allocator over it and the owner map (frame → guest page)
//! that turns dirty-log physical addresses back into program addresses.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Page size.
pub const PAGE: u64 = 4096;
/// Guest physical address of the first byte of guest RAM. Above 4 GiB so the
/// VMX real-mode TSS/identity-map pages KVM may want below 4 GiB never clash.
pub const PHYS_BASE: u64 = 1 << 32;

/// Owner-map value of a free frame.
pub const OWN_FREE: u64 = 0;
/// Owner-map value of a page-table frame.
pub const OWN_PT: u64 = 1;
/// Owner-map value of a vmmload system frame (GDT, IDT, TSS, stub, stacks).
pub const OWN_SYS: u64 = 2;
/// Low tag of an owner-map value that holds a user page address.
pub const OWN_USER_TAG: u64 = 3;
/// Low tag of a free frame that remembers its last user page (so writes
/// logged just before an munmap are still attributed).
pub const OWN_FREED_TAG: u64 = 4;

/// Default guest RAM: what the host could back, RAM plus swap, rounded up
/// to a GiB (at least 1 GiB), so an allocation the host would grant
/// natively fits in the guest too. The mapping is MAP_NORESERVE, and the
/// owner map and the KVM memslots (`memslots.rs`) grow with use, so the
/// reservation itself costs neither host memory nor VM creation time.
pub fn host_default_size() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo_total(&info)
}

fn meminfo_total(info: &str) -> u64 {
    const GIB: u64 = 1 << 30;
    let kib = |key: &str| {
        info.lines()
            .find_map(|l| {
                l.strip_prefix(key)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0)
    };
    let bytes = (kib("MemTotal:") + kib("SwapTotal:")).saturating_mul(1024);
    bytes.div_ceil(GIB).max(1) * GIB
}

/// The guest RAM mapping. The mapping lives as long as the process, so raw
/// pointers into it stay valid for every thread.
pub struct GuestRam {
    host: *mut u8,
    size: u64,
    /// Frames whose host backing is a shared mapping (a `MAP_SHARED`
    /// mapping of the program, see `shm.rs`) instead of the private one.
    shared: Mutex<BTreeSet<u64>>,
    shared_count: AtomicU64,
    /// The KVM memslots over it, added as frames get used.
    pub slots: crate::memslots::Memslots,
}

// SAFETY: the mapping is never unmapped while vmmload runs; concurrent access
// from vCPU threads is the same as a guest with several CPUs and goes through
// raw pointers or atomics only.
unsafe impl Send for GuestRam {}
// SAFETY: see above.
unsafe impl Sync for GuestRam {}

impl GuestRam {
    /// Reserves `size` bytes (no backing until touched).
    pub fn new(size: u64) -> io::Result<GuestRam> {
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(GuestRam {
            host: p as *mut u8,
            size,
            shared: Mutex::new(BTreeSet::new()),
            shared_count: AtomicU64::new(0),
            slots: crate::memslots::Memslots::new(size, p as u64),
        })
    }

    /// Host address of the mapping.
    #[cfg(test)]
    pub fn host_base(&self) -> u64 {
        self.host as u64
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Host pointer for `len` bytes at guest physical `gpa`, if inside RAM.
    pub fn ptr(&self, gpa: u64, len: u64) -> Option<*mut u8> {
        let off = gpa.checked_sub(PHYS_BASE)?;
        let end = off.checked_add(len)?;
        if end > self.size {
            return None;
        }
        // SAFETY: `off + len` is inside the mapping.
        Some(unsafe { self.host.add(off as usize) })
    }

    /// The 64-bit word at `gpa` (8-aligned) as an atomic, for page-table entries.
    pub fn word(&self, gpa: u64) -> &AtomicU64 {
        assert_eq!(gpa % 8, 0);
        let p = self
            .ptr(gpa, 8)
            .expect("page-table address outside guest RAM");
        // SAFETY: aligned, inside the mapping, and only accessed atomically or by the guest MMU.
        unsafe { &*(p as *const AtomicU64) }
    }

    /// Copies `data` to guest physical `gpa`.
    pub fn write(&self, gpa: u64, data: &[u8]) {
        let p = self
            .ptr(gpa, data.len() as u64)
            .expect("write outside guest RAM");
        // SAFETY: destination range checked above; source is a distinct host buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    }

    /// Copies from guest physical `gpa` into `out`.
    pub fn read(&self, gpa: u64, out: &mut [u8]) {
        let p = self
            .ptr(gpa, out.len() as u64)
            .expect("read outside guest RAM");
        // SAFETY: source range checked above.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len()) };
    }

    /// Makes KVM drop its mappings (shadow or EPT entries) of the first
    /// `frames` frames through the MMU notifier, by a host protection round
    /// trip. Contents stay; the next guest access refaults and the guest
    /// page walk sets accessed bits again.
    pub fn zap_kvm_mappings(&self, frames: u64) {
        let len = (frames * PAGE).min(self.size) as usize;
        if len == 0 {
            return;
        }
        // The round trip adds and removes PROT_EXEC: the mapping never loses
        // read or write permission. vCPU page walks write A/D bits through it
        // and vmmload's threads copy syscall data through it, so a read-only
        // window (even microseconds) makes those writes fail.
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: changing protection of our own mapping, always keeping R+W.
        unsafe {
            libc::mprotect(self.host as *mut libc::c_void, len, rw | libc::PROT_EXEC);
            libc::mprotect(self.host as *mut libc::c_void, len, rw);
        }
    }

    /// Like `zap_kvm_mappings` for the frames at guest physical `[gpa, gpa+len)`.
    pub fn zap_kvm_range(&self, gpa: u64, len: u64) {
        let Some(p) = self.ptr(gpa, len) else {
            return;
        };
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: page-aligned range of our own mapping; R+W are kept throughout.
        unsafe {
            libc::mprotect(p as *mut libc::c_void, len as usize, rw | libc::PROT_EXEC);
            libc::mprotect(p as *mut libc::c_void, len as usize, rw);
        }
    }

    /// Backs the frames at `[gpa, gpa+len)` (free of data: just allocated)
    /// with `fd` at `off`, shared: the host pages are the file's (or the
    /// memfd's), so they stay shared across vmmload's fork and writes reach
    /// the file. KVM's MMU notifier drops its mappings of the old pages.
    pub fn back_shared(&self, gpa: u64, len: u64, fd: RawFd, off: u64) -> io::Result<()> {
        let p = self
            .ptr(gpa, len)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: replaces a page-aligned range of our own mapping that holds
        // no data yet; the guest page tables point at it only after this.
        let r = unsafe {
            libc::mmap(
                p as *mut libc::c_void,
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                off as libc::off_t,
            )
        };
        if r == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut set = self.shared.lock().expect("shared lock");
        for f in (gpa..gpa + len).step_by(PAGE as usize) {
            if set.insert(f) {
                self.shared_count.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Whether the frame at `gpa` is backed by a shared mapping.
    pub fn is_shared(&self, gpa: u64) -> bool {
        self.shared_count.load(Ordering::Relaxed) != 0
            && self.shared.lock().expect("shared lock").contains(&gpa)
    }

    /// A frame goes back to the allocator: its contents are dropped, and a
    /// shared frame gets private anonymous backing again (the file keeps
    /// what was written). False if the frame must not be reused.
    pub fn release(&self, gpa: u64) -> bool {
        if !self.is_shared(gpa) {
            self.discard(gpa, PAGE);
            return true;
        }
        let Some(p) = self.ptr(gpa, PAGE) else {
            return false;
        };
        // SAFETY: replaces one page of our own mapping with fresh private
        // anonymous memory, as it was before `back_shared`.
        let r = unsafe {
            libc::mmap(
                p as *mut libc::c_void,
                PAGE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if r == libc::MAP_FAILED {
            // Out of host mappings: the frame keeps the shared page and is
            // never reused (its next owner would write into the file).
            log::warn!(
                "cannot give frame {gpa:#x} private backing again: {}",
                io::Error::last_os_error()
            );
            return false;
        }
        if self.shared.lock().expect("shared lock").remove(&gpa) {
            self.shared_count.fetch_sub(1, Ordering::Relaxed);
        }
        true
    }

    /// Gives frames back to the host so they read as zero next time.
    pub fn discard(&self, gpa: u64, len: u64) {
        if let Some(p) = self.ptr(gpa, len) {
            // SAFETY: page-aligned range inside our private anonymous mapping.
            unsafe { libc::madvise(p as *mut libc::c_void, len as usize, libc::MADV_DONTNEED) };
        }
    }
}

impl Drop for GuestRam {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping at process teardown.
        unsafe { libc::munmap(self.host as *mut libc::c_void, self.size as usize) };
    }
}

/// Frame allocator: a bump pointer plus a map of free extents, preferring
/// contiguous runs so that guest buffers are host-contiguous too.
#[derive(Debug, Clone)]
pub struct Frames {
    next: u64,
    limit: u64,
    free: BTreeMap<u64, u64>,
    /// Owner of each frame below the high-water mark (`OWN_*`, or
    /// `gva | OWN_USER_TAG`). It grows with the bump pointer, so a large
    /// guest RAM costs nothing until used and fork copies only what is.
    pub owner: Vec<u64>,
    used: u64,
}

impl Frames {
    /// An allocator over `nframes` frames.
    pub fn new(nframes: u64) -> Frames {
        Frames {
            next: 0,
            limit: nframes,
            free: BTreeMap::new(),
            owner: Vec::new(),
            used: 0,
        }
    }

    /// One past the highest frame ever handed out.
    pub fn high_water(&self) -> u64 {
        self.next
    }

    /// Frames in use.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Moves the bump pointer to `next`, growing the owner map with it.
    fn bump_to(&mut self, next: u64) {
        self.next = next;
        self.owner.resize(next as usize, OWN_FREE);
    }

    /// Allocates up to `n` contiguous frames; returns (first frame index, count).
    fn alloc_run(&mut self, n: u64) -> Option<(u64, u64)> {
        if let Some((&s, &l)) = self.free.iter().find(|(_, &l)| l >= n) {
            self.free.remove(&s);
            if l > n {
                self.free.insert(s + n, l - n);
            }
            return Some((s, n));
        }
        if self.limit - self.next >= n {
            let s = self.next;
            self.bump_to(s + n);
            return Some((s, n));
        }
        // Fragmented: take the largest free piece or what the bump area has left.
        let biggest = self
            .free
            .iter()
            .max_by_key(|(_, &l)| l)
            .map(|(&s, &l)| (s, l));
        match biggest {
            Some((s, l)) if l >= self.limit - self.next => {
                self.free.remove(&s);
                Some((s, l))
            }
            _ if self.next < self.limit => {
                let s = self.next;
                let got = self.limit - self.next;
                self.bump_to(self.limit);
                Some((s, got))
            }
            _ => None,
        }
    }

    /// Allocates `n` frames (as contiguous as possible) and returns their
    /// guest physical addresses, or `None` (nothing allocated) if RAM is full.
    pub fn alloc(&mut self, n: u64, owner: u64) -> Option<Vec<u64>> {
        if self.limit - self.used < n {
            return None;
        }
        let mut out = Vec::with_capacity(n as usize);
        while (out.len() as u64) < n {
            let (s, got) = self.alloc_run(n - out.len() as u64)?;
            for f in s..s + got {
                self.owner[f as usize] = owner;
                out.push(PHYS_BASE + f * PAGE);
            }
        }
        self.used += n;
        Some(out)
    }

    /// Frees one frame (the caller discards its contents).
    pub fn free(&mut self, gpa: u64) {
        let f = (gpa - PHYS_BASE) / PAGE;
        let o = self.owner[f as usize];
        if o == OWN_FREE || o & 7 == OWN_FREED_TAG {
            return;
        }
        self.owner[f as usize] = if o & 7 == OWN_USER_TAG {
            (o & !7) | OWN_FREED_TAG
        } else {
            OWN_FREE
        };
        self.used -= 1;
        let mut start = f;
        let mut len = 1;
        if let Some((&ps, &pl)) = self.free.range(..f).next_back() {
            if ps + pl == f {
                self.free.remove(&ps);
                start = ps;
                len += pl;
            }
        }
        if let Some(nl) = self.free.remove(&(f + 1)) {
            len += nl;
        }
        self.free.insert(start, len);
    }

    /// Sets the owner of a frame.
    pub fn set_owner(&mut self, gpa: u64, owner: u64) {
        self.owner[((gpa - PHYS_BASE) / PAGE) as usize] = owner;
    }

    /// Owner of the frame at `gpa` (`OWN_FREE` outside RAM).
    pub fn owner_of(&self, gpa: u64) -> u64 {
        gpa.checked_sub(PHYS_BASE)
            .and_then(|o| self.owner.get((o / PAGE) as usize).copied())
            .unwrap_or(OWN_FREE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_contiguously_and_reuses_freed_frames() {
        let mut f = Frames::new(16);
        let a = f.alloc(4, OWN_PT).unwrap();
        assert_eq!(a, (0..4).map(|i| PHYS_BASE + i * PAGE).collect::<Vec<_>>());
        let b = f.alloc(4, OWN_SYS).unwrap();
        assert_eq!(b[0], PHYS_BASE + 4 * PAGE);
        for g in &a {
            f.free(*g);
        }
        assert_eq!(f.used(), 4);
        let c = f.alloc(3, OWN_PT).unwrap();
        assert_eq!(c[0], PHYS_BASE);
        assert_eq!(f.owner_of(PHYS_BASE + 5 * PAGE), OWN_SYS);
    }

    #[test]
    fn default_size_is_host_ram_plus_swap() {
        let info = "MemTotal:       24683712 kB\nMemFree: 1 kB\nSwapTotal:       2097148 kB\n";
        assert_eq!(meminfo_total(info), 26 << 30);
        assert_eq!(meminfo_total("MemTotal: 1000 kB\n"), 1 << 30);
        assert_eq!(meminfo_total("garbage"), 1 << 30);
        assert!(host_default_size() >= 1 << 30);
    }

    #[test]
    fn owner_map_grows_only_with_use() {
        // 1 TiB of guest RAM: nothing per frame is allocated up front.
        let mut f = Frames::new(1 << 28);
        assert_eq!(f.owner.len(), 0);
        let a = f.alloc(3, OWN_SYS).unwrap();
        assert_eq!(f.owner.len(), 3);
        assert_eq!(f.owner_of(a[2]), OWN_SYS);
        assert_eq!(f.owner_of(PHYS_BASE + 100 * PAGE), OWN_FREE);
        f.free(a[0]);
        assert_eq!(f.alloc(1, OWN_PT).unwrap(), vec![a[0]]);
        assert_eq!(f.owner.len(), 3);
    }

    #[test]
    fn refuses_when_full_and_never_double_frees() {
        let mut f = Frames::new(4);
        let a = f.alloc(4, OWN_PT).unwrap();
        assert!(f.alloc(1, OWN_PT).is_none());
        f.free(a[1]);
        f.free(a[1]);
        assert_eq!(f.used(), 3);
        f.free(a[3]);
        let b = f.alloc(2, OWN_PT).unwrap();
        assert_eq!(b.len(), 2);
        assert!(f.alloc(1, OWN_PT).is_none());
    }
}
