//! Generic relay of system calls to the host: a table says, per call, which
//! arguments are guest pointers and how large their buffers are. Every guest
//! pointer is translated and bounds-checked (EFAULT if any byte is not a
//! present user page), buffers that are not host-contiguous go through
//! readv/writev-style segment lists or a bounce buffer, so the host kernel
//! never sees an address outside guest RAM.

use crate::mm::{HostSeg, Mm, MmError};

/// How one system-call argument is passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// Plain value.
    V,
    /// NUL-terminated path or name (NULL allowed).
    Str,
    /// Input buffer whose length is argument `n`.
    In(u8),
    /// Output buffer whose length is argument `n`; the call returns the bytes written.
    Out(u8),
    /// Input buffer of fixed size.
    InF(u16),
    /// Output buffer of fixed size.
    OutF(u16),
    /// In/out buffer of fixed size.
    IoF(u16),
    /// In/out array of `size`-byte elements, count in argument `n`.
    IoN(u16, u8),
    /// Output array of `size`-byte elements, count in argument `n`.
    OutN(u16, u8),
}

use Arg::*;

/// Relay description of a call: name and argument kinds.
pub type Spec = (&'static str, [Arg; 6]);

const fn s(name: &'static str, a: [Arg; 6]) -> Option<Spec> {
    Some((name, a))
}

const STAT: u16 = 144;
const SOCKADDR: u16 = 128;

/// The relay table. Calls not listed here are emulated or unsupported.
pub fn spec(nr: u64) -> Option<Spec> {
    match nr {
        0 => s("read", [V, Out(2), V, V, V, V]),
        1 => s("write", [V, In(2), V, V, V, V]),
        2 => s("open", [Str, V, V, V, V, V]),
        3 => s("close", [V; 6]),
        4 => s("stat", [Str, OutF(STAT), V, V, V, V]),
        5 => s("fstat", [V, OutF(STAT), V, V, V, V]),
        6 => s("lstat", [Str, OutF(STAT), V, V, V, V]),
        7 => s("poll", [IoN(8, 1), V, V, V, V, V]),
        8 => s("lseek", [V; 6]),
        17 => s("pread64", [V, Out(2), V, V, V, V]),
        18 => s("pwrite64", [V, In(2), V, V, V, V]),
        21 => s("access", [Str, V, V, V, V, V]),
        22 => s("pipe", [OutF(8), V, V, V, V, V]),
        23 => s("select", [V, IoF(128), IoF(128), IoF(128), IoF(16), V]),
        24 => s("sched_yield", [V; 6]),
        32 => s("dup", [V; 6]),
        33 => s("dup2", [V; 6]),
        34 => s("pause", [V; 6]),
        35 => s("nanosleep", [InF(16), OutF(16), V, V, V, V]),
        36 => s("getitimer", [V, OutF(32), V, V, V, V]),
        37 => s("alarm", [V; 6]),
        38 => s("setitimer", [V, InF(32), OutF(32), V, V, V]),
        39 => s("getpid", [V; 6]),
        40 => s("sendfile", [V, V, IoF(8), V, V, V]),
        41 => s("socket", [V; 6]),
        42 => s("connect", [V, In(2), V, V, V, V]),
        44 => s("sendto", [V, In(2), V, V, In(5), V]),
        45 => s("recvfrom", [V, Out(2), V, V, OutF(SOCKADDR), IoF(4)]),
        48 => s("shutdown", [V; 6]),
        49 => s("bind", [V, In(2), V, V, V, V]),
        50 => s("listen", [V; 6]),
        51 => s("getsockname", [V, OutF(SOCKADDR), IoF(4), V, V, V]),
        52 => s("getpeername", [V, OutF(SOCKADDR), IoF(4), V, V, V]),
        53 => s("socketpair", [V, V, V, OutF(8), V, V]),
        54 => s("setsockopt", [V, V, V, In(4), V, V]),
        55 => s("getsockopt", [V, V, V, OutF(256), IoF(4), V]),
        61 => s("wait4", [V, OutF(4), V, OutF(STAT), V, V]),
        63 => s("uname", [OutF(390), V, V, V, V, V]),
        73 => s("flock", [V; 6]),
        74 => s("fsync", [V; 6]),
        75 => s("fdatasync", [V; 6]),
        76 => s("truncate", [Str, V, V, V, V, V]),
        77 => s("ftruncate", [V; 6]),
        78 => s("getdents", [V, Out(2), V, V, V, V]),
        79 => s("getcwd", [Out(1), V, V, V, V, V]),
        80 => s("chdir", [Str, V, V, V, V, V]),
        81 => s("fchdir", [V; 6]),
        82 => s("rename", [Str, Str, V, V, V, V]),
        83 => s("mkdir", [Str, V, V, V, V, V]),
        84 => s("rmdir", [Str, V, V, V, V, V]),
        85 => s("creat", [Str, V, V, V, V, V]),
        86 => s("link", [Str, Str, V, V, V, V]),
        87 => s("unlink", [Str, V, V, V, V, V]),
        88 => s("symlink", [Str, Str, V, V, V, V]),
        90 => s("chmod", [Str, V, V, V, V, V]),
        91 => s("fchmod", [V; 6]),
        92 => s("chown", [Str, V, V, V, V, V]),
        93 => s("fchown", [V; 6]),
        94 => s("lchown", [Str, V, V, V, V, V]),
        95 => s("umask", [V; 6]),
        96 => s("gettimeofday", [OutF(16), OutF(8), V, V, V, V]),
        97 => s("getrlimit", [V, OutF(16), V, V, V, V]),
        98 => s("getrusage", [V, OutF(144), V, V, V, V]),
        99 => s("sysinfo", [OutF(112), V, V, V, V, V]),
        100 => s("times", [OutF(32), V, V, V, V, V]),
        102 => s("getuid", [V; 6]),
        104 => s("getgid", [V; 6]),
        105 => s("setuid", [V; 6]),
        106 => s("setgid", [V; 6]),
        107 => s("geteuid", [V; 6]),
        108 => s("getegid", [V; 6]),
        109 => s("setpgid", [V; 6]),
        110 => s("getppid", [V; 6]),
        111 => s("getpgrp", [V; 6]),
        112 => s("setsid", [V; 6]),
        115 => s("getgroups", [V, OutN(4, 0), V, V, V, V]),
        118 => s("getresuid", [OutF(4), OutF(4), OutF(4), V, V, V]),
        120 => s("getresgid", [OutF(4), OutF(4), OutF(4), V, V, V]),
        121 => s("getpgid", [V; 6]),
        124 => s("getsid", [V; 6]),
        132 => s("utime", [Str, InF(16), V, V, V, V]),
        137 => s("statfs", [Str, OutF(120), V, V, V, V]),
        138 => s("fstatfs", [V, OutF(120), V, V, V, V]),
        140 => s("getpriority", [V; 6]),
        141 => s("setpriority", [V; 6]),
        143 => s("sched_getparam", [V, OutF(4), V, V, V, V]),
        145 => s("sched_getscheduler", [V; 6]),
        160 => s("setrlimit", [V, InF(16), V, V, V, V]),
        186 => s("gettid", [V; 6]),
        191 => s("getxattr", [Str, Str, Out(3), V, V, V]),
        192 => s("lgetxattr", [Str, Str, Out(3), V, V, V]),
        193 => s("fgetxattr", [V, Str, Out(3), V, V, V]),
        194 => s("listxattr", [Str, Out(2), V, V, V, V]),
        195 => s("llistxattr", [Str, Out(2), V, V, V, V]),
        196 => s("flistxattr", [V, Out(2), V, V, V, V]),
        201 => s("time", [OutF(8), V, V, V, V, V]),
        203 => s("sched_setaffinity", [V, V, In(1), V, V, V]),
        204 => s("sched_getaffinity", [V, V, Out(1), V, V, V]),
        217 => s("getdents64", [V, Out(2), V, V, V, V]),
        221 => s("fadvise64", [V; 6]),
        228 => s("clock_gettime", [V, OutF(16), V, V, V, V]),
        229 => s("clock_getres", [V, OutF(16), V, V, V, V]),
        230 => s("clock_nanosleep", [V, V, InF(16), OutF(16), V, V]),
        232 => s("epoll_wait", [V, OutN(12, 2), V, V, V, V]),
        233 => s("epoll_ctl", [V, V, V, InF(12), V, V]),
        235 => s("utimes", [Str, InF(32), V, V, V, V]),
        257 => s("openat", [V, Str, V, V, V, V]),
        258 => s("mkdirat", [V, Str, V, V, V, V]),
        260 => s("fchownat", [V, Str, V, V, V, V]),
        262 => s("newfstatat", [V, Str, OutF(STAT), V, V, V]),
        263 => s("unlinkat", [V, Str, V, V, V, V]),
        264 => s("renameat", [V, Str, V, Str, V, V]),
        265 => s("linkat", [V, Str, V, Str, V, V]),
        266 => s("symlinkat", [Str, V, Str, V, V, V]),
        268 => s("fchmodat", [V, Str, V, V, V, V]),
        269 => s("faccessat", [V, Str, V, V, V, V]),
        271 => s("ppoll", [IoN(8, 1), V, InF(16), InF(8), V, V]),
        280 => s("utimensat", [V, Str, InF(32), V, V, V]),
        281 => s("epoll_pwait", [V, OutN(12, 2), V, V, InF(8), V]),
        283 => s("timerfd_create", [V; 6]),
        284 => s("eventfd", [V; 6]),
        285 => s("fallocate", [V; 6]),
        286 => s("timerfd_settime", [V, V, InF(32), OutF(32), V, V]),
        287 => s("timerfd_gettime", [V, OutF(32), V, V, V, V]),
        290 => s("eventfd2", [V; 6]),
        291 => s("epoll_create1", [V; 6]),
        213 => s("epoll_create", [V; 6]),
        292 => s("dup3", [V; 6]),
        293 => s("pipe2", [OutF(8), V, V, V, V, V]),
        295 => s("preadv", [V; 6]),
        302 => s("prlimit64", [V, V, InF(16), OutF(16), V, V]),
        309 => s("getcpu", [OutF(4), OutF(4), V, V, V, V]),
        316 => s("renameat2", [V, Str, V, Str, V, V]),
        318 => s("getrandom", [Out(1), V, V, V, V, V]),
        319 => s("memfd_create", [Str, V, V, V, V, V]),
        326 => s("copy_file_range", [V, IoF(8), V, IoF(8), V, V]),
        332 => s("statx", [V, Str, V, V, OutF(256), V]),
        439 => s("faccessat2", [V, Str, V, V, V, V]),
        _ => None,
    }
}

/// Names of calls vmmload handles itself or refuses, for log messages.
pub fn name(nr: u64) -> &'static str {
    if let Some((n, _)) = spec(nr) {
        return n;
    }
    match nr {
        9 => "mmap",
        10 => "mprotect",
        11 => "munmap",
        12 => "brk",
        13 => "rt_sigaction",
        14 => "rt_sigprocmask",
        15 => "rt_sigreturn",
        16 => "ioctl",
        19 => "readv",
        20 => "writev",
        25 => "mremap",
        28 => "madvise",
        56 => "clone",
        57 => "fork",
        58 => "vfork",
        59 => "execve",
        60 => "exit",
        62 => "kill",
        72 => "fcntl",
        89 => "readlink",
        101 => "ptrace",
        131 => "sigaltstack",
        157 => "prctl",
        158 => "arch_prctl",
        200 => "tkill",
        202 => "futex",
        218 => "set_tid_address",
        231 => "exit_group",
        234 => "tgkill",
        267 => "readlinkat",
        273 => "set_robust_list",
        322 => "execveat",
        334 => "rseq",
        435 => "clone3",
        _ => "?",
    }
}

/// A guest-writable range that the VMM wrote on the program's behalf.
pub type Written = (u64, u64);

/// Holds translated arguments alive until the host call returns.
#[derive(Default)]
pub struct Prepared {
    /// Host-side argument values.
    pub args: [u64; 6],
    bounces: Vec<Bounce>,
    strings: Vec<std::ffi::CString>,
    /// Output ranges: (arg index, guest address, length, "length is return value").
    outs: Vec<(usize, u64, u64, bool)>,
}

struct Bounce {
    buf: Vec<u8>,
    gva: u64,
    write_back: bool,
}

fn host_of(segs: &[HostSeg]) -> Option<u64> {
    match segs {
        [one] => Some(one.ptr as u64),
        _ => None,
    }
}

impl Prepared {
    fn buffer(
        &mut self,
        mm: &Mm,
        gva: u64,
        len: u64,
        read_in: bool,
        write: bool,
    ) -> Result<u64, MmError> {
        if gva == 0 {
            return Ok(0);
        }
        if len == 0 {
            // The kernel touches nothing; pass a non-NULL value that is no
            // valid host address either.
            return Ok(1);
        }
        let segs = mm.translate(gva, len, write)?;
        if let Some(h) = host_of(&segs) {
            return Ok(h);
        }
        let buf = if read_in || write {
            mm.read_bytes(gva, len)?
        } else {
            vec![0; len as usize]
        };
        self.bounces.push(Bounce {
            buf,
            gva,
            write_back: write,
        });
        Ok(self.bounces.last().expect("pushed").buf.as_ptr() as u64)
    }

    /// Copies bounce buffers back to the guest; returns the ranges written.
    pub fn finish(self, mm: &Mm, ret: i64) -> Vec<Written> {
        for b in &self.bounces {
            if b.write_back && ret >= 0 {
                let _ = mm.write_bytes(b.gva, &b.buf);
            }
        }
        let mut w = Vec::new();
        if ret >= 0 {
            for &(_, gva, len, by_ret) in &self.outs {
                let n = if by_ret { (ret as u64).min(len) } else { len };
                if gva != 0 && n > 0 {
                    w.push((gva, n));
                }
            }
        }
        w
    }
}

/// Translates guest arguments per `spec`.
pub fn prepare(mm: &Mm, spec: &[Arg; 6], a: &[u64; 6]) -> Result<Prepared, MmError> {
    let mut p = Prepared {
        args: *a,
        ..Default::default()
    };
    let mut clamp: Option<(usize, u64)> = None;
    for (i, kind) in spec.iter().enumerate() {
        let g = a[i];
        p.args[i] = match *kind {
            V => g,
            Str => {
                if g == 0 {
                    0
                } else {
                    let bytes = mm.read_cstr(g, 4096).map_err(|e| {
                        if e == MmError::Inval {
                            MmError::Fault
                        } else {
                            e
                        }
                    })?;
                    let c = std::ffi::CString::new(bytes).map_err(|_| MmError::Inval)?;
                    let ptr = c.as_ptr() as u64;
                    p.strings.push(c);
                    ptr
                }
            }
            In(n) => p.buffer(mm, g, a[n as usize], true, false)?,
            Out(n) => {
                // Like the kernel, accept a buffer that is only partly
                // writable: the call can fill the valid prefix.
                let want = a[n as usize];
                let len = if g == 0 {
                    0
                } else {
                    mm.accessible_prefix(g, want, true)
                };
                if g != 0 && want > 0 && len == 0 {
                    return Err(MmError::Fault);
                }
                clamp = Some((n as usize, len));
                p.outs.push((i, g, len, true));
                p.buffer(mm, g, len, false, true)?
            }
            InF(n) => p.buffer(mm, g, n as u64, true, false)?,
            OutF(n) => {
                p.outs.push((i, g, n as u64, false));
                p.buffer(mm, g, n as u64, true, true)?
            }
            IoF(n) => {
                p.outs.push((i, g, n as u64, false));
                p.buffer(mm, g, n as u64, true, true)?
            }
            IoN(sz, n) | OutN(sz, n) => {
                let len = (sz as u64)
                    .checked_mul(a[n as usize])
                    .ok_or(MmError::Inval)?;
                if len > (64 << 20) {
                    return Err(MmError::Inval);
                }
                p.outs.push((i, g, len, false));
                p.buffer(mm, g, len, true, true)?
            }
        };
    }
    if let Some((n, len)) = clamp {
        p.args[n] = len;
    }
    Ok(p)
}

/// Runs a host system call and returns the raw result (negative errno on error).
pub fn host_syscall(nr: u64, a: &[u64; 6]) -> i64 {
    // SAFETY: every pointer argument was translated into guest RAM or a live
    // host buffer by `prepare`; the call list excludes calls that change
    // vmmload's own memory map or control flow.
    let r = unsafe { libc::syscall(nr as libc::c_long, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r == -1 {
        -(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO) as i64)
    } else {
        r
    }
}

/// Builds a host iovec array for a guest iovec array, splitting entries that
/// are not host-contiguous. `write` is true when the host will write (readv).
pub fn iovecs(
    mm: &Mm,
    iov: u64,
    cnt: u64,
    write: bool,
) -> Result<(Vec<libc::iovec>, Vec<Written>), MmError> {
    if cnt > 1024 {
        return Err(MmError::Inval);
    }
    let raw = mm.read_bytes(iov, cnt * 16)?;
    let mut out = Vec::new();
    let mut ranges = Vec::new();
    for e in raw.chunks_exact(16) {
        let base = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(e[8..].try_into().expect("8 bytes"));
        if len == 0 {
            continue;
        }
        if len > isize::MAX as u64 {
            return Err(MmError::Inval);
        }
        let len = if write {
            mm.accessible_prefix(base, len, true)
        } else {
            len
        };
        if len == 0 {
            return Err(MmError::Fault);
        }
        for sgm in mm.translate(base, len, write)? {
            out.push(libc::iovec {
                iov_base: sgm.ptr as *mut libc::c_void,
                iov_len: sgm.len,
            });
        }
        ranges.push((base, len));
    }
    if out.len() > 1024 {
        return Err(MmError::Inval);
    }
    Ok((out, ranges))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::{VmaKind, PROT_R, PROT_W};
    use crate::ram::{GuestRam, PAGE};
    use std::sync::Arc;

    fn mm() -> Mm {
        Mm::new(Arc::new(GuestRam::new(32 << 20).unwrap())).unwrap()
    }

    #[test]
    fn relayed_write_reads_guest_buffer_and_bad_pointer_gives_efault() {
        let mut m = mm();
        let a = m
            .mmap_anon(0, PAGE, PROT_R | PROT_W, false, VmaKind::Anon)
            .unwrap();
        m.write_bytes(a, b"ok").unwrap();
        let (_, sp) = spec(1).unwrap();
        let mut fds = [0i32; 2];
        // SAFETY: pipe writes two fds into our array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let p = prepare(&m, &sp, &[fds[1] as u64, a, 2, 0, 0, 0]).unwrap();
        assert_eq!(host_syscall(1, &p.args), 2);
        assert_eq!(
            prepare(&m, &sp, &[fds[1] as u64, a + PAGE, 2, 0, 0, 0]).err(),
            Some(MmError::Fault)
        );
        assert_eq!(
            prepare(&m, &sp, &[fds[1] as u64, 0xffff_ff80_0000_5000, 2, 0, 0, 0]).err(),
            Some(MmError::Fault)
        );
        // SAFETY: closing the fds we opened.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn out_buffer_is_clamped_to_writable_prefix() {
        let mut m = mm();
        let a = m
            .mmap_anon(0, PAGE, PROT_R | PROT_W, false, VmaKind::Anon)
            .unwrap();
        let (_, sp) = spec(318).unwrap(); // getrandom(buf, len, flags)
        let p = prepare(&m, &sp, &[a + PAGE - 16, 1 << 20, 0, 0, 0, 0]).unwrap();
        assert_eq!(p.args[1], 16);
        let r = host_syscall(318, &p.args);
        assert_eq!(r, 16);
        assert_eq!(p.finish(&m, r), vec![(a + PAGE - 16, 16)]);
    }

    #[test]
    fn strings_must_be_terminated_inside_mapped_memory() {
        let mut m = mm();
        let a = m
            .mmap_anon(0, PAGE, PROT_R | PROT_W, false, VmaKind::Anon)
            .unwrap();
        m.write_bytes(a + PAGE - 3, b"abc").unwrap();
        let (_, sp) = spec(21).unwrap(); // access(path, mode)
        assert_eq!(
            prepare(&m, &sp, &[a + PAGE - 3, 0, 0, 0, 0, 0]).err(),
            Some(MmError::Fault)
        );
    }

    /// Fuzz-style: every relay-table row with random argument values. The
    /// translation must never panic, and every pointer argument handed to
    /// the host is NULL, the harmless 1, inside guest RAM, or a buffer owned
    /// by `Prepared` (never the raw guest value outside RAM).
    #[test]
    fn fuzz_argument_translation_for_every_table_row() {
        let mut m = mm();
        let a = m
            .mmap_anon(0, 8 * PAGE, PROT_R | PROT_W, false, VmaKind::Anon)
            .unwrap();
        m.write_bytes(a, b"/tmp\0").unwrap();
        m.munmap(a + 4 * PAGE, PAGE).unwrap();
        let (base, size) = (m.ram.host_base(), m.ram.size());
        let interesting = [
            0,
            1,
            a,
            a + PAGE - 3,
            a + 4 * PAGE,
            a + 7 * PAGE + 4000,
            0xffff_ff80_0000_5000,
            0x0000_9000_0000_0000,
            u64::MAX,
            base,
            4096,
            1 << 40,
        ];
        let mut seed = 0x1234_5678_9abc_def1u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for nr in 0..460u64 {
            let Some((_, sp)) = spec(nr) else { continue };
            for _ in 0..300 {
                let mut args = [0u64; 6];
                for v in &mut args {
                    *v = interesting[(next() % interesting.len() as u64) as usize];
                }
                let Ok(p) = prepare(&m, &sp, &args) else {
                    continue;
                };
                for (i, k) in sp.iter().enumerate() {
                    if *k == Arg::V {
                        continue;
                    }
                    let h = p.args[i];
                    let in_ram = h >= base && h < base + size;
                    let owned = p.bounces.iter().any(|b| b.buf.as_ptr() as u64 == h)
                        || p.strings.iter().any(|c| c.as_ptr() as u64 == h);
                    assert!(
                        h <= 1 || in_ram || owned,
                        "nr {nr} arg {i}: {h:#x} from {:#x}",
                        args[i]
                    );
                }
            }
        }
    }
}
