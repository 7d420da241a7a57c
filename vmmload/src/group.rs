//! The program's process group.
//!
//! The program's forks are real host processes (see `forkexec.rs`), so
//! ending vmmload's own process at `--timeout` or at a fatal signal would
//! leave them running. Like coreutils `timeout`, vmmload starts a process
//! group of its own, which the program and everything it forks inherit, and
//! ends that group: the signal first, then SIGKILL after a grace period for
//! whatever ignores it. The caveat is also `timeout`'s: a new group is not
//! the terminal's foreground group, so a program that reads the terminal
//! stops with SIGTTIN; `--foreground` keeps vmmload in the caller's group
//! (and then forked children outlive a timeout). A program that moves its
//! children into groups of their own (`setpgid`, `setsid`: a shell with job
//! control) takes them out of reach, as with `timeout`.
//!
//! Members are signalled one by one (not with `kill(0, ..)`) so vmmload
//! never signals itself: its own termination signals belong to the program.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Makes the calling process the leader of a new process group.
pub fn lead() -> std::io::Result<()> {
    // SAFETY: setpgid on ourselves.
    if unsafe { libc::setpgid(0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Live processes (not zombies) of process group `pgid`, other than us.
fn members(pgid: i32) -> Vec<i32> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| stat_group(&s))
                .is_some_and(|(state, g)| g == pgid && state != 'Z' && state != 'X')
        })
        .collect()
}

/// (state, process group) from a `/proc/PID/stat` line. The command name
/// is in parentheses and may itself contain spaces and parentheses.
fn stat_group(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, pgrp))
}

/// Reaps our own exited children so they stop counting as members.
fn reap() {
    // SAFETY: non-blocking wait for any child.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG | libc::__WALL) } > 0 {}
}

/// Waits until every process in `pids` has exited or `until` passes;
/// returns whether all exited.
fn wait_exit(pids: &[i32], until: Instant) -> bool {
    let fds: Vec<OwnedFd> = pids
        .iter()
        .filter_map(|&pid| {
            // SAFETY: pidfd_open returns a new descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
            // SAFETY: a fresh descriptor we own.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
        })
        .collect();
    let mut pending: Vec<libc::pollfd> = fds
        .iter()
        .map(|f| libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !pending.is_empty() {
        reap();
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll on our own array of pidfds.
        let n = unsafe { libc::poll(pending.as_mut_ptr(), pending.len() as libc::nfds_t, ms) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return false;
        }
        pending.retain(|p| p.revents == 0);
    }
    reap();
    true
}

/// Ends every other process of our group: `sig`, then SIGKILL for what is
/// still running after `grace`, until nothing is left (a member that forks
/// while being killed is found by the next scan).
pub fn end(sig: i32, grace: Duration) {
    // SAFETY: getpgrp has no preconditions.
    let pgid = unsafe { libc::getpgrp() };
    let pids = members(pgid);
    if pids.is_empty() {
        return;
    }
    log::debug!(
        "ending {} process(es) of group {pgid} with signal {sig}",
        pids.len()
    );
    for &pid in &pids {
        // SAFETY: signalling a process of our own group.
        unsafe { libc::kill(pid, sig) };
    }
    if wait_exit(&pids, Instant::now() + grace) && members(pgid).is_empty() {
        return;
    }
    for _ in 0..1000 {
        let pids = members(pgid);
        if pids.is_empty() {
            return;
        }
        for &pid in &pids {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        wait_exit(&pids, Instant::now() + Duration::from_secs(5));
    }
    log::warn!("processes of group {pgid} survived SIGKILL");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_lines_with_odd_names() {
        assert_eq!(stat_group("42 (a) b (c)) S 1 77 77 0 -1"), Some(('S', 77)));
        assert_eq!(stat_group("42 (sh) Z 1 9 9"), Some(('Z', 9)));
        assert_eq!(stat_group("garbage"), None);
        assert_eq!(stat_group("1 (x) R"), None);
    }
}
