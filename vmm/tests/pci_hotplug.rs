//! ACPI PCI hotplug with the real binary on this host's /dev/kvm, driven
//! through the REST API. The guest plays the part of Linux's acpiphp at
//! the register level: it polls the hotplug controller's PCID register
//! and ejects (B0EJ) whatever the VMM asks to remove, except slot 3, which
//! it never lets go. So the test sees both a completed unplug and a guest
//! that does not eject, plus the bad-input answers, all on a VM whose
//! vCPU and device threads run under their seccomp filters.

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use api::client::{api_request, HttpResponse, Method};
use vmm_sys_util::tempdir::TempDir;

mod common;
use common::kernel;

/// The guest, assembled from (GNU as, AT&T syntax):
///
/// ```text
///     cli
/// 1:  mov $0xe0100004,%esi      # PCID: slots the VMM wants gone (read clears)
///     mov (%rsi),%eax
///     and $0xfffffff7,%eax      # never eject slot 3
///     test %eax,%eax ; jz 2f
///     mov %eax,4(%rsi)          # B0EJ: eject them
/// 2:  mov $0x20000,%ecx         # wait a little between polls
/// 3:  pause ; dec %ecx ; jnz 3b
///     jmp 1b
/// ```
const GUEST: [u8; 31] = [
    0xfa, 0xbe, 0x04, 0x00, 0x10, 0xe0, 0x8b, 0x06, 0x83, 0xe0, 0xf7, 0x85, 0xc0, 0x74, 0x03, 0x89,
    0x46, 0x04, 0xb9, 0x00, 0x00, 0x02, 0x00, 0xf3, 0x90, 0xff, 0xc9, 0x75, 0xfa, 0xeb, 0xe2,
];

struct Vmm {
    child: Child,
    socket: std::path::PathBuf,
    stderr: std::path::PathBuf,
}

impl Vmm {
    fn call(&self, method: Method, endpoint: &str, body: Option<&str>) -> HttpResponse {
        api_request(&self.socket, method, endpoint, body.map(str::as_bytes))
            .unwrap_or_else(|e| panic!("{endpoint}: {e}; log: {}", self.log()))
    }

    fn put(&self, endpoint: &str, body: &str) -> (u16, String) {
        let r = self.call(Method::Put, endpoint, Some(body));
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    }

    fn counters(&self) -> String {
        let r = self.call(Method::Get, "vm.counters", None);
        String::from_utf8_lossy(&r.body).into_owned()
    }

    fn info(&self) -> serde_json::Value {
        let r = self.call(Method::Get, "vm.info", None);
        serde_json::from_slice(&r.body).expect("vm.info is JSON")
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Vmm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Our VMM running the guest, its virtio devices on `transport`.
fn start(dir: &Path, transport: &str) -> Vmm {
    let elf = dir.join("hotplug.elf");
    kernel(&elf, &GUEST);
    let socket = dir.join("api.sock");
    let stderr = dir.join("vmm.stderr");
    let child = Command::new(env!("CARGO_BIN_EXE_cloud-hypervisor"))
        .args(["-v", "--virtio-transport", transport, "--kernel"])
        .arg(&elf)
        .args([
            "--memory",
            "size=64M",
            "--console",
            "off",
            "--serial",
            "off",
        ])
        .arg("--api-socket")
        .arg(format!("path={}", socket.display()))
        .stderr(fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("start cloud-hypervisor");
    let vmm = Vmm {
        child,
        socket,
        stderr,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while api_request(&vmm.socket, Method::Get, "vmm.ping", None).is_err() {
        assert!(Instant::now() < deadline, "no API; log: {}", vmm.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    vmm
}

fn disk(dir: &Path, name: &str) -> String {
    let path = dir.join(name);
    fs::write(&path, vec![0u8; 1 << 20]).expect("disk image");
    path.display().to_string()
}

#[test]
fn disks_are_hot_plugged_and_ejected_and_a_guest_that_never_ejects_keeps_its_device() {
    if !common::kvm_available() {
        eprintln!("skipped: no usable /dev/kvm");
        return;
    }
    let tmp = TempDir::new().expect("temp dir");
    let dir = tmp.as_path();
    let vmm = start(dir, "pci");

    // Slot 1 holds the entropy device; the first disk goes to slot 2.
    let a = disk(dir, "a.img");
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}","id":"hpa"}}"#));
    assert_eq!(status, 200, "{body}; log: {}", vmm.log());
    let info: serde_json::Value = serde_json::from_str(&body).expect("PciDeviceInfo");
    assert_eq!(info["id"], "hpa");
    assert_eq!(info["bdf"], "0000:00:02.0");
    assert!(vmm.counters().contains("\"hpa\""));
    let vm = vmm.info();
    assert_eq!(vm["device_tree"]["hpa"]["pci_bdf"], "0000:00:02.0");
    assert_eq!(vm["config"]["disks"][0]["id"], "hpa");

    // Bad input: a duplicate id, an image that does not exist (upstream's
    // status for both is 500), removing an unknown id.
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}","id":"hpa"}}"#));
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("Failed to validate config"), "{body}");
    assert!(body.contains("Identifier hpa is not unique"), "{body}");
    let missing = dir.join("missing.img").display().to_string();
    let (status, body) = vmm.put(
        "vm.add-disk",
        &format!(r#"{{"path":"{missing}","id":"nofile"}}"#),
    );
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("missing.img"), "{body}");
    assert!(!vmm.counters().contains("nofile"));
    let (status, body) = vmm.put("vm.remove-device", r#"{"id":"nope"}"#);
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("No device with id"), "{body}");

    // The guest ejects slot 2: the answer comes once it did.
    let t = Instant::now();
    let (status, body) = vmm.put("vm.remove-device", r#"{"id":"hpa"}"#);
    assert_eq!(status, 204, "{body}; log: {}", vmm.log());
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(!vmm.counters().contains("\"hpa\""));
    let vm = vmm.info();
    assert!(vm["device_tree"].get("hpa").is_none(), "{vm}");
    assert!(vm["config"]["disks"]
        .as_array()
        .is_none_or(|d| d.is_empty()));

    // Slot 2 is free again and taken first; the next disk lands in slot 3,
    // which this guest never ejects.
    let b = disk(dir, "b.img");
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}","id":"hpa"}}"#));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("0000:00:02.0"), "{body}");
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{b}","id":"hpb"}}"#));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("0000:00:03.0"), "{body}");
    let t = Instant::now();
    let (status, body) = vmm.put("vm.remove-device", r#"{"id":"hpb"}"#);
    let waited = t.elapsed();
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("did not eject"), "{body}");
    assert!(body.contains("stays attached"), "{body}");
    assert!(waited >= Duration::from_secs(20), "{waited:?}");
    assert!(vmm.counters().contains("\"hpb\""), "the device stays");
    assert_eq!(vmm.info()["device_tree"]["hpb"]["pci_bdf"], "0000:00:03.0");

    // Fill the bus: 31 slots minus the entropy device and the two disks.
    let mut added = 0;
    let last = loop {
        let (status, body) = vmm.put(
            "vm.add-disk",
            &format!(r#"{{"path":"{a}","id":"fill{added}","readonly":true}}"#),
        );
        if status != 200 {
            break (status, body);
        }
        added += 1;
        assert!(added <= 28, "more devices than slots were accepted");
    };
    assert_eq!(added, 28);
    assert_eq!(last.0, 500, "{}", last.1);
    assert!(last.1.contains("no free slot"), "{}", last.1);

    let log = vmm.log();
    assert!(!log.contains("made a forbidden syscall"), "{log}");
    assert!(log.contains("hot-plugged hpa at 0000:00:02.0"), "{log}");
    assert!(log.contains("unplugged hpa from 0000:00:02.0"), "{log}");
}

#[test]
fn hotplug_on_virtio_mmio_is_refused_clearly() {
    if !common::kvm_available() {
        eprintln!("skipped: no usable /dev/kvm");
        return;
    }
    let tmp = TempDir::new().expect("temp dir");
    let dir = tmp.as_path();
    let vmm = start(dir, "mmio");
    let a = disk(dir, "a.img");
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}","id":"hpa"}}"#));
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("--virtio-transport pci"), "{body}");
    assert!(!vmm.counters().contains("hpa"));
    assert!(vmm.info()["config"]["disks"]
        .as_array()
        .is_none_or(|d| d.is_empty()));
    // Nothing to remove on mmio either: the boot devices are not disks.
    let (status, body) = vmm.put("vm.remove-device", r#"{"id":"__rng"}"#);
    assert_eq!(status, 500, "{body}");
}

/// A guest that moves a function's BAR 0, as Linux does for hot-plugged
/// functions (assembled from GNU as, AT&T syntax; `hex` prints eax as 8
/// hex digits and a newline on COM1):
///
/// ```text
///     cli
///     mov $0xe0010000,%esi            # ECAM of 00:02.0 (the disk)
///     movw $6,4(%rsi)                 # memory decode, bus master
///     movl $0xc0100000,0x10(%rsi)     # move BAR 0
///     mov 0x10(%rsi),%eax ; call hex  # BAR 0 reads back
///     mov $0xc0100000,%edi
///     movzwl 0x12(%rdi),%eax ; call hex   # num_queues at the new place
///     mov $0xc0008000,%edi
///     mov 0x10(%rdi),%eax ; call hex  # the old place decodes nothing
///     movl $0xc0004000,0x10(%rsi)     # onto the entropy device's BAR: refused
///     mov 0x10(%rsi),%eax ; call hex
///     mov $0x600,%dx ; mov $0x34,%al ; out %al,(%dx)   # ACPI S5
/// 1:  hlt ; jmp 1b
/// ```
const MOVER: [u8; 125] = [
    0xfa, 0xbe, 0x00, 0x00, 0x01, 0xe0, 0x66, 0xc7, 0x46, 0x04, 0x06, 0x00, 0xc7, 0x46, 0x10, 0x00,
    0x00, 0x10, 0xc0, 0x8b, 0x46, 0x10, 0xe8, 0x34, 0x00, 0x00, 0x00, 0xbf, 0x00, 0x00, 0x10, 0xc0,
    0x0f, 0xb7, 0x47, 0x12, 0xe8, 0x26, 0x00, 0x00, 0x00, 0xbf, 0x00, 0x80, 0x00, 0xc0, 0x8b, 0x47,
    0x10, 0xe8, 0x19, 0x00, 0x00, 0x00, 0xc7, 0x46, 0x10, 0x00, 0x40, 0x00, 0xc0, 0x8b, 0x46, 0x10,
    0xe8, 0x0a, 0x00, 0x00, 0x00, 0x66, 0xba, 0x00, 0x06, 0xb0, 0x34, 0xee, 0xf4, 0xeb, 0xfd, 0x50,
    0x51, 0x41, 0x89, 0xc0, 0xb9, 0x08, 0x00, 0x00, 0x00, 0x66, 0xba, 0xf8, 0x03, 0x41, 0xc1, 0xc0,
    0x04, 0x44, 0x89, 0xc0, 0x83, 0xe0, 0x0f, 0x83, 0xf8, 0x0a, 0x72, 0x03, 0x83, 0xc0, 0x27, 0x83,
    0xc0, 0x30, 0xee, 0xff, 0xc9, 0x75, 0xe6, 0xb0, 0x0a, 0xee, 0x59, 0x58, 0xc3,
];

#[test]
fn a_bar_the_guest_moves_is_decoded_at_its_new_place_under_the_sandbox() {
    if !common::kvm_available() {
        eprintln!("skipped: no usable /dev/kvm");
        return;
    }
    let tmp = TempDir::new().expect("temp dir");
    let dir = tmp.as_path();
    let elf = dir.join("mover.elf");
    kernel(&elf, &MOVER);
    let a = disk(dir, "a.img");
    let serial = dir.join("serial.out");
    let stderr = dir.join("vmm.stderr");
    let status = common::run_pci_guest(&elf, &format!("path={a}"), &serial, &stderr);
    let log = fs::read_to_string(&stderr).unwrap_or_default();
    let out = fs::read_to_string(&serial).unwrap_or_default();
    assert!(status.success(), "VMM exit {status}; log: {log}");
    assert!(!log.contains("made a forbidden syscall"), "{log}");
    assert!(
        !log.contains("ioeventfd"),
        "moving the ioeventfds failed: {log}"
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "c0100000", // BAR 0 where the guest put it
            "00000001", // the disk's num_queues, read there
            "ffffffff", // its old place decodes nothing
            "c0100000", // a move onto another BAR is refused
        ],
        "log: {log}"
    );
    assert!(
        log.contains("moved a BAR 0 from 0xc0008000 to 0xc0100000"),
        "{log}"
    );
    assert!(
        log.contains("cannot move from 0xc0100000 to 0xc0000000"),
        "{log}"
    );
}
