//! The two memory tiers: what guest RAM belongs to each, which of its pages
//! are in the balloon, and how their host memory is released.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use vm_memory::{GuestAddress, GuestMemoryBackend};

use devices::virtio::GuestMemoryMmap;

use crate::defs::PAGE_SIZE;
use crate::metrics::{BadPfn, Metrics};

/// A piece of guest RAM that belongs to one tier.
///
/// The VMM builds one per `GuestRange` of each memory zone: `gpa` and `len`
/// from the range, `file` from the zone's `fd` (memfd or backing file, so
/// inflated pages can be hole-punched) with `file_offset` = the range's
/// `zone_offset`, and `page_size` = the zone's huge page size (4 KiB for
/// normal or THP-backed memory).
#[derive(Debug, Clone)]
pub struct TierRange {
    /// Guest physical start (a multiple of `page_size`).
    pub gpa: u64,
    /// Length in bytes (a multiple of `page_size`).
    pub len: u64,
    /// File or memfd backing this range, if any. Inflated pages get
    /// `fallocate(PUNCH_HOLE)` on it before `madvise(MADV_DONTNEED)`.
    pub file: Option<Arc<File>>,
    /// Offset of `gpa` inside `file`.
    pub file_offset: u64,
    /// Host page size of the backing. With huge pages a host page is
    /// released only once every 4 KiB balloon page in it was inflated.
    pub page_size: u64,
}

impl TierRange {
    /// Anonymous (private) memory with 4 KiB host pages.
    pub fn anonymous(gpa: u64, len: u64) -> Self {
        Self {
            gpa,
            len,
            file: None,
            file_offset: 0,
            page_size: PAGE_SIZE,
        }
    }

    /// Memory backed by `file` at `file_offset`, 4 KiB host pages.
    pub fn file_backed(gpa: u64, len: u64, file: Arc<File>, file_offset: u64) -> Self {
        Self {
            gpa,
            len,
            file: Some(file),
            file_offset,
            page_size: PAGE_SIZE,
        }
    }

    /// The same range with host pages of `page_size` bytes.
    pub fn with_page_size(mut self, page_size: u64) -> Self {
        self.page_size = page_size;
        self
    }

    fn end(&self) -> u64 {
        self.gpa + self.len
    }

    fn check(&self) -> Result<(), String> {
        if !self.page_size.is_power_of_two() || self.page_size < PAGE_SIZE {
            return Err(format!(
                "page size {:#x} is not a power of two >= 4 KiB",
                self.page_size
            ));
        }
        if self.len == 0
            || !self.gpa.is_multiple_of(self.page_size)
            || !self.len.is_multiple_of(self.page_size)
        {
            return Err(format!(
                "range {:#x}+{:#x} is empty or not aligned to its page size {:#x}",
                self.gpa, self.len, self.page_size
            ));
        }
        if self.gpa.checked_add(self.len).is_none() {
            return Err(format!("range {:#x}+{:#x} overflows", self.gpa, self.len));
        }
        Ok(())
    }
}

/// The guest RAM of one tier (tier 0 = FMem, tier 1 = SMem).
#[derive(Debug, Clone, Default)]
pub struct TierMemory {
    /// The tier's pieces of guest RAM.
    pub ranges: Vec<TierRange>,
}

impl TierMemory {
    /// A tier made of `ranges`.
    pub fn new(ranges: Vec<TierRange>) -> Self {
        Self { ranges }
    }

    /// Total bytes.
    pub fn size(&self) -> u64 {
        self.ranges.iter().map(|r| r.len).sum()
    }

    /// Whether `gpa` lies in this tier.
    pub fn contains(&self, gpa: u64) -> bool {
        self.ranges.iter().any(|r| (r.gpa..r.end()).contains(&gpa))
    }

    /// Checks alignment and that `self` and `other` do not overlap.
    pub(crate) fn check(tiers: &[TierMemory; 2]) -> Result<(), String> {
        let mut all: Vec<&TierRange> = Vec::new();
        for t in tiers {
            for r in &t.ranges {
                r.check()?;
                all.push(r);
            }
        }
        all.sort_by_key(|r| r.gpa);
        for w in all.windows(2) {
            if w[0].end() > w[1].gpa {
                return Err(format!(
                    "tier ranges at {:#x} and {:#x} overlap",
                    w[0].gpa, w[1].gpa
                ));
            }
        }
        Ok(())
    }
}

/// Runtime state of one range: which 4 KiB pages are in the balloon.
struct RangeState {
    range: TierRange,
    bits: Vec<u64>,
}

impl RangeState {
    fn new(range: TierRange) -> Self {
        let pages = (range.len / PAGE_SIZE) as usize;
        Self {
            bits: vec![0; pages.div_ceil(64)],
            range,
        }
    }

    fn page(&self, gpa: u64) -> usize {
        ((gpa - self.range.gpa) / PAGE_SIZE) as usize
    }

    fn test(&self, i: usize) -> bool {
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, i: usize, v: bool) {
        if v {
            self.bits[i / 64] |= 1 << (i % 64);
        } else {
            self.bits[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Whether every 4 KiB page of the host page holding page `i` is inflated.
    fn host_page_full(&self, i: usize) -> bool {
        let per = (self.range.page_size / PAGE_SIZE) as usize;
        let first = i / per * per;
        (first..first + per).all(|p| self.test(p))
    }
}

/// A run of contiguous pages of one range waiting to be released.
struct Run {
    range: usize,
    gpa: u64,
    len: u64,
}

/// Balloon state of both tiers, owned by the device thread.
pub(crate) struct Tiers {
    ranges: [Vec<RangeState>; 2],
}

impl Tiers {
    pub(crate) fn new(tiers: &[TierMemory; 2]) -> Self {
        Self {
            ranges: [0, 1].map(|t| {
                tiers[t]
                    .ranges
                    .iter()
                    .cloned()
                    .map(RangeState::new)
                    .collect()
            }),
        }
    }

    fn locate(&self, gpa: u64) -> Option<(usize, usize)> {
        (0..2).find_map(|t| {
            self.ranges[t]
                .iter()
                .position(|r| (r.range.gpa..r.range.end()).contains(&gpa))
                .map(|i| (t, i))
        })
    }

    /// Checks one PFN: in RAM, in a tier (the wanted one, if any). Returns
    /// the tier and range index.
    fn validate(
        &self,
        mem: &GuestMemoryMmap,
        pfn: u32,
        want: Option<usize>,
        metrics: &Metrics,
        queue: usize,
    ) -> Option<(usize, usize, u64)> {
        let gpa = u64::from(pfn) << crate::defs::PFN_SHIFT;
        if !GuestMemoryBackend::check_range(mem, GuestAddress(gpa), PAGE_SIZE as usize) {
            metrics.bad_pfn(BadPfn::OutsideRam, u64::from(pfn), queue);
            return None;
        }
        match self.locate(gpa) {
            None => {
                metrics.bad_pfn(BadPfn::NoTier, u64::from(pfn), queue);
                None
            }
            Some((t, _)) if want.is_some_and(|w| w != t) => {
                metrics.bad_pfn(BadPfn::WrongTier, u64::from(pfn), queue);
                None
            }
            Some((t, r)) => Some((t, r, gpa)),
        }
    }

    /// Inflates `pfns` (from queue `queue`, whose PFNs must be in tier
    /// `want` if given): marks them and releases their host memory.
    pub(crate) fn inflate(
        &mut self,
        mem: &GuestMemoryMmap,
        pfns: &[u32],
        want: Option<usize>,
        metrics: &Metrics,
        queue: usize,
    ) {
        let mut runs: Vec<(usize, Run)> = Vec::new();
        for &pfn in pfns {
            let Some((t, r, gpa)) = self.validate(mem, pfn, want, metrics, queue) else {
                continue;
            };
            let state = &mut self.ranges[t][r];
            let i = state.page(gpa);
            if state.test(i) {
                metrics.bad_pfn(BadPfn::AlreadyInflated, u64::from(pfn), queue);
                continue;
            }
            state.set(i, true);
            Metrics::add(&metrics.inflated[t], 1);
            Metrics::add(&metrics.balloon_pages[t], 1);
            let ps = state.range.page_size;
            let (start, len) = if ps == PAGE_SIZE {
                (gpa, PAGE_SIZE)
            } else if state.host_page_full(i) {
                (gpa / ps * ps, ps)
            } else {
                continue;
            };
            match runs.last_mut() {
                Some((lt, run)) if *lt == t && run.range == r && run.gpa + run.len == start => {
                    run.len += len
                }
                _ => runs.push((
                    t,
                    Run {
                        range: r,
                        gpa: start,
                        len,
                    },
                )),
            }
        }
        for (t, run) in runs {
            release(
                mem,
                &self.ranges[t][run.range].range,
                run.gpa,
                run.len,
                metrics,
            );
        }
    }

    /// Deflates `pfns`: the guest may use those pages again. The host
    /// memory refaults on first touch (as zero-filled pages), so nothing
    /// needs doing beyond forgetting the pages.
    pub(crate) fn deflate(
        &mut self,
        mem: &GuestMemoryMmap,
        pfns: &[u32],
        want: Option<usize>,
        metrics: &Metrics,
        queue: usize,
    ) {
        for &pfn in pfns {
            let Some((t, r, gpa)) = self.validate(mem, pfn, want, metrics, queue) else {
                continue;
            };
            let state = &mut self.ranges[t][r];
            let i = state.page(gpa);
            if !state.test(i) {
                metrics.bad_pfn(BadPfn::NotInflated, u64::from(pfn), queue);
                continue;
            }
            state.set(i, false);
            Metrics::add(&metrics.deflated[t], 1);
            Metrics::sub(&metrics.balloon_pages[t], 1);
        }
    }

    /// Forgets every inflated page (device reset: the guest owns all of its
    /// memory again).
    pub(crate) fn clear(&mut self, metrics: &Metrics) {
        for (t, ranges) in self.ranges.iter_mut().enumerate() {
            for r in ranges {
                r.bits.fill(0);
            }
            metrics.balloon_pages[t].store(0, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether the 4 KiB page at `gpa` is in the balloon.
    #[cfg(test)]
    pub(crate) fn is_inflated(&self, gpa: u64) -> bool {
        self.locate(gpa).is_some_and(|(t, r)| {
            let s = &self.ranges[t][r];
            s.test(s.page(gpa))
        })
    }
}

/// Gives the host memory behind `[gpa, gpa + len)` back to the host:
/// punch a hole in the backing file, if any, then drop the mapping's pages.
fn release(mem: &GuestMemoryMmap, range: &TierRange, gpa: u64, len: u64, metrics: &Metrics) {
    if let Some(file) = &range.file {
        let offset = range.file_offset + (gpa - range.gpa);
        // SAFETY: fallocate on a descriptor we hold; the range lies inside
        // the guest RAM the file backs, whose content the guest gave up.
        let ret = unsafe {
            libc::fallocate64(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off64_t,
                len as libc::off64_t,
            )
        };
        if ret != 0 {
            metrics.release_error(
                gpa,
                len,
                "fallocate(PUNCH_HOLE)",
                &std::io::Error::last_os_error(),
            );
        }
    }
    let slice = match mem.get_slice(GuestAddress(gpa), len as usize) {
        Ok(s) => s,
        Err(e) => {
            let err = std::io::Error::other(e.to_string());
            metrics.release_error(gpa, len, "host address lookup", &err);
            return;
        }
    };
    let guard = slice.ptr_guard_mut();
    // SAFETY: the slice is `len` bytes of guest RAM mapped by the VMM; the
    // guest gave these pages up, so discarding their content is what it
    // asked for, and the mapping stays valid (pages refault as zero).
    let ret = unsafe { libc::madvise(guard.as_ptr().cast(), len as usize, libc::MADV_DONTNEED) };
    if ret != 0 {
        metrics.release_error(
            gpa,
            len,
            "madvise(MADV_DONTNEED)",
            &std::io::Error::last_os_error(),
        );
    }
}
