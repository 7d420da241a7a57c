//! The daemon against VMM API servers: our real `api` HTTP server on a
//! UNIX socket per VM, with a balloon model behind it (the guest's side:
//! `actual` follows `target` at a fixed rate). Checks what the daemon does
//! through the API: the budget at every instant as the VMMs see it, slice
//! sizes, donors first, a VMM that vanishes and comes back, a VM without
//! a tiered balloon. The real guest path runs in the testbed.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use api::{
    channel, start_http_server, ApiError, ApiRequest, ApiResponse, ApiSocket, BalloonSize,
    BalloonStatsResponse, BalloonTierStats, VmInfo, VmState,
};
use tier_policy::daemon::config::Config;
use tier_policy::daemon::Daemon;
use tier_policy::policies::StaticSplit;
use vmm_sys_util::eventfd::EventFd;

const GIB: u64 = 1 << 30;
const RATE: f64 = 8.0 * GIB as f64; // balloon bytes/s in the model

/// What every fake VMM reports to the test: Σ FMem held at each change.
#[derive(Default)]
struct Ledger {
    held: BTreeMap<String, u64>,
    max_sum: u64,
    /// (vm, old share, new share) per resize, in order.
    resizes: Vec<(String, u64, u64)>,
}

impl Ledger {
    fn set(&mut self, vm: &str, held: u64) {
        self.held.insert(vm.into(), held);
        self.max_sum = self.max_sum.max(self.held.values().sum());
    }
}

struct FakeVmm {
    stop: Arc<AtomicBool>,
    kill: EventFd,
    threads: Vec<JoinHandle<()>>,
}

impl FakeVmm {
    fn shutdown(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.kill.write(1);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn start_vmm(
    name: &str,
    sock: &Path,
    tier: u64,
    balloon: u64,
    hetero: bool,
    ledger: Arc<Mutex<Ledger>>,
) -> FakeVmm {
    start_vmm_at_rate(name, sock, tier, balloon, hetero, ledger, RATE)
}

/// A fake VMM whose guest moves the balloon at `rate` bytes/s (0: stuck).
fn start_vmm_at_rate(
    name: &str,
    sock: &Path,
    tier: u64,
    balloon: u64,
    hetero: bool,
    ledger: Arc<Mutex<Ledger>>,
    rate: f64,
) -> FakeVmm {
    start_vmm_guest(
        name,
        sock,
        tier,
        balloon,
        hetero,
        ledger,
        rate,
        f64::INFINITY,
    )
}

/// A fake VMM whose guest moves the balloon at `rate` bytes/s but cannot
/// inflate it beyond `max_balloon` bytes (its FMem is full of pages in use).
#[allow(clippy::too_many_arguments)]
fn start_vmm_guest(
    name: &str,
    sock: &Path,
    tier: u64,
    balloon: u64,
    hetero: bool,
    ledger: Arc<Mutex<Ledger>>,
    rate: f64,
    max_balloon: f64,
) -> FakeVmm {
    let _ = std::fs::remove_file(sock);
    let (tx, rx) = channel().unwrap();
    let kill = EventFd::new(libc::EFD_NONBLOCK).unwrap();
    let socket = ApiSocket::parse(&format!("path={}", sock.display())).unwrap();
    let server = start_http_server(socket, tx, kill.try_clone().unwrap()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let name = name.to_string();
    ledger.lock().unwrap().set(&name, tier - balloon);
    let vmm = std::thread::spawn(move || {
        let (mut target, mut actual) = (balloon as f64, balloon as f64);
        let mut last = Instant::now();
        while !stop2.load(Ordering::SeqCst) {
            let mut pfd = libc::pollfd {
                fd: rx.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut pfd, 1, 5) };
            // The guest moves the balloon towards the target.
            let dt = last.elapsed().as_secs_f64();
            last = Instant::now();
            let step = rate * dt;
            actual = if actual < target {
                (actual + step).min(target).min(max_balloon.max(actual))
            } else {
                (actual - step).max(target)
            };
            let held = tier - (target.min(actual) as u64);
            ledger.lock().unwrap().set(&name, held);
            for msg in rx.drain().unwrap_or_default() {
                let r = match &msg.request {
                    ApiRequest::VmInfo => {
                        let mut config = vm_config::VmConfig::default();
                        config.memory.size = tier;
                        Ok(ApiResponse::VmInfo(Box::new(VmInfo {
                            config,
                            state: VmState::Running,
                            memory_actual_size: 0,
                            device_tree: None,
                        })))
                    }
                    ApiRequest::VmBalloonStats => {
                        let tiers = vec![
                            BalloonTierStats {
                                tier: "fmem".into(),
                                target: target as u64,
                                actual: actual as u64,
                                host_inflated: actual as u64,
                                guest_total: None,
                                guest_free: None,
                                guest_used: None,
                                ..Default::default()
                            },
                            BalloonTierStats {
                                tier: "smem".into(),
                                target: 0,
                                actual: 0,
                                host_inflated: 0,
                                guest_total: None,
                                guest_free: None,
                                guest_used: None,
                                ..Default::default()
                            },
                        ];
                        Ok(ApiResponse::BalloonStats(Box::new(BalloonStatsResponse {
                            balloon_actual: actual as u64,
                            heterogeneous_memory: hetero,
                            stats_updates: 1,
                            tiers,
                            stats: BTreeMap::new(),
                        })))
                    }
                    ApiRequest::VmResize(d) => match d.desired_balloon {
                        Some(BalloonSize { fmem, smem })
                            if fmem <= tier && (hetero || smem == 0) =>
                        {
                            let old = tier - (target.min(actual) as u64);
                            target = fmem as f64;
                            let mut l = ledger.lock().unwrap();
                            l.set(&name, tier - (target.min(actual) as u64));
                            l.resizes.push((name.clone(), old, tier - fmem));
                            Ok(ApiResponse::Empty)
                        }
                        _ => Err(ApiError::VmNotCreated),
                    },
                    _ => Err(ApiError::VmNotCreated),
                };
                msg.respond(r);
            }
        }
    });
    FakeVmm {
        stop,
        kill,
        threads: vec![server, vmm],
    }
}

fn config(dir: &Path, budget: &str, extra: &str) -> Config {
    let text = format!(
        "[host]\nfmem_budget = \"{budget}\"\nunit = \"256M\"\ninterval_s = 1\np_max = \"512M\"\nsocket_dir = \"{}\"\nstate_dir = \"{}\"\nresize_timeout_s = 5\npolicy = \"static\"\n{extra}",
        dir.join("socks").display(),
        dir.join("state").display()
    );
    Config::parse(&text, dir).unwrap()
}

fn log_lines(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("state/decisions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

static STOP: AtomicBool = AtomicBool::new(false);

/// Replaces `path` as a load generator should (tb-kvload does): a reader
/// never sees a half-written file.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn sock(dir: &Path, n: &str) -> PathBuf {
    dir.join("socks").join(format!("{n}.sock"))
}

#[test]
fn keeps_the_budget_slices_and_donors_first_through_the_api() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("socks")).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    // Shares 2 + 6 + 6 = 14 GiB of a 14 GiB budget; static wants 14/3 each.
    let vmms = vec![
        start_vmm(
            "a",
            &sock(dir.path(), "a"),
            8 * GIB,
            6 * GIB,
            true,
            ledger.clone(),
        ),
        start_vmm(
            "b",
            &sock(dir.path(), "b"),
            8 * GIB,
            2 * GIB,
            true,
            ledger.clone(),
        ),
        start_vmm(
            "c",
            &sock(dir.path(), "c"),
            8 * GIB,
            2 * GIB,
            true,
            ledger.clone(),
        ),
    ];
    let cfg = config(dir.path(), "14G", "");
    let mut d = Daemon::new(cfg, Box::new(StaticSplit), &STOP).unwrap();
    d.cycle();
    assert!(
        ledger.lock().unwrap().resizes.is_empty(),
        "the first interval only observes"
    );
    let st = tier_policy::daemon::read_status(&dir.path().join("state")).unwrap();
    assert_eq!(st.vms.len(), 3, "status is there from the first interval");
    d.cycle();
    let l = ledger.lock().unwrap();
    assert!(
        l.max_sum <= 14 * GIB,
        "Σ FMem held reached {} > budget",
        l.max_sum
    );
    for (vm, old, new) in &l.resizes {
        assert!(
            old.abs_diff(*new) <= 512 << 20,
            "{vm}: {old} -> {new} exceeds p_max"
        );
    }
    // The first resize is a donor's (b or c shrinking).
    let (first_vm, old, new) = &l.resizes[0];
    assert!(new < old && first_vm != "a", "{:?}", l.resizes);
    let held: Vec<u64> = ["a", "b", "c"].iter().map(|n| l.held[*n]).collect();
    let units: Vec<u64> = held.iter().map(|h| h / (256 << 20)).collect();
    assert_eq!(units.iter().sum::<u64>(), 56);
    assert!(units.iter().all(|u| (18..=19).contains(u)), "{units:?}");
    drop(l);
    let log = log_lines(dir.path());
    let decision = log.iter().find(|e| e["event"] == "decision").unwrap();
    assert_eq!(decision["outcome"], "done");
    // The log matches what the VMMs report.
    for (vm, units) in decision["targets"].as_object().unwrap() {
        assert_eq!(
            ledger.lock().unwrap().held[vm.as_str()],
            units.as_u64().unwrap() * (256 << 20)
        );
    }
    for v in vmms {
        v.shutdown();
    }
}

#[test]
fn an_abandoned_slice_is_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("socks")).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    // a holds 3 GiB and must give 1 GiB to b, but its guest never moves
    // the balloon: the shrink times out and the plan is dropped.
    let a = start_vmm_at_rate(
        "a",
        &sock(dir.path(), "a"),
        4 * GIB,
        GIB,
        true,
        ledger.clone(),
        0.0,
    );
    let b = start_vmm(
        "b",
        &sock(dir.path(), "b"),
        4 * GIB,
        3 * GIB,
        true,
        ledger.clone(),
    );
    let text = format!(
        "[host]\nfmem_budget = \"4G\"\nunit = \"256M\"\ninterval_s = 1\np_max = \"1G\"\nsocket_dir = \"{}\"\nstate_dir = \"{}\"\nresize_timeout_s = 1\npolicy = \"static\"\n",
        dir.path().join("socks").display(),
        dir.path().join("state").display()
    );
    let cfg = Config::parse(&text, dir.path()).unwrap();
    let mut d = Daemon::new(cfg, Box::new(StaticSplit), &STOP).unwrap();
    d.cycle();
    d.cycle();
    let log = log_lines(dir.path());
    let decision = log.iter().find(|e| e["event"] == "decision").unwrap();
    assert!(
        decision["outcome"].as_str().unwrap().starts_with("replan"),
        "{decision}"
    );
    // Every resize a VMM received is in the log's slices.
    let slices = decision["slices"].as_array().unwrap();
    let logged: Vec<(String, u64)> = slices
        .iter()
        .flat_map(|s| {
            let mut v = s["shrink"].as_array().unwrap().clone();
            v.extend(s["grow"].as_array().unwrap().iter().cloned());
            v
        })
        .map(|e| {
            (
                e[0].as_str().unwrap().to_string(),
                e[1].as_u64().unwrap() * (256 << 20),
            )
        })
        .collect();
    let resizes = ledger.lock().unwrap().resizes.clone();
    assert!(!resizes.is_empty());
    for (vm, _, new) in &resizes {
        assert!(
            logged.contains(&(vm.clone(), *new)),
            "{vm} -> {new} was asked of the VMM but is not in the log: {decision}"
        );
    }
    // The timeout (1 s) came before a stall (3 s): the shrink is left as
    // it was, nothing is settled.
    assert_eq!(slices.last().unwrap()["reached"], false);
    assert!(slices.iter().all(|s| s["settle"].is_null()), "{decision}");
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_stalled_donor_is_settled_and_spared_while_the_others_give() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("socks")).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    const U: u64 = 256 << 20;
    // Budget 24 units: a holds 16, b 8, c 0; static wants 8 each. a's
    // guest can free only 2.4 units: the second slice of its shrink
    // stalls at 13.6 units held.
    let a = start_vmm_guest(
        "a",
        &sock(dir.path(), "a"),
        4 * GIB,
        0,
        true,
        ledger.clone(),
        RATE,
        2.4 * U as f64,
    );
    let b = start_vmm(
        "b",
        &sock(dir.path(), "b"),
        4 * GIB,
        2 * GIB,
        true,
        ledger.clone(),
    );
    let c = start_vmm(
        "c",
        &sock(dir.path(), "c"),
        4 * GIB,
        4 * GIB,
        true,
        ledger.clone(),
    );
    let cfg = config(dir.path(), "6G", "stall_s = 0.3\n");
    let mut d = Daemon::new(cfg, Box::new(StaticSplit), &STOP).unwrap();
    d.cycle();
    let t0 = Instant::now();
    d.cycle();
    assert!(
        t0.elapsed().as_secs_f64() < 3.0,
        "a stall is seen after stall_s, not the 5 s resize timeout"
    );
    {
        let l = ledger.lock().unwrap();
        // a was set back to the unit it stopped in: whole units, at rest.
        assert_eq!(l.held["a"], 14 * U, "{:?}", l.resizes);
        assert!(l.max_sum <= 24 * U, "Σ FMem held reached {}", l.max_sum);
    }
    let log = log_lines(dir.path());
    let first = log.iter().find(|e| e["event"] == "decision").unwrap();
    let outcome = first["outcome"].as_str().unwrap();
    assert!(outcome.contains("stalled (a"), "{first}");
    let st = tier_policy::daemon::read_status(&dir.path().join("state")).unwrap();
    assert_eq!(st.stalled_donors, 1);
    let settle = first["slices"].as_array().unwrap().last().unwrap();
    assert_eq!(settle["settle"], true, "{first}");
    assert_eq!(settle["grow"], serde_json::json!([["a", 14]]));
    // The next decision does not ask a to shrink (its floor is its
    // minimum; static splits what is above the minimums equally) and
    // takes the FMem from b instead.
    d.cycle();
    let log = log_lines(dir.path());
    let second = log
        .iter()
        .filter(|e| e["event"] == "decision")
        .nth(1)
        .unwrap();
    assert_eq!(second["outcome"], "done", "{second}");
    assert!(
        second["notes"][0]
            .as_str()
            .unwrap()
            .contains("a: its guest could not free FMem"),
        "{second}"
    );
    let l = ledger.lock().unwrap();
    let units: Vec<u64> = ["a", "b", "c"].iter().map(|n| l.held[*n] / U).collect();
    assert_eq!(units, vec![16, 4, 4]);
    assert!(
        !l.resizes
            .iter()
            .skip_while(|r| r.0 != "b")
            .any(|r| r.0 == "a" && r.2 < r.1),
        "a was asked to shrink again: {:?}",
        l.resizes
    );
    assert!(l.max_sum <= 24 * U, "Σ FMem held reached {}", l.max_sum);
    drop(l);
    for v in [a, b, c] {
        v.shutdown();
    }
}

#[test]
fn a_share_between_units_counts_as_the_larger_unit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("socks")).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    // a holds 11.5 units of 256 MiB (its whole tier), b 4; budget 16.
    // Static keeps a at its minimum of 11 and gives b 5: that only fits
    // once a has given back its half unit, so the plan must shrink a
    // first. Seen as 11 units (rounded down), a would not be asked, and
    // b's growth would be refused by the budget check at every interval.
    let a = start_vmm(
        "a",
        &sock(dir.path(), "a"),
        2944 << 20,
        0,
        true,
        ledger.clone(),
    );
    let b = start_vmm(
        "b",
        &sock(dir.path(), "b"),
        4 * GIB,
        3 * GIB,
        true,
        ledger.clone(),
    );
    let cfg = config(
        dir.path(),
        "4G",
        "[[vm]]\nname = \"a\"\nmin = \"2816M\"\n[[vm]]\nname = \"b\"\n",
    );
    let mut d = Daemon::new(cfg, Box::new(StaticSplit), &STOP).unwrap();
    d.cycle();
    d.cycle();
    let log = log_lines(dir.path());
    let decision = log.iter().find(|e| e["event"] == "decision").unwrap();
    assert_eq!(decision["outcome"], "done", "{decision}");
    let l = ledger.lock().unwrap();
    assert_eq!(l.held["a"], 11 * (256 << 20));
    assert_eq!(l.held["b"], 5 * (256 << 20));
    assert!(l.max_sum <= 4 * GIB, "Σ FMem held reached {}", l.max_sum);
    drop(l);
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_vanished_vmm_is_dropped_and_rediscovered() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("socks")).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let a = start_vmm(
        "a",
        &sock(dir.path(), "a"),
        4 * GIB,
        2 * GIB,
        true,
        ledger.clone(),
    );
    let b = start_vmm(
        "b",
        &sock(dir.path(), "b"),
        4 * GIB,
        2 * GIB,
        true,
        ledger.clone(),
    );
    // A VM whose balloon has no SMem side is never tracked.
    let flat = start_vmm(
        "flat",
        &sock(dir.path(), "flat"),
        4 * GIB,
        2 * GIB,
        false,
        ledger.clone(),
    );
    let cfg = config(dir.path(), "6G", "");
    let mut d = Daemon::new(cfg, Box::new(StaticSplit), &STOP).unwrap();
    let status = d.status();
    d.cycle();
    d.cycle();
    assert_eq!(
        status.lock().unwrap().vms.keys().collect::<Vec<_>>(),
        ["a", "b"]
    );
    b.shutdown();
    d.cycle();
    {
        let s = status.lock().unwrap();
        assert_eq!(s.vms_dropped, 1);
        assert!(!s.vms.contains_key("b"));
    }
    // b comes back holding 3 GiB while a was given the rest: over budget.
    // The daemon's next decision only shrinks until Σ fits again.
    let b = start_vmm(
        "b",
        &sock(dir.path(), "b"),
        4 * GIB,
        GIB,
        true,
        ledger.clone(),
    );
    let before = ledger.lock().unwrap().resizes.len();
    d.cycle();
    assert!(status.lock().unwrap().vms.contains_key("b"));
    {
        let l = ledger.lock().unwrap();
        let after = &l.resizes[before..];
        assert!(!after.is_empty());
        // While over budget nothing grows.
        let over_budget = l.held["a"] + l.held["b"] > 6 * GIB;
        assert!(
            !over_budget,
            "{:?} {:?}",
            l.held,
            log_lines(dir.path()).last()
        );
    }
    d.cycle();
    let l = ledger.lock().unwrap();
    assert!(l.held["a"] + l.held["b"] <= 6 * GIB, "{:?}", l.held);
    drop(l);
    for v in [a, b, flat] {
        v.shutdown();
    }
}

#[test]
fn a_vmm_that_fails_behind_its_socket_keeps_its_fmem_reserved() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("socks")).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let a = start_vmm(
        "a",
        &sock(dir.path(), "a"),
        4 * GIB,
        2 * GIB,
        true,
        ledger.clone(),
    );
    let b = start_vmm(
        "b",
        &sock(dir.path(), "b"),
        4 * GIB,
        2 * GIB,
        true,
        ledger.clone(),
    );
    let mut d = Daemon::new(config(dir.path(), "6G", ""), Box::new(StaticSplit), &STOP).unwrap();
    let status = d.status();
    d.cycle();
    d.cycle();
    b.shutdown();
    // Something still listens on b's socket but answers garbage: the VMM
    // may be alive and still hold its 3 GiB.
    let listener = std::os::unix::net::UnixListener::bind(sock(dir.path(), "b")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    listener.set_nonblocking(true).unwrap();
    let junk = std::thread::spawn(move || {
        while !stop2.load(Ordering::SeqCst) {
            if let Ok((mut c, _)) = listener.accept() {
                use std::io::Write;
                let _ = c.write_all(b"garbage\r\n\r\n");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    d.cycle();
    d.cycle();
    assert_eq!(status.lock().unwrap().vms_dropped, 1);
    assert!(
        ledger.lock().unwrap().held["a"] <= 3 * GIB,
        "a must not take b's reserved FMem"
    );
    let log = log_lines(dir.path());
    assert_eq!(log.last().unwrap()["reserved_bytes"], 3 * GIB);
    stop.store(true, Ordering::SeqCst);
    junk.join().unwrap();
    a.shutdown();
}

#[test]
fn profile_sweep_walks_the_fmem_balloon_and_restores_it() {
    use tier_policy::daemon::profile::{sweep, Sweep};
    use tier_policy::daemon::vmm::Vmm;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("socks")).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let v = start_vmm(
        "p",
        &sock(dir.path(), "p"),
        2 * GIB,
        GIB,
        true,
        ledger.clone(),
    );
    let tput = dir.path().join("tput");
    // The workload's throughput file: rewritten with a fresh time; its value
    // falls once (noise), which the sweep flattens.
    let writer_stop = Arc::new(AtomicBool::new(false));
    let ws = writer_stop.clone();
    let path = tput.clone();
    let writer = std::thread::spawn(move || {
        let mut k = 0u32;
        while !ws.load(Ordering::SeqCst) {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            let value = if k == 3 { 50 } else { 100 + k };
            write_atomically(&path, &format!("{value} {now}\n"));
            k += 1;
            std::thread::sleep(std::time::Duration::from_millis(60));
        }
    });
    let s = Sweep {
        steps: 4,
        settle: std::time::Duration::from_millis(50),
        timeout: std::time::Duration::from_secs(5),
    };
    let (profile, _flattened) = sweep(&Vmm::new(&sock(dir.path(), "p")), &tput, &s).unwrap();
    let xs: Vec<u64> = profile.points().iter().map(|p| p.0).collect();
    assert_eq!(xs, vec![0, GIB / 2, GIB, 3 * GIB / 2, 2 * GIB]);
    assert!(profile.points().windows(2).all(|w| w[0].1 <= w[1].1));
    let l = ledger.lock().unwrap();
    // Every share was visited, and the VM got its 1 GiB back.
    assert_eq!(l.resizes.len(), 6);
    assert_eq!(l.resizes.last().unwrap().2, GIB);
    drop(l);
    writer_stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    v.shutdown();
    assert!(sweep(&Vmm::new(&dir.path().join("none.sock")), &tput, &s).is_err());
}

static STOP_RUN: AtomicBool = AtomicBool::new(false);

#[test]
fn an_lc_violation_brings_the_next_decision_forward() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("socks")).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let vmms = vec![
        start_vmm(
            "lc",
            &sock(dir.path(), "lc"),
            4 * GIB,
            2 * GIB,
            true,
            ledger.clone(),
        ),
        start_vmm(
            "be",
            &sock(dir.path(), "be"),
            4 * GIB,
            2 * GIB,
            true,
            ledger.clone(),
        ),
    ];
    let p99 = dir.path().join("lc.p99");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    std::fs::write(&p99, format!("5 {}\n", now())).unwrap();
    // A minute's interval: within this test, only a violation decides.
    let mut cfg = config(
        dir.path(),
        "4G",
        &format!(
            "[[vm]]\nname = \"lc\"\nclass = \"lc\"\nslo_ms = 20\nlatency_file = \"{}\"\n",
            p99.display()
        ),
    );
    cfg.interval_s = 60.0;
    let daemon = std::thread::spawn(move || {
        let mut d = Daemon::new(cfg, Box::new(StaticSplit), &STOP_RUN).unwrap();
        d.run();
    });
    let decisions = || {
        std::fs::read_to_string(dir.path().join("state/decisions.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["event"] == "decision")
            .collect::<Vec<_>>()
    };
    // A load generator's 0.5 s windows: three within the SLO, then over.
    let start = Instant::now();
    let mut first_violation = None;
    let mut k = 0;
    while decisions().is_empty() && start.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(500));
        k += 1;
        let v = if k <= 3 { 5 } else { 50 };
        if v > 20 && first_violation.is_none() {
            first_violation = Some(Instant::now());
        }
        write_atomically(&p99, &format!("{v} {}\n", now()));
    }
    STOP_RUN.store(true, Ordering::SeqCst);
    daemon.join().unwrap();
    let d = decisions();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["early"], "lc");
    let after = first_violation.unwrap().elapsed().as_secs_f64();
    assert!(
        after < 10.0,
        "the early decision came {after} s after the violation"
    );
    let st = tier_policy::daemon::read_status(&dir.path().join("state")).unwrap();
    assert_eq!((st.decisions, st.early_decisions), (1, 1));
    for v in vmms {
        v.shutdown();
    }
}

#[test]
fn a_donor_that_stops_a_few_mib_short_never_lets_a_receiver_grow() {
    // The testbed's sizes: tiers of 256 MiB, units of 32 MiB, budget 256
    // MiB. a holds 6 units and must give 2 to b (static: 4 and 4), but
    // its guest stops inflating 3 MiB short of the 128 MiB balloon. Its
    // balloon never reports the target as reached, so b must not grow by
    // any of it, at any instant: the shrink stalls and a is settled at the
    // unit it stopped in (the next decisions take that as its floor).
    const MIB: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("socks")).unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let a = start_vmm_guest(
        "a",
        &sock(dir.path(), "a"),
        256 * MIB,
        64 * MIB,
        true,
        ledger.clone(),
        RATE,
        (125 * MIB) as f64,
    );
    let b = start_vmm(
        "b",
        &sock(dir.path(), "b"),
        256 * MIB,
        192 * MIB,
        true,
        ledger.clone(),
    );
    let text = format!(
        "[host]\nfmem_budget = \"256M\"\nunit = \"32M\"\ninterval_s = 1\np_max = \"64M\"\nsocket_dir = \"{}\"\nstate_dir = \"{}\"\nresize_timeout_s = 5\nstall_s = 0.3\npolicy = \"static\"\n",
        dir.path().join("socks").display(),
        dir.path().join("state").display()
    );
    let cfg = Config::parse(&text, dir.path()).unwrap();
    let mut d = Daemon::new(cfg, Box::new(StaticSplit), &STOP).unwrap();
    d.cycle();
    d.cycle();
    {
        let l = ledger.lock().unwrap();
        assert!(l.max_sum <= 256 * MIB, "Σ FMem held reached {}", l.max_sum);
        assert!(
            !l.resizes.iter().any(|r| r.0 == "b" && r.2 > r.1),
            "b grew while a was short of its target: {:?}",
            l.resizes
        );
        // a stopped holding 131 MiB and was set back to 5 units.
        assert_eq!(l.held["a"], 160 * MIB, "{:?}", l.resizes);
        assert_eq!(l.held["b"], 64 * MIB, "{:?}", l.resizes);
    }
    let log = log_lines(dir.path());
    let decision = log.iter().find(|e| e["event"] == "decision").unwrap();
    assert!(
        decision["outcome"].as_str().unwrap().contains("stalled (a"),
        "{decision}"
    );
    a.shutdown();
    b.shutdown();
}
