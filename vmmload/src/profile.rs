//! Where vmmload's time goes: per system call number (calls, time handled,
//! longest), per vCPU exit reason, and the cost of dirty-ring harvesting
//! and read re-arming. Lock-free counters, cheap against an exit (tens of
//! µs on PVM); reported in the JSON report (`profile`) and with `-v`.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::relay;

/// System call numbers tracked one by one; larger ones share the last slot.
const NR_SLOTS: usize = 512;
const FUTEX_NR: u64 = 202;
/// FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME masked off.
const FUTEX_CMD_MASK: u64 = 0x7f;

/// Why a vCPU left KVM_RUN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    /// The syscall stub's port I/O.
    Syscall,
    /// An exception stub's port I/O.
    Exception,
    /// KVM_EXIT_DIRTY_RING_FULL.
    RingFull,
    /// A kick (EINTR / KVM_EXIT_INTR).
    Kick,
    /// Anything else (the run ends).
    Other,
}

const REASONS: [(ExitReason, &str); 5] = [
    (ExitReason::Syscall, "syscall"),
    (ExitReason::Exception, "exception"),
    (ExitReason::RingFull, "dirty_ring_full"),
    (ExitReason::Kick, "kick"),
    (ExitReason::Other, "other"),
];

/// What triggered a ring harvest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HarvestCause {
    /// A vCPU's ring filled up (that vCPU waits for it).
    RingFull,
    /// The sampler's interval (no vCPU waits).
    Interval,
}

#[derive(Default)]
struct Timed {
    count: AtomicU64,
    ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Timed {
    fn add(&self, ns: u64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.time(ns);
    }

    fn time(&self, ns: u64) {
        self.ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    fn json(&self) -> serde_json::Value {
        let n = self.count.load(Ordering::Relaxed);
        let ns = self.ns.load(Ordering::Relaxed);
        serde_json::json!({
            "count": n,
            "total_ms": ns as f64 / 1e6,
            "mean_us": if n > 0 { ns as f64 / n as f64 / 1e3 } else { 0.0 },
            "max_us": self.max_ns.load(Ordering::Relaxed) as f64 / 1e3,
        })
    }
}

/// futex operations told apart (FUTEX_CMD_MASK values up to FUTEX_LOCK_PI2).
const FUTEX_OPS: usize = 14;

fn futex_op_name(op: usize) -> &'static str {
    const NAMES: [&str; FUTEX_OPS] = [
        "wait",
        "wake",
        "fd",
        "requeue",
        "cmp_requeue",
        "wake_op",
        "lock_pi",
        "unlock_pi",
        "trylock_pi",
        "wait_bitset",
        "wake_bitset",
        "wait_requeue_pi",
        "cmp_requeue_pi",
        "lock_pi2",
    ];
    NAMES.get(op).copied().unwrap_or("other")
}

/// The counters.
pub struct Profile {
    calls: Vec<Timed>,
    futex_ops: Vec<Timed>,
    exits: [AtomicU64; REASONS.len()],
    harvest_full: Timed,
    harvest_interval: Timed,
    harvested_entries: AtomicU64,
    rearm: Timed,
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            calls: (0..NR_SLOTS).map(|_| Timed::default()).collect(),
            futex_ops: (0..=FUTEX_OPS).map(|_| Timed::default()).collect(),
            exits: Default::default(),
            harvest_full: Timed::default(),
            harvest_interval: Timed::default(),
            harvested_entries: AtomicU64::new(0),
            rearm: Timed::default(),
        }
    }
}

fn slot(nr: u64) -> usize {
    (nr as usize).min(NR_SLOTS - 1)
}

fn futex_slot(op: u64) -> usize {
    ((op & FUTEX_CMD_MASK) as usize).min(FUTEX_OPS)
}

fn reason_index(r: ExitReason) -> usize {
    REASONS.iter().position(|&(x, _)| x == r).unwrap_or(0)
}

impl Profile {
    /// Counts one exit.
    pub fn exit(&self, r: ExitReason) {
        self.exits[reason_index(r)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a system call as it starts (so a call that ends the run,
    /// whose handler may not return before the report, is still counted).
    /// `op` is the second argument (only used for futex).
    pub fn syscall_start(&self, nr: u64, op: u64) {
        self.calls[slot(nr)].count.fetch_add(1, Ordering::Relaxed);
        if nr == FUTEX_NR {
            self.futex_ops[futex_slot(op)]
                .count
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds the time a call took from the exit to the resume, including
    /// any time it blocked on the host.
    pub fn syscall_done(&self, nr: u64, op: u64, ns: u64) {
        self.calls[slot(nr)].time(ns);
        if nr == FUTEX_NR {
            self.futex_ops[futex_slot(op)].time(ns);
        }
    }

    /// `syscall_start` and `syscall_done` at once.
    #[cfg(test)]
    fn syscall(&self, nr: u64, op: u64, ns: u64) {
        self.syscall_start(nr, op);
        self.syscall_done(nr, op, ns);
    }

    /// Records one ring harvest that collected `entries` dirty pages.
    pub fn harvest(&self, cause: HarvestCause, entries: u64, ns: u64) {
        match cause {
            HarvestCause::RingFull => self.harvest_full.add(ns),
            HarvestCause::Interval => self.harvest_interval.add(ns),
        }
        self.harvested_entries.fetch_add(entries, Ordering::Relaxed);
    }

    /// Records one accessed-bit scan and re-arm.
    pub fn rearm(&self, ns: u64) {
        self.rearm.add(ns);
    }

    /// Calls seen, most expensive (total time) first: (nr, count, ns, max_ns).
    pub fn top_calls(&self) -> Vec<(u64, u64, u64, u64)> {
        let mut v: Vec<_> = self
            .calls
            .iter()
            .enumerate()
            .filter_map(|(nr, t)| {
                let n = t.count.load(Ordering::Relaxed);
                (n > 0).then(|| {
                    (
                        nr as u64,
                        n,
                        t.ns.load(Ordering::Relaxed),
                        t.max_ns.load(Ordering::Relaxed),
                    )
                })
            })
            .collect();
        v.sort_by_key(|&(nr, _, ns, _)| (std::cmp::Reverse(ns), nr));
        v
    }

    /// The `profile` object of the JSON report.
    pub fn json(&self) -> serde_json::Value {
        let calls: Vec<serde_json::Value> = self
            .top_calls()
            .into_iter()
            .map(|(nr, n, ns, max)| {
                serde_json::json!({
                    "nr": nr,
                    "name": relay::name(nr),
                    "count": n,
                    "total_ms": ns as f64 / 1e6,
                    "mean_us": ns as f64 / n as f64 / 1e3,
                    "max_us": max as f64 / 1e3,
                })
            })
            .collect();
        let exits: serde_json::Map<String, serde_json::Value> = REASONS
            .iter()
            .enumerate()
            .map(|(i, &(_, name))| {
                (
                    name.to_string(),
                    self.exits[i].load(Ordering::Relaxed).into(),
                )
            })
            .collect();
        let futex: serde_json::Map<String, serde_json::Value> = self
            .futex_ops
            .iter()
            .enumerate()
            .filter(|(_, t)| t.count.load(Ordering::Relaxed) > 0)
            .map(|(op, t)| (futex_op_name(op).to_string(), t.json()))
            .collect();
        serde_json::json!({
            "exits": exits,
            "syscalls": calls,
            "futex_ops": futex,
            "ring_harvest": {
                "on_ring_full": self.harvest_full.json(),
                "on_interval": self.harvest_interval.json(),
                "entries": self.harvested_entries.load(Ordering::Relaxed),
            },
            "read_rearm": self.rearm.json(),
        })
    }

    /// A few lines for `-v`.
    pub fn summary(&self) -> String {
        let mut s = String::from("exits:");
        for (i, &(_, name)) in REASONS.iter().enumerate() {
            let n = self.exits[i].load(Ordering::Relaxed);
            if n > 0 {
                s.push_str(&format!(" {name} {n}"));
            }
        }
        for (label, t) in [
            ("ring harvests on ring-full", &self.harvest_full),
            ("ring harvests per interval", &self.harvest_interval),
            ("read re-arms", &self.rearm),
        ] {
            let n = t.count.load(Ordering::Relaxed);
            if n > 0 {
                s.push_str(&format!(
                    "\n{label}: {n}, {:.1} µs mean, {:.1} µs max",
                    t.ns.load(Ordering::Relaxed) as f64 / n as f64 / 1e3,
                    t.max_ns.load(Ordering::Relaxed) as f64 / 1e3
                ));
            }
        }
        for (op, t) in self.futex_ops.iter().enumerate() {
            let n = t.count.load(Ordering::Relaxed);
            if n > 0 {
                s.push_str(&format!(
                    "\nfutex {}: {n}, {:.1} µs mean (including time blocked)",
                    futex_op_name(op),
                    t.ns.load(Ordering::Relaxed) as f64 / n as f64 / 1e3
                ));
            }
        }
        s.push_str("\nsystem calls by time handled (count, mean, max):");
        for (nr, n, ns, max) in self.top_calls().into_iter().take(12) {
            s.push_str(&format!(
                "\n  {:<16} {n:>9} {:>10.1} µs {:>10.1} µs",
                relay::name(nr),
                ns as f64 / n as f64 / 1e3,
                max as f64 / 1e3
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_orders_calls_by_time() {
        let p = Profile::default();
        p.syscall(39, 0, 1_000);
        p.syscall(202, 0x80, 5_000); // FUTEX_WAIT_PRIVATE
        p.syscall(202, 1, 7_000); // FUTEX_WAKE
        p.syscall(202, u64::MAX, 1); // bad op: "other", no panic
        p.syscall(100_000, 0, 10); // out of range: last slot, no panic
        let top = p.top_calls();
        assert_eq!(top[0], (202, 3, 12_001, 7_000));
        let j = p.json();
        assert_eq!(j["futex_ops"]["wait"]["count"], 1);
        assert_eq!(j["futex_ops"]["wake"]["count"], 1);
        assert_eq!(j["futex_ops"]["other"]["count"], 1);
        assert_eq!(top[1], (39, 1, 1_000, 1_000));
        assert_eq!(top[2].0, NR_SLOTS as u64 - 1);
    }

    #[test]
    fn exits_and_harvests_reach_the_json() {
        let p = Profile::default();
        p.exit(ExitReason::Syscall);
        p.exit(ExitReason::RingFull);
        p.exit(ExitReason::RingFull);
        p.harvest(HarvestCause::RingFull, 192, 3_000);
        p.harvest(HarvestCause::Interval, 8, 1_000);
        let j = p.json();
        assert_eq!(j["exits"]["dirty_ring_full"], 2);
        assert_eq!(j["exits"]["syscall"], 1);
        assert_eq!(j["ring_harvest"]["entries"], 200);
        assert_eq!(j["ring_harvest"]["on_ring_full"]["count"], 1);
        assert_eq!(j["ring_harvest"]["on_interval"]["count"], 1);
    }
}
