//! The `cloud-hypervisor` binary with its sandbox, on this host's
//! /dev/kvm, driven through its API: seccomp is on by default and every
//! thread is filtered, a whole API lifecycle runs without a denied
//! syscall, and under `--landlock` a VM re-created through the API cannot
//! open a disk outside the paths the command line named.
//!
//! The guest is a few bytes (`cli; hlt`), so this runs wherever /dev/kvm
//! can run 64-bit code, PVM hosts included: the vCPU halts in the kernel.

use std::fs;
use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use api::client::{api_request, HttpResponse, Method};
use vmm_sys_util::tempdir::TempDir;

mod common;

/// The fd number the child gets its API listener on.
/// What the SIGSYS handler prints (vmm/src/seccomp.rs).
const SIGSYS_REPORT: &str = "made a forbidden syscall";

/// An ELF64 "kernel" whose entry is `cli; hlt; jmp hlt` at 1 MiB.
fn halting_kernel(path: &Path) {
    common::kernel(path, &[0xfa, 0xf4, 0xeb, 0xfd]);
}

fn disk(path: &Path, marker: &[u8]) {
    let mut f = fs::File::create(path).expect("create a disk");
    f.write_all(marker).expect("write the marker");
    f.set_len(1 << 20).expect("size the disk");
}

struct Vmm {
    child: Child,
    socket: PathBuf,
    stderr: PathBuf,
}

impl Vmm {
    /// Starts the VMM with `args`, its API on a listener bound here (so
    /// requests queue until the server accepts: no wait for a socket).
    fn start(dir: &Path, args: &[&str]) -> Self {
        let socket = dir.join("api.sock");
        let listener = UnixListener::bind(&socket).expect("bind the API socket");
        let stderr = dir.join("vmm.stderr");
        let mut cmd = common::vmm_with_api_fd(args, &listener, &stderr);
        cmd.arg("-v");
        let child = cmd.spawn().expect("start cloud-hypervisor");
        drop(listener);
        Self {
            child,
            socket,
            stderr,
        }
    }

    fn put(&self, endpoint: &str, body: Option<&str>) -> HttpResponse {
        api_request(&self.socket, Method::Put, endpoint, body.map(str::as_bytes))
            .unwrap_or_else(|e| panic!("{endpoint}: {e}; VMM log: {}", self.log()))
    }

    fn ok(&self, endpoint: &str, body: Option<&str>) {
        let r = self.put(endpoint, body);
        assert!(
            (200..300).contains(&r.status),
            "{endpoint}: {} {}; VMM log: {}",
            r.status,
            String::from_utf8_lossy(&r.body),
            self.log()
        );
    }

    fn state(&self) -> String {
        let r = api_request(&self.socket, Method::Get, "vm.info", None)
            .unwrap_or_else(|e| panic!("vm.info: {e}; VMM log: {}", self.log()));
        let info: serde_json::Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|e| panic!("vm.info: {e}; VMM log: {}", self.log()));
        info["state"].as_str().unwrap_or("?").to_owned()
    }

    /// (name, seccomp mode, number of filters) of every thread; the main
    /// thread is named "main".
    fn threads(&self) -> Vec<(String, String, u32)> {
        let pid = self.child.id().to_string();
        let tasks = format!("/proc/{pid}/task");
        fs::read_dir(tasks)
            .expect("the VMM's threads")
            .filter_map(|t| {
                let t = t.ok()?.path();
                let comm = if t.file_name()? == pid.as_str() {
                    "main".to_owned()
                } else {
                    fs::read_to_string(t.join("comm")).ok()?
                };
                let status = fs::read_to_string(t.join("status")).ok()?;
                let field = |key: &str| {
                    status
                        .lines()
                        .find_map(|l| l.strip_prefix(key))
                        .map(|v| v.trim().to_owned())
                        .unwrap_or_default()
                };
                let filters = field("Seccomp_filters:").parse().unwrap_or(0);
                Some((comm.trim().to_owned(), field("Seccomp:"), filters))
            })
            .collect()
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Asks the VMM to exit and checks it did so cleanly, with no thread
    /// having made a forbidden syscall.
    fn shut_down(mut self) {
        self.ok("vmm.shutdown", None);
        let status = self.child.wait().expect("wait for the VMM");
        let log = self.log();
        assert!(!log.contains(SIGSYS_REPORT), "VMM log: {log}");
        assert!(status.success(), "exit {status:?}; VMM log: {log}");
    }
}

impl Drop for Vmm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn vm_config(kernel: &Path, disk: &Path) -> String {
    serde_json::json!({
        "cpus": {"boot_vcpus": 1, "max_vcpus": 1},
        // A zone on a host node: validating it (on the API thread) looks
        // the node up in sysfs.
        "memory": {"size": 0, "zones": [{"id": "z0", "size": 64u64 << 20, "host_numa_node": 0}]},
        "payload": {"kernel": kernel},
        "disks": [{"path": disk}],
        "serial": {"mode": "Null"},
        "console": {"mode": "Off"},
    })
    .to_string()
}

/// Starts the VMM on the halting kernel with 64 MiB and one disk, plus
/// `extra` flags first.
fn start_halting_vm(dir: &Path, kernel: &Path, image: &Path, extra: &[&str]) -> Vmm {
    let disk_arg = format!("path={}", image.display());
    let mut args: Vec<&str> = extra.to_vec();
    args.extend([
        "--kernel",
        kernel.to_str().expect("utf-8 path"),
        "--memory",
        "size=64M",
        "--disk",
        &disk_arg,
        "--serial",
        "null",
        "--console",
        "off",
    ]);
    Vmm::start(dir, &args)
}

#[test]
fn seccomp_is_on_by_default_and_an_api_lifecycle_makes_no_forbidden_syscall() {
    assert!(common::kvm_available(), "these tests need /dev/kvm");
    let dir = TempDir::new_with_prefix("/tmp/vmm-sandbox-").expect("tempdir");
    let dir = dir.as_path();
    let kernel = dir.join("halt.elf");
    halting_kernel(&kernel);
    let image = dir.join("disk.raw");
    disk(&image, b"disk");
    let vmm = start_halting_vm(dir, &kernel, &image, &[]);
    assert_eq!(vmm.state(), "Running", "VMM log: {}", vmm.log());
    // Once paused, every vCPU thread has run (so it is named and confined).
    vmm.ok("vm.pause", None);
    assert_eq!(vmm.state(), "Paused");
    let threads = vmm.threads();
    for (name, mode, filters) in &threads {
        // 2 = SECCOMP_MODE_FILTER.
        assert_eq!(mode, "2", "thread {name} unfiltered: {threads:?}");
        // The process ceiling plus the thread's own (vCPUs, devices and
        // console helpers also carry the filter of the thread that made them).
        let own = ["main", "http-server", "device-spawner", "serial-"]
            .iter()
            .any(|p| name.starts_with(p));
        let stacked = ["vcpu", "virtio-", "balloon"]
            .iter()
            .any(|p| name.starts_with(p));
        assert!(
            (!own || *filters >= 2) && (!stacked || *filters >= 3),
            "{name} lacks its own filter: {threads:?}"
        );
    }
    for want in [
        "main",
        "http-server",
        "device-spawner",
        "vcpu0",
        "virtio-blk",
    ] {
        assert!(
            threads.iter().any(|(n, _, _)| n == want),
            "no {want}: {threads:?}"
        );
    }
    vmm.ok("vm.resume", None);
    let counters = api_request(&vmm.socket, Method::Get, "vm.counters", None).expect("counters");
    assert_eq!(counters.status, 200);
    vmm.ok("vm.shutdown", None);
    vmm.ok("vm.delete", None);
    vmm.ok("vm.create", Some(&vm_config(&kernel, &image)));
    vmm.ok("vm.boot", None);
    assert_eq!(vmm.state(), "Running");
    vmm.ok("vm.reboot", None);
    assert_eq!(vmm.state(), "Running");
    vmm.shut_down();
}

/// `inside/` with a halting kernel and a disk, and a disk in `outside/`:
/// (inside, kernel, the disk inside, the disk outside).
fn landlock_files(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let inside = dir.join("inside");
    let outside = dir.join("outside");
    fs::create_dir(&inside).expect("mkdir");
    fs::create_dir(&outside).expect("mkdir");
    let kernel = inside.join("halt.elf");
    halting_kernel(&kernel);
    let named = inside.join("disk.raw");
    let other = outside.join("disk.raw");
    disk(&named, b"inside");
    disk(&other, b"outside");
    (inside, kernel, named, other)
}

/// A VM on `disk` must fail with "Permission denied" at create or, since
/// creating may or may not look at the disk, at boot (which must open it).
/// Returns the refusal's body.
fn refused_vm(vmm: &Vmm, kernel: &Path, disk: &Path) -> String {
    let created = vmm.put("vm.create", Some(&vm_config(kernel, disk)));
    let refusal = if (200..300).contains(&created.status) {
        vmm.put("vm.boot", None)
    } else {
        created
    };
    let text = String::from_utf8_lossy(&refusal.body).into_owned();
    assert!(
        !(200..300).contains(&refusal.status) && text.contains("Permission denied"),
        "{} {text}; VMM log: {}",
        refusal.status,
        vmm.log()
    );
    text
}

#[test]
fn under_landlock_a_vm_created_later_cannot_open_a_path_outside_the_command_line() {
    assert!(common::kvm_available(), "these tests need /dev/kvm");
    let dir = TempDir::new_with_prefix("/tmp/vmm-landlock-").expect("tempdir");
    let dir = dir.as_path();
    let (_, kernel, named, other) = landlock_files(dir);
    let vmm = start_halting_vm(dir, &kernel, &named, &["--landlock"]);
    assert_eq!(vmm.state(), "Running", "VMM log: {}", vmm.log());
    assert!(
        vmm.log().contains("landlock: FullyEnforced"),
        "{}",
        vmm.log()
    );
    vmm.ok("vm.shutdown", None);
    vmm.ok("vm.delete", None);

    let text = refused_vm(&vmm, &kernel, &other);
    assert!(text.contains(&other.display().to_string()), "{text}");
    assert_ne!(vmm.state(), "Running");

    // The paths the command line named still open (a VM's reboot needs them).
    let _ = vmm.put("vm.delete", None);
    vmm.ok("vm.create", Some(&vm_config(&kernel, &named)));
    vmm.ok("vm.boot", None);
    assert_eq!(vmm.state(), "Running");
    vmm.ok("vm.reboot", None);
    assert_eq!(vmm.state(), "Running");
    vmm.shut_down();
}

#[test]
fn under_landlock_without_a_kernel_a_vm_created_later_opens_only_the_landlock_rules_paths() {
    assert!(common::kvm_available(), "these tests need /dev/kvm");
    let dir = TempDir::new_with_prefix("/tmp/vmm-landlock-rules-").expect("tempdir");
    let dir = dir.as_path();
    let (inside, kernel, named, other) = landlock_files(dir);
    let rule = format!("path={},access=rw", inside.display());
    let vmm = Vmm::start(dir, &["--landlock", "--landlock-rules", &rule]);
    vmm.ok("vm.create", Some(&vm_config(&kernel, &named)));
    vmm.ok("vm.boot", None);
    assert_eq!(vmm.state(), "Running", "VMM log: {}", vmm.log());
    assert!(
        vmm.log().contains("landlock: FullyEnforced"),
        "{}",
        vmm.log()
    );
    vmm.ok("vm.shutdown", None);
    vmm.ok("vm.delete", None);
    refused_vm(&vmm, &kernel, &other);
    assert_ne!(vmm.state(), "Running");
    vmm.shut_down();
}

#[test]
fn landlock_rules_without_landlock_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_cloud-hypervisor"))
        .args([
            "--landlock-rules",
            "path=/tmp,access=rw",
            "--api-socket",
            "path=/nonexistent/dir/api.sock",
        ])
        .output()
        .expect("run cloud-hypervisor");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--landlock-rules needs --landlock"),
        "{stderr}"
    );
}
