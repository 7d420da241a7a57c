//! Filters compile for every thread kind, and a denied syscall ends the
//! process with a report. Confinement cannot be undone, so the checks
//! that install a filter run in a child process (this test binary again).

use std::process::Command;

use super::*;

const CHILD_ENV: &str = "VMM_SECCOMP_TEST_CHILD";

const KINDS: [ThreadKind; 7] = [
    ThreadKind::Vmm,
    ThreadKind::Vcpu,
    ThreadKind::Block,
    ThreadKind::Net,
    ThreadKind::Rng,
    ThreadKind::Console,
    ThreadKind::Balloon,
];

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
    for kind in KINDS {
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
    assert_eq!(
        ThreadKind::of_thread(devices::sandbox::SPAWNER_THREAD),
        Some(ThreadKind::Vmm)
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
    let (code, stderr) = in_child("seccomp::tests::child_denied_syscall");
    assert_eq!(code, Some(SIGSYS_EXIT_CODE), "stderr: {stderr}");
    let expect = format!("made a forbidden syscall {}", libc::SYS_openat);
    assert!(stderr.contains(&expect), "stderr: {stderr}");
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
    install_sigsys_handler().unwrap();
    // Inherits the way a vCPU thread does: VMM filter, then its own.
    apply(ThreadKind::Vmm, SeccompMode::Trap).unwrap();
    apply(ThreadKind::Vcpu, SeccompMode::Trap).unwrap();
    // KVM_RUN on a non-KVM fd passes the filter and fails in the kernel.
    // SAFETY: an ioctl with no argument on stdin.
    let rc = unsafe { libc::ioctl(0, 0xAE80) };
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
fn a_vcpu_may_only_issue_its_kvm_ioctls() {
    let (code, stderr) = in_child("seccomp::tests::child_vcpu_ioctl_filter");
    assert_eq!(code, Some(SIGSYS_EXIT_CODE), "stderr: {stderr}");
    assert!(
        stderr.contains(&format!("forbidden syscall {}", libc::SYS_ioctl)),
        "stderr: {stderr}"
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
