//! ACPI PCI hotplug with the real binary on this host's /dev/kvm, driven
//! through the REST API. The guest plays the part of Linux's acpiphp at
//! the register level: it polls the hotplug controller, prints on COM1
//! every PCIU bitmap (slots added) it reads, and ejects (B0EJ) whatever
//! PCID asks to remove, except slot 3, which it never lets go. So the
//! tests see a completed unplug, a guest that never ejects (the VMM must
//! not wait for it), a guest that learns of changes made while it was
//! paused once it runs again, and the bad-input answers, all on a VM whose
//! vCPU and device threads run under their seccomp filters.

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use api::client::{api_request, HttpResponse, Method};
use vmm_sys_util::tempdir::TempDir;

mod common;
use common::kernel;

/// The guest, assembled from (GNU as, AT&T syntax; `hex` prints eax as 8
/// hex digits and a newline on COM1):
///
/// ```text
///     cli
/// 1:  mov $0xe0100000,%esi      # the hotplug controller
///     mov (%rsi),%eax           # PCIU: slots added (read clears)
///     test %eax,%eax ; jz 2f
///     call hex                  # tell the host what the guest saw
/// 2:  mov 4(%rsi),%eax          # PCID: slots the VMM wants gone (read clears)
///     and $0xfffffff7,%eax      # never eject slot 3
///     test %eax,%eax ; jz 3f
///     mov %eax,8(%rsi)          # B0EJ: eject them
/// 3:  mov $0x20000,%ecx         # wait a little between polls
/// 4:  pause ; dec %ecx ; jnz 4b
///     jmp 1b
/// ```
const GUEST: [u8; 89] = [
    0xfa, 0xbe, 0x00, 0x00, 0x10, 0xe0, 0x8b, 0x06, 0x85, 0xc0, 0x74, 0x05, 0xe8, 0x1a, 0x00, 0x00,
    0x00, 0x8b, 0x46, 0x04, 0x83, 0xe0, 0xf7, 0x85, 0xc0, 0x74, 0x03, 0x89, 0x46, 0x08, 0xb9, 0x00,
    0x00, 0x02, 0x00, 0xf3, 0x90, 0xff, 0xc9, 0x75, 0xfa, 0xeb, 0xd6, 0x50, 0x51, 0x41, 0x89, 0xc0,
    0xb9, 0x08, 0x00, 0x00, 0x00, 0x66, 0xba, 0xf8, 0x03, 0x41, 0xc1, 0xc0, 0x04, 0x44, 0x89, 0xc0,
    0x83, 0xe0, 0x0f, 0x83, 0xf8, 0x0a, 0x72, 0x03, 0x83, 0xc0, 0x27, 0x83, 0xc0, 0x30, 0xee, 0xff,
    0xc9, 0x75, 0xe6, 0xb0, 0x0a, 0xee, 0x59, 0x58, 0xc3,
];

/// How long a request that must not wait for the guest may take: an API
/// round trip on a loaded 2-core host, far below any guest's eject time.
const PROMPT: Duration = Duration::from_secs(2);

/// How long the guest may take to act on a hotplug event (it polls every
/// few hundred milliseconds under PVM's instruction emulation).
const GUEST_REACTS: Duration = Duration::from_secs(20);

struct Vmm {
    child: Child,
    socket: std::path::PathBuf,
    stderr: std::path::PathBuf,
    serial: std::path::PathBuf,
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

    /// A bodiless PUT (vm.pause, vm.resume, vm.shutdown, vm.boot) that
    /// must succeed with 204.
    fn act(&self, endpoint: &str) {
        let r = self.call(Method::Put, endpoint, None);
        assert_eq!(
            r.status,
            204,
            "{endpoint}: {}; log: {}",
            String::from_utf8_lossy(&r.body),
            self.log()
        );
    }

    /// `vm.remove-device` of `id`: it must answer 204 promptly, whatever
    /// the guest does.
    fn remove(&self, id: &str) {
        let t = Instant::now();
        let (status, body) = self.put("vm.remove-device", &format!(r#"{{"id":"{id}"}}"#));
        let took = t.elapsed();
        assert_eq!(status, 204, "remove {id}: {body}; log: {}", self.log());
        assert!(took < PROMPT, "remove {id} took {took:?}");
    }

    fn counters(&self) -> String {
        let r = self.call(Method::Get, "vm.counters", None);
        String::from_utf8_lossy(&r.body).into_owned()
    }

    fn info(&self) -> serde_json::Value {
        let r = self.call(Method::Get, "vm.info", None);
        serde_json::from_slice(&r.body).expect("vm.info is JSON")
    }

    /// The ids of the configuration's disks, in order.
    fn config_disks(&self) -> Vec<String> {
        self.info()["config"]["disks"]
            .as_array()
            .map(|d| {
                d.iter()
                    .map(|d| d["id"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `id` is attached: in the device tree and in vm.counters.
    fn attached(&self, id: &str) -> bool {
        let in_tree = self.info()["device_tree"].get(id).is_some();
        let in_counters = self.counters().contains(&format!("\"{id}\""));
        assert_eq!(
            in_tree, in_counters,
            "{id}: the device tree and vm.counters disagree"
        );
        in_tree
    }

    /// Waits (bounded) until the guest ejected `id` and the VMM tore it
    /// down. The API offers no event for it; upstream's clients poll too.
    fn wait_detached(&self, id: &str) {
        let deadline = Instant::now() + GUEST_REACTS;
        while self.attached(id) {
            assert!(
                Instant::now() < deadline,
                "{id} is still attached {GUEST_REACTS:?} after its removal; log: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The PCIU bitmaps the guest read, in order (what it printed).
    fn guest_saw(&self) -> Vec<u32> {
        fs::read_to_string(&self.serial)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| u32::from_str_radix(l, 16).ok())
            .collect()
    }

    /// Waits (bounded) until the guest read PCIU with `slot`'s bit set.
    fn wait_guest_saw_slot(&self, slot: u8) {
        let deadline = Instant::now() + GUEST_REACTS;
        while !self.guest_saw().iter().any(|bits| bits & (1 << slot) != 0) {
            assert!(
                Instant::now() < deadline,
                "the guest did not see slot {slot} added within {GUEST_REACTS:?} \
                 (PCIU reads: {:x?}); log: {}",
                self.guest_saw(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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
    let serial = dir.join("serial.out");
    let child = Command::new(env!("CARGO_BIN_EXE_cloud-hypervisor"))
        .args(["-v", "--virtio-transport", transport, "--kernel"])
        .arg(&elf)
        .args(["--memory", "size=64M", "--console", "off", "--serial"])
        .arg(format!("file={}", serial.display()))
        .arg("--api-socket")
        .arg(format!("path={}", socket.display()))
        .stderr(fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("start cloud-hypervisor");
    let vmm = Vmm {
        child,
        socket,
        stderr,
        serial,
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

/// What every test here starts from: a temporary directory, our VMM in it
/// with its devices on `transport`, and a 1 MiB disk image `a.img`. None
/// (the test is skipped) without a usable /dev/kvm.
struct Setup {
    // Declared first so the binding made from it (listed first) is dropped
    // last: the VMM stops before its directory goes.
    tmp: TempDir,
    vmm: Vmm,
    a: String,
}

fn setup(transport: &str) -> Option<Setup> {
    if !common::kvm_available() {
        eprintln!("skipped: no usable /dev/kvm");
        return None;
    }
    let tmp = TempDir::new().expect("temp dir");
    let vmm = start(tmp.as_path(), transport);
    let a = disk(tmp.as_path(), "a.img");
    Some(Setup { tmp, vmm, a })
}

#[test]
fn disks_are_hot_plugged_and_ejected_and_a_guest_that_never_ejects_cannot_stall_the_vmm() {
    let Some(Setup { tmp, vmm, a }) = setup("pci") else {
        return;
    };
    let dir = tmp.as_path();

    // Slot 1 holds the entropy device; the first disk goes to slot 2.
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}","id":"hpa"}}"#));
    assert_eq!(status, 200, "{body}; log: {}", vmm.log());
    let info: serde_json::Value = serde_json::from_str(&body).expect("PciDeviceInfo");
    assert_eq!(info["id"], "hpa");
    assert_eq!(info["bdf"], "0000:00:02.0");
    assert!(vmm.counters().contains("\"hpa\""));
    let vm = vmm.info();
    assert_eq!(vm["device_tree"]["hpa"]["pci_bdf"], "0000:00:02.0");
    assert_eq!(vm["config"]["disks"][0]["id"], "hpa");
    // The guest read PCIU: slot 2 appeared.
    vmm.wait_guest_saw_slot(2);

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
    // Boot-time devices other than disks and NICs cannot be removed.
    let (status, body) = vmm.put("vm.remove-device", r#"{"id":"__rng"}"#);
    assert_eq!(status, 500, "{body}");
    assert!(vmm.attached("__rng"));

    // The answer comes at once (as upstream's); the configuration forgets
    // the disk then, and the disk goes once the guest ejected slot 2.
    vmm.remove("hpa");
    assert!(vmm.config_disks().is_empty(), "{}", vmm.info());
    vmm.wait_detached("hpa");
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
    vmm.wait_guest_saw_slot(3);

    // The guest never ejects hpb: the answer still comes at once, and the
    // disk stays attached and listed (device tree, counters) while the
    // configuration no longer has it.
    vmm.remove("hpb");
    assert_eq!(vmm.config_disks(), ["hpa"]);
    assert!(
        vmm.attached("hpb"),
        "the device stays until the guest ejects it"
    );
    assert_eq!(vmm.info()["device_tree"]["hpb"]["pci_bdf"], "0000:00:03.0");
    // Asking again asks the guest again (upstream answers 204 too).
    vmm.remove("hpb");
    assert!(vmm.attached("hpb"));
    // Its id stays taken while it is attached.
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{b}","id":"hpb"}}"#));
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("Identifier hpb is not unique"), "{body}");
    assert!(body.contains("still attached"), "{body}");
    assert_eq!(vmm.config_disks(), ["hpa"]);

    // Fill the bus: 31 slots minus the entropy device and the two disks
    // (hpb still holds slot 3).
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
    assert!(
        log.contains("asked the guest to eject hpb at 0000:00:03.0 (again)"),
        "{log}"
    );
    assert!(!log.contains("unplugged hpb"), "{log}");
}

#[test]
fn a_pending_removal_keeps_its_id_until_ejected_and_a_shutdown_completes_it() {
    let Some(Setup { tmp: _tmp, vmm, a }) = setup("pci") else {
        return;
    };

    // "keep" in slot 2, an unnamed disk in slot 3 (never ejected): it is
    // named as upstream names it, _disk0.
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}","id":"keep"}}"#));
    assert_eq!(status, 200, "{body}; log: {}", vmm.log());
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}"}}"#));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""id":"_disk0""#), "{body}");
    assert!(body.contains("0000:00:03.0"), "{body}");
    vmm.remove("_disk0");
    assert_eq!(vmm.config_disks(), ["keep"]);
    assert!(vmm.attached("_disk0"));

    // The configuration alone would name the next unnamed disk _disk0
    // again; the attached one still holds that id.
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}"}}"#));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""id":"_disk1""#), "{body}");
    assert!(body.contains("0000:00:04.0"), "{body}");
    assert_eq!(vmm.config_disks(), ["keep", "_disk1"]);
    assert!(vmm.attached("_disk0") && vmm.attached("_disk1"));

    // Shutting down with the removal pending ends it: the configuration
    // no longer has the disk, so the next boot does not bring it back.
    vmm.act("vm.shutdown");
    assert_eq!(vmm.config_disks(), ["keep", "_disk1"]);
    vmm.act("vm.boot");
    let tree = vmm.info()["device_tree"].clone();
    assert_eq!(tree["keep"]["pci_bdf"], "0000:00:02.0", "{tree}");
    assert_eq!(tree["_disk1"]["pci_bdf"], "0000:00:03.0", "{tree}");
    assert!(tree.get("_disk0").is_none(), "{tree}");
    assert!(!vmm.counters().contains("\"_disk0\""));
    // The id is free again.
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}","id":"_disk0"}}"#));
    assert_eq!(status, 200, "{body}; log: {}", vmm.log());
    let log = vmm.log();
    assert!(!log.contains("made a forbidden syscall"), "{log}");
}

#[test]
fn a_paused_vm_gets_hotplug_changes_and_the_guest_sees_them_when_resumed() {
    let Some(Setup { tmp: _tmp, vmm, a }) = setup("pci") else {
        return;
    };

    // Add while paused: plugged at once (as upstream), parked with the
    // rest of the VM; the guest cannot have seen it yet.
    vmm.act("vm.pause");
    let t = Instant::now();
    let (status, body) = vmm.put("vm.add-disk", &format!(r#"{{"path":"{a}","id":"pz"}}"#));
    assert!(t.elapsed() < PROMPT, "{:?}", t.elapsed());
    assert_eq!(status, 200, "{body}; log: {}", vmm.log());
    assert!(body.contains("0000:00:02.0"), "{body}");
    let vm = vmm.info();
    assert_eq!(vm["state"], "Paused", "{vm}");
    assert_eq!(vm["device_tree"]["pz"]["pci_bdf"], "0000:00:02.0", "{vm}");
    assert_eq!(vmm.config_disks(), ["pz"]);
    assert!(vmm.guest_saw().is_empty(), "{:?}", vmm.guest_saw());
    // Resumed, the guest reads PCIU and finds slot 2.
    vmm.act("vm.resume");
    vmm.wait_guest_saw_slot(2);

    // Remove while paused: answered at once; the guest ejects only once
    // it runs again.
    vmm.act("vm.pause");
    vmm.remove("pz");
    assert!(vmm.config_disks().is_empty());
    assert!(vmm.attached("pz"), "a paused guest cannot have ejected it");
    vmm.act("vm.resume");
    vmm.wait_detached("pz");
    let log = vmm.log();
    assert!(!log.contains("made a forbidden syscall"), "{log}");
    assert!(log.contains("unplugged pz from 0000:00:02.0"), "{log}");
}

#[test]
fn hotplug_on_virtio_mmio_is_refused_clearly() {
    let Some(Setup { tmp: _tmp, vmm, a }) = setup("mmio") else {
        return;
    };
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
