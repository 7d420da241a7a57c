//! System-call dispatch: calls that touch vmmload's own state (memory map,
//! threads, signals, FS base, exit) are emulated here; everything else goes
//! through the relay table in `relay.rs`. Faults become signals.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use kvm_bindings::kvm_regs;
use kvm_ioctls::VcpuFd;
use log::debug;

use crate::mm::{Mm, MmError, VmaKind, PROT_R, PROT_W, USER_END};
use crate::process::{Ending, Process, Thread, VcpuStart};
use crate::ram::PAGE;
use crate::relay::{self, Arg};
use crate::shm::Source;

/// What the vCPU loop does after a system call.
#[derive(Debug)]
pub enum Action {
    /// Return this value in RAX.
    Return(i64),
    /// This thread exits.
    ThreadExit,
    /// The process is ending; stop this vCPU.
    Stop,
    /// The registers were set by the call itself (rt_sigreturn).
    Resume,
}

/// What a new thread must do when it starts.
#[derive(Debug, Default, Clone)]
pub struct ThreadSetup {
    /// CLONE_CHILD_CLEARTID address.
    pub clear_child_tid: u64,
    /// CLONE_CHILD_SETTID address.
    pub set_child_tid: u64,
    /// CLONE_PARENT_SETTID address.
    pub parent_tid: u64,
    /// Inherited signal mask.
    pub sigmask: u64,
}

fn err(e: i32) -> Action {
    Action::Return(-(e as i64))
}

fn mmerr(e: MmError) -> Action {
    err(e.errno())
}

/// Signal names for messages.
pub fn signame(sig: i32) -> &'static str {
    match sig {
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        9 => "SIGKILL",
        _ => "signal",
    }
}

/// Writes the new tid where clone asked for it.
pub fn thread_started(p: &Process, t: &Thread, s: &ThreadSetup) {
    let mm = p.mm.lock().expect("mm lock");
    for a in [s.set_child_tid, s.parent_tid] {
        if a != 0 {
            let _ = mm.write_bytes(a, &(t.tid as u32).to_le_bytes());
        }
    }
}

/// Handles one system call.
pub fn handle(p: &Arc<Process>, vcpu: &mut VcpuFd, t: &mut Thread, r: &kvm_regs) -> Action {
    let nr = r.rax;
    let a = [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9];
    let act = dispatch(p, vcpu, t, nr, &a, r);
    if crate::fastcalls::changes_ids(nr) {
        crate::fastcalls::refresh_ids(&p.mm.lock().expect("mm lock"));
    }
    if log::log_enabled!(log::Level::Trace) {
        log::trace!(
            "[{}] {}({:#x}, {:#x}, {:#x}, {:#x}, {:#x}, {:#x}) = {:?}",
            t.tid,
            relay::name(nr),
            a[0],
            a[1],
            a[2],
            a[3],
            a[4],
            a[5],
            act
        );
    }
    act
}

fn dispatch(
    p: &Arc<Process>,
    vcpu: &mut VcpuFd,
    t: &mut Thread,
    nr: u64,
    a: &[u64; 6],
    r: &kvm_regs,
) -> Action {
    let a = *a;
    {
        let mm = p.mm.lock().expect("mm lock");
        let mut cache = p.cache.lock().expect("cache lock");
        if nr == 0
            && *p
                .backend
                .get()
                .unwrap_or(&crate::process::Backend::Standard)
                == crate::process::Backend::Pvm
        {
            if let Some((ret, written)) = cache.read(&mm, a[0], a[1], a[2]) {
                drop(cache);
                drop(mm);
                if let Some(w) = written {
                    p.tracker.note_vmm_writes(&[w]);
                }
                return Action::Return(ret);
            }
        } else if nr == 56 && a[0] & 0x1_0000 != 0 {
            // A new thread shares descriptors: no read-ahead from now on.
            cache.disable(&mm);
        } else {
            cache.before_syscall(&mm, nr, &a);
        }
    }
    if crate::fds::first_arg_is_fd(nr) && crate::fds::is_private(a[0])
        || matches!(nr, 33 | 292) && crate::fds::is_private(a[1])
        || nr == 9 && a[3] & 0x20 == 0 && crate::fds::is_private(a[4])
    {
        return err(libc::EBADF);
    }
    match nr {
        436 => Action::Return(crate::fds::close_range(a[0], a[1], a[2])),
        9 => mmap(p, &a),
        10 => {
            let mut mm = p.mm.lock().expect("mm lock");
            match mm.mprotect(a[0], a[1], a[2] as u32 & 7) {
                Ok(()) => Action::Return(0),
                Err(e) => mmerr(e),
            }
        }
        11 => {
            let mut mm = p.mm.lock().expect("mm lock");
            match mm.munmap(a[0], a[1]) {
                Ok(()) => Action::Return(0),
                Err(e) => mmerr(e),
            }
        }
        12 => Action::Return(p.mm.lock().expect("mm lock").brk(a[0]) as i64),
        13 => crate::signals::calls::sigaction(p, &a),
        14 => crate::signals::calls::sigprocmask(p, t, &a),
        15 => crate::signals::calls::sigreturn(p, vcpu, t, r),
        34 => crate::signals::calls::sigsuspend(p, t, &a, false),
        128 => crate::signals::calls::sigtimedwait(p, t, &a),
        129 | 297 => crate::signals::calls::sigqueueinfo(p, nr, &a),
        130 => crate::signals::calls::sigsuspend(p, t, &a, true),
        270 | 271 | 281 | 441 => crate::signals::calls::masked_wait(p, t, nr, &a),
        222..=226 => crate::signals::calls::timer(p, nr, &a),
        16 => ioctl(p, &a),
        19 | 20 | 295 | 296 => rwv(p, nr, &a),
        25 => {
            if a[3] & !3 != 0 || a[3] & 2 != 0 {
                p.log_once("mremap with MREMAP_FIXED is not supported (EINVAL)".into());
                return err(libc::EINVAL);
            }
            let mut mm = p.mm.lock().expect("mm lock");
            match mm.mremap(a[0], a[1], a[2], a[3] & 1 != 0) {
                Ok(v) => Action::Return(v as i64),
                Err(e) => mmerr(e),
            }
        }
        26 | 149 | 150 | 151 | 152 => Action::Return(0),
        27 => mincore(p, &a),
        28 => madvise(p, &a),
        56 => clone(p, vcpu, t, r),
        57 | 58 => crate::forkexec::fork(p, vcpu, t, r, 0),
        59 => crate::signals::host::around_exec(p, || crate::forkexec::execve(p, &a)),
        322 => crate::signals::host::around_exec(p, || crate::forkexec::execveat(p, &a)),
        2 | 257 => open(p, nr, &a),
        60 => {
            p.exit_code.store(a[0] as i32 & 0xff, Ordering::SeqCst);
            Action::ThreadExit
        }
        231 => {
            p.end(Ending::Exit(a[0] as i32 & 0xff));
            Action::Stop
        }
        62 | 200 | 234 => crate::signals::calls::kill(p, nr, &a),
        72 => {
            let cmd = a[1] as i32;
            let k = match cmd {
                5 | 6 | 7 | 36 | 37 | 38 => Arg::IoF(32),
                15 | 16 => Arg::IoF(8),
                _ => Arg::V,
            };
            relay_with(p, 72, &[Arg::V, Arg::V, k, Arg::V, Arg::V, Arg::V], &a)
        }
        89 | 267 => readlink(p, nr, &a),
        131 => crate::signals::calls::sigaltstack(p, t, r),
        127 => crate::signals::calls::sigpending(p, t, &a),
        157 => prctl(p, &a),
        158 => arch_prctl(p, vcpu, &a),
        202 => crate::futex::futex(p, &a),
        218 => {
            t.clear_child_tid = a[0];
            Action::Return(t.tid as i64)
        }
        273 => Action::Return(0),
        334 | 435 | 425 | 426 | 427 => {
            debug!("{} → ENOSYS", relay::name(nr));
            err(libc::ENOSYS)
        }
        _ => match relay::spec(nr) {
            Some((_, spec)) => relay_with(p, nr, &spec, &a),
            None => {
                p.log_once(format!(
                    "unsupported system call {nr} ({}) returns ENOSYS",
                    relay::name(nr)
                ));
                err(libc::ENOSYS)
            }
        },
    }
}

/// Relays a call whose arguments are all plain values.
pub fn relay_plain(p: &Process, nr: u64, a: &[u64; 6]) -> Action {
    relay_with(p, nr, &[Arg::V; 6], a)
}

/// Relays a call with an explicit argument description.
pub fn relay_spec(p: &Process, nr: u64, spec: &[Arg; 6], a: &[u64; 6]) -> Action {
    relay_with(p, nr, spec, a)
}

/// Translates, relays, copies back and records the VMM's writes.
fn relay_with(p: &Process, nr: u64, spec: &[Arg; 6], a: &[u64; 6]) -> Action {
    let prep = {
        let mm = p.mm.lock().expect("mm lock");
        match relay::prepare(&mm, spec, a) {
            Ok(x) => x,
            Err(e) => return mmerr(e),
        }
    };
    let ret = relay::host_syscall(nr, &prep.args);
    let written = {
        let mm = p.mm.lock().expect("mm lock");
        prep.finish(&mm, ret)
    };
    p.tracker.note_vmm_writes(&written);
    if ret == -(libc::EPIPE as i64) && (nr == 1 || nr == 18 || nr == 20 || nr == 44) {
        return sigpipe(p, ret);
    }
    Action::Return(ret)
}

/// A write hit a closed pipe: SIGPIPE for the calling thread.
fn sigpipe(p: &Process, ret: i64) -> Action {
    crate::signals::calls::sigpipe(p, ret)
}

fn rwv(p: &Process, nr: u64, a: &[u64; 6]) -> Action {
    let write_to_guest = nr == 19 || nr == 295;
    let (iov, ranges) = {
        let mm = p.mm.lock().expect("mm lock");
        match relay::iovecs(&mm, a[1], a[2], write_to_guest) {
            Ok(x) => x,
            Err(e) => return mmerr(e),
        }
    };
    let args = [
        a[0],
        iov.as_ptr() as u64,
        iov.len() as u64,
        a[3],
        a[4],
        a[5],
    ];
    let ret = relay::host_syscall(nr, &args);
    if write_to_guest && ret > 0 {
        let mut left = ret as u64;
        let mut w = Vec::new();
        for (g, l) in ranges {
            if left == 0 {
                break;
            }
            let n = l.min(left);
            w.push((g, n));
            left -= n;
        }
        p.tracker.note_vmm_writes(&w);
    }
    if ret == -(libc::EPIPE as i64) && nr == 20 {
        return sigpipe(p, ret);
    }
    Action::Return(ret)
}

fn mmap(p: &Process, a: &[u64; 6]) -> Action {
    let (addr, len, prot, flags, fd, off) = (a[0], a[1], a[2] as u32 & 7, a[3], a[4] as i32, a[5]);
    const MAP_SHARED: u64 = 1;
    const MAP_FIXED: u64 = 0x10;
    const MAP_ANON: u64 = 0x20;
    const MAP_FIXED_NOREPLACE: u64 = 0x10_0000;
    if len == 0 || off % PAGE != 0 || flags & 3 == 0 {
        return err(libc::EINVAL);
    }
    if flags & 0x40000 != 0 {
        p.log_once("MAP_HUGETLB is not supported (ENOMEM)".into());
        return err(libc::ENOMEM);
    }
    let fixed = flags & MAP_FIXED != 0;
    let mut mm = p.mm.lock().expect("mm lock");
    if flags & MAP_FIXED_NOREPLACE != 0 {
        let end = match addr.checked_add(len) {
            Some(e) => e,
            None => return err(libc::EINVAL),
        };
        if !mm.is_free(addr & !(PAGE - 1), end) {
            return err(libc::EEXIST);
        }
    }
    // MAP_SHARED or MAP_SHARED_VALIDATE.
    let shared = flags & 3 != 2;
    if flags & MAP_ANON != 0 {
        if shared {
            return shared_map(&mut mm, addr, len, prot, fixed, Source::Anon, VmaKind::Anon);
        }
        return match mm.mmap_anon(addr, len, prot, fixed, VmaKind::Anon) {
            Ok(v) => Action::Return(v as i64),
            Err(e) => mmerr(e),
        };
    }
    // File mapping: a private copy of the file contents.
    // SAFETY: fstat on a guest-supplied fd number into our own struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return err(libc::EBADF);
    }
    let ftype = st.st_mode & libc::S_IFMT;
    if ftype != libc::S_IFREG && ftype != libc::S_IFBLK {
        if ftype == libc::S_IFCHR && st.st_rdev == libc::makedev(1, 5) {
            // /dev/zero
            if shared {
                return shared_map(&mut mm, addr, len, prot, fixed, Source::Anon, VmaKind::Anon);
            }
            return match mm.mmap_anon(addr, len, prot, fixed, VmaKind::Anon) {
                Ok(v) => Action::Return(v as i64),
                Err(e) => mmerr(e),
            };
        }
        return err(libc::ENODEV);
    }
    let path = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| format!("fd:{fd}"));
    if flags & MAP_SHARED != 0 {
        if crate::shm::writable_fd(fd) {
            let src = Source::File(fd, off);
            return shared_map(&mut mm, addr, len, prot, fixed, src, VmaKind::File(path));
        }
        if prot & PROT_W != 0 {
            return err(libc::EACCES);
        }
        // Read-only: a private copy reads the same (see shm.rs).
    }
    let start = match mm.mmap_anon(addr, len, PROT_R | PROT_W, fixed, VmaKind::File(path)) {
        Ok(v) => v,
        Err(e) => return mmerr(e),
    };
    let fsize = st.st_size as u64;
    let n = if off >= fsize {
        0
    } else {
        (fsize - off).min(len)
    };
    let mut done = 0u64;
    while done < n {
        let segs = match mm.translate(start + done, n - done, true) {
            Ok(s) => s,
            Err(e) => return mmerr(e),
        };
        for sgm in segs {
            // SAFETY: segment inside guest RAM; pread writes at most its length.
            let r = unsafe {
                libc::pread(
                    fd,
                    sgm.ptr as *mut libc::c_void,
                    sgm.len,
                    (off + done) as i64,
                )
            };
            if r <= 0 {
                let e = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                if r < 0 {
                    let _ = mm.munmap(start, len);
                    return err(e);
                }
                done = n;
                break;
            }
            done += r as u64;
            if (r as usize) < sgm.len {
                break;
            }
        }
    }
    if prot != PROT_R | PROT_W {
        if let Err(e) = mm.mprotect(start, len, prot) {
            return mmerr(e);
        }
    }
    Action::Return(start as i64)
}

fn shared_map(
    mm: &mut Mm,
    addr: u64,
    len: u64,
    prot: u32,
    fixed: bool,
    src: Source,
    kind: VmaKind,
) -> Action {
    match crate::shm::map(mm, addr, len, prot, fixed, src, kind) {
        Ok(v) => Action::Return(v as i64),
        Err(e) => err(e),
    }
}

fn madvise(p: &Process, a: &[u64; 6]) -> Action {
    const MADV_DONTNEED: u64 = 4;
    if !a[0].is_multiple_of(PAGE) {
        return err(libc::EINVAL);
    }
    if a[2] != MADV_DONTNEED {
        return Action::Return(0);
    }
    let mm = p.mm.lock().expect("mm lock");
    let end = a[0].saturating_add(a[1]).min(USER_END);
    let mut va = a[0];
    while va < end {
        let anon = mm
            .vma_at(va)
            .is_some_and(|v| !matches!(v.kind, VmaKind::File(_)));
        let pte = mm.pte(va);
        if anon && pte & crate::mm::PTE_P != 0 {
            mm.ram.discard(pte & crate::mm::PTE_ADDR, PAGE);
        }
        va += PAGE;
    }
    Action::Return(0)
}

fn mincore(p: &Process, a: &[u64; 6]) -> Action {
    if !a[0].is_multiple_of(PAGE) {
        return err(libc::EINVAL);
    }
    let mm = p.mm.lock().expect("mm lock");
    let pages = a[1].div_ceil(PAGE);
    if pages > (1 << 24) {
        return err(libc::ENOMEM);
    }
    let mut v = Vec::with_capacity(pages as usize);
    for i in 0..pages {
        if mm.vma_at(a[0] + i * PAGE).is_none() {
            return err(libc::ENOMEM);
        }
        v.push(1u8);
    }
    match mm.write_bytes(a[2], &v) {
        Ok(()) => Action::Return(0),
        Err(e) => mmerr(e),
    }
}

fn ioctl(p: &Process, a: &[u64; 6]) -> Action {
    let k = match a[1] as u32 {
        0x5401 => Arg::OutF(60),                     // TCGETS
        0x5402..=0x5404 => Arg::InF(60),             // TCSETS*
        0x5413 => Arg::OutF(8),                      // TIOCGWINSZ
        0x5414 => Arg::InF(8),                       // TIOCSWINSZ
        0x540f | 0x5429 => Arg::OutF(4),             // TIOCGPGRP, TIOCGSID
        0x5410 | 0x5421 | 0x5452 => Arg::InF(4),     // TIOCSPGRP, FIONBIO, FIOASYNC
        0x541b => Arg::OutF(4),                      // FIONREAD
        0x5450 | 0x5451 | 0x540b | 0x540a => Arg::V, // FIONCLEX FIOCLEX TCFLSH TCXONC
        0x8008_6601 => Arg::OutF(8),                 // FS_IOC_GETFLAGS
        _ => {
            p.log_once(format!(
                "unsupported ioctl request {:#x} returns ENOTTY",
                a[1]
            ));
            return err(libc::ENOTTY);
        }
    };
    relay_with(p, 16, &[Arg::V, Arg::V, k, Arg::V, Arg::V, Arg::V], a)
}

/// open/openat: the program's image for its `/proc/self/exe`.
fn open(p: &Process, nr: u64, a: &[u64; 6]) -> Action {
    let (path_at, flags, mode) = if nr == 2 {
        (a[0], a[1], a[2])
    } else {
        (a[1], a[2], a[3])
    };
    let is_self =
        p.mm.lock()
            .expect("mm lock")
            .read_cstr(path_at, 4096)
            .is_ok_and(|path| crate::selfexe::names_self_exe(&path));
    if !is_self {
        let spec = relay::spec(nr).map_or([Arg::V; 6], |(_, s)| s);
        return relay_with(p, nr, &spec, a);
    }
    let Ok(exe) = std::ffi::CString::new(p.exe.lock().expect("exe lock").clone()) else {
        return err(libc::ENOENT);
    };
    // SAFETY: openat on a NUL-terminated path with the program's flags.
    let fd = unsafe {
        libc::openat(
            libc::AT_FDCWD,
            exe.as_ptr(),
            flags as i32,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOENT));
    }
    Action::Return(fd as i64)
}

fn readlink(p: &Process, nr: u64, a: &[u64; 6]) -> Action {
    let (path_at, buf_at, len_at) = if nr == 89 { (0, 1, 2) } else { (1, 2, 3) };
    let path = match p.mm.lock().expect("mm lock").read_cstr(a[path_at], 4096) {
        Ok(s) => s,
        Err(_) => return err(libc::EFAULT),
    };
    if crate::selfexe::names_self_exe(&path) {
        let exe = p.exe.lock().expect("exe lock").clone().into_bytes();
        let n = exe.len().min(a[len_at] as usize);
        let mm = p.mm.lock().expect("mm lock");
        return match mm.write_bytes(a[buf_at], &exe[..n]) {
            Ok(()) => Action::Return(n as i64),
            Err(e) => mmerr(e),
        };
    }
    let spec = if nr == 89 {
        [Arg::Str, Arg::Out(2), Arg::V, Arg::V, Arg::V, Arg::V]
    } else {
        [Arg::V, Arg::Str, Arg::Out(3), Arg::V, Arg::V, Arg::V]
    };
    relay_with(p, nr, &spec, a)
}

fn prctl(p: &Process, a: &[u64; 6]) -> Action {
    match a[0] {
        15 => relay_with(
            p,
            157,
            &[Arg::V, Arg::InF(16), Arg::V, Arg::V, Arg::V, Arg::V],
            a,
        ),
        16 => relay_with(
            p,
            157,
            &[Arg::V, Arg::OutF(16), Arg::V, Arg::V, Arg::V, Arg::V],
            a,
        ),
        1 | 3 | 4 | 38 | 39 => relay_with(p, 157, &[Arg::V; 6], a),
        0x5356_4d41 => err(libc::EINVAL),
        o => {
            p.log_once(format!("prctl option {o} is not supported (EINVAL)"));
            err(libc::EINVAL)
        }
    }
}

fn arch_prctl(p: &Process, vcpu: &mut VcpuFd, a: &[u64; 6]) -> Action {
    let mut s = match vcpu.get_sregs() {
        Ok(s) => s,
        Err(_) => return err(libc::EIO),
    };
    match a[0] {
        0x1001 | 0x1002 => {
            if a[1] >= USER_END {
                return err(libc::EPERM);
            }
            if a[0] == 0x1002 {
                s.fs.base = a[1];
            } else {
                s.gs.base = a[1];
            }
            match vcpu.set_sregs(&s) {
                Ok(()) => Action::Return(0),
                Err(_) => err(libc::EIO),
            }
        }
        0x1003 | 0x1004 => {
            let v = if a[0] == 0x1003 { s.fs.base } else { s.gs.base };
            match p
                .mm
                .lock()
                .expect("mm lock")
                .write_bytes(a[1], &v.to_le_bytes())
            {
                Ok(()) => Action::Return(0),
                Err(e) => mmerr(e),
            }
        }
        _ => err(libc::EINVAL),
    }
}

fn clone(p: &Arc<Process>, vcpu: &mut VcpuFd, t: &Thread, r: &kvm_regs) -> Action {
    const CLONE_VM: u64 = 0x100;
    const CLONE_VFORK: u64 = 0x4000;
    const CLONE_THREAD: u64 = 0x10000;
    const CLONE_SETTLS: u64 = 0x80000;
    const CLONE_PARENT_SETTID: u64 = 0x10_0000;
    const CLONE_CHILD_CLEARTID: u64 = 0x20_0000;
    const CLONE_CHILD_SETTID: u64 = 0x100_0000;
    let flags = r.rdi;
    if flags & CLONE_THREAD == 0 || flags & CLONE_VFORK != 0 {
        if flags & CLONE_VM != 0 && flags & CLONE_VFORK == 0 {
            p.log_once(
                "clone(CLONE_VM) without CLONE_THREAD runs as fork (memory not shared)".into(),
            );
        }
        return crate::forkexec::fork(p, vcpu, t, r, flags);
    }
    if flags & CLONE_VM == 0 {
        return err(libc::EINVAL);
    }
    let s = match vcpu.get_sregs() {
        Ok(s) => s,
        Err(_) => return err(libc::EAGAIN),
    };
    let mut regs = *r;
    regs.rax = 0;
    if r.rsi != 0 {
        regs.rsp = r.rsi;
    }
    regs.rip = r.rcx;
    regs.rflags = r.r11 | 2;
    let start = VcpuStart {
        regs,
        fs_base: if flags & CLONE_SETTLS != 0 {
            r.r8
        } else {
            s.fs.base
        },
        gs_base: s.gs.base,
    };
    let child = match p.create_vcpu(&start) {
        Ok(v) => v,
        Err(e) => {
            p.log_once(format!("cannot create a vCPU for a new thread: {e}"));
            return err(libc::EAGAIN);
        }
    };
    let setup = ThreadSetup {
        clear_child_tid: if flags & CLONE_CHILD_CLEARTID != 0 {
            r.r10
        } else {
            0
        },
        set_child_tid: if flags & CLONE_CHILD_SETTID != 0 {
            r.r10
        } else {
            0
        },
        parent_tid: if flags & CLONE_PARENT_SETTID != 0 {
            r.rdx
        } else {
            0
        },
        sigmask: t.sigmask,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    p.spawn(child, setup, tx);
    match rx.recv() {
        Ok(tid) => Action::Return(tid as i64),
        Err(_) => err(libc::EAGAIN),
    }
}

/// Reads guest memory ignoring the user bit (exception frames).
fn peek_u64(mm: &Mm, va: u64) -> Option<u64> {
    let pte = mm.pte(va);
    if pte & crate::mm::PTE_P == 0 || !va.is_multiple_of(8) {
        return None;
    }
    let mut b = [0u8; 8];
    mm.ram
        .read((pte & crate::mm::PTE_ADDR) + (va & (PAGE - 1)), &mut b);
    Some(u64::from_le_bytes(b))
}

/// A page fault in a fast path of the PVM stub while storing to a
/// program-supplied pointer (read-cache copy, clock_gettime, gettimeofday,
/// time): undo the call and return EFAULT, as Linux would. `sp` points at
/// the exception frame (after the error code).
fn stub_store_fault(p: &Process, vcpu: &mut VcpuFd, regs: &kvm_regs, sp: u64, off: u64) -> bool {
    let mm = p.mm.lock().expect("mm lock");
    let Some(user_rsp) = peek_u64(&mm, sp + 24) else {
        return false;
    };
    let Ok(saved) = mm.read_bytes(user_rsp, 40) else {
        return false;
    };
    let w = |i: usize| u64::from_le_bytes(saved[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    if off == crate::machine::STUB_COPY_OFF {
        p.cache.lock().expect("cache lock").unconsume(&mm, regs.rax);
    }
    drop(mm);
    let mut r = *regs;
    r.rax = (-(libc::EFAULT as i64)) as u64;
    r.rdx = w(0);
    r.rdi = w(1);
    r.rsi = w(2);
    r.rcx = w(3);
    r.r11 = w(4);
    r.rsp = user_rsp + 40 + 128;
    r.rip = w(3);
    r.rflags = w(4) | 2;
    let Ok(mut s) = vcpu.get_sregs() else {
        return false;
    };
    let fs = s.fs.base;
    let gs = s.gs.base;
    s = crate::machine::user_sregs(s, s.cr3, fs, s.tr.base);
    s.gs.base = gs;
    vcpu.set_sregs(&s).is_ok() && vcpu.set_regs(&r).is_ok()
}

/// An exception reached the guest IDT: run the program's handler for the
/// signal Linux would send, or end the run as its default action would.
/// Returns true if the vCPU may continue.
pub fn exception(p: &Process, vcpu: &mut VcpuFd, t: &mut Thread, v: u8) -> bool {
    let regs = match vcpu.get_regs() {
        Ok(r) => r,
        Err(e) => {
            p.end(Ending::Error(format!(
                "exception {v}: cannot read registers: {e}"
            )));
            return false;
        }
    };
    let cr2 = vcpu.get_sregs().map(|s| s.cr2).unwrap_or(0);
    let mm = p.mm.lock().expect("mm lock");
    let mut sp = regs.rsp;
    let code = if crate::machine::has_error_code(v) {
        let c = peek_u64(&mm, sp).unwrap_or(0);
        sp += 8;
        Some(c)
    } else {
        None
    };
    let rip = peek_u64(&mm, sp).unwrap_or(0);
    let cs = peek_u64(&mm, sp + 8).unwrap_or(0);
    let user_flags = peek_u64(&mm, sp + 16).unwrap_or(0x202);
    let user_rsp = peek_u64(&mm, sp + 24).unwrap_or(0);
    drop(mm);
    let off = rip.wrapping_sub(crate::machine::STUB_VA);
    if v == 14
        && crate::machine::STUB_USER_STORE_RANGES
            .iter()
            .any(|&(lo, hi)| off >= lo && off < hi)
        && stub_store_fault(p, vcpu, &regs, sp, off)
    {
        return true;
    }
    let (sig, what) = match v {
        0 => (8, "divide error".to_string()),
        1 | 3 => (5, "breakpoint/debug trap".to_string()),
        4 => (11, "overflow".to_string()),
        5 => (11, "bound range exceeded".to_string()),
        6 => (4, "invalid opcode".to_string()),
        7 => (8, "device not available".to_string()),
        13 => (
            11,
            format!(
                "general protection fault (error code {:#x})",
                code.unwrap_or(0)
            ),
        ),
        14 => {
            let c = code.unwrap_or(0);
            let kind = if c & 16 != 0 {
                "instruction fetch"
            } else if c & 2 != 0 {
                "write"
            } else {
                "read"
            };
            let why = if c & 1 != 0 {
                "protection violation"
            } else {
                "not mapped"
            };
            (
                11,
                format!("page fault: {kind} at address {cr2:#x} ({why})"),
            )
        }
        16 | 19 => (8, "floating-point exception".to_string()),
        17 => (7, "alignment check".to_string()),
        12 => (7, "stack fault".to_string()),
        _ => (11, format!("exception vector {v}")),
    };
    let stub = crate::machine::STUB_VA..crate::machine::STUB_VA + PAGE;
    if cs & 3 == 0 || stub.contains(&rip) {
        // A fault in vmmload's own stub is not the program's to handle.
        p.end(Ending::Signal(
            sig,
            format!("{what} in vmmload's stub at rip {rip:#x}"),
        ));
        return false;
    }
    let err_code = code.unwrap_or(0);
    let info = crate::signals::SigInfo::fault(
        sig,
        fault_code(v, err_code),
        match v {
            14 => cr2,
            13 | 3 | 1 | 4 | 5 | 12 => 0,
            _ => rip,
        },
    );
    let mut user = regs;
    user.rip = rip;
    user.rflags = user_flags;
    user.rsp = user_rsp;
    let ctx = crate::signals::FaultCtx {
        trapno: v as u64,
        err: err_code,
        cr2: if v == 14 { cr2 } else { 0 },
    };
    crate::signals::fault(
        p,
        vcpu,
        t,
        info,
        user,
        ctx,
        format!("{what} at rip {rip:#x}"),
    )
}

/// si_code Linux gives the signal of exception `v` (error code `err`).
fn fault_code(v: u8, err: u64) -> i32 {
    match v {
        // SEGV_ACCERR for a protection violation, SEGV_MAPERR otherwise.
        14 => {
            if err & 1 != 0 {
                2
            } else {
                1
            }
        }
        0 => 1,       // FPE_INTDIV
        6 => 2,       // ILL_ILLOPN
        17 => 1,      // BUS_ADRALN
        1 => 2,       // TRAP_TRACE
        16 | 19 => 0, // computed from the FPU status by Linux; not here
        _ => 0x80,    // SI_KERNEL (#GP, int3, …)
    }
}
