//! Daemon state for `/metrics` (Prometheus text format) and `status`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

/// One VM's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct VmStatus {
    /// `lc` or `be`.
    pub class: String,
    /// FMem held, bytes.
    pub share_bytes: u64,
    /// Latest target, bytes.
    pub target_bytes: u64,
    /// Latest p99, ms (LC).
    pub p99_ms: Option<f64>,
    /// SLO, ms (LC).
    pub slo_ms: Option<f64>,
    /// SLO violations counted (including missing or stale latency).
    pub slo_violations: u64,
    /// Where access figures come from: `guest` (tiering agent tags) or
    /// `balloon` (no agent: the balloon's own figures).
    pub access_source: String,
    /// Accesses per second (guest) or bytes in use (balloon fallback).
    pub access_rate: Option<f64>,
    /// Guest counters seen going backwards.
    pub counter_resets: u64,
}

/// Everything the daemon reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Status {
    /// Policy name.
    pub policy: String,
    /// Budget, bytes.
    pub budget_bytes: u64,
    /// Σ FMem held at the last sample, bytes.
    pub committed_bytes: u64,
    /// Decisions made.
    pub decisions: u64,
    /// Of the decisions, those brought forward by an LC VM's SLO
    /// violation (`daemon::react`).
    #[serde(default)]
    pub early_decisions: u64,
    /// Decisions refused or failed (policy error, plan error).
    pub decision_errors: u64,
    /// Slices that timed out (replanned next interval).
    pub replans: u64,
    /// Donors whose shrink stalled in the guest (settled and floored).
    #[serde(default)]
    pub stalled_donors: u64,
    /// VMs dropped because their VMM vanished or failed.
    pub vms_dropped: u64,
    /// Latency reads that failed (counted as violations).
    pub latency_errors: u64,
    /// Measured balloon rate, bytes/s.
    pub move_rate: f64,
    /// Daemon CPU time, seconds.
    pub cpu_seconds: f64,
    /// Last decision time, ms.
    pub last_decision_ms: f64,
    /// Per VM.
    pub vms: BTreeMap<String, VmStatus>,
}

/// Shared status.
pub type SharedStatus = Arc<Mutex<Status>>;

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus exposition of `s`.
pub fn render(s: &Status) -> String {
    let mut o = String::new();
    let mut g = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(
            o,
            "# HELP tier_policy_{name} {help}\n# TYPE tier_policy_{name} {kind}"
        );
        for (labels, v) in rows {
            let _ = writeln!(o, "tier_policy_{name}{labels} {v}");
        }
    };
    let one = |v: f64| vec![(String::new(), v)];
    g(
        "budget_bytes",
        "gauge",
        "FMem budget",
        one(s.budget_bytes as f64),
    );
    g(
        "committed_bytes",
        "gauge",
        "FMem held by all VMs",
        one(s.committed_bytes as f64),
    );
    g(
        "decisions_total",
        "counter",
        "Decisions made",
        one(s.decisions as f64),
    );
    g(
        "early_decisions_total",
        "counter",
        "Decisions brought forward by an LC VM's latency window over its SLO",
        one(s.early_decisions as f64),
    );
    g(
        "decision_errors_total",
        "counter",
        "Decisions refused or failed",
        one(s.decision_errors as f64),
    );
    g(
        "replans_total",
        "counter",
        "Resize slices that timed out",
        one(s.replans as f64),
    );
    g(
        "stalled_donors_total",
        "counter",
        "Donors whose guest stopped short of a shrink (settled, spared for a few decisions)",
        one(s.stalled_donors as f64),
    );
    g(
        "vms_dropped_total",
        "counter",
        "VMs dropped (VMM gone or failing)",
        one(s.vms_dropped as f64),
    );
    g(
        "latency_errors_total",
        "counter",
        "Missing, stale or malformed p99 reads",
        one(s.latency_errors as f64),
    );
    g(
        "move_rate_bytes_per_second",
        "gauge",
        "Measured balloon rate",
        one(s.move_rate),
    );
    g(
        "cpu_seconds_total",
        "counter",
        "Daemon CPU time",
        one(s.cpu_seconds),
    );
    g(
        "last_decision_seconds",
        "gauge",
        "Duration of the last decision",
        one(s.last_decision_ms / 1e3),
    );
    let per = |f: &dyn Fn(&VmStatus) -> Option<f64>| -> Vec<(String, f64)> {
        s.vms
            .iter()
            .filter_map(|(n, v)| {
                f(v).map(|x| {
                    (
                        format!("{{vm=\"{}\",class=\"{}\"}}", esc(n), esc(&v.class)),
                        x,
                    )
                })
            })
            .collect()
    };
    g(
        "vm_fmem_share_bytes",
        "gauge",
        "FMem held by the VM",
        per(&|v| Some(v.share_bytes as f64)),
    );
    g(
        "vm_fmem_target_bytes",
        "gauge",
        "FMem the policy wants the VM to hold",
        per(&|v| Some(v.target_bytes as f64)),
    );
    g(
        "vm_p99_milliseconds",
        "gauge",
        "Latest p99 of an LC VM",
        per(&|v| v.p99_ms),
    );
    g(
        "vm_slo_milliseconds",
        "gauge",
        "SLO of an LC VM",
        per(&|v| v.slo_ms),
    );
    g(
        "vm_slo_violations_total",
        "counter",
        "Intervals over the SLO or without fresh latency",
        per(&|v| v.slo_ms.map(|_| v.slo_violations as f64)),
    );
    g(
        "vm_access_rate",
        "gauge",
        "Accesses per second (guest agent) or bytes in use (balloon fallback)",
        per(&|v| v.access_rate),
    );
    o
}

/// Serves `/metrics` and `/status` (JSON) on `addr` in a thread.
pub fn serve(addr: &str, status: SharedStatus) -> Result<JoinHandle<()>, String> {
    let server =
        tiny_http::Server::http(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                let snapshot = status
                    .lock()
                    .map(|s| s.clone())
                    .unwrap_or_else(|e| e.into_inner().clone());
                let (code, body, ctype) = match req.url() {
                    "/metrics" => (200, render(&snapshot), "text/plain; version=0.0.4"),
                    "/status" => (
                        200,
                        serde_json::to_string_pretty(&snapshot).unwrap_or_default(),
                        "application/json",
                    ),
                    _ => (
                        404,
                        "not found: try /metrics or /status\n".to_string(),
                        "text/plain",
                    ),
                };
                let header = tiny_http::Header::from_bytes("Content-Type", ctype).ok();
                let mut resp = tiny_http::Response::from_string(body).with_status_code(code);
                if let Some(h) = header {
                    resp = resp.with_header(h);
                }
                if let Err(e) = req.respond(resp) {
                    log::debug!("metrics client went away: {e}");
                }
            }
        })
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_labels() {
        let mut s = Status {
            policy: "mtat".into(),
            budget_bytes: 10,
            decisions: 3,
            early_decisions: 1,
            stalled_donors: 2,
            ..Default::default()
        };
        s.vms.insert(
            "re\"dis".into(),
            VmStatus {
                class: "lc".into(),
                share_bytes: 4,
                p99_ms: Some(1.5),
                slo_ms: Some(20.0),
                slo_violations: 2,
                ..Default::default()
            },
        );
        s.vms.insert(
            "gups".into(),
            VmStatus {
                class: "be".into(),
                share_bytes: 6,
                ..Default::default()
            },
        );
        let t = render(&s);
        assert!(t.contains("tier_policy_decisions_total 3\n"));
        assert!(t.contains("tier_policy_stalled_donors_total 2\n"));
        assert!(t.contains("tier_policy_early_decisions_total 1\n"));
        assert!(
            t.contains("tier_policy_vm_fmem_share_bytes{vm=\"re\\\"dis\",class=\"lc\"} 4\n"),
            "{t}"
        );
        assert!(
            t.contains("tier_policy_vm_slo_violations_total{vm=\"re\\\"dis\",class=\"lc\"} 2\n")
        );
        assert!(!t.contains("vm_p99_milliseconds{vm=\"gups\""));
    }

    #[test]
    fn serves_metrics_over_http() {
        let status: SharedStatus = Arc::default();
        status.lock().unwrap().decisions = 7;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        drop(l);
        serve(&addr, status).unwrap();
        let body = crate::daemon::signals::http_get(&format!("http://{addr}/metrics")).unwrap();
        assert!(body.contains("tier_policy_decisions_total 7"));
        assert!(crate::daemon::signals::http_get(&format!("http://{addr}/nope")).is_err());
    }
}
