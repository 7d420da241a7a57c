//! The VM configuration, in Cloud Hypervisor's schema.
//!
//! The same structs are filled from the command line (each `*Config` has a
//! `SYNTAX` string, reused as the `--help` text, and a `parse`) and from the
//! JSON body of `PUT /api/v1/vm.create`, then checked by
//! [`VmConfig::validate`], so both paths obey the same rules.

#![deny(missing_docs)]

mod balloon;
mod cli;
mod types;
mod validate;

pub use balloon::{BalloonConfig, BalloonSize, Tier};
pub use cli::ParseError;
pub use types::*;
pub use validate::ValidationError;
