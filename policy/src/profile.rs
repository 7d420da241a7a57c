//! Throughput-against-FMem profiles of best-effort VMs (§3.2.2, eq. 3).
//!
//! A profile file is JSON: `{"points": [[fmem_bytes, throughput], ...]}`,
//! at least two points, FMem strictly increasing, throughput finite, ≥ 0
//! and non-decreasing in FMem (more fast memory never hurts; a measured
//! dip is noise the operator must smooth, so it is refused, not guessed).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A validated profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ProfileFile", into = "ProfileFile")]
pub struct Profile {
    points: Vec<(u64, f64)>,
}

/// The file form of a profile.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    /// `(FMem bytes, throughput)` pairs.
    pub points: Vec<(u64, f64)>,
}

/// Why a profile is refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProfileError {
    /// Fewer than two points.
    #[error("a profile needs at least two points, got {0}")]
    TooFewPoints(usize),
    /// FMem not strictly increasing.
    #[error("profile FMem values must strictly increase (point {0})")]
    NotIncreasing(usize),
    /// Throughput NaN, infinite or negative.
    #[error("profile throughput at point {0} is not a finite non-negative number")]
    BadThroughput(usize),
    /// Throughput drops as FMem grows.
    #[error("profile is not monotone: throughput falls at point {0}")]
    NotMonotone(usize),
    /// Throughput zero everywhere (nothing to normalise by).
    #[error("profile throughput is zero everywhere")]
    AllZero,
    /// Unreadable or malformed file.
    #[error("cannot read profile {path}: {reason}")]
    File {
        /// Path.
        path: String,
        /// Why.
        reason: String,
    },
}

impl TryFrom<ProfileFile> for Profile {
    type Error = ProfileError;
    fn try_from(f: ProfileFile) -> Result<Self, ProfileError> {
        Profile::new(f.points)
    }
}

impl From<Profile> for ProfileFile {
    fn from(p: Profile) -> Self {
        ProfileFile { points: p.points }
    }
}

impl Profile {
    /// Validates `points`.
    pub fn new(points: Vec<(u64, f64)>) -> Result<Self, ProfileError> {
        if points.len() < 2 {
            return Err(ProfileError::TooFewPoints(points.len()));
        }
        for (i, &(_, t)) in points.iter().enumerate() {
            if !t.is_finite() || t < 0.0 {
                return Err(ProfileError::BadThroughput(i));
            }
        }
        for i in 1..points.len() {
            if points[i].0 <= points[i - 1].0 {
                return Err(ProfileError::NotIncreasing(i));
            }
            if points[i].1 < points[i - 1].1 {
                return Err(ProfileError::NotMonotone(i));
            }
        }
        if points.iter().all(|p| p.1 == 0.0) {
            return Err(ProfileError::AllZero);
        }
        Ok(Self { points })
    }

    /// Reads and validates a profile file.
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let err = |reason: String| ProfileError::File {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let file: ProfileFile = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        Profile::new(file.points).map_err(|e| err(e.to_string()))
    }

    /// The points.
    pub fn points(&self) -> &[(u64, f64)] {
        &self.points
    }

    /// Throughput with `fmem_bytes` of FMem: linear between points, flat
    /// beyond the ends.
    pub fn throughput(&self, fmem_bytes: u64) -> f64 {
        let pts = &self.points;
        if fmem_bytes <= pts[0].0 {
            return pts[0].1;
        }
        for w in pts.windows(2) {
            let ((x0, y0), (x1, y1)) = (w[0], w[1]);
            if fmem_bytes <= x1 {
                let f = (fmem_bytes - x0) as f64 / (x1 - x0) as f64;
                return y0 + f * (y1 - y0);
            }
        }
        pts[pts.len() - 1].1
    }

    /// Throughput with all the FMem the profile knows (eq. 3's Perf_full).
    pub fn full(&self) -> f64 {
        self.points[self.points.len() - 1].1
    }

    /// Normalised performance NP (eq. 3) with `fmem_bytes`.
    pub fn np(&self, fmem_bytes: u64) -> f64 {
        self.throughput(fmem_bytes) / self.full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_and_normalises() {
        let p = Profile::new(vec![(0, 10.0), (100, 20.0), (200, 40.0)]).unwrap();
        assert_eq!(p.throughput(0), 10.0);
        assert_eq!(p.throughput(50), 15.0);
        assert_eq!(p.throughput(150), 30.0);
        assert_eq!(p.throughput(1000), 40.0);
        assert_eq!(p.np(200), 1.0);
        assert_eq!(p.np(0), 0.25);
    }

    #[test]
    fn refuses_bad_profiles() {
        assert_eq!(
            Profile::new(vec![(0, 1.0)]),
            Err(ProfileError::TooFewPoints(1))
        );
        assert_eq!(
            Profile::new(vec![(0, 1.0), (0, 2.0)]),
            Err(ProfileError::NotIncreasing(1))
        );
        assert_eq!(
            Profile::new(vec![(0, 2.0), (10, 1.0)]),
            Err(ProfileError::NotMonotone(1))
        );
        assert_eq!(
            Profile::new(vec![(0, f64::NAN), (10, 1.0)]),
            Err(ProfileError::BadThroughput(0))
        );
        assert_eq!(
            Profile::new(vec![(0, 0.0), (10, 0.0)]),
            Err(ProfileError::AllZero)
        );
        let bad: Result<Profile, _> = serde_json::from_str(r#"{"points": [[0, 3.0], [5, 1.0]]}"#);
        assert!(bad.unwrap_err().to_string().contains("not monotone"));
        let bad: Result<Profile, _> = serde_json::from_str(r#"{"points": "x"}"#);
        assert!(bad.is_err());
    }

    #[test]
    fn loads_files_with_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        std::fs::write(&path, r#"{"points": [[0, 1.0], [4096, 2.0]]}"#).unwrap();
        assert_eq!(Profile::load(&path).unwrap().full(), 2.0);
        std::fs::write(&path, "{").unwrap();
        let e = Profile::load(&path).unwrap_err().to_string();
        assert!(e.contains("p.json"), "{e}");
        assert!(Profile::load(&dir.path().join("none")).is_err());
    }
}
