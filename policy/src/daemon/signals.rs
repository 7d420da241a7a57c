//! Signals from outside the VMM: the LC VM's p99 and the guest's access
//! counters (reached through the balloon statistics).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::config::LatencySource;

/// Guest-reported cumulative FMem accesses (vendor tag 0x800d).
pub const TAG_FMEM_ACCESSES: &str = "tiering_fmem_accesses";
/// Guest-reported cumulative SMem accesses (vendor tag 0x800e).
pub const TAG_SMEM_ACCESSES: &str = "tiering_smem_accesses";

/// Why a p99 could not be read (the caller counts it as a violation).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LatencyError {
    /// Unreadable source.
    #[error("latency source unreadable: {0}")]
    Unreadable(String),
    /// Malformed value.
    #[error("latency source malformed: {0}")]
    Malformed(String),
    /// Older than allowed.
    #[error("latency is {age_s:.0} s old (max {max_s:.0} s)")]
    Stale {
        /// Age.
        age_s: f64,
        /// Allowed.
        max_s: f64,
    },
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Reads a p99 (ms) from `src`, refusing values older than `max_age_s`.
pub fn read_latency(src: &LatencySource, max_age_s: f64) -> Result<f64, LatencyError> {
    read_latency_sample(src, max_age_s).map(|s| s.p99_ms)
}

/// A p99 and the end of the window it measured, when the source says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencySample {
    /// p99, ms.
    pub p99_ms: f64,
    /// End of its window, unix seconds (a file's time or mtime, a
    /// Prometheus sample's timestamp; `None` for a sample without one).
    pub window_end: Option<f64>,
}

/// [`read_latency`] with the window's end.
pub fn read_latency_sample(
    src: &LatencySource,
    max_age_s: f64,
) -> Result<LatencySample, LatencyError> {
    match src {
        LatencySource::File(p) => {
            read_latency_file_at(p, max_age_s).map(|(p99_ms, end)| LatencySample {
                p99_ms,
                window_end: Some(end),
            })
        }
        LatencySource::Prometheus { url, metric } => {
            let text = http_get(url).map_err(LatencyError::Unreadable)?;
            let (v, ts_ms) = parse_prometheus_sample(&text, metric).ok_or_else(|| {
                LatencyError::Malformed(format!("metric {metric} not found at {url}"))
            })?;
            let window_end = ts_ms.map(|t| t / 1e3);
            if let Some(end) = window_end {
                let age = now_s() - end;
                if age > max_age_s {
                    return Err(LatencyError::Stale {
                        age_s: age,
                        max_s: max_age_s,
                    });
                }
            }
            Ok(LatencySample {
                p99_ms: check_value(v)?,
                window_end,
            })
        }
    }
}

fn check_value(v: f64) -> Result<f64, LatencyError> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(LatencyError::Malformed(format!(
            "p99 {v} is not a finite non-negative number"
        )))
    }
}

/// `<p99_ms> [<unix_time_s>]`; without a time the file's mtime counts.
pub fn read_latency_file(path: &Path, max_age_s: f64) -> Result<f64, LatencyError> {
    read_latency_file_at(path, max_age_s).map(|(v, _)| v)
}

/// [`read_latency_file`] with the time the value is for.
fn read_latency_file_at(path: &Path, max_age_s: f64) -> Result<(f64, f64), LatencyError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LatencyError::Unreadable(format!("{}: {e}", path.display())))?;
    let mut it = text.split_whitespace();
    let p99: f64 = it.next().and_then(|v| v.parse().ok()).ok_or_else(|| {
        LatencyError::Malformed(format!(
            "{}: expected '<p99_ms> [<unix_time>]'",
            path.display()
        ))
    })?;
    let when = match it.next() {
        Some(t) => t
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite())
            .ok_or_else(|| {
                LatencyError::Malformed(format!("{}: bad time {t:?}", path.display()))
            })?,
        None => std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
    };
    let age = now_s() - when;
    if age > max_age_s {
        return Err(LatencyError::Stale {
            age_s: age,
            max_s: max_age_s,
        });
    }
    check_value(p99).map(|v| (v, when))
}

/// The value of `metric` (a name, or `name{labels}` matched exactly) in a
/// Prometheus text exposition.
pub fn parse_prometheus(text: &str, metric: &str) -> Option<f64> {
    parse_prometheus_sample(text, metric).map(|(v, _)| v)
}

/// [`parse_prometheus`] with the sample's optional timestamp (ms since
/// the epoch, the exposition format's third field).
pub fn parse_prometheus_sample(text: &str, metric: &str) -> Option<(f64, Option<f64>)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .find_map(|l| {
            let (key, rest) = match l.find('}') {
                Some(i) if l.contains('{') => (&l[..=i], l[i + 1..].trim()),
                _ => l
                    .split_once(char::is_whitespace)
                    .map(|(k, r)| (k, r.trim()))?,
            };
            let name_only = key.split('{').next().unwrap_or(key);
            if key != metric && name_only != metric {
                return None;
            }
            let mut fields = rest.split_whitespace();
            let v = fields.next()?.parse().ok()?;
            let ts = fields
                .next()
                .and_then(|t| t.parse::<f64>().ok())
                .filter(|t| t.is_finite());
            Some((v, ts))
        })
}

/// Plain HTTP/1.0 GET of `url` (`http://host:port/path`), body only;
/// scrape endpoints are local, so no TLS and a short timeout.
pub fn http_get(url: &str) -> Result<String, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// is supported"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let timeout = Duration::from_secs(5);
    let addr = std::net::ToSocketAddrs::to_socket_addrs(host)
        .map_err(|e| format!("{url}: {e}"))?
        .next()
        .ok_or_else(|| format!("{url}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{url}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    // One write: `write!` on an unbuffered stream sends each piece as its
    // own segment, and a server that answers after its first read and
    // closes would reset the connection under the unread rest.
    let request = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/plain\r\n\r\n");
    s.write_all(request.as_bytes())
        .map_err(|e| format!("{url}: {e}"))?;
    let mut buf = Vec::new();
    s.take(4 << 20)
        .read_to_end(&mut buf)
        .map_err(|e| format!("{url}: {e}"))?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{url}: malformed response"))?;
    if head.split_whitespace().nth(1).is_none_or(|c| c != "200") {
        return Err(format!(
            "{url}: {}",
            head.lines().next().unwrap_or_default()
        ));
    }
    Ok(body.to_string())
}

/// Turns cumulative guest counters into rates between two polls, and
/// notices counters that go backwards (a restarted guest agent).
#[derive(Clone, Debug, Default)]
pub struct AccessCounters {
    last: Option<(f64, u64, u64)>,
    /// Times the counters went backwards.
    pub resets: u64,
}

/// Access rates of one interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AccessRates {
    /// Accesses per second, both tiers.
    pub rate: f64,
    /// Fraction that went to FMem (`None` without accesses).
    pub fmem_ratio: Option<f64>,
}

impl AccessCounters {
    /// Feeds the counters at time `t_s`; `None` on the first sample, after
    /// a reset, or without the tags.
    pub fn update(&mut self, t_s: f64, stats: &BTreeMap<String, u64>) -> Option<AccessRates> {
        let (f, s) = (stats.get(TAG_FMEM_ACCESSES)?, stats.get(TAG_SMEM_ACCESSES)?);
        let prev = self.last.replace((t_s, *f, *s));
        let (t0, f0, s0) = prev?;
        if *f < f0 || *s < s0 {
            self.resets += 1;
            return None;
        }
        let dt = t_s - t0;
        if dt <= 0.0 {
            return None;
        }
        let (df, ds) = ((f - f0) as f64, (s - s0) as f64);
        Some(AccessRates {
            rate: (df + ds) / dt,
            fmem_ratio: (df + ds > 0.0).then(|| df / (df + ds)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_file_fresh_stale_and_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p99");
        std::fs::write(&p, format!("12.5 {}\n", now_s())).unwrap();
        assert_eq!(read_latency_file(&p, 10.0), Ok(12.5));
        std::fs::write(&p, format!("12.5 {}\n", now_s() - 100.0)).unwrap();
        assert!(matches!(
            read_latency_file(&p, 10.0),
            Err(LatencyError::Stale { .. })
        ));
        std::fs::write(&p, "7\n").unwrap();
        assert_eq!(read_latency_file(&p, 10.0), Ok(7.0));
        for bad in ["", "abc", "NaN", "inf", "-1", "3 xyz"] {
            std::fs::write(&p, bad).unwrap();
            assert!(read_latency_file(&p, 10.0).is_err(), "{bad:?}");
        }
        assert!(matches!(
            read_latency_file(&dir.path().join("none"), 10.0),
            Err(LatencyError::Unreadable(_))
        ));
    }

    #[test]
    fn prometheus_text_is_parsed() {
        let t = "# HELP p99 x\n# TYPE p99 gauge\nreq_p99_ms{svc=\"a\"} 3.5\nreq_p99_ms{svc=\"b\"} 9\nother 1\n";
        assert_eq!(parse_prometheus(t, "req_p99_ms{svc=\"b\"}"), Some(9.0));
        assert_eq!(parse_prometheus(t, "req_p99_ms"), Some(3.5));
        assert_eq!(parse_prometheus(t, "other"), Some(1.0));
        assert_eq!(parse_prometheus(t, "missing"), None);
        let stamped = "lat_p99 12 1700000000500\nplain 3\nbad_ts 4 x\n";
        assert_eq!(
            parse_prometheus_sample(stamped, "lat_p99"),
            Some((12.0, Some(1_700_000_000_500.0)))
        );
        assert_eq!(parse_prometheus_sample(stamped, "plain"), Some((3.0, None)));
        assert_eq!(
            parse_prometheus_sample(stamped, "bad_ts"),
            Some((4.0, None))
        );
    }

    #[test]
    fn latency_file_sample_carries_its_window_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p99");
        let t = now_s().floor();
        std::fs::write(&p, format!("30 {t}\n")).unwrap();
        let s = read_latency_sample(&LatencySource::File(p), 10.0).unwrap();
        assert_eq!(s.p99_ms, 30.0);
        assert_eq!(s.window_end, Some(t));
    }

    #[test]
    fn prometheus_scrape_over_tcp() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut req = Vec::new();
            let mut chunk = [0u8; 512];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = c.read(&mut chunk).unwrap();
                assert!(n > 0, "client closed before the end of its request");
                req.extend_from_slice(&chunk[..n]);
            }
            c.write_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nlat_p99 4.25\n")
                .unwrap();
        });
        let src = LatencySource::Prometheus {
            url: format!("http://{addr}/metrics"),
            metric: "lat_p99".into(),
        };
        assert_eq!(read_latency(&src, 1.0), Ok(4.25));
        server.join().unwrap();
        let closed = LatencySource::Prometheus {
            url: format!("http://{addr}/metrics"),
            metric: "x".into(),
        };
        assert!(read_latency(&closed, 1.0).is_err());
    }

    #[test]
    fn counters_give_rates_and_survive_resets() {
        let mut c = AccessCounters::default();
        let m = |f: u64, s: u64| {
            BTreeMap::from([
                (TAG_FMEM_ACCESSES.to_string(), f),
                (TAG_SMEM_ACCESSES.to_string(), s),
            ])
        };
        assert_eq!(c.update(0.0, &m(100, 100)), None);
        let r = c.update(2.0, &m(400, 200)).unwrap();
        assert_eq!(r.rate, 200.0);
        assert_eq!(r.fmem_ratio, Some(0.75));
        assert_eq!(c.update(3.0, &m(5, 5)), None, "backwards: agent restarted");
        assert_eq!(c.resets, 1);
        assert!(c.update(4.0, &m(15, 5)).is_some());
        assert_eq!(c.update(5.0, &BTreeMap::new()), None);
    }
}
