//! Filters compile for every thread kind, and a denied syscall ends the
//! process with a report. Confinement cannot be undone, so the checks
//! that install a filter run in a child process (this test binary again).

use std::process::Command;

use super::*;
use libc::*;

const CHILD_ENV: &str = "VMM_SECCOMP_TEST_CHILD";

/// Runs test `name` in a child with `CHILD_ENV` set; returns (exit code, stderr).
fn in_child(name: &str) -> (Option<i32>, String) {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Runs child test `name`, which must die of SIGSYS with `expect` in the
/// handler's report; returns its stderr for further checks.
fn expect_killed(name: &str, expect: &str) -> String {
    let (code, stderr) = in_child(name);
    assert_eq!(code, Some(SIGSYS_EXIT_CODE), "stderr: {stderr}");
    assert!(stderr.contains(expect), "stderr: {stderr}");
    stderr
}

#[test]
fn modes_are_spelled_as_upstream() {
    assert_eq!(SeccompMode::parse("true"), Ok(SeccompMode::Trap));
    assert_eq!(SeccompMode::parse("false"), Ok(SeccompMode::Off));
    assert_eq!(SeccompMode::parse("log"), Ok(SeccompMode::Log));
    assert!(SeccompMode::parse("on").is_err());
    assert!(SeccompMode::parse("").is_err());
}

#[test]
fn every_filter_compiles_and_off_means_none() {
    for kind in ThreadKind::ALL {
        for mode in [SeccompMode::Trap, SeccompMode::Log] {
            let prog = filter(kind, mode).expect("compiles").expect("a program");
            assert!(!prog.is_empty(), "{kind:?}");
        }
        assert!(filter(kind, SeccompMode::Off).unwrap().is_none());
    }
}

#[test]
fn device_thread_names_map_to_their_filters() {
    assert_eq!(ThreadKind::of_thread("virtio-blk"), Some(ThreadKind::Block));
    assert_eq!(ThreadKind::of_thread("balloon"), Some(ThreadKind::Balloon));
    // virtio-mem releases unplugged memory as the balloon does.
    assert_eq!(
        ThreadKind::of_thread(devices::virtio::thread_name(24)),
        Some(ThreadKind::Balloon)
    );
    assert_eq!(
        ThreadKind::of_thread(devices::sandbox::SPAWNER_THREAD),
        Some(ThreadKind::Spawner)
    );
    assert_eq!(ThreadKind::of_thread("something-new"), None);
}

#[test]
fn child_denied_syscall() {
    if !is_child() {
        return;
    }
    install_sigsys_handler().unwrap();
    apply(ThreadKind::Rng, SeccompMode::Trap).unwrap();
    // A device thread must not open files.
    let _ = std::fs::File::open("/dev/null");
    // Not reached: the handler ends the process.
    std::process::exit(0);
}

#[test]
fn a_denied_syscall_ends_the_process_and_names_it() {
    let stderr = expect_killed(
        "seccomp::tests::child_denied_syscall",
        &format!("made a forbidden syscall {}", libc::SYS_openat),
    );
    assert!(
        stderr.contains("seccomp: a virtio-rng thread"),
        "stderr: {stderr}"
    );
}

#[test]
fn child_vcpu_ioctl_filter() {
    if !is_child() {
        return;
    }
    enter_as_vcpu();
    // KVM_RUN on a non-KVM fd passes the filter and fails in the kernel.
    // SAFETY: an ioctl with no argument on stdin.
    let rc = unsafe { libc::ioctl(0, 0xAE80) };
    assert_eq!(rc, -1);
    // So does KVM_SET_GSI_ROUTING (virtio-pci MSI-X table writes).
    // SAFETY: an ioctl on stdin, refused by the kernel before any access.
    let rc = unsafe { libc::ioctl(0, 0x4008_AE6A, std::ptr::null::<u8>()) };
    assert_eq!(rc, -1);
    // And KVM_IOEVENTFD (a hot-plugged function's BAR moved by the guest).
    // SAFETY: as above.
    let rc = unsafe { libc::ioctl(0, 0x4040_AE79, std::ptr::null::<u8>()) };
    assert_eq!(rc, -1);
    let (tx, rx) = std::sync::mpsc::channel();
    tx.send(1).unwrap();
    assert_eq!(rx.recv().unwrap(), 1);
    println!("vcpu-allowed-ok");
    // Any other ioctl is denied: TCGETS.
    // SAFETY: TCGETS into a zeroed termios.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        libc::ioctl(0, libc::TCGETS, &mut t);
    }
    std::process::exit(0);
}

#[test]
fn child_nic_ioctl_filter() {
    if !is_child() {
        return;
    }
    enter_as(&[ThreadKind::Process, ThreadKind::Spawner, ThreadKind::Net]);
    // TUNSETQUEUE on a non-TAP fd passes both filters, fails in the kernel.
    let mut ifr = [0u8; 40];
    // SAFETY: TUNSETQUEUE reads an ifreq (40 bytes) the call outlives.
    let rc = unsafe { libc::ioctl(0, libc::TUNSETQUEUE, ifr.as_mut_ptr()) };
    assert_eq!(rc, -1);
    // TUNSETOFFLOAD (the negotiated offloads, at the thread's start) too.
    // SAFETY: TUNSETOFFLOAD takes an integer.
    let rc = unsafe { libc::ioctl(0, libc::TUNSETOFFLOAD, 0 as libc::c_ulong) };
    assert_eq!(rc, -1);
    eprintln!("nic-allowed-ok");
    // Any other ioctl is denied: TCGETS.
    // SAFETY: TCGETS into a zeroed termios.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        libc::ioctl(0, libc::TCGETS, &mut t);
    }
    std::process::exit(0);
}

#[test]
fn a_nic_thread_may_only_issue_its_tap_ioctls() {
    let stderr = expect_killed(
        "seccomp::tests::child_nic_ioctl_filter",
        &format!("forbidden syscall {}", libc::SYS_ioctl),
    );
    assert!(stderr.contains("nic-allowed-ok"), "stderr: {stderr}");
    assert!(stderr.contains("a virtio-net thread"), "stderr: {stderr}");
}

#[test]
fn a_vcpu_may_only_issue_its_kvm_ioctls() {
    expect_killed(
        "seccomp::tests::child_vcpu_ioctl_filter",
        &format!("forbidden syscall {}", libc::SYS_ioctl),
    );
}

#[test]
fn child_thread_exits_cleanly_under_a_device_filter() {
    if !is_child() {
        return;
    }
    install_sigsys_handler().unwrap();
    let worker = std::thread::spawn(|| {
        apply(ThreadKind::Block, SeccompMode::Trap).unwrap();
        let v: Vec<u8> = vec![7; 1 << 20];
        v.iter().map(|&b| u64::from(b)).sum::<u64>()
    });
    assert_eq!(worker.join().unwrap(), 7 << 20);
    std::process::exit(0);
}

#[test]
fn a_confined_thread_can_allocate_and_exit() {
    let (code, stderr) =
        in_child("seccomp::tests::child_thread_exits_cleanly_under_a_device_filter");
    assert_eq!(code, Some(0), "stderr: {stderr}");
}

/// Starts a device thread the way the VMM does (spawner with the VMM
/// filter, then the device's own) and has it open a file, which no device
/// filter allows. Prints what the thread saw when the open ran (log mode).
fn open_from_a_device_thread(mode: SeccompMode) {
    install_sigsys_handler().unwrap();
    set_mode(mode);
    apply(ThreadKind::Process, mode).unwrap();
    devices::sandbox::install(device_sandbox_hook()).expect("spawner starts confined");
    apply(ThreadKind::Vmm, mode).unwrap();
    let worker = devices::sandbox::spawn("virtio-blk", || {
        // Reading /proc opens a file: denied for every device thread.
        std::fs::read_to_string("/proc/thread-self/status")
    })
    .expect("the device thread starts");
    let status = worker.join().unwrap().expect("ran").expect("read");
    let seccomp = status
        .lines()
        .find(|l| l.starts_with("Seccomp:"))
        .unwrap_or("Seccomp: ?");
    println!("device-thread-opened {seccomp}");
    std::process::exit(0);
}

#[test]
fn child_device_thread_opens_a_file_trap() {
    if is_child() {
        open_from_a_device_thread(SeccompMode::Trap);
    }
}

#[test]
fn child_device_thread_opens_a_file_log() {
    if is_child() {
        open_from_a_device_thread(SeccompMode::Log);
    }
}

#[test]
fn a_device_thread_started_through_the_spawner_is_killed_on_a_forbidden_syscall() {
    expect_killed(
        "seccomp::tests::child_device_thread_opens_a_file_trap",
        &format!(
            "seccomp: a virtio-blk thread made a forbidden syscall {}",
            libc::SYS_openat
        ),
    );
}

#[test]
fn in_log_mode_a_forbidden_syscall_runs_under_the_filter() {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "seccomp::tests::child_device_thread_opens_a_file_log",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}");
    // Mode 2 = filtered: the thread ran the open under its filter.
    assert!(
        stdout.contains("device-thread-opened Seccomp:\t2"),
        "stdout: {stdout}"
    );
}

/// Confines the calling thread as a vCPU thread is (the process ceiling and
/// the main thread's filter, inherited, then its own).
fn enter_as_vcpu() {
    enter_as(&[ThreadKind::Process, ThreadKind::Vmm, ThreadKind::Vcpu]);
}

/// Installs the SIGSYS report and the filters `stack`, in order.
fn enter_as(stack: &[ThreadKind]) {
    install_sigsys_handler().unwrap();
    for &kind in stack {
        apply(kind, SeccompMode::Trap).unwrap();
    }
}

#[test]
fn child_vcpu_fcntl() {
    if !is_child() {
        return;
    }
    enter_as_vcpu();
    // Cloning an eventfd for a device thread (File::try_clone) is allowed.
    // SAFETY: fcntl on stdin; the new fd is closed at exit.
    let fd = unsafe { libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 0) };
    assert!(fd >= 0, "F_DUPFD_CLOEXEC");
    println!("dupfd-allowed");
    // Any other fcntl command is not.
    // SAFETY: F_GETFL on stdin.
    unsafe { libc::fcntl(0, libc::F_GETFL) };
    std::process::exit(0);
}

#[test]
fn a_vcpu_may_clone_a_descriptor_but_use_no_other_fcntl() {
    expect_killed(
        "seccomp::tests::child_vcpu_fcntl",
        &format!("a vcpu thread made a forbidden syscall {}", libc::SYS_fcntl),
    );
}

#[test]
fn child_vcpu_eventfd() {
    if !is_child() {
        return;
    }
    enter_as_vcpu();
    // Devices start by message on their own thread: a vCPU creates no
    // eventfd (nor epoll, nor thread).
    // SAFETY: eventfd with valid flags.
    unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
    std::process::exit(0);
}

#[test]
fn a_vcpu_cannot_create_an_eventfd() {
    expect_killed(
        "seccomp::tests::child_vcpu_eventfd",
        &format!("forbidden syscall {}", libc::SYS_eventfd2),
    );
}

/// What each device thread does on its data path, done on a thread
/// started through the spawner under the real filters: epoll over an
/// eventfd, then the device's own I/O on descriptors opened beforehand
/// (as the VMM thread opens them).
#[test]
fn child_device_threads_do_their_work() {
    if !is_child() {
        return;
    }
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
    use vmm_sys_util::eventfd::EventFd;

    install_sigsys_handler().unwrap();
    set_mode(SeccompMode::Trap);
    apply(ThreadKind::Process, SeccompMode::Trap).unwrap();
    devices::sandbox::install(device_sandbox_hook()).unwrap();
    apply(ThreadKind::Vmm, SeccompMode::Trap).unwrap();
    let dir = vmm_sys_util::tempdir::TempDir::new_with_prefix("/tmp/seccomp-work-").unwrap();
    let image = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.as_path().join("image"))
        .unwrap();
    image.set_len(1 << 20).unwrap();
    let source = std::fs::File::open("/dev/urandom").unwrap();
    let evt = EventFd::new(libc::EFD_NONBLOCK).unwrap();
    let run = |name: &'static str, work: Box<dyn FnOnce() -> u64 + Send>| {
        devices::sandbox::spawn(name, work)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .join()
            .unwrap()
            .unwrap()
    };
    // The device loop: an epoll made by the VMM thread, waited on here.
    let epoll = std::sync::Arc::new(Epoll::new().unwrap());
    epoll
        .ctl(
            ControlOperation::Add,
            evt.as_raw_fd(),
            EpollEvent::new(EventSet::IN, 1),
        )
        .unwrap();
    let block_evt = evt.try_clone().unwrap();
    let block_epoll = epoll.clone();
    let n = run(
        "virtio-blk",
        Box::new(move || {
            block_evt.write(1).unwrap();
            let mut events = [EpollEvent::default(); 4];
            assert_eq!(block_epoll.wait(1000, &mut events).unwrap(), 1);
            block_evt.read().unwrap();
            image.write_all_at(b"sector", 4096).unwrap();
            image.sync_data().unwrap();
            let mut back = [0u8; 6];
            image.read_exact_at(&mut back, 4096).unwrap();
            assert_eq!(&back, b"sector");
            back.len() as u64
        }),
    );
    assert_eq!(n, 6);
    let n = run(
        "virtio-rng",
        Box::new(move || {
            let mut buf = [0u8; 64];
            (&source).read_exact(&mut buf).unwrap();
            buf.len() as u64
        }),
    );
    assert_eq!(n, 64);
    // A TAP stands in as a pipe: frames are read and written whole.
    let (rx, tx) = std::io::pipe().unwrap();
    let n = run(
        "virtio-net",
        Box::new(move || {
            (&tx).write_all(b"frame").unwrap();
            let mut buf = [0u8; 5];
            (&rx).read_exact(&mut buf).unwrap();
            buf.len() as u64
        }),
    );
    assert_eq!(n, 5);
    // The balloon gives a page of a memfd zone back: DONTNEED plus a hole.
    let zone = memfd_page();
    let n = run(
        "balloon",
        Box::new(move || {
            let (fd, addr) = zone;
            // SAFETY: addr is a 4 KiB shared mapping of fd made above.
            let rc = unsafe {
                libc::madvise(addr as *mut libc::c_void, 4096, libc::MADV_DONTNEED)
                    | libc::fallocate(
                        fd,
                        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                        0,
                        4096,
                    )
            };
            assert_eq!(rc, 0);
            4096
        }),
    );
    assert_eq!(n, 4096);
    println!("device-work-done");
    std::process::exit(0);
}

/// A memfd with one page, mapped shared: (fd, address). Both live until
/// the child process exits.
fn memfd_page() -> (i32, usize) {
    // SAFETY: memfd_create with a valid name; ftruncate and mmap on the
    // new fd with valid arguments; results checked.
    unsafe {
        let fd = libc::memfd_create(c"zone".as_ptr(), 0);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, 4096), 0);
        let addr = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED);
        *(addr as *mut u8) = 1;
        (fd, addr as usize)
    }
}

#[test]
fn device_threads_can_do_their_work_under_their_filters() {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "seccomp::tests::child_device_threads_do_their_work",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stdout.contains("device-work-done"), "stdout: {stdout}");
}

/// A filter stacked on another only gets what the lower one allows too:
/// each kind's list must be within those it inherits, or a thread dies on a
/// syscall its own list names.
#[test]
fn every_filter_is_within_the_filters_it_stacks_on() {
    use ThreadKind::*;
    let stacks: [(ThreadKind, &[ThreadKind]); 10] = [
        (Vmm, &[Process]),
        (Api, &[Process]),
        (Spawner, &[Process]),
        (ConsoleIo, &[Process, Vmm]),
        (Vcpu, &[Process, Vmm]),
        (Block, &[Process, Spawner]),
        (Net, &[Process, Spawner]),
        (Rng, &[Process, Spawner]),
        (Console, &[Process, Spawner]),
        (Balloon, &[Process, Spawner]),
    ];
    for (kind, below) in stacks {
        for &lower in below {
            let allowed = allowed_syscalls(lower);
            for nr in allowed_syscalls(kind) {
                assert!(
                    allowed.contains(&nr),
                    "{kind:?} allows syscall {nr}, which {lower:?} below it denies"
                );
            }
        }
    }
}

/// What narrowing by role removes (each is checked in a child below too).
#[test]
fn roles_lack_what_they_do_not_need() {
    use ThreadKind::*;
    let has = |k, nr| allowed_syscalls(k).contains(&nr);
    assert!(!has(Vcpu, SYS_read), "a vCPU reads nothing");
    assert!(!has(Vcpu, SYS_readv));
    for nr in [SYS_openat, SYS_open, SYS_ioctl, SYS_socket, SYS_mbind] {
        assert!(!has(Api, nr), "the API thread: {nr}");
    }
    for nr in [SYS_accept4, SYS_bind, SYS_listen, SYS_connect, SYS_sendto] {
        assert!(!has(Vmm, nr), "the main thread serves no socket: {nr}");
        assert!(has(Api, SYS_accept4));
    }
    for nr in [SYS_openat, SYS_ioctl, SYS_socket] {
        assert!(!has(ConsoleIo, nr), "console helpers: {nr}");
    }
    // The spawner's ioctls are TUNSETQUEUE and TUNSETOFFLOAD only, for the NIC threads stacked
    // on it (a_nic_thread_may_only_issue_its_tap_ioctls).
    for nr in [SYS_openat, SYS_socket] {
        assert!(!has(Spawner, nr), "the spawner: {nr}");
    }
    for kind in ThreadKind::ALL {
        for nr in [
            SYS_execve,
            SYS_execveat,
            SYS_fork,
            SYS_vfork,
            SYS_ptrace,
            SYS_mount,
            SYS_bpf,
            SYS_wait4,
        ] {
            assert!(!has(kind, nr), "{kind:?} allows {nr}");
        }
    }
}

#[test]
fn child_api_thread_opens_a_file() {
    if !is_child() {
        return;
    }
    enter_as(&[ThreadKind::Process, ThreadKind::Api]);
    let _ = std::fs::File::open("/dev/null");
    std::process::exit(0);
}

#[test]
fn the_api_thread_cannot_open_files() {
    expect_killed(
        "seccomp::tests::child_api_thread_opens_a_file",
        &format!(
            "a http-server thread made a forbidden syscall {}",
            libc::SYS_openat
        ),
    );
}

#[test]
fn child_vmm_thread_binds_a_socket() {
    if !is_child() {
        return;
    }
    enter_as(&[ThreadKind::Process, ThreadKind::Vmm]);
    // socket() is allowed (the TAP's AF_INET control socket); bind is not.
    let dir = std::env::temp_dir().join(format!("seccomp-bind-{}", std::process::id()));
    let _ = std::os::unix::net::UnixListener::bind(dir);
    std::process::exit(0);
}

#[test]
fn the_main_thread_cannot_bind_a_socket_after_start() {
    expect_killed(
        "seccomp::tests::child_vmm_thread_binds_a_socket",
        &format!("a vmm thread made a forbidden syscall {}", libc::SYS_bind),
    );
}

#[test]
fn child_process_ioctl_types() {
    if !is_child() {
        return;
    }
    enter_as(&[ThreadKind::Process, ThreadKind::Vmm]);
    // TCGETS ('T') passes the filter; on a non-terminal it fails in the kernel.
    // SAFETY: TCGETS into a zeroed termios.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        libc::ioctl(0, libc::TCGETS, &mut t);
    }
    println!("tcgets-allowed");
    // BLKGETSIZE64 (type 0x12) is no ioctl the VMM issues.
    let mut size = 0u64;
    // SAFETY: the kernel would write a u64 into `size`.
    unsafe { libc::ioctl(0, 0x8008_1272, &mut size) };
    std::process::exit(0);
}

#[test]
fn only_kvm_terminal_tun_and_socket_ioctls_pass() {
    let stderr = expect_killed(
        "seccomp::tests::child_process_ioctl_types",
        &format!("made a forbidden syscall {}", libc::SYS_ioctl),
    );
    assert!(!stderr.contains("tcgets"), "{stderr}");
}

#[test]
fn child_vcpu_reads() {
    if !is_child() {
        return;
    }
    enter_as_vcpu();
    let mut b = [0u8; 1];
    // SAFETY: a one-byte read into a local buffer.
    unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
    std::process::exit(0);
}

#[test]
fn a_vcpu_cannot_read() {
    expect_killed(
        "seccomp::tests::child_vcpu_reads",
        &format!("a vcpu thread made a forbidden syscall {}", libc::SYS_read),
    );
}

#[test]
fn child_console_helper_opens_a_file() {
    if !is_child() {
        return;
    }
    enter_as(&[ThreadKind::Process, ThreadKind::Vmm, ThreadKind::ConsoleIo]);
    let mut b = [0u8; 1];
    // stdin is allowed (it is what the helper forwards).
    // SAFETY: a one-byte read into a local buffer.
    unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
    std::thread::sleep(std::time::Duration::from_millis(1));
    let _ = std::fs::File::open("/dev/null");
    std::process::exit(0);
}

#[test]
fn a_console_helper_reads_stdin_and_sleeps_but_cannot_open_files() {
    expect_killed(
        "seccomp::tests::child_console_helper_opens_a_file",
        &format!(
            "a console-io thread made a forbidden syscall {}",
            libc::SYS_openat
        ),
    );
}

#[test]
fn child_thread_prctl() {
    if !is_child() {
        return;
    }
    enter_as(&[ThreadKind::Process, ThreadKind::Api]);
    // Naming a thread is allowed (std does it in every new thread).
    let t = std::thread::Builder::new()
        .name("named".into())
        .spawn(|| 1)
        .unwrap();
    assert_eq!(t.join().unwrap(), 1);
    println!("named-thread-ok");
    // SAFETY: PR_SET_DUMPABLE with a valid value.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) };
    std::process::exit(0);
}

#[test]
fn prctl_only_names_threads_and_sets_no_new_privs() {
    expect_killed(
        "seccomp::tests::child_thread_prctl",
        &format!("forbidden syscall {}", libc::SYS_prctl),
    );
}

#[test]
fn child_forks() {
    if !is_child() {
        return;
    }
    enter_as(&[ThreadKind::Process]);
    // Threads still start (clone3 gives ENOSYS, glibc falls back to clone
    // with CLONE_THREAD).
    let t = std::thread::spawn(|| 7);
    assert_eq!(t.join().unwrap(), 7);
    eprintln!("thread-started");
    // SAFETY: fork; the child (if any) exits at once.
    if unsafe { libc::fork() } == 0 {
        // SAFETY: leaving the forked child without running anything.
        unsafe { libc::_exit(0) };
    }
    std::process::exit(0);
}

#[test]
fn no_thread_can_fork_but_threads_still_start() {
    let (code, stderr) = in_child("seccomp::tests::child_forks");
    assert_eq!(code, Some(SIGSYS_EXIT_CODE), "stderr: {stderr}");
    assert!(stderr.contains("thread-started"), "stderr: {stderr}");
    assert!(
        stderr.contains(&format!("made a forbidden syscall {}", libc::SYS_clone)),
        "stderr: {stderr}"
    );
}
