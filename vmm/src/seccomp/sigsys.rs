//! The SIGSYS handler: a denied syscall is reported with the thread's role
//! and the syscall number, then the process ends with
//! [`SIGSYS_EXIT_CODE`](super::SIGSYS_EXIT_CODE).

use std::cell::Cell;
use std::io;

use super::{CONFINED_AS, SIGSYS_EXIT_CODE};

/// Installs the SIGSYS handler that reports a denied syscall and ends the
/// process. Call before the first filter is applied.
pub fn install_sigsys_handler() -> io::Result<()> {
    // SAFETY: a zeroed sigaction with a valid handler function and
    // SA_SIGINFO; sigaction gets valid pointers.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigsys as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(libc::SIGSYS, &act, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Layout of the SIGSYS part of `siginfo_t` (after the common header):
/// the faulting instruction, the syscall number and the audit arch.
#[repr(C)]
struct SigsysInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    _pad: libc::c_int,
    call_addr: *mut libc::c_void,
    syscall: libc::c_int,
    arch: libc::c_uint,
}

/// Formats `n` in decimal into `buf`; returns the digits.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 0 {
            return &buf[i..];
        }
    }
}

extern "C" fn on_sigsys(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // Only write(2) and exit_group(2) here: every filter allows them, and a
    // second denied syscall inside this handler would kill the process
    // without a word (SIGSYS is blocked while it runs).
    let kind = CONFINED_AS.with(Cell::get);
    // SAFETY: the kernel passes a valid siginfo for SIGSYS (SA_SIGINFO),
    // laid out as SigsysInfo; the buffers are local or static.
    unsafe {
        let nr = (*(info as *const SigsysInfo)).syscall;
        let mut digits = [0u8; 20];
        let nr = decimal(u64::try_from(nr).unwrap_or(0), &mut digits);
        for part in [
            &b"cloud-hypervisor: seccomp: a "[..],
            kind.as_bytes(),
            &b" thread"[..],
            &b" made a forbidden syscall "[..],
            nr,
            &b" (run with --seccomp log to find every one)\n"[..],
        ] {
            libc::write(2, part.as_ptr().cast(), part.len());
        }
        libc::_exit(SIGSYS_EXIT_CODE);
    }
}
