//! fork and execve for the program.
//!
//! fork: vmmload forks itself. The child (a real host process, so the
//! program's parent can wait for it) builds a new VM around its copy-on-write
//! copy of guest RAM and continues the forking thread on a new vCPU, on the
//! host thread that survived the fork, so its tid equals its pid as natively.
//! Children are not profiled (tracking off, no report) and run quietly.
//! `vfork` and `clone(CLONE_VFORK)` are treated as fork (the child gets a
//! copy, not a share, of the parent's memory — enough for vfork+exec and
//! posix_spawn).
//!
//! execve: vmmload re-executes itself with the same options on the new
//! program (`--argv0` keeps the program's argv[0]); the new program's report
//! replaces the old one. Errors the kernel would report before replacing the
//! image (missing file, not executable, not a loadable format) are returned
//! to the program.

use std::ffi::CString;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use kvm_bindings::kvm_regs;
use kvm_ioctls::VcpuFd;

use crate::forkreport::{ChildEnd, ForkReport};
use crate::mm::Mm;
use crate::process::{Process, Thread, VcpuStart};
use crate::session::Session;
use crate::sys::{Action, ThreadSetup};

fn err(e: i32) -> Action {
    Action::Return(-(e as i64))
}

/// fork, vfork, or clone without CLONE_VM.
pub fn fork(p: &Arc<Process>, vcpu: &mut VcpuFd, t: &Thread, r: &kvm_regs, flags: u64) -> Action {
    const CLONE_CHILD_SETTID: u64 = 0x100_0000;
    const CLONE_CHILD_CLEARTID: u64 = 0x20_0000;
    const CLONE_PARENT_SETTID: u64 = 0x10_0000;
    if p.threads.lock().expect("threads lock").len() > 1 {
        p.log_once("fork of a multi-threaded program: only the calling thread continues in the child (as natively)".into());
    }
    let Ok(sregs) = vcpu.get_sregs() else {
        return err(libc::EAGAIN);
    };
    let Ok(xsave) = vcpu.get_xsave() else {
        return err(libc::EAGAIN);
    };
    let mm_copy: Mm = {
        let mm = p.mm.lock().expect("mm lock");
        p.cache.lock().expect("cache lock").settle(&mm);
        mm.clone()
    };
    let actions = p.signals.lock().expect("signals lock").actions;
    let exe = p.exe.lock().expect("exe lock").clone();
    let backend = p.backend.get().copied();
    let Ok(report) = ForkReport::new() else {
        return err(libc::EAGAIN);
    };
    // Hold stderr across fork so the child never inherits it locked by
    // another thread (the logger writes there).
    let stderr = std::io::stderr();
    let lock = stderr.lock();
    // SAFETY: fork in a multi-threaded process; the child only uses the
    // copies made above, fresh objects and async-signal-tolerant calls of
    // glibc (whose malloc is fork-safe).
    let pid = unsafe { libc::fork() };
    if pid != 0 {
        drop(lock);
        if pid < 0 {
            return err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EAGAIN));
        }
        if let Err(e) = report.parent().wait() {
            // The child could not start: fork fails as it would natively.
            // SAFETY: reaping our own child; a NULL status is allowed.
            while unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::__WALL) } < 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
            return err(e);
        }
        if flags & CLONE_PARENT_SETTID != 0 && r.rdx != 0 {
            let _ =
                p.mm.lock()
                    .expect("mm lock")
                    .write_bytes(r.rdx, &(pid as u32).to_le_bytes());
        }
        return Action::Return(pid as i64);
    }
    drop(lock);
    let report = report.child();
    let mut opts = p.opts.clone();
    opts.ring_entries = 0;
    opts.read_cache = false;
    opts.session = Session {
        command: opts.session.command.clone(),
        interval_ms: opts.session.interval_ms,
        quiet: true,
        ..Default::default()
    };
    let (tx, rx) = mpsc::channel();
    let child = match Process::with_memory(opts, exe, tx, mm_copy, true) {
        Ok(c) => Arc::new(c),
        Err(e) => child_failed(report, libc::EAGAIN, &e),
    };
    child.signals.lock().expect("signals lock").actions = actions;
    if let Some(b) = backend {
        let _ = child.backend.set(b);
        child.tracker.choose_reads(b);
    }
    crate::fastcalls::refresh_ids(&child.mm.lock().expect("mm lock"));
    let mut regs = *r;
    regs.rax = 0;
    regs.rip = r.rcx;
    regs.rflags = r.r11 | 2;
    if r.rax == 56 && r.rsi != 0 {
        regs.rsp = r.rsi;
    }
    let start = VcpuStart {
        regs,
        fs_base: sregs.fs.base,
        gs_base: sregs.gs.base,
    };
    let mut cvcpu = match child.create_vcpu(&start) {
        Ok(v) => v,
        Err(e) => child_failed(report, libc::EAGAIN, &e),
    };
    // SAFETY: the state comes from KVM_GET_XSAVE of a vCPU of the same host.
    if let Err(e) = unsafe { cvcpu.set_xsave(&xsave) } {
        log::debug!("forked child: KVM_SET_XSAVE: {e}");
    }
    let is_clone = r.rax == 56;
    let setup = ThreadSetup {
        clear_child_tid: if is_clone && flags & CLONE_CHILD_CLEARTID != 0 {
            r.r10
        } else {
            0
        },
        set_child_tid: if is_clone && flags & CLONE_CHILD_SETTID != 0 {
            r.r10
        } else {
            0
        },
        parent_tid: 0,
        sigmask: t.sigmask,
    };
    let sup = child.clone();
    let started = Instant::now();
    let spawned = std::thread::Builder::new()
        .name("supervisor".into())
        .spawn(move || std::process::exit(crate::session::supervise(sup, rx, started)));
    if let Err(e) = spawned.and_then(|_| crate::signals::host::start_forwarder(&child)) {
        let errno = e.raw_os_error().unwrap_or(libc::EAGAIN);
        child_failed(report, errno, &format!("cannot start a host thread: {e}"));
    }
    if let Err(e) = crate::process::prepare_run(&mut cvcpu) {
        let errno = e.raw_os_error().unwrap_or(libc::EAGAIN);
        child_failed(report, errno, &format!("KVM_RUN: {e}"));
    }
    report.send(0);
    let (rtx, _rrx) = mpsc::channel();
    child.run_vcpu_here(cvcpu, setup, rtx);
    // The guest thread ended; the supervisor ends the process.
    loop {
        std::thread::park();
        if child.stopping.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// A forked child that cannot run the program: the parent's fork fails with
/// `errno` (and reaps this process).
fn child_failed(report: ChildEnd, errno: i32, why: &str) -> ! {
    log::warn!("forked child: {why}");
    report.send(errno);
    // SAFETY: leaving the child process without running the parent's destructors.
    unsafe { libc::_exit(125) }
}

/// Reads a NULL-terminated array of strings from guest memory.
fn read_strv(mm: &Mm, mut at: u64) -> Result<Vec<Vec<u8>>, i32> {
    let mut v = Vec::new();
    if at == 0 {
        return Ok(v);
    }
    let mut total = 0usize;
    loop {
        let ptr = mm.read_u64(at).map_err(|e| e.errno())?;
        if ptr == 0 {
            return Ok(v);
        }
        let s = mm.read_cstr(ptr, 128 << 10).map_err(|_| libc::EFAULT)?;
        total += s.len() + 1;
        if v.len() >= 65536 || total > (2 << 20) {
            return Err(libc::E2BIG);
        }
        v.push(s);
        at += 8;
    }
}

fn cstrings(v: Vec<Vec<u8>>) -> Result<Vec<CString>, i32> {
    v.into_iter()
        .map(|s| CString::new(s).map_err(|_| libc::EINVAL))
        .collect()
}

/// execve(path, argv, envp): re-run vmmload on the new program.
pub fn execve(p: &Process, a: &[u64; 6]) -> Action {
    exec(p, libc::AT_FDCWD, a[0], a[1], a[2], 0)
}

/// execveat(dirfd, path, argv, envp, flags).
pub fn execveat(p: &Process, a: &[u64; 6]) -> Action {
    exec(p, a[0] as i32, a[1], a[2], a[3], a[4])
}

fn exec(p: &Process, dirfd: i32, path_at: u64, argv_at: u64, envp_at: u64, flags: u64) -> Action {
    if flags & !((libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW) as u64) != 0 {
        return err(libc::EINVAL);
    }
    let (path, argv, envp) = {
        let mm = p.mm.lock().expect("mm lock");
        let path = match mm.read_cstr(path_at, 4096) {
            Ok(s) => s,
            Err(_) => return err(libc::EFAULT),
        };
        let argv = match read_strv(&mm, argv_at) {
            Ok(v) => v,
            Err(e) => return err(e),
        };
        let envp = match read_strv(&mm, envp_at) {
            Ok(v) => v,
            Err(e) => return err(e),
        };
        (path, argv, envp)
    };
    let path = match crate::selfexe::execveat_path(dirfd, &path, flags as i32) {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    if flags & libc::AT_SYMLINK_NOFOLLOW as u64 != 0 {
        let pp = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&path),
        );
        if pp
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            return err(libc::ELOOP);
        }
    }
    // The program's own image, not vmmload's, as natively.
    let path = crate::selfexe::substitute(p, path);
    let Ok(cpath) = CString::new(path.clone()) else {
        return err(libc::ENOENT);
    };
    // Errors execve reports before the old image is gone.
    // SAFETY: access on a NUL-terminated path.
    if unsafe { libc::access(cpath.as_ptr(), libc::X_OK) } != 0 {
        return err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EACCES));
    }
    let ppath =
        std::path::Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&path));
    if ppath.is_dir() {
        return err(libc::EACCES);
    }
    let mut head = [0u8; 4];
    let n = std::fs::File::open(ppath)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .unwrap_or(0);
    if !(n >= 4 && &head == b"\x7fELF" || n >= 2 && head.starts_with(b"#!")) {
        return err(libc::ENOEXEC);
    }
    {
        let mm = p.mm.lock().expect("mm lock");
        p.cache.lock().expect("cache lock").settle(&mm);
    }
    let argv0 = argv.first().cloned().unwrap_or_else(|| path.clone());
    let mut args: Vec<Vec<u8>> = vec![b"vmmload".to_vec()];
    for o in &p.opts.reexec {
        let is_output = ["--report=", "--csv=", "--heatmap="]
            .iter()
            .any(|f| o.starts_with(f));
        if p.forked && is_output {
            continue;
        }
        args.push(o.clone().into_bytes());
    }
    if p.forked {
        // Children print no summary; their warnings follow -q and --log.
        args.push(b"--no-summary".to_vec());
    }
    // The process keeps its pid, its process group and what is left of
    // the deadline across the exec.
    args.push(b"--exec-continued".to_vec());
    if let Some(d) = p.opts.session.deadline {
        let left = d.saturating_duration_since(std::time::Instant::now());
        args.push(format!("--timeout={:.3}", left.as_secs_f64().max(0.001)).into_bytes());
    }
    let mut a0 = b"--argv0=".to_vec();
    a0.extend(argv0);
    args.push(a0);
    args.push(b"--".to_vec());
    args.push(path);
    args.extend(argv.into_iter().skip(1));
    let (Ok(args), Ok(envs)) = (cstrings(args), cstrings(envp)) else {
        return err(libc::EINVAL);
    };
    let mut argp: Vec<*const libc::c_char> = args.iter().map(|c| c.as_ptr()).collect();
    argp.push(std::ptr::null());
    let mut envpp: Vec<*const libc::c_char> = envs.iter().map(|c| c.as_ptr()).collect();
    envpp.push(std::ptr::null());
    let me = CString::new("/proc/self/exe").expect("no NUL");
    // SAFETY: NULL-terminated arrays of live C strings; on success the
    // process image is replaced and nothing here runs any more.
    unsafe { libc::execve(me.as_ptr(), argp.as_ptr(), envpp.as_ptr()) };
    err(std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::ENOEXEC))
}
