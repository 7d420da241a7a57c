//! Time and identity calls answered inside the guest (PVM backend): the
//! stub (see `stub.S`) serves getpid, getuid, getgid, geteuid, getegid,
//! clock_gettime(REALTIME/MONOTONIC), gettimeofday and time from the control
//! page without an exit, the way the vDSO does natively.
//!
//! Time is `base + (rdtsc - base_tsc) * mult >> 32` with the base taken from
//! the host clocks once at the first system call; on PVM the program's
//! `rdtsc` reads the host TSC. Only used when the TSC is constant and
//! non-stop. Like the vDSO it does not follow NTP slewing after the base was
//! taken (ppm-level drift over a run).

use std::sync::atomic::Ordering;

use crate::machine::{ctl, CACHE_CTL_VA};
use crate::mm::{Mm, PTE_ADDR};

fn tsc_is_reliable() -> bool {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = info.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    flags.split_whitespace().any(|f| f == "constant_tsc")
        && flags.split_whitespace().any(|f| f == "nonstop_tsc")
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn put(mm: &Mm, off: u64, v: u64) {
    let gpa = mm.pte(CACHE_CTL_VA) & PTE_ADDR;
    mm.ram.word(gpa + off).store(v, Ordering::SeqCst);
}

/// Publishes the identity values (again after a set*id call).
pub fn refresh_ids(mm: &Mm) {
    // SAFETY: these getters have no preconditions.
    let (pid, uid, gid, euid, egid) = unsafe {
        (
            libc::getpid() as u64,
            libc::getuid() as u64,
            libc::getgid() as u64,
            libc::geteuid() as u64,
            libc::getegid() as u64,
        )
    };
    put(mm, ctl::PID, pid);
    put(mm, ctl::UID, uid);
    put(mm, ctl::GID, gid);
    put(mm, ctl::EUID, euid);
    put(mm, ctl::EGID, egid);
}

/// Turns the fast calls on; `tsc_khz` is the TSC rate KVM reports.
/// Returns false (and leaves them off) if the TSC cannot be trusted.
pub fn enable(mm: &Mm, tsc_khz: u32) -> bool {
    if tsc_khz == 0 || !tsc_is_reliable() {
        return false;
    }
    refresh_ids(mm);
    // SAFETY: rdtsc has no preconditions.
    let t1 = unsafe { core::arch::x86_64::_rdtsc() };
    let real = clock_ns(libc::CLOCK_REALTIME);
    let mono = clock_ns(libc::CLOCK_MONOTONIC);
    // SAFETY: as above.
    let t2 = unsafe { core::arch::x86_64::_rdtsc() };
    let mult = ((1_000_000_000u128 << 32) / (tsc_khz as u128 * 1000)) as u64;
    put(mm, ctl::TSC, t1 + (t2 - t1) / 2);
    put(mm, ctl::MULT, mult);
    put(mm, ctl::REAL, real);
    put(mm, ctl::MONO, mono);
    put(mm, ctl::FAST, 1);
    true
}

/// set*id calls change what the identity fast paths must answer.
pub fn changes_ids(nr: u64) -> bool {
    matches!(nr, 105 | 106 | 113 | 114 | 117 | 119 | 122 | 123)
}
