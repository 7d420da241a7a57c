//! Landlock (`--landlock`): after start, the process can open only the
//! files its configuration names.
//!
//! The rules come from the VM configuration given on the command line:
//! the payload and the entropy source (read), disks (read, or read-write
//! unless `readonly=on`), zone files, `/dev/kvm` and, with NICs,
//! `/dev/net/tun` (read-write), console output files, and the API
//! socket's directory (to remove the socket at exit). Every reopen a
//! guest reboot needs is among them. A VM created later through the API
//! could name other files, so `--landlock` needs `--kernel`.

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
    /// Read, write, create and remove beneath it.
    ReadWrite,
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
