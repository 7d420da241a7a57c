//! `/proc/self/exe` as the program sees it.
//!
//! On the host, `/proc/self/exe` of a vmmload process is vmmload itself.
//! Programs use the link to find or re-run their own image (busybox applets,
//! launchers, `readlink(/proc/self/exe)` to locate data files), so every path
//! that names the link is answered with the program's image instead:
//! `execve`/`execveat`, `open`/`openat` and `readlink`/`readlinkat`.

use std::os::unix::ffi::OsStrExt;

use crate::process::Process;

/// Whether `path` names the calling process's own executable link:
/// `/proc/self/exe`, `/proc/thread-self/exe` or `/proc/<our pid>/exe`.
pub fn names_self_exe(path: &[u8]) -> bool {
    let Some(rest) = path.strip_prefix(b"/proc/") else {
        return false;
    };
    let Some(who) = rest.strip_suffix(b"/exe") else {
        return false;
    };
    if who == b"self" || who == b"thread-self" {
        return true;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    who == pid.to_string().as_bytes()
}

/// The program's image path in place of `path` when `path` names the
/// executable link; `path` itself otherwise.
pub fn substitute(p: &Process, path: Vec<u8>) -> Vec<u8> {
    if names_self_exe(&path) {
        p.exe.lock().expect("exe lock").as_bytes().to_vec()
    } else {
        path
    }
}

/// The path an `execveat(dirfd, path, .., flags)` executes, as the host sees
/// it: `AT_EMPTY_PATH` names the file open as `dirfd`, a relative path is
/// resolved against `dirfd` (through `/proc/self/fd`, which the host
/// resolves for vmmload exactly as for the program: descriptors are relayed
/// one to one).
pub fn execveat_path(dirfd: i32, path: &[u8], flags: i32) -> Result<Vec<u8>, i32> {
    if path.is_empty() {
        if flags & libc::AT_EMPTY_PATH == 0 {
            return Err(libc::ENOENT);
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{dirfd}")).map_err(|_| libc::EBADF)?;
        return Ok(link.as_os_str().as_bytes().to_vec());
    }
    if path.starts_with(b"/") || dirfd == libc::AT_FDCWD {
        return Ok(path.to_vec());
    }
    let mut p = format!("/proc/self/fd/{dirfd}/").into_bytes();
    p.extend_from_slice(path);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_link_by_every_name() {
        assert!(names_self_exe(b"/proc/self/exe"));
        assert!(names_self_exe(b"/proc/thread-self/exe"));
        // SAFETY: getpid has no preconditions.
        let me = format!("/proc/{}/exe", unsafe { libc::getpid() });
        assert!(names_self_exe(me.as_bytes()));
        assert!(!names_self_exe(b"/proc/1/exe"));
        assert!(!names_self_exe(b"/proc/self/exe2"));
        assert!(!names_self_exe(b"proc/self/exe"));
        assert!(!names_self_exe(b"/proc/self/cwd"));
    }

    #[test]
    fn execveat_paths() {
        assert_eq!(execveat_path(libc::AT_FDCWD, b"x", 0), Ok(b"x".to_vec()));
        assert_eq!(execveat_path(7, b"/bin/sh", 0), Ok(b"/bin/sh".to_vec()));
        assert_eq!(
            execveat_path(7, b"sh", 0),
            Ok(b"/proc/self/fd/7/sh".to_vec())
        );
        assert_eq!(execveat_path(7, b"", 0), Err(libc::ENOENT));
        assert_eq!(
            execveat_path(-1, b"", libc::AT_EMPTY_PATH),
            Err(libc::EBADF)
        );
    }
}
