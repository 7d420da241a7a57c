//! vmmload's own file descriptors (/dev/kvm, the VM, the vCPUs) live in the
//! program's descriptor table. They are moved to high numbers, out of the
//! way of `exec 3<file` and the lowest-free rule, and hidden: calls that
//! name one of them get EBADF, and `close_range` skips them (programs that
//! close every descriptor before exec, like Python's subprocess, would
//! otherwise close the VM under vmmload).

use std::os::unix::io::RawFd;
use std::sync::Mutex;

static PRIVATE: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

/// Lowest number used for private descriptors.
fn base() -> RawFd {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into our struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    let soft = r.rlim_cur.min(1 << 20) as RawFd;
    (soft - 128).max(100)
}

/// Moves `fd` to a high close-on-exec number, registers it as private and
/// returns the new number (the old one is closed).
pub fn hide(fd: RawFd) -> std::io::Result<RawFd> {
    // SAFETY: duplicating and closing a descriptor we own.
    let h = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, base()) };
    if h < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    unsafe { libc::close(fd) };
    PRIVATE.lock().expect("fds lock").push(h);
    Ok(h)
}

/// Whether `fd` is one of vmmload's.
pub fn is_private(fd: u64) -> bool {
    fd <= i32::MAX as u64 && PRIVATE.lock().expect("fds lock").contains(&(fd as RawFd))
}

/// Calls whose first argument is a descriptor (others are checked where they are).
pub fn first_arg_is_fd(nr: u64) -> bool {
    matches!(
        nr,
        0 | 1
            | 3
            | 5
            | 8
            | 16
            | 17
            | 18
            | 19
            | 20
            | 32
            | 33
            | 72
            | 73
            | 74
            | 75
            | 77
            | 78
            | 81
            | 91
            | 93
            | 138
            | 193
            | 196
            | 217
            | 221
            | 285
            | 292
            | 295
            | 296
    )
}

/// close_range(first, last, flags), leaving vmmload's descriptors alone.
pub fn close_range(first: u64, last: u64, flags: u64) -> i64 {
    const CLOSE_RANGE_UNSHARE: u64 = 2;
    const CLOSE_RANGE_CLOEXEC: u64 = 4;
    if first > last || flags & !(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC) != 0 {
        return -(libc::EINVAL as i64);
    }
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return -(libc::ENOMEM as i64);
    };
    let open: Vec<u64> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd: &u64| fd >= first && fd <= last && !is_private(fd))
        .collect();
    for fd in open {
        // SAFETY: closing or marking descriptors of the program (not ours).
        unsafe {
            if flags & CLOSE_RANGE_CLOEXEC != 0 {
                libc::fcntl(fd as RawFd, libc::F_SETFD, libc::FD_CLOEXEC);
            } else {
                libc::close(fd as RawFd);
            }
        }
    }
    0
}
