//! `tier-policy`: a host daemon that divides a host's fast memory (FMem)
//! among co-located VMs and enforces the division through each VMM's
//! double balloon (`vm.resize`), after MTAT (`../shared/papers/`, §3–§5):
//! latency-critical VMs get the smallest share that keeps their p99 under
//! the SLO (Soft Actor-Critic), best-effort VMs split the rest fairly
//! (simulated annealing), and every change is applied LC-first in bounded
//! slices. Policies are plug-ins behind [`policies::Policy`]; the
//! simulator ([`sim`]) drives the same code against workload models.

#![deny(missing_docs)]

pub mod annealing;
pub mod bench;
pub mod daemon;
pub mod enforce;
pub mod model;
pub mod policies;
pub mod profile;
pub mod sac;
pub mod sim;
pub mod train;
