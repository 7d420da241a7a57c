//! In-guest read cache (PVM backend only): cuts the exits of sequential
//! `read(2)` loops such as md5sum's.
//!
//! When the program reads a regular file in chunks of at least 4 KiB, the VMM
//! reads up to 1 MiB ahead into a buffer mapped in the guest and publishes
//! (fd, pos, len) in a user-writable control page. The syscall stub (which
//! runs at CPL3 on PVM) serves `read(fd, …)` from that buffer with
//! `rep movsb` and returns without an exit when the buffer holds the whole
//! request; otherwise it exits and the VMM serves the rest of the buffer,
//! refills, and completes the request, so a read is short only at EOF.
//!
//! The host file position runs ahead of the program's. Before any other
//! system call that names the cached fd (lseek, close, dup2 onto it, fstat,
//! pread, …) and before creating a thread, the VMM gives the unread bytes
//! back with `lseek(fd, -unread, SEEK_CUR)` and turns the cache off, so the
//! program can never observe the difference in position. Contents are as of
//! the refill (a file rewritten in place during those few milliseconds can
//! show older data; appended data is seen by the next refill).

use std::sync::atomic::Ordering;

use crate::machine::{ctl, CACHE_BUF_SIZE, CACHE_BUF_VA, CACHE_CTL_VA};
use crate::mm::{Mm, PTE_ADDR, PTE_P};
use crate::ram::PAGE;

/// Smallest read request that turns the cache on for a file.
const MIN_REQUEST: u64 = 4096;

/// (device, inode) and whether it is a regular file.
fn stat_fd(fd: u64) -> Option<((u64, u64), bool)> {
    if fd > i32::MAX as u64 {
        return None;
    }
    // SAFETY: fstat on a descriptor number into our own struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd as i32, &mut st) } != 0 {
        return None;
    }
    Some((
        (st.st_dev, st.st_ino),
        st.st_mode & libc::S_IFMT == libc::S_IFREG,
    ))
}

fn file_id(fd: u64) -> Option<(u64, u64)> {
    stat_fd(fd).map(|s| s.0)
}

/// State of the cache, owned by the VMM.
pub struct ReadCache {
    enabled: bool,
    fd: i64,
    file: (u64, u64),
    len: u64,
    ctl_gpa: u64,
    buf_host: *mut u8,
    /// Refills done (each one an exit).
    pub refills: u64,
    /// Bytes served (from refills and the fast path).
    pub bytes: u64,
}

// SAFETY: the raw pointer is into guest RAM, which lives for the whole run;
// the cache is always used under the process mutex.
unsafe impl Send for ReadCache {}

impl ReadCache {
    /// Locates the control page and buffer; the buffer must be host-contiguous.
    pub fn new(mm: &Mm, enabled: bool) -> ReadCache {
        let ctl_gpa = mm.pte(CACHE_CTL_VA) & PTE_ADDR;
        let first = mm.pte(CACHE_BUF_VA);
        let mut contiguous = first & PTE_P != 0;
        for i in 1..CACHE_BUF_SIZE / PAGE {
            let e = mm.pte(CACHE_BUF_VA + i * PAGE);
            contiguous &= e & PTE_ADDR == (first & PTE_ADDR) + i * PAGE;
        }
        let buf_host = mm
            .ram
            .ptr(first & PTE_ADDR, CACHE_BUF_SIZE)
            .unwrap_or(std::ptr::null_mut());
        ReadCache {
            enabled: enabled && contiguous && !buf_host.is_null(),
            fd: -1,
            file: (0, 0),
            len: 0,
            ctl_gpa,
            buf_host,
            refills: 0,
            bytes: 0,
        }
    }

    fn publish(&self, mm: &Mm, pos: u64) {
        let w = |off| mm.ram.word(self.ctl_gpa + off);
        w(ctl::FD).store(self.fd as u64, Ordering::SeqCst);
        w(ctl::BUF).store(CACHE_BUF_VA, Ordering::SeqCst);
        w(ctl::POS).store(pos, Ordering::SeqCst);
        w(ctl::LEN).store(self.len, Ordering::SeqCst);
    }

    /// Consumed bytes as the guest left them (clamped: the page is guest-writable).
    fn pos(&self, mm: &Mm) -> u64 {
        mm.ram
            .word(self.ctl_gpa + ctl::POS)
            .load(Ordering::SeqCst)
            .min(self.len)
    }

    /// Gives unread bytes back to the file and turns the cache off.
    pub fn settle(&mut self, mm: &Mm) {
        if self.fd < 0 {
            return;
        }
        let pos = self.pos(mm);
        let unread = self.len - pos;
        self.bytes += pos;
        if unread > 0 {
            // SAFETY: lseek on the program's own descriptor.
            unsafe { libc::lseek(self.fd as i32, -(unread as i64), libc::SEEK_CUR) };
        }
        self.fd = -1;
        self.len = 0;
        self.publish(mm, 0);
    }

    /// Turns the cache off for good (threads share descriptors).
    pub fn disable(&mut self, mm: &Mm) {
        self.settle(mm);
        self.enabled = false;
    }

    /// Called before every relayed or emulated call other than a cache read.
    pub fn before_syscall(&mut self, mm: &Mm, nr: u64, a: &[u64; 6]) {
        if self.fd < 0 {
            return;
        }
        let fd = self.fd as u64;
        let names_fd = a[0] == fd
            || (matches!(nr, 33 | 292) && a[1] == fd) // dup2/dup3 onto it
            || (nr == 40 && a[1] == fd) // sendfile from it
            || (matches!(nr, 275 | 326) && a[2] == fd); // splice, copy_file_range
                                                        // Calls that use the file position of another descriptor: if it is
                                                        // the same file (perhaps a dup sharing our position), settle first.
        let other = match nr {
            0 | 1 | 8 | 19 | 20 => Some(a[0]),
            40 => Some(a[1]),
            275 | 326 => Some(a[0]),
            _ => None,
        };
        if names_fd || other.is_some_and(|o| o != fd && file_id(o) == Some(self.file)) {
            self.settle(mm);
        }
    }

    /// Handles a `read` that reached the VMM. `None`: relay it normally.
    pub fn read(
        &mut self,
        mm: &Mm,
        fd: u64,
        buf: u64,
        count: u64,
    ) -> Option<(i64, Option<(u64, u64)>)> {
        if !self.enabled {
            return None;
        }
        if fd as i64 != self.fd {
            if fd > i32::MAX as u64 {
                return None;
            }
            let (id, regular) = stat_fd(fd)?;
            if self.fd >= 0 && id == self.file {
                // Another descriptor of the cached file: positions may be shared.
                self.settle(mm);
            }
            if count < MIN_REQUEST || !regular {
                return None;
            }
            self.settle(mm);
            self.fd = fd as i64;
            self.file = id;
        }
        // The stub exits when the buffer holds less than asked for. Serve
        // what is left, then refill until `count` bytes or end of file: a
        // read of a regular file is short only at EOF (tar, for one, takes
        // a short read for a file that shrank).
        let mut done = 0u64;
        let mut pos = self.pos(mm);
        loop {
            let n = (self.len - pos).min(count - done);
            if n > 0 {
                // SAFETY: pos + n <= len <= CACHE_BUF_SIZE bytes of the buffer.
                let data = unsafe {
                    std::slice::from_raw_parts(self.buf_host.add(pos as usize), n as usize)
                };
                if mm.write_bytes(buf + done, data).is_err() {
                    // Keep the data for the next read, report the bad buffer.
                    self.publish(mm, pos);
                    return Some(match done {
                        0 => (-(libc::EFAULT as i64), None),
                        _ => (done as i64, Some((buf, done))),
                    });
                }
                pos += n;
                done += n;
            }
            if done == count {
                break;
            }
            // Everything in the buffer was consumed: refill it.
            self.bytes += self.len;
            self.refills += 1;
            // SAFETY: the buffer is CACHE_BUF_SIZE host-contiguous bytes of guest RAM.
            let r = unsafe {
                libc::read(
                    fd as i32,
                    self.buf_host as *mut libc::c_void,
                    CACHE_BUF_SIZE as usize,
                )
            };
            if r < 0 {
                let e = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                self.fd = -1;
                self.len = 0;
                self.publish(mm, 0);
                return Some(match done {
                    0 => (-(e as i64), None),
                    _ => (done as i64, Some((buf, done))),
                });
            }
            self.len = r as u64;
            pos = 0;
            if r == 0 {
                break; // end of file
            }
        }
        self.publish(mm, pos);
        Some((done as i64, Some((buf, done))))
    }

    /// A fault in the stub's copy: un-consume the `n` bytes being copied.
    pub fn unconsume(&mut self, mm: &Mm, n: u64) {
        let pos = self.pos(mm).saturating_sub(n);
        self.publish(mm, pos);
    }
}
