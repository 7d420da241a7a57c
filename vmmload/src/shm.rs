//! Shared mappings (`MAP_SHARED`).
//!
//! Guest RAM is one private anonymous host mapping, copied on write by
//! vmmload's fork, so an ordinary frame is private to one program process.
//! A shared mapping gets ordinary frames whose host pages are then replaced
//! (`mmap(MAP_FIXED | MAP_SHARED)` over that part of guest RAM) by the
//! file's pages, or by a memfd's for anonymous shared memory. The guest
//! physical layout, the memslots, the owner map and dirty tracking are
//! unchanged: the frames are still guest RAM. What changes is the host side:
//! a forked child inherits the shared host mapping (fork keeps MAP_SHARED
//! shared), and its new VM's memslot over its copy of guest RAM therefore
//! sees the very pages the parent sees. Writes land in the page cache, so a
//! read(2) of the file sees them at once and the kernel writes them back
//! (msync, munmap and exit need nothing more).
//!
//! When such a frame is freed it gets private anonymous backing again
//! (`GuestRam::release`). Not covered: a file mapped through a descriptor
//! opened read-only stays a private copy (it cannot be written through the
//! mapping anyway, but later writes by others are not seen); pages past the
//! end of the file read as zeros instead of raising SIGBUS; growing a shared
//! mapping with mremap adds private pages.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::mm::{Mm, VmaKind, PROT_R, PROT_W, PTE_ADDR};
use crate::ram::PAGE;

/// What a shared mapping maps.
pub enum Source {
    /// Anonymous shared memory (or /dev/zero).
    Anon,
    /// The program's open file `fd` (a host descriptor, relayed 1:1) from
    /// byte `off`.
    File(RawFd, u64),
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Whether `fd` is open for reading and writing (else a shared file
/// mapping stays a private copy).
pub fn writable_fd(fd: RawFd) -> bool {
    // SAFETY: F_GETFL on a descriptor number; no memory is passed.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_ACCMODE == libc::O_RDWR
}

/// Maps `len` bytes shared at `addr` (a hint unless `fixed`); returns the
/// start address or an errno.
pub fn map(
    mm: &mut Mm,
    addr: u64,
    len: u64,
    prot: u32,
    fixed: bool,
    src: Source,
    kind: VmaKind,
) -> Result<u64, i32> {
    let len = len
        .checked_add(PAGE - 1)
        .map(|l| l & !(PAGE - 1))
        .ok_or(libc::EINVAL)?;
    // The backing descriptor and how many pages of it exist.
    let (memfd, fd, off, backed) = match src {
        Source::Anon => {
            let name = c"vmmload-shared";
            // SAFETY: memfd_create with a NUL-terminated name.
            let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
            if fd < 0 {
                return Err(errno());
            }
            // SAFETY: a fresh descriptor we own.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: ftruncate on our own memfd.
            if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
                return Err(errno());
            }
            (Some(owned), fd, 0, len)
        }
        Source::File(fd, off) => {
            // SAFETY: fstat into a local struct.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::fstat(fd, &mut st) } != 0 {
                return Err(libc::EBADF);
            }
            let size = st.st_size.max(0) as u64;
            let backed = size
                .saturating_sub(off)
                .div_ceil(PAGE)
                .saturating_mul(PAGE)
                .min(len);
            (None, fd, off, backed)
        }
    };
    let start = mm
        .mmap_anon(addr, len, PROT_R | PROT_W, fixed, kind)
        .map_err(|e| e.errno())?;
    if let Err(e) = back(mm, start, backed, fd, off) {
        let _ = mm.munmap(start, len);
        return Err(e);
    }
    drop(memfd);
    if prot != PROT_R | PROT_W {
        if let Err(e) = mm.mprotect(start, len, prot) {
            let _ = mm.munmap(start, len);
            return Err(e.errno());
        }
    }
    Ok(start)
}

/// Backs the frames of the first `len` bytes at `start` with `fd` from
/// `off`, one host mapping per run of contiguous frames.
fn back(mm: &Mm, start: u64, len: u64, fd: RawFd, off: u64) -> Result<(), i32> {
    let mut va = start;
    while va < start + len {
        let gpa = mm.pte(va) & PTE_ADDR;
        let mut run = PAGE;
        while va + run < start + len && mm.pte(va + run) & PTE_ADDR == gpa + run {
            run += PAGE;
        }
        mm.ram
            .back_shared(gpa, run, fd, off + (va - start))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::ENOMEM))?;
        va += run;
    }
    Ok(())
}
