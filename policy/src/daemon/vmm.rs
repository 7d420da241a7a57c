//! One VMM seen through its REST API socket (our `api` crate's client).

use std::path::{Path, PathBuf};

use api::client::{api_request, ClientError, Method};
use api::{BalloonStatsResponse, VmInfo};

/// A failed VMM call.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    /// Transport or HTTP status error.
    #[error("{socket}: {source}")]
    Api {
        /// Socket.
        socket: String,
        /// Why.
        #[source]
        source: ClientError,
    },
    /// The answer is not what the API documents.
    #[error("{socket}: unexpected answer to {endpoint}: {reason}")]
    Decode {
        /// Socket.
        socket: String,
        /// Endpoint.
        endpoint: &'static str,
        /// Why.
        reason: String,
    },
    /// The VM has no double balloon (no SMem side or no balloon at all).
    #[error("{0}: the VM has no balloon with an SMem side (heterogeneous_memory)")]
    NoTieredBalloon(String),
}

/// A VMM's API socket.
#[derive(Clone, Debug)]
pub struct Vmm {
    socket: PathBuf,
}

/// What the policy needs from one VMM at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct VmmSample {
    /// FMem tier size, bytes (zones of NUMA nodes with vCPUs, plus
    /// `memory.size`).
    pub fmem_tier: u64,
    /// FMem balloon target and actual, bytes.
    pub fmem_balloon: (u64, u64),
    /// SMem balloon target, bytes (kept as is by resizes).
    pub smem_target: u64,
    /// The full statistics.
    pub stats: BalloonStatsResponse,
}

impl VmmSample {
    /// FMem the VM holds now: its tier minus the larger of the balloon's
    /// target and actual (a shrinking VM still holds memory until the
    /// guest gives it back; a growing one may already use it).
    pub fn share_bytes(&self) -> u64 {
        self.fmem_tier
            .saturating_sub(self.fmem_balloon.0.min(self.fmem_balloon.1))
    }

    /// FMem the VM will hold once the balloon reaches its target.
    pub fn target_share_bytes(&self) -> u64 {
        self.fmem_tier.saturating_sub(self.fmem_balloon.0)
    }
}

impl Vmm {
    /// The VMM behind `socket`.
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_path_buf(),
        }
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn get<T: serde::de::DeserializeOwned>(&self, endpoint: &'static str) -> Result<T, VmmError> {
        let s = self.socket.display().to_string();
        let body = api_request(&self.socket, Method::Get, endpoint, None)
            .and_then(|r| r.into_result())
            .map_err(|source| VmmError::Api {
                socket: s.clone(),
                source,
            })?;
        serde_json::from_slice(&body).map_err(|e| VmmError::Decode {
            socket: s,
            endpoint,
            reason: e.to_string(),
        })
    }

    /// FMem tier size from `vm.info`.
    pub fn fmem_tier(&self) -> Result<u64, VmmError> {
        let info: VmInfo = self.get("vm.info")?;
        let mem = &info.config.memory;
        let memory_only: Vec<String> = info
            .config
            .numa
            .iter()
            .flatten()
            .filter(|n| n.cpus.as_ref().is_none_or(|c| c.is_empty()))
            .flat_map(|n| n.memory_zones.iter().flatten().cloned())
            .collect();
        let zones: u64 = mem
            .zones
            .iter()
            .flatten()
            .filter(|z| !memory_only.contains(&z.id))
            .map(|z| z.size)
            .sum();
        Ok(mem.size.saturating_add(zones))
    }

    /// Balloon state; refuses a VM without a per-tier balloon.
    pub fn sample(&self, fmem_tier: u64) -> Result<VmmSample, VmmError> {
        let stats: BalloonStatsResponse = match self.get("vm.balloon-stats") {
            Err(VmmError::Api {
                source:
                    ClientError::Status {
                        status: 404 | 409 | 500,
                        ..
                    },
                ..
            }) => return Err(VmmError::NoTieredBalloon(self.socket.display().to_string())),
            r => r?,
        };
        if !stats.heterogeneous_memory || stats.tiers.len() != 2 {
            return Err(VmmError::NoTieredBalloon(self.socket.display().to_string()));
        }
        Ok(VmmSample {
            fmem_tier,
            fmem_balloon: (stats.tiers[0].target, stats.tiers[0].actual),
            smem_target: stats.tiers[1].target,
            stats,
        })
    }

    /// Sets the FMem balloon so the VM holds `share` bytes of FMem; the
    /// SMem balloon keeps `smem_target`.
    pub fn resize_share(
        &self,
        fmem_tier: u64,
        share: u64,
        smem_target: u64,
    ) -> Result<(), VmmError> {
        let balloon = fmem_tier.saturating_sub(share);
        let body = serde_json::json!({ "desired_balloon": [balloon, smem_target] }).to_string();
        let s = self.socket.display().to_string();
        let r = api_request(
            &self.socket,
            Method::Put,
            "vm.resize",
            Some(body.as_bytes()),
        )
        .and_then(|r| r.into_result());
        match r {
            Ok(_) => Ok(()),
            Err(ClientError::Status {
                status: 400 | 409,
                message,
            }) if message.contains("SMem") || message.contains("balloon") => {
                Err(VmmError::NoTieredBalloon(format!("{s} ({message})")))
            }
            Err(source) => Err(VmmError::Api { socket: s, source }),
        }
    }
}
