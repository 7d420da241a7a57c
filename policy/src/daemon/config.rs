//! The daemon's TOML configuration.
//!
//! ```toml
//! [host]
//! fmem_budget = "24G"      # FMem all VMs may hold together
//! unit = "256M"            # allocation unit (4 KiB multiple)
//! interval_s = 60          # decision interval (paper §4: 1 min)
//! p_max = "1G"             # largest move per slice (Algorithm 3)
//! move_rate = "1G"         # initial balloon rate guess, bytes/s (then measured)
//! policy = "mtat"          # static | hotness | mtat
//! model = "lc-sac.safetensors"
//! socket_dir = "/run/vmm"  # every *.sock here is a VMM
//! state_dir = "/var/lib/tier-policy"   # decisions.jsonl, status.json
//! metrics_listen = "127.0.0.1:9464"
//! resize_timeout_s = 30    # a slice not done by then is abandoned
//! stall_s = 3              # a donor's balloon still this long: stalled
//! react_to_violations = true   # an LC window over the SLO decides early
//! rise_reserve_s = 0       # mtat: after an LC load rise, provision the next step this long (0: off)
//!
//! [[vm]]
//! name = "redis"
//! socket = "/run/vmm/redis.sock"
//! class = "lc"
//! slo_ms = 20.0
//! latency_file = "/run/redis.p99"
//! min = "1G"
//!
//! [[vm]]
//! name = "gups"
//! class = "be"
//! profile = "/etc/tier-policy/gups.json"
//! ```

use std::path::{Path, PathBuf};

use option_parser::ByteSized;
use serde::Deserialize;

use crate::profile::Profile;

/// A size in the file: bytes or `512M`-style.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

fn size(field: &str, v: &Size) -> Result<u64, ConfigError> {
    match v {
        Size::Bytes(b) => Ok(*b),
        Size::Text(s) => s
            .parse::<ByteSized>()
            .map(|b| b.0)
            .map_err(|e| ConfigError::Invalid(format!("{field}: {e}"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFile {
    fmem_budget: Size,
    #[serde(default)]
    unit: Option<Size>,
    #[serde(default)]
    interval_s: Option<f64>,
    #[serde(default)]
    p_max: Option<Size>,
    #[serde(default)]
    move_rate: Option<Size>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    model: Option<PathBuf>,
    #[serde(default)]
    socket_dir: Option<PathBuf>,
    #[serde(default)]
    state_dir: Option<PathBuf>,
    #[serde(default)]
    metrics_listen: Option<String>,
    #[serde(default)]
    resize_timeout_s: Option<f64>,
    #[serde(default)]
    stall_s: Option<f64>,
    #[serde(default)]
    react_to_violations: Option<bool>,
    #[serde(default)]
    rise_reserve_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VmFile {
    name: String,
    #[serde(default)]
    socket: Option<PathBuf>,
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    slo_ms: Option<f64>,
    #[serde(default)]
    latency_file: Option<PathBuf>,
    #[serde(default)]
    latency_prometheus: Option<String>,
    #[serde(default)]
    latency_metric: Option<String>,
    #[serde(default)]
    min: Option<Size>,
    #[serde(default)]
    profile: Option<PathBuf>,
    #[serde(default)]
    access_scale: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    host: HostFile,
    #[serde(default)]
    vm: Vec<VmFile>,
}

/// Where an LC VM's p99 comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum LatencySource {
    /// A file a load generator or the service rewrites each window:
    /// `<p99_ms> [<unix_time>]` (mtime when the time is absent).
    File(PathBuf),
    /// A Prometheus text endpoint and the metric (a gauge in ms).
    Prometheus {
        /// `http://host:port/path`.
        url: String,
        /// Metric name, optionally with `{labels}` to match exactly.
        metric: String,
    },
}

/// One configured VM.
#[derive(Clone, Debug)]
pub struct VmConfig {
    /// Name.
    pub name: String,
    /// API socket (default: `<socket_dir>/<name>.sock`).
    pub socket: Option<PathBuf>,
    /// LC with SLO, or BE.
    pub slo_ms: Option<f64>,
    /// p99 source (LC).
    pub latency: Option<LatencySource>,
    /// Smallest share, bytes.
    pub min_bytes: u64,
    /// Throughput profile (BE).
    pub profile: Option<Profile>,
    /// Accesses/s at peak load (LC state normalisation).
    pub access_scale: Option<f64>,
}

/// The whole configuration, validated.
#[derive(Clone, Debug)]
pub struct Config {
    /// FMem budget, bytes (a multiple of `unit`).
    pub budget_bytes: u64,
    /// Allocation unit, bytes.
    pub unit_bytes: u64,
    /// Decision interval, seconds.
    pub interval_s: f64,
    /// Largest move per slice, bytes.
    pub p_max_bytes: u64,
    /// Initial balloon movement rate, bytes/s.
    pub move_rate: f64,
    /// Policy name.
    pub policy: String,
    /// SAC model file (mtat).
    pub model: Option<PathBuf>,
    /// Directory scanned for `*.sock`.
    pub socket_dir: Option<PathBuf>,
    /// Decision log and status file directory.
    pub state_dir: PathBuf,
    /// `/metrics` listen address.
    pub metrics_listen: Option<String>,
    /// How long one slice may take before the daemon replans.
    pub resize_timeout_s: f64,
    /// How long a donor's balloon may stand still, short of its target,
    /// before the daemon calls it stalled (its guest cannot free FMem now).
    pub stall_s: f64,
    /// Bring the next decision forward when an LC VM's latency window,
    /// begun after the last plan was applied, is over its SLO
    /// (`daemon::react`).
    pub react_to_violations: bool,
    /// How long after a rise of an LC VM's load `mtat` holds the share its
    /// next step up needs (`policies::reserve`), seconds; 0 (the
    /// default): never.
    pub rise_reserve_s: f64,
    /// Configured VMs.
    pub vms: Vec<VmConfig>,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unreadable file.
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// Not valid TOML or unknown keys.
    #[error("{0}")]
    Parse(String),
    /// A value out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Read(path.display().to_string(), e))?;
        Self::parse(&text, path.parent().unwrap_or(Path::new(".")))
    }

    /// Parses TOML `text`; relative paths are taken from `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Self, ConfigError> {
        let f: ConfigFile = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let inv = |s: String| ConfigError::Invalid(s);
        let rel = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let unit = f
            .host
            .unit
            .as_ref()
            .map(|u| size("host.unit", u))
            .transpose()?
            .unwrap_or(256 << 20);
        if unit == 0 || unit % 4096 != 0 {
            return Err(inv(format!(
                "host.unit must be a non-zero multiple of 4 KiB, got {unit}"
            )));
        }
        let budget = size("host.fmem_budget", &f.host.fmem_budget)?;
        if budget == 0 || budget % unit != 0 {
            return Err(inv(format!(
                "host.fmem_budget ({budget}) must be a non-zero multiple of host.unit ({unit})"
            )));
        }
        let interval_s = f.host.interval_s.unwrap_or(60.0);
        if !(interval_s.is_finite() && interval_s >= 1.0) {
            return Err(inv(format!(
                "host.interval_s must be at least 1, got {interval_s}"
            )));
        }
        let p_max = f
            .host
            .p_max
            .as_ref()
            .map(|p| size("host.p_max", p))
            .transpose()?
            .unwrap_or(4 * unit);
        if p_max < unit {
            return Err(inv(format!(
                "host.p_max ({p_max}) must be at least one unit ({unit})"
            )));
        }
        let move_rate = f
            .host
            .move_rate
            .as_ref()
            .map(|m| size("host.move_rate", m))
            .transpose()?
            .unwrap_or(1 << 30);
        if move_rate == 0 {
            return Err(inv("host.move_rate must be positive".into()));
        }
        let policy = f.host.policy.unwrap_or_else(|| "mtat".into());
        if !crate::policies::POLICY_NAMES.contains(&policy.as_str()) {
            return Err(inv(format!(
                "host.policy {policy:?} is not one of {:?}",
                crate::policies::POLICY_NAMES
            )));
        }
        let resize_timeout_s = f.host.resize_timeout_s.unwrap_or(30.0);
        if !(resize_timeout_s.is_finite() && resize_timeout_s > 0.0) {
            return Err(inv("host.resize_timeout_s must be positive".into()));
        }
        let stall_s = f.host.stall_s.unwrap_or(3.0);
        if !(stall_s.is_finite() && stall_s > 0.0) {
            return Err(inv("host.stall_s must be positive".into()));
        }
        // Off unless asked for: a guest's access rate over its running
        // peak reads as a rise at the start and holds the whole tier
        // (docs/policy.md, "Not done yet").
        let rise_reserve_s = f.host.rise_reserve_s.unwrap_or(0.0);
        if !(rise_reserve_s.is_finite() && rise_reserve_s >= 0.0) {
            return Err(inv(
                "host.rise_reserve_s must be 0 (off) or a positive number of seconds".into(),
            ));
        }
        let mut vms = Vec::new();
        for v in f.vm {
            if v.name.is_empty() || v.name.contains('/') {
                return Err(inv(format!(
                    "vm name {:?} must be non-empty without '/'",
                    v.name
                )));
            }
            if vms.iter().any(|x: &VmConfig| x.name == v.name) {
                return Err(inv(format!("vm {} is configured twice", v.name)));
            }
            let lc = match v.class.as_deref().unwrap_or("be") {
                "lc" => true,
                "be" => false,
                other => {
                    return Err(inv(format!(
                        "vm {}: class {other:?} is not lc or be",
                        v.name
                    )))
                }
            };
            let slo_ms = if lc {
                match v.slo_ms {
                    Some(s) if s.is_finite() && s > 0.0 => Some(s),
                    Some(s) => {
                        return Err(inv(format!("vm {}: slo_ms must be > 0, got {s}", v.name)))
                    }
                    None => return Err(inv(format!("vm {}: an lc VM needs slo_ms", v.name))),
                }
            } else {
                if v.slo_ms.is_some() {
                    return Err(inv(format!("vm {}: slo_ms is for lc VMs", v.name)));
                }
                None
            };
            let latency = match (v.latency_file, v.latency_prometheus, v.latency_metric) {
                (Some(p), None, None) => Some(LatencySource::File(rel(p))),
                (None, Some(url), Some(metric)) => Some(LatencySource::Prometheus { url, metric }),
                (None, None, None) => None,
                _ => {
                    return Err(inv(format!(
                        "vm {}: give latency_file, or latency_prometheus with latency_metric",
                        v.name
                    )))
                }
            };
            if lc && latency.is_none() {
                return Err(inv(format!(
                    "vm {}: an lc VM needs a latency source",
                    v.name
                )));
            }
            let min_bytes = v
                .min
                .as_ref()
                .map(|m| size("vm.min", m))
                .transpose()?
                .unwrap_or(0);
            let profile = v
                .profile
                .map(|p| Profile::load(&rel(p)))
                .transpose()
                .map_err(|e| inv(format!("vm {}: {e}", v.name)))?;
            if let Some(a) = v.access_scale {
                if !(a.is_finite() && a > 0.0) {
                    return Err(inv(format!("vm {}: access_scale must be > 0", v.name)));
                }
            }
            vms.push(VmConfig {
                name: v.name,
                socket: v.socket.map(rel),
                slo_ms,
                latency,
                min_bytes,
                profile,
                access_scale: v.access_scale,
            });
        }
        let socket_dir = f.host.socket_dir.map(rel);
        if socket_dir.is_none() && vms.iter().any(|v| v.socket.is_none()) {
            return Err(inv("a vm without socket needs host.socket_dir".into()));
        }
        let min_sum: u64 = vms.iter().map(|v| v.min_bytes.div_ceil(unit) * unit).sum();
        if min_sum > budget {
            return Err(inv(format!(
                "host.fmem_budget ({budget}) is below the sum of the VMs' minimums ({min_sum})"
            )));
        }
        Ok(Self {
            budget_bytes: budget,
            unit_bytes: unit,
            interval_s,
            p_max_bytes: p_max,
            move_rate: move_rate as f64,
            policy,
            model: f.host.model.map(rel),
            socket_dir,
            state_dir: f
                .host
                .state_dir
                .map(rel)
                .unwrap_or_else(|| base.join("tier-policy-state")),
            metrics_listen: f.host.metrics_listen,
            resize_timeout_s,
            stall_s,
            react_to_violations: f.host.react_to_violations.unwrap_or(true),
            rise_reserve_s,
            vms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[host]
fmem_budget = "4G"
unit = "256M"
interval_s = 20
socket_dir = "/run/vmm"

[[vm]]
name = "redis"
class = "lc"
slo_ms = 20
latency_file = "p99"
min = "512M"

[[vm]]
name = "gups"
"#;

    #[test]
    fn parses_a_good_file() {
        let c = Config::parse(GOOD, Path::new("/etc/tp")).unwrap();
        assert_eq!(c.budget_bytes, 4 << 30);
        assert_eq!(
            c.vms[0].latency,
            Some(LatencySource::File("/etc/tp/p99".into()))
        );
        assert_eq!(c.vms[0].min_bytes, 512 << 20);
        assert_eq!(c.vms[1].slo_ms, None);
        assert_eq!(c.p_max_bytes, 1 << 30);
        assert_eq!(c.policy, "mtat");
        assert_eq!(c.stall_s, 3.0);
        assert!(c.react_to_violations);
        assert_eq!(c.rise_reserve_s, 0.0);
        let on = GOOD.replace("[host]", "[host]\nrise_reserve_s = 60");
        assert_eq!(
            Config::parse(&on, Path::new("/")).unwrap().rise_reserve_s,
            60.0
        );
        let off = GOOD.replace("[host]", "[host]\nreact_to_violations = false");
        assert!(
            !Config::parse(&off, Path::new("/"))
                .unwrap()
                .react_to_violations
        );
    }

    #[test]
    fn refuses_bad_values_with_clear_errors() {
        let cases = [
            (
                GOOD.replace("slo_ms = 20", "slo_ms = 0"),
                "slo_ms must be > 0",
            ),
            (
                GOOD.replace("slo_ms = 20", "slo_ms = -3"),
                "slo_ms must be > 0",
            ),
            (
                GOOD.replace("fmem_budget = \"4G\"", "fmem_budget = \"256M\"\n"),
                "below the sum",
            ),
            (
                GOOD.replace("unit = \"256M\"", "unit = \"1000\""),
                "multiple of 4 KiB",
            ),
            (
                GOOD.replace("fmem_budget = \"4G\"", "fmem_budget = \"4X\""),
                "fmem_budget",
            ),
            (
                GOOD.replace("class = \"lc\"", "class = \"gold\""),
                "not lc or be",
            ),
            (
                GOOD.replace("latency_file = \"p99\"", ""),
                "needs a latency source",
            ),
            (
                GOOD.replace("interval_s = 20", "interval_s = 0"),
                "interval_s",
            ),
            (
                GOOD.replace("[host]", "[host]\npolicy = \"magic\""),
                "not one of",
            ),
            (GOOD.replace("[host]", "[host]\nstall_s = 0"), "stall_s"),
            (GOOD.replace("[host]", "[host]\nstall_s = -1.5"), "stall_s"),
            (
                GOOD.replace("[host]", "[host]\nrise_reserve_s = -1"),
                "rise_reserve_s",
            ),
            (
                GOOD.replace("[host]", "[host]\nrise_reserve_s = nan"),
                "rise_reserve_s",
            ),
            (GOOD.replace("[host]", "[host]\nbogus = 1"), "unknown field"),
            (
                format!("{GOOD}\n[[vm]]\nname = \"gups\"\n"),
                "configured twice",
            ),
        ];
        for (text, want) in cases {
            let e = Config::parse(&text, Path::new("/"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }
}
