//! The VM configuration, in Cloud Hypervisor's schema.
//!
//! The same structs are filled from the command line (each `*Config` has a
//! `SYNTAX` string, reused as the `--help` text, and a `parse`) and from the
//! JSON body of `PUT /api/v1/vm.create`, then checked by
//! [`VmConfig::validate`], so both paths obey the same rules.

#![deny(missing_docs)]

mod balloon;
mod cli;
pub mod compat;
mod console;
mod disk;
pub mod hotplug;
mod net;
mod platform;
mod types;
mod validate;

pub use balloon::{BalloonConfig, BalloonSize, Tier};
pub use cli::ParseError;
pub use disk::{DiskConfig, DEFAULT_DISK_NUM_QUEUES, DEFAULT_DISK_QUEUE_SIZE, DISK_SERIAL_MAX};
pub use net::{
    MacAddr, NetConfig, DEFAULT_NET_IP, DEFAULT_NET_MASK, DEFAULT_NET_NUM_QUEUES,
    DEFAULT_NET_QUEUE_SIZE,
};
pub use platform::{
    parse_uuid, PlatformConfig, PLATFORM_OEM_STRINGS_MAX, PLATFORM_STRING_BYTES_MAX,
};
pub use types::*;
pub use validate::ValidationError;
