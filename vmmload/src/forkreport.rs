//! How a forked vmmload child tells its parent whether the fork worked.
//!
//! A host fork can succeed while the child then fails to build its VM or to
//! start its host threads (a process limit, RLIMIT_NPROC, counts threads).
//! Natively the program's fork would have failed with EAGAIN, so the parent
//! waits for the child's word on a pipe before returning from fork: 0 when
//! the child is about to run the program, an errno otherwise (the parent
//! then reaps the child and returns that error).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The pipe, created before the fork.
pub struct ForkReport {
    read: OwnedFd,
    write: OwnedFd,
}

/// The parent's end.
pub struct ParentEnd(OwnedFd);

/// The child's end.
pub struct ChildEnd(OwnedFd);

impl ForkReport {
    pub fn new() -> std::io::Result<Self> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors are new and owned by nobody else.
        Ok(unsafe {
            Self {
                read: OwnedFd::from_raw_fd(fds[0]),
                write: OwnedFd::from_raw_fd(fds[1]),
            }
        })
    }

    /// In the parent after fork (closes the child's end).
    pub fn parent(self) -> ParentEnd {
        ParentEnd(self.read)
    }

    /// In the child after fork (closes the parent's end).
    pub fn child(self) -> ChildEnd {
        ChildEnd(self.write)
    }
}

impl ParentEnd {
    /// Waits for the child's word: Ok when it runs the program, the errno it
    /// sent otherwise, EAGAIN if it ended without a word.
    pub fn wait(self) -> Result<(), i32> {
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < buf.len() {
            // SAFETY: reading into the unfilled part of a local buffer.
            let n = unsafe {
                libc::read(
                    self.0.as_raw_fd(),
                    buf[got..].as_mut_ptr().cast(),
                    buf.len() - got,
                )
            };
            let interrupted =
                n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR);
            if n > 0 {
                got += n as usize;
            } else if !interrupted {
                // End of file (the child is gone) or a read error.
                return Err(libc::EAGAIN);
            }
        }
        match i32::from_ne_bytes(buf) {
            0 => Ok(()),
            e if e > 0 && e < 4096 => Err(e),
            _ => Err(libc::EAGAIN),
        }
    }
}

impl ChildEnd {
    /// Sends 0 (running) or an errno; closes the pipe.
    pub fn send(self, errno: i32) {
        let buf = errno.to_ne_bytes();
        // SAFETY: writing a local buffer; 4 bytes to a pipe are atomic.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (ParentEnd, ChildEnd) {
        let r = ForkReport::new().expect("pipe");
        (ParentEnd(r.read), ChildEnd(r.write))
    }

    #[test]
    fn running_child_is_ok() {
        let (p, c) = pair();
        c.send(0);
        assert_eq!(p.wait(), Ok(()));
    }

    #[test]
    fn failing_child_passes_its_errno() {
        let (p, c) = pair();
        c.send(libc::ENOMEM);
        assert_eq!(p.wait(), Err(libc::ENOMEM));
    }

    #[test]
    fn silent_child_is_eagain() {
        let (p, c) = pair();
        drop(c);
        assert_eq!(p.wait(), Err(libc::EAGAIN));
    }

    #[test]
    fn garbage_word_is_eagain() {
        let (p, c) = pair();
        c.send(-5);
        assert_eq!(p.wait(), Err(libc::EAGAIN));
    }
}
