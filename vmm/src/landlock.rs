//! Landlock (`--landlock`, `--landlock-rules`, as Cloud Hypervisor spells
//! them): after start, the process can open only the files its
//! configuration names.
//!
//! The rules come from the VM configuration given on the command line:
//! the payload and the entropy source (read), disks (read, or read-write
//! unless `readonly=on`), zone files, `/dev/kvm` and, with NICs,
//! `/dev/net/tun` (read-write), console output files, and the API
//! socket's directory (to remove the socket at exit); plus every
//! `--landlock-rules path=<path>,access=r|w|rw` (a file or a directory).
//! Every reopen a guest reboot needs is among them.
//!
//! The domain is entered by the main thread before any other thread
//! starts, so every thread is inside it (Landlock cannot be applied to
//! threads that already run). Upstream enters it at `vm.create` instead;
//! without `--kernel` there is no configuration yet, so here the domain
//! holds `/dev/kvm`, `/dev/net/tun`, `/dev/urandom`, the API socket's
//! directory and the `--landlock-rules`: a VM created later through the API
//! must keep its files beneath those rules.

use std::io;
use std::path::{Path, PathBuf};

use landlock::{
    path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    ABI,
};
use vm_config::{ConsoleOutputMode, VmConfig};

/// The newest Landlock ABI whose rights we ask for (Linux 6.2: truncate).
const TARGET_ABI: ABI = ABI::V3;

/// What may be done with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allow {
    /// Open for reading (and list, for a directory).
    Read,
    /// Write, create and remove beneath it, but not read.
    Write,
    /// Read, write, create and remove beneath it.
    ReadWrite,
}

/// `--landlock-rules` syntax (upstream's).
pub const RULES_SYNTAX: &str = "Landlock rules for paths a VM created or changed after start \
    may use: path=<file or directory>,access=r|w|rw";

/// Parses one `--landlock-rules` value: `path=<path>,access=r|w|rw`.
pub fn parse_rule(input: &str) -> Result<(PathBuf, Allow), String> {
    let mut p = option_parser::OptionParser::new();
    p.add_all(&["path", "access"]);
    p.parse(input)
        .map_err(|e| format!("--landlock-rules {input:?}: {e}"))?;
    let path = p
        .get("path")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("--landlock-rules {input:?}: path= is required"))?;
    let allow = match p.get("access") {
        Some("r") => Allow::Read,
        Some("w") => Allow::Write,
        Some("rw") => Allow::ReadWrite,
        Some(other) => {
            return Err(format!(
                "--landlock-rules {input:?}: access={other} is not one of r, w, rw"
            ))
        }
        None => return Err(format!("--landlock-rules {input:?}: access= is required")),
    };
    Ok((PathBuf::from(path), allow))
}

/// The paths a VMM started without a VM configuration needs whatever VM
/// is created later: KVM, TAPs and the default entropy source.
pub fn rules_without_config(api_socket: Option<&Path>) -> Vec<(PathBuf, Allow)> {
    let mut rules = vec![
        (PathBuf::from("/dev/kvm"), Allow::ReadWrite),
        (PathBuf::from("/dev/urandom"), Allow::Read),
    ];
    // A host without TUN cannot give a VM a NIC anyway.
    let tun = Path::new("/dev/net/tun");
    if tun.exists() {
        rules.push((tun.to_path_buf(), Allow::ReadWrite));
    }
    if let Some(sock) = api_socket {
        rules.push((parent_of(sock), Allow::ReadWrite));
    }
    rules
}

/// The paths `config` needs after start (and across guest reboots).
pub fn rules_for(config: &VmConfig, api_socket: Option<&Path>) -> Vec<(PathBuf, Allow)> {
    let mut rules = vec![(PathBuf::from("/dev/kvm"), Allow::ReadWrite)];
    if let Some(p) = &config.payload {
        for path in [&p.kernel, &p.initramfs, &p.firmware].into_iter().flatten() {
            rules.push((path.clone(), Allow::Read));
        }
    }
    rules.push((config.rng.src.clone(), Allow::Read));
    for d in config.disks.iter().flatten() {
        let allow = if d.readonly {
            Allow::Read
        } else {
            Allow::ReadWrite
        };
        rules.push((d.path.clone(), allow));
    }
    if config.net.as_ref().is_some_and(|n| !n.is_empty()) {
        rules.push((PathBuf::from("/dev/net/tun"), Allow::ReadWrite));
    }
    for z in config.memory.zones.iter().flatten() {
        if let Some(f) = &z.file {
            rules.push((f.clone(), Allow::ReadWrite));
        }
    }
    for c in [&config.serial, &config.console] {
        if let (ConsoleOutputMode::File, Some(f)) = (c.mode, &c.file) {
            // It may not exist yet: allow creating it in its directory.
            rules.push((parent_of(f), Allow::ReadWrite));
        }
    }
    if let Some(sock) = api_socket {
        rules.push((parent_of(sock), Allow::ReadWrite));
    }
    rules
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Restricts the calling thread, and every thread it starts afterwards, to
/// `rules`. Call on the main thread before any other thread exists. Fails
/// if the kernel does not enforce Landlock at all.
pub fn restrict(rules: &[(PathBuf, Allow)]) -> io::Result<()> {
    let all = AccessFs::from_all(TARGET_ABI);
    let read = AccessFs::from_read(TARGET_ABI);
    let write = AccessFs::from_write(TARGET_ABI);
    let paths = |want: Allow| {
        rules
            .iter()
            .filter(move |(_, a)| *a == want)
            .map(|(p, _)| p.as_path())
            .collect::<Vec<_>>()
    };
    let status = Ruleset::default()
        .handle_access(all)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(paths(Allow::Read), read)))
        .and_then(|r| r.add_rules(path_beneath_rules(paths(Allow::Write), write)))
        .and_then(|r| r.add_rules(path_beneath_rules(paths(Allow::ReadWrite), all)))
        .and_then(|r| r.restrict_self())
        .map_err(|e| io::Error::other(format!("landlock: {e}")))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(io::Error::other(
            "landlock: this kernel does not enforce Landlock (not built in, or not in lsm=)",
        ));
    }
    log::info!(
        "landlock: {:?} ({:?}), {} path rule(s)",
        status.ruleset,
        status.landlock,
        rules.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests;
