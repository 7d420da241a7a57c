//! Write tracking (KVM dirty ring, or the dirty bitmap where there is no
//! ring) and read tracking (accessed bits of vmmload's own page tables),
//! harvested every interval while the vCPUs are paused.
//!
//! Read re-arming depends on the backend:
//! - standard KVM (EPT/NPT): clear A bits, then flush the guest TLB
//!   (`flush-tlb`: a CR4.PGE change through KVM_SET_SREGS on each vCPU);
//! - the PVM hypervisor (shadow paging): clearing A bits is not enough, the
//!   shadow entries keep the translation. KVM must drop them so the next
//!   access walks the guest tables again: `host-remap` (default) changes the
//!   host protection of guest RAM and back, which makes KVM's MMU notifier
//!   zap the mappings while the vCPUs keep running; `memslot-cycle` deletes
//!   and re-adds the memslot, which needs every vCPU paused.

use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use kvm_bindings::{
    kvm_enable_cap, KVM_CAP_DIRTY_LOG_RING, KVM_CAP_DIRTY_LOG_RING_ACQ_REL, KVM_MEM_LOG_DIRTY_PAGES,
};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use log::{info, warn};

use crate::mm::{PTE_A, PTE_ADDR, PTE_P};
use crate::process::{Backend, ProcOptions, Process};
use crate::profile::HarvestCause;
use crate::ram::{OWN_FREED_TAG, OWN_USER_TAG, PAGE, PHYS_BASE};
use crate::stats::{Sample, Stats};

/// Read tracking as requested on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadRequest {
    /// Pick by backend and paging mode: host-remap on PVM and on shadow
    /// paging (ept=0/npt=0), flush-tlb with EPT/NPT.
    Auto,
    /// No read tracking.
    Off,
    /// Delete and re-add the memslot each interval (needs all vCPUs paused).
    MemslotCycle,
    /// Toggle the host protection of guest RAM so KVM's MMU notifier drops
    /// its mappings (works with vCPUs running).
    HostRemap,
    /// Flush the guest TLB each interval.
    FlushTlb,
}

/// Read tracking in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStrategy {
    /// None.
    Off,
    /// Memslot delete/re-add.
    MemslotCycle,
    /// Host mprotect round trip (MMU-notifier zap).
    HostRemap,
    /// Guest TLB flush.
    FlushTlb,
}

impl ReadStrategy {
    /// Name for reports.
    pub fn name(self) -> &'static str {
        match self {
            ReadStrategy::Off => "off",
            ReadStrategy::MemslotCycle => "accessed-bits+memslot-cycle",
            ReadStrategy::HostRemap => "accessed-bits+mmu-notifier-zap",
            ReadStrategy::FlushTlb => "accessed-bits+tlb-flush",
        }
    }
}

/// The read strategy `--reads auto` picks: a guest TLB flush where the CPU
/// sets accessed bits itself (standard KVM with EPT/NPT, also when the
/// paging mode cannot be read), the MMU-notifier zap where KVM shadows the
/// guest's page tables (PVM, or standard KVM with `ept=0`/`npt=0`).
fn auto_reads(b: Backend, tdp: Option<bool>) -> ReadStrategy {
    match (b, tdp) {
        (Backend::Pvm, _) | (Backend::Standard, Some(false)) => ReadStrategy::HostRemap,
        (Backend::Standard, _) => ReadStrategy::FlushTlb,
    }
}

/// Write tracking in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// None.
    Off,
    /// Dirty ring with this many entries per vCPU.
    Ring(u32),
    /// Dirty bitmap.
    Bitmap,
}

impl WriteMode {
    /// Name for reports.
    pub fn name(self) -> String {
        match self {
            WriteMode::Off => "off".into(),
            WriteMode::Ring(n) => format!("dirty-ring({n} entries)"),
            WriteMode::Bitmap => "dirty-bitmap".into(),
        }
    }
}

#[repr(C)]
struct DirtyGfn {
    flags: AtomicU32,
    slot: u32,
    offset: u64,
}

struct Ring {
    base: *mut DirtyGfn,
    entries: u32,
    fetch: u32,
}

// SAFETY: the ring is shared memory with the kernel, accessed through atomics
// under the rings mutex.
unsafe impl Send for Ring {}

const KVM_RESET_DIRTY_RINGS: libc::c_ulong = 0xaec7;
const DIRTY: u32 = 1;
const RESET: u32 = 2;

/// More separate frame runs than this are re-armed by one zap of all of
/// guest RAM (two mprotect calls) rather than two calls per run.
const MAX_ZAP_RUNS: usize = 256;

/// Makes KVM drop its mappings of the frames whose accessed bit was just
/// cleared, so their next access walks the guest tables and sets it again.
/// Only those frames can have a mapping: every mapping KVM created since
/// the previous re-arm came from a guest walk that set the bit (and the
/// shadow MMU prefetches only entries whose bit is already set). Zapping
/// just them spares the hypervisor the invalidation of all guest RAM,
/// which costs a program touching few pages far more than its refaults.
fn zap_accessed(p: &Process, mut frames: Vec<u64>, mapped_limit: u64) {
    frames.sort_unstable();
    frames.dedup();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for f in frames {
        match runs.last_mut() {
            Some((start, len)) if *start + *len == f => *len += PAGE,
            _ => runs.push((f, PAGE)),
        }
    }
    if runs.len() > MAX_ZAP_RUNS {
        p.ram.zap_kvm_mappings(mapped_limit);
        return;
    }
    for (gpa, len) in runs {
        p.ram.zap_kvm_range(gpa, len);
    }
}

/// The tracker.
pub struct Tracker {
    /// Write tracking mode.
    pub writes: WriteMode,
    read_req: ReadRequest,
    reads: OnceLock<ReadStrategy>,
    rings: Mutex<Vec<Ring>>,
    harvested: Mutex<Vec<u64>>,
    vmm_writes: Mutex<Vec<u64>>,
    /// Ring-full exits so far.
    pub ring_full_events: AtomicU64,
    last_ring_full: AtomicU64,
    /// Statistics.
    pub stats: Mutex<Stats>,
    start: Instant,
}

impl Tracker {
    /// Sets up write tracking on the VM (before any vCPU exists).
    pub fn new(kvm: &Kvm, vm: &VmFd, opts: &ProcOptions) -> Result<Tracker, String> {
        let _ = kvm;
        let writes = if opts.ring_entries == 0 {
            WriteMode::Off
        } else {
            let acq = vm.check_extension_raw(KVM_CAP_DIRTY_LOG_RING_ACQ_REL as libc::c_ulong);
            let plain = vm.check_extension_raw(KVM_CAP_DIRTY_LOG_RING as libc::c_ulong);
            let (cap, max) = if acq > 0 {
                (KVM_CAP_DIRTY_LOG_RING_ACQ_REL, acq)
            } else {
                (KVM_CAP_DIRTY_LOG_RING, plain)
            };
            if max <= 0 {
                info!("no dirty ring on this host: using the dirty bitmap");
                WriteMode::Bitmap
            } else {
                let max_entries = (max as u64 / 16) as u32;
                let mut n = opts.ring_entries.max(256).next_power_of_two();
                if n > max_entries {
                    info!(
                        "--ring-entries {} exceeds the host maximum {max_entries}",
                        opts.ring_entries
                    );
                    n = max_entries;
                }
                if n != opts.ring_entries {
                    info!(
                        "dirty ring size {} rounded to {n} entries",
                        opts.ring_entries
                    );
                }
                let mut c = kvm_enable_cap {
                    cap,
                    ..Default::default()
                };
                c.args[0] = n as u64 * 16;
                match vm.enable_cap(&c) {
                    Ok(()) => WriteMode::Ring(n),
                    Err(e) => {
                        warn!("enabling the dirty ring failed ({e}): using the dirty bitmap");
                        WriteMode::Bitmap
                    }
                }
            }
        };
        let read_req = if writes == WriteMode::Off {
            ReadRequest::Off
        } else {
            opts.reads
        };
        Ok(Tracker {
            writes,
            read_req,
            reads: OnceLock::new(),
            rings: Mutex::new(Vec::new()),
            harvested: Mutex::new(Vec::new()),
            vmm_writes: Mutex::new(Vec::new()),
            ring_full_events: AtomicU64::new(0),
            last_ring_full: AtomicU64::new(0),
            stats: Mutex::new(Stats::new(opts.stats)),
            start: Instant::now(),
        })
    }

    /// Flags for the RAM memslot.
    pub fn memslot_flags(&self) -> u32 {
        if self.writes == WriteMode::Off {
            0
        } else {
            KVM_MEM_LOG_DIRTY_PAGES
        }
    }

    /// Whether any tracking runs.
    pub fn enabled(&self) -> bool {
        self.writes != WriteMode::Off
    }

    /// Maps a new vCPU's dirty ring.
    pub fn add_vcpu(&self, vcpu: &VcpuFd) -> Result<(), String> {
        let WriteMode::Ring(n) = self.writes else {
            return Ok(());
        };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64;
        // SAFETY: mapping the vCPU's ring at the documented offset; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n as usize * 16,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                vcpu.as_raw_fd(),
                kvm_bindings::KVM_DIRTY_LOG_PAGE_OFFSET as i64 * page,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().to_string());
        }
        self.rings.lock().expect("rings lock").push(Ring {
            base: p as *mut DirtyGfn,
            entries: n,
            fetch: 0,
        });
        Ok(())
    }

    /// Picks the read strategy once the backend is known.
    pub fn choose_reads(&self, b: Backend) {
        let s = match (self.read_req, b) {
            (ReadRequest::Off, _) => ReadStrategy::Off,
            (ReadRequest::MemslotCycle, _) => ReadStrategy::MemslotCycle,
            (ReadRequest::HostRemap, _) => ReadStrategy::HostRemap,
            (ReadRequest::FlushTlb, _) => ReadStrategy::FlushTlb,
            (ReadRequest::Auto, b) => auto_reads(b, crate::kvmpaging::host_uses_tdp()),
        };
        let _ = self.reads.set(s);
        info!(
            "write tracking: {}; read tracking: {}",
            self.writes.name(),
            s.name()
        );
    }

    /// Read strategy in effect (off until the first syscall).
    pub fn reads(&self) -> ReadStrategy {
        self.reads.get().copied().unwrap_or(ReadStrategy::Off)
    }

    /// Records ranges the VMM wrote for the program (read(2) buffers etc.).
    pub fn note_vmm_writes(&self, ranges: &[(u64, u64)]) {
        if !self.enabled() || ranges.is_empty() {
            return;
        }
        let mut w = self.vmm_writes.lock().expect("vmm writes lock");
        for &(g, l) in ranges {
            let mut pg = g & !(PAGE - 1);
            while pg < g + l {
                w.push(pg);
                pg += PAGE;
            }
        }
    }

    /// Collects every ring's dirty entries and resets them; returns how many.
    fn harvest_rings(&self, vm: &VmFd, ram: &crate::ram::GuestRam) -> u64 {
        let mut rings = self.rings.lock().expect("rings lock");
        let mut out = self.harvested.lock().expect("harvest lock");
        let mut any = false;
        let mut n = 0u64;
        for r in rings.iter_mut() {
            loop {
                let idx = (r.fetch % r.entries) as usize;
                // SAFETY: idx < entries, inside the mapped ring.
                let e = unsafe { &*r.base.add(idx) };
                if e.flags.load(Ordering::Acquire) & DIRTY == 0 {
                    break;
                }
                if let Some(off) = ram.slots.frame_offset(e.slot, e.offset) {
                    out.push(off);
                }
                e.flags.store(RESET, Ordering::Release);
                r.fetch = r.fetch.wrapping_add(1);
                any = true;
                n += 1;
            }
        }
        if any {
            // SAFETY: VM ioctl without arguments.
            unsafe { libc::ioctl(vm.as_raw_fd(), KVM_RESET_DIRTY_RINGS) };
        }
        n
    }

    /// Handles KVM_EXIT_DIRTY_RING_FULL.
    pub fn ring_full(&self, p: &Process) {
        self.ring_full_events.fetch_add(1, Ordering::Relaxed);
        let t0 = Instant::now();
        let n = self.harvest_rings(&p.vm, &p.ram);
        p.counters
            .profile
            .harvest(HarvestCause::RingFull, n, t0.elapsed().as_nanos() as u64);
    }

    /// Takes one interval sample. Runs concurrently with the vCPUs: ring
    /// harvesting and accessed-bit clearing are atomic; only the memslot
    /// cycle pauses them.
    pub fn sample(&self, p: &Process, last: bool) {
        if !self.enabled() {
            return;
        }
        let reads = self.reads();
        let paused = if reads == ReadStrategy::MemslotCycle && !last {
            let g = p.pause();
            if g.is_none() {
                p.log_once("could not pause the vCPUs: memslot-cycle read re-arming skipped (use --reads host-remap)".into());
            }
            g
        } else {
            None
        };
        match self.writes {
            WriteMode::Ring(_) => {
                let t0 = Instant::now();
                let n = self.harvest_rings(&p.vm, &p.ram);
                p.counters.profile.harvest(
                    HarvestCause::Interval,
                    n,
                    t0.elapsed().as_nanos() as u64,
                );
            }
            WriteMode::Bitmap => {
                for (slot, start, len) in p.ram.slots.registered() {
                    let Ok(bits) = p.vm.get_dirty_log(slot, len as usize) else {
                        continue;
                    };
                    let mut out = self.harvested.lock().expect("harvest lock");
                    for (i, w) in bits.iter().enumerate() {
                        let mut w = *w;
                        while w != 0 {
                            let b = w.trailing_zeros() as u64;
                            out.push(start / PAGE + i as u64 * 64 + b);
                            w &= w - 1;
                        }
                    }
                }
            }
            WriteMode::Off => {}
        }
        let gfns = std::mem::take(&mut *self.harvested.lock().expect("harvest lock"));
        let vmm = std::mem::take(&mut *self.vmm_writes.lock().expect("vmm writes lock"));
        let mm = p.mm.lock().expect("mm lock");
        let mut written: Vec<u64> = Vec::with_capacity(gfns.len() + vmm.len());
        for off in gfns {
            let own = mm.frames.owner_of(PHYS_BASE + off * PAGE);
            if own & 7 == OWN_USER_TAG || own & 7 == OWN_FREED_TAG {
                written.push(own & !(PAGE - 1));
            }
        }
        written.extend(vmm);
        let mut accessed = Vec::new();
        let mut accessed_frames = Vec::new();
        let rearm_start = Instant::now();
        if reads != ReadStrategy::Off {
            for (&hi, &table) in &mm.leaf_tables {
                for i in 0..512u64 {
                    let w = mm.ram.word(table + i * 8);
                    let v = w.load(Ordering::Relaxed);
                    if v & (PTE_P | PTE_A) == PTE_P | PTE_A {
                        w.fetch_and(!PTE_A, Ordering::Relaxed);
                        accessed.push((hi << 21) | (i << 12));
                        accessed_frames.push(v & PTE_ADDR);
                    }
                }
            }
        }
        let mapped = mm.frames.used();
        let mapped_limit = mm.frames.high_water();
        let vmas: Vec<(u64, u64, String)> = mm
            .vmas
            .values()
            .map(|v| (v.start, v.end, v.kind.label()))
            .collect();
        drop(mm);
        if paused.is_some() {
            if let Err(e) = p.remove_memslot().and_then(|_| p.add_memslot()) {
                p.end(crate::process::Ending::Error(format!(
                    "re-adding the memslot failed: {e}"
                )));
            }
        }
        if reads == ReadStrategy::HostRemap {
            zap_accessed(p, accessed_frames, mapped_limit);
        }
        drop(paused);
        if reads == ReadStrategy::FlushTlb {
            p.flush_epoch.fetch_add(1, Ordering::SeqCst);
            p.kick_all();
        }
        if reads != ReadStrategy::Off {
            p.counters
                .profile
                .rearm(rearm_start.elapsed().as_nanos() as u64);
        }
        let rf = self.ring_full_events.load(Ordering::Relaxed);
        let prev = self.last_ring_full.swap(rf, Ordering::Relaxed);
        let s = Sample {
            t_ms: self.start.elapsed().as_secs_f64() * 1000.0,
            written,
            accessed,
            mapped_pages: mapped,
            ring_full: rf - prev,
            reads_tracked: reads != ReadStrategy::Off,
        };
        let mut st = self.stats.lock().expect("stats lock");
        st.record(s);
        st.set_regions(vmas);
    }
}

#[cfg(test)]
mod tests {
    use super::{auto_reads, ReadStrategy};
    use crate::process::Backend;

    #[test]
    fn auto_reads_follow_the_paging_mode() {
        assert_eq!(auto_reads(Backend::Pvm, None), ReadStrategy::HostRemap);
        assert_eq!(
            auto_reads(Backend::Pvm, Some(true)),
            ReadStrategy::HostRemap
        );
        assert_eq!(
            auto_reads(Backend::Standard, Some(true)),
            ReadStrategy::FlushTlb
        );
        assert_eq!(auto_reads(Backend::Standard, None), ReadStrategy::FlushTlb);
        assert_eq!(
            auto_reads(Backend::Standard, Some(false)),
            ReadStrategy::HostRemap
        );
    }
}
