//! virtio-mem per memory zone with the real binary on this host's
//! /dev/kvm, on both transports: the zones' hotplug regions exist, bound
//! like their zones; `vm.resize-zone` asks a zone's device for a size
//! (seen in `vm.counters`, `vm.info` and `vm.balloon-stats`) and refuses,
//! with upstream's 500 and a message, what it cannot do. The guest only
//! halts (no driver plugs anything): the guest's side is the testbed's
//! `resize-zone` scenario.

use std::fs;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use api::client::{api_request, HttpResponse, Method};
use vmm_sys_util::tempdir::TempDir;

mod common;

const MIB: u64 = 1 << 20;

struct Vmm {
    child: Child,
    socket: PathBuf,
    stderr: PathBuf,
}

impl Vmm {
    fn start(dir: &Path, args: &[&str]) -> Self {
        let socket = dir.join("api.sock");
        let listener = UnixListener::bind(&socket).expect("bind the API socket");
        let stderr = dir.join("vmm.stderr");
        let mut cmd = common::vmm_with_api_fd(args, &listener, &stderr);
        let child = cmd.spawn().expect("start cloud-hypervisor");
        drop(listener);
        Self {
            child,
            socket,
            stderr,
        }
    }

    fn call(&self, method: Method, endpoint: &str, body: Option<String>) -> HttpResponse {
        api_request(
            &self.socket,
            method,
            endpoint,
            body.as_deref().map(str::as_bytes),
        )
        .unwrap_or_else(|e| panic!("{endpoint}: {e}; VMM log: {}", self.log()))
    }

    fn resize_zone(&self, id: &str, desired_ram: u64) -> (u16, String) {
        let body = serde_json::json!({"id": id, "desired_ram": desired_ram}).to_string();
        let r = self.call(Method::Put, "vm.resize-zone", Some(body));
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    }

    fn json(&self, endpoint: &str) -> serde_json::Value {
        let r = self.call(Method::Get, endpoint, None);
        assert_eq!(
            r.status,
            200,
            "{endpoint}: {}",
            String::from_utf8_lossy(&r.body)
        );
        serde_json::from_slice(&r.body).expect("JSON")
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Bytes of the mappings bound (MPOL_BIND) to host node `node`.
    fn bound_bytes(&self, node: u32) -> u64 {
        let maps = fs::read_to_string(format!("/proc/{}/maps", self.child.id())).expect("maps");
        let sizes: std::collections::BTreeMap<u64, u64> = maps
            .lines()
            .filter_map(|l| {
                let (range, _) = l.split_once(' ')?;
                let (a, b) = range.split_once('-')?;
                let (a, b) = (
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                );
                Some((a, b - a))
            })
            .collect();
        let policy = format!(" bind:{node}");
        self.numa_maps()
            .lines()
            .filter(|l| l.contains(&policy))
            .filter_map(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
            .filter_map(|start| sizes.get(&start))
            .sum()
    }

    fn numa_maps(&self) -> String {
        fs::read_to_string(format!("/proc/{}/numa_maps", self.child.id())).expect("numa_maps")
    }
}

impl Drop for Vmm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, transport: &str) -> Vmm {
    let kernel = dir.join("kernel");
    common::kernel(&kernel, &[0xfa, 0xf4, 0xeb, 0xfd]);
    Vmm::start(
        dir,
        &[
            "--virtio-transport",
            transport,
            "--kernel",
            kernel.to_str().expect("utf-8"),
            "--cpus",
            "boot=1",
            "--memory",
            "size=0,hotplug_method=virtio-mem",
            "--memory-zone",
            "id=fmem,size=64M,host_numa_node=0,hotplug_size=256M,hotplugged_size=32M",
            "id=smem,size=64M,shared=on,host_numa_node=0,hotplug_size=128M",
            "id=plain,size=32M",
            "--numa",
            "guest_numa_id=0,cpus=[0],memory_zones=[fmem,plain]",
            "guest_numa_id=1,memory_zones=smem",
            "--balloon",
            "size=[0,0],heterogeneous_memory=on",
            "--serial",
            "null",
            "--console",
            "off",
        ],
    )
}

fn check_transport(transport: &str) {
    let dir = TempDir::new().expect("tempdir");
    let vmm = start(dir.as_path(), transport);
    let counters = |zone: &str| vmm.json("vm.counters")[format!("__virtio_mem_{zone}")].clone();
    // The VMM is up once vm.counters answers with both devices.
    let c = counters("fmem");
    assert_eq!(c["region_size"], 256 * MIB, "{c}; log: {}", vmm.log());
    assert_eq!(c["requested_size"], 32 * MIB, "hotplugged_size at boot");
    assert_eq!(counters("smem")["region_size"], 128 * MIB);
    assert!(vmm.json("vm.counters").get("__virtio_mem_plain").is_none());

    // The regions are bound like their zones: the bound mappings (which
    // the kernel may merge when adjacent) cover both zones and both
    // regions, the SMem region being a memfd of its own.
    let bound = vmm.bound_bytes(0);
    assert!(
        bound >= (64 + 256 + 64 + 128) * MIB,
        "{bound} bytes bound: {}",
        vmm.numa_maps()
    );
    let memfds = vmm
        .numa_maps()
        .lines()
        .filter(|l| l.contains("bind:0") && l.contains("ch-zone-smem"))
        .count();
    assert_eq!(memfds, 2, "{}", vmm.numa_maps());

    // Grow SMem by 64 MiB: the device is asked at once.
    assert_eq!(vmm.resize_zone("smem", 128 * MIB), (204, String::new()));
    assert_eq!(counters("smem")["requested_size"], 64 * MIB);
    let info = vmm.json("vm.info");
    let smem = &info["config"]["memory"]["zones"][1];
    assert_eq!(smem["hotplugged_size"], 64 * MIB, "{info}");
    assert_eq!(info["config"]["memory"]["hotplug_method"], "VirtioMem");
    // Nothing is plugged by a guest without a driver.
    assert_eq!(info["memory_actual_size"], 160 * MIB);
    let stats = vmm.json("vm.balloon-stats");
    assert_eq!(stats["tiers"][1]["hotplug_size"], 128 * MIB, "{stats}");
    assert_eq!(stats["tiers"][1]["hotplug_requested"], 64 * MIB);
    assert_eq!(stats["tiers"][1]["hotplug_plugged"], 0);
    assert_eq!(stats["tiers"][0]["hotplug_requested"], 32 * MIB);

    // What cannot be done: 500 with a message, and nothing changes.
    for (id, ram, why) in [
        ("smem", 64 * MIB + 256 * MIB, "exceed"),
        ("smem", 32 * MIB, "less"),
        ("smem", 64 * MIB + 3 * MIB, "2 MiB"),
        ("plain", 64 * MIB, "no virtio-mem"),
        ("nonexistent", 64 * MIB, "no memory zone"),
    ] {
        let (status, body) = vmm.resize_zone(id, ram);
        assert_eq!(status, 500, "{id} {ram}: {body}");
        assert!(body.contains(why), "{id} {ram}: {body}");
    }
    assert_eq!(counters("smem")["requested_size"], 64 * MIB);

    // Shrinking back to the boot size asks for nothing plugged.
    assert_eq!(vmm.resize_zone("smem", 64 * MIB).0, 204);
    assert_eq!(counters("smem")["requested_size"], 0);
    assert_eq!(counters("smem")["resizes"], 2);
}

#[test]
fn resize_zone_on_virtio_mmio() {
    if !common::kvm_available() {
        eprintln!("skipped: no /dev/kvm");
        return;
    }
    check_transport("mmio");
}

#[test]
fn resize_zone_on_virtio_pci() {
    if !common::kvm_available() {
        eprintln!("skipped: no /dev/kvm");
        return;
    }
    check_transport("pci");
}

#[test]
fn hotplug_size_without_virtio_mem_is_refused_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_cloud-hypervisor"))
        .args([
            "--kernel",
            "/nonexistent",
            "--memory",
            "size=0",
            "--memory-zone",
            "id=z,size=64M,hotplug_size=128M",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hotplug_method=virtio-mem"), "{err}");
}
