//! Helpers shared by the VMM's integration tests.

// Each test binary uses a subset of these.
#![allow(dead_code)]

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The descriptor the VMM gets its API listener on (`--api-socket fd=3`).
pub const API_FD: i32 = 3;

/// Whether this host lets us open /dev/kvm for a VM.
pub fn kvm_available() -> bool {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

/// The VMM binary with `args`, `--api-socket fd=API_FD` on `listener`, and
/// its stderr in `stderr`; spawn it, then drop the listener.
pub fn vmm_with_api_fd(args: &[&str], listener: &UnixListener, stderr: &Path) -> Command {
    let fd = listener.as_raw_fd();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cloud-hypervisor"));
    cmd.args(args)
        .args(["--api-socket", &format!("fd={API_FD}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(stderr).expect("stderr file"));
    // SAFETY: dup2 and fcntl are async-signal-safe; this runs in the child
    // between fork and exec. The listener must reach the VMM as API_FD
    // without close-on-exec: dup2 clears the flag, except when the listener
    // already is API_FD (dup2 then does nothing).
    unsafe {
        cmd.pre_exec(move || {
            let rc = if fd == API_FD {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, API_FD)
            };
            if rc < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// An ELF64 "kernel" with `code` at 1 MiB, its entry.
pub fn kernel(path: &Path, code: &[u8]) {
    const ENTRY: u64 = 0x10_0000;
    const CODE_OFFSET: u64 = 0x1000;
    let len = code.len() as u64;
    let mut elf = Vec::new();
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\0");
    elf.extend_from_slice(&[0; 8]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    elf.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&ENTRY.to_le_bytes());
    elf.extend_from_slice(&64u64.to_le_bytes()); // program headers
    elf.extend_from_slice(&0u64.to_le_bytes()); // no section headers
    elf.extend_from_slice(&0u32.to_le_bytes());
    for half in [64u16, 56, 1, 0, 0, 0] {
        elf.extend_from_slice(&half.to_le_bytes());
    }
    elf.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // R+X
    for word in [CODE_OFFSET, ENTRY, ENTRY, len, len, 0x1000] {
        elf.extend_from_slice(&word.to_le_bytes());
    }
    elf.resize(CODE_OFFSET as usize, 0);
    elf.extend_from_slice(code);
    fs::write(path, elf).expect("write the kernel");
}

/// Runs the VMM on `elf` with virtio-pci, 64 MiB, one disk (`disk`, the
/// `--disk` value) and the serial port in `serial`, its stderr in
/// `stderr`, until the guest powers off (at most 60 s; the test fails with
/// the serial output and the log otherwise).
pub fn run_pci_guest(
    elf: &Path,
    disk: &str,
    serial: &Path,
    stderr: &Path,
) -> std::process::ExitStatus {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cloud-hypervisor"))
        .args(["-v", "--virtio-transport", "pci", "--kernel"])
        .arg(elf)
        .args(["--memory", "size=64M", "--console", "off", "--disk", disk])
        .arg("--serial")
        .arg(format!("file={}", serial.display()))
        .stderr(fs::File::create(stderr).expect("stderr file"))
        .spawn()
        .expect("start cloud-hypervisor");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the guest did not power off; serial: {:?}; log: {}",
                fs::read_to_string(serial).unwrap_or_default(),
                fs::read_to_string(stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
