//! Keeps api/openapi/cloud-hypervisor.yaml and the code in step:
//! * the routes (path + method) in the file are exactly the router's;
//! * every schema's property names are exactly the serde fields (checked on
//!   a fully populated sample of the Rust type, built with struct literals
//!   so that a new field fails to compile here until it is added);
//! * `required` is exactly the set of fields serde cannot do without;
//! * every `default` is what serde fills in;
//! * samples of every type validate against the schema (a small validator
//!   for the subset of JSON Schema the file uses);
//! * enums list exactly the Rust variants;
//! * every JSON route's documented body has a full sample that the router
//!   accepts, and for the bodies of features this VMM lacks (upstream's
//!   types, not modelled here) `required` is exactly what the router checks.
//!
//! The schemas nested in `VmConfig` describe the JSON as it appears there:
//! `VmConfig` is written with upstream's default fields and reads them, so
//! their samples are cut out of a serialized `VmConfig` and read back
//! through one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use api::router::{API_PREFIX, ROUTES};
use api::{
    ApiRequest, BalloonSize, BalloonStatsResponse, BalloonTierStats, DeviceNode, PciDeviceInfo,
    VmInfo, VmRemoveDeviceData, VmResizeData, VmResizeDiskData, VmResizeZoneData, VmState,
    VmmPingResponse,
};
use serde_json::{json, Value};
use vm_config::*;

fn spec() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/cloud-hypervisor.yaml");
    let text = std::fs::read_to_string(path).expect("yaml readable");
    serde_yaml::from_str(&text).expect("yaml parses")
}

fn schema<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec.pointer(&format!("/components/schemas/{name}"))
        .unwrap_or_else(|| panic!("schema {name} missing"))
}

fn resolve<'a>(spec: &'a Value, s: &'a Value) -> &'a Value {
    match s.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.strip_prefix("#/components/schemas/").expect("local ref");
            resolve(spec, schema(spec, name))
        }
        None => s,
    }
}

/// Validates `v` against schema `s` (the subset used by the file).
fn validate(spec: &Value, s: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        for part in all {
            validate(spec, part, v, at)?;
        }
        return Ok(());
    }
    let s = resolve(spec, s);
    if v.is_null() {
        return if s.get("nullable") == Some(&Value::Bool(true)) {
            Ok(())
        } else {
            Err(format!("{at}: null not allowed"))
        };
    }
    if let Some(alts) = s.get("oneOf").and_then(Value::as_array) {
        let ok = alts
            .iter()
            .filter(|a| validate(spec, a, v, at).is_ok())
            .count();
        return if ok == 1 {
            Ok(())
        } else {
            Err(format!("{at}: {ok} oneOf alternatives match {v}"))
        };
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return Err(format!("{at}: {v} not in enum {e:?}"));
        }
    }
    let ty = s.get("type").and_then(Value::as_str);
    match ty {
        Some("object") => {
            let obj = v.as_object().ok_or(format!("{at}: not an object: {v}"))?;
            let props = s.get("properties").and_then(Value::as_object);
            for req in s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let req = req.as_str().unwrap();
                if !obj.contains_key(req) {
                    return Err(format!("{at}: required {req} missing"));
                }
            }
            for (k, val) in obj {
                let sub = props.and_then(|p| p.get(k));
                match (sub, s.get("additionalProperties")) {
                    (Some(sub), _) => validate(spec, sub, val, &format!("{at}.{k}"))?,
                    (None, Some(Value::Bool(false))) => {
                        return Err(format!("{at}: unexpected property {k}"))
                    }
                    (None, Some(extra)) if extra.is_object() => {
                        validate(spec, extra, val, &format!("{at}.{k}"))?
                    }
                    (None, _) => {}
                }
            }
        }
        Some("array") => {
            let arr = v.as_array().ok_or(format!("{at}: not an array: {v}"))?;
            let n = arr.len() as u64;
            if s.get("minItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
                || s.get("maxItems")
                    .and_then(Value::as_u64)
                    .is_some_and(|m| n > m)
            {
                return Err(format!("{at}: wrong length {n}"));
            }
            for (i, item) in arr.iter().enumerate() {
                validate(spec, &s["items"], item, &format!("{at}[{i}]"))?;
            }
        }
        Some("integer") => {
            if !(v.is_u64() || v.is_i64()) {
                return Err(format!("{at}: not an integer: {v}"));
            }
            let n = v.as_f64().unwrap();
            if s.get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|m| n < m)
                || s.get("maximum")
                    .and_then(Value::as_f64)
                    .is_some_and(|m| n > m)
            {
                return Err(format!("{at}: {v} out of range"));
            }
        }
        Some("string") if !v.is_string() => return Err(format!("{at}: not a string: {v}")),
        Some("boolean") if !v.is_boolean() => return Err(format!("{at}: not a boolean: {v}")),
        Some("string" | "boolean") => {}
        other => return Err(format!("{at}: schema type {other:?} not handled")),
    }
    Ok(())
}

/// A type described by a named schema: a full sample and how serde reads it.
struct Case {
    name: &'static str,
    full: Value,
    parses: fn(&Value) -> bool,
}

fn parses<T: serde::de::DeserializeOwned>(v: &Value) -> bool {
    serde_json::from_value::<T>(v.clone()).is_ok()
}

fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Option<Value> {
    serde_json::from_value::<T>(v.clone())
        .ok()
        .map(|t| serde_json::to_value(t).unwrap())
}

fn full_topology() -> CpuTopology {
    CpuTopology {
        threads_per_core: 1,
        cores_per_die: 2,
        dies_per_package: 1,
        packages: 1,
    }
}

fn full_cpus() -> CpusConfig {
    CpusConfig {
        boot_vcpus: 2,
        max_vcpus: 2,
        topology: Some(full_topology()),
        kvm_hyperv: false,
        max_phys_bits: 46,
        affinity: Some(vec![CpuAffinity {
            vcpu: 0,
            host_cpus: vec![0, 1],
        }]),
    }
}

fn full_zone() -> MemoryZoneConfig {
    MemoryZoneConfig {
        id: "fast".into(),
        size: 1 << 30,
        file: Some(PathBuf::from("/dev/dax0.0")),
        shared: true,
        hugepages: false,
        hugepage_size: Some(2 << 20),
        host_numa_node: Some(0),
        hotplug_size: Some(0),
        hotplugged_size: Some(0),
        prefault: false,
    }
}

fn full_memory() -> MemoryConfig {
    MemoryConfig {
        size: 0,
        mergeable: false,
        shared: true,
        hugepages: false,
        hugepage_size: Some(2 << 20),
        prefault: false,
        thp: true,
        hotplug_size: Some(0),
        hotplug_method: vm_config::HotplugMethod::VirtioMem,
        zones: Some(vec![full_zone()]),
    }
}

fn full_numa() -> NumaConfig {
    NumaConfig {
        guest_numa_id: 1,
        cpus: Some(vec![0, 1]),
        distances: Some(vec![NumaDistance {
            destination: 0,
            distance: 20,
        }]),
        memory_zones: Some(vec!["fast".into()]),
        latency_ns: Some(300),
        bandwidth_mbps: Some(10_000),
    }
}

fn full_payload() -> PayloadConfig {
    PayloadConfig {
        firmware: Some("/fw".into()),
        kernel: Some("/vmlinux".into()),
        cmdline: Some("console=ttyS0".into()),
        initramfs: Some("/initrd".into()),
    }
}

fn full_console() -> ConsoleConfig {
    ConsoleConfig {
        file: Some("/tmp/serial.log".into()),
        socket: Some("/tmp/serial.sock".into()),
        mode: ConsoleOutputMode::File,
        iommu: false,
    }
}

fn full_vm_config() -> VmConfig {
    VmConfig {
        cpus: full_cpus(),
        memory: full_memory(),
        payload: Some(full_payload()),
        serial: full_console(),
        console: full_console(),
        numa: Some(vec![full_numa()]),
        balloon: Some(full_balloon()),
        disks: Some(vec![full_disk()]),
        net: Some(vec![full_net()]),
        rng: RngConfig {
            src: "/dev/hwrng".into(),
            iommu: false,
        },
        iommu: false,
        watchdog: false,
        platform: full_platform(),
    }
}

fn full_platform() -> PlatformConfig {
    PlatformConfig {
        system_serial_number: Some("ds=nocloud;s=http://10.0.0.1/".into()),
        system_uuid: Some("4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6".into()),
        oem_strings: Some(vec!["io.systemd.credential:a=b".into()]),
        system_manufacturer: Some("Cloud Hypervisor".into()),
        system_product_name: Some("cloud-hypervisor".into()),
        system_version: Some("1".into()),
        system_family: Some("family".into()),
        system_sku_number: Some("sku".into()),
        chassis_asset_tag: Some("tag".into()),
    }
}

fn full_disk() -> DiskConfig {
    DiskConfig {
        path: "/images/disk.raw".into(),
        readonly: true,
        direct: true,
        iommu: false,
        num_queues: 1,
        queue_size: 64,
        id: Some("root".into()),
        serial: Some("disk-serial".into()),
    }
}

fn full_net() -> NetConfig {
    NetConfig {
        tap: Some("tap0".into()),
        ip: "192.168.10.10".parse().unwrap(),
        mask: "255.255.255.0".parse().unwrap(),
        mac: "12:34:56:78:90:01".parse().unwrap(),
        host_mac: Some("12:34:56:78:90:02".parse().unwrap()),
        mtu: Some(1400),
        iommu: false,
        num_queues: 2,
        queue_size: 256,
        id: Some("net0".into()),
        offload_tso: false,
        offload_ufo: false,
        offload_csum: false,
    }
}

fn full_balloon() -> BalloonConfig {
    BalloonConfig {
        size: BalloonSize {
            fmem: 1 << 30,
            smem: 2 << 30,
        },
        deflate_on_oom: true,
        free_page_reporting: false,
        statistics: true,
        heterogeneous_memory: true,
    }
}

fn full_balloon_stats() -> BalloonStatsResponse {
    let tier = |name: &str| BalloonTierStats {
        tier: name.into(),
        target: 4096,
        actual: 4096,
        host_inflated: 4096,
        guest_total: Some(1 << 30),
        guest_free: Some(1 << 29),
        guest_used: Some(1 << 29),
        hotplug_size: 1 << 30,
        hotplug_requested: 256 << 20,
        hotplug_plugged: 128 << 20,
    };
    BalloonStatsResponse {
        balloon_actual: 8192,
        heterogeneous_memory: true,
        stats_updates: 3,
        tiers: vec![tier("fmem"), tier("smem")],
        stats: BTreeMap::from([("free_memory".into(), 1 << 20)]),
    }
}

fn full_device_node() -> DeviceNode {
    DeviceNode {
        id: "balloon0".into(),
        resources: vec![json!({"MmioAddressRange": {"base": 4096, "size": 4096}})],
        children: vec!["child".into()],
        pci_bdf: Some("0000:00:05.0".into()),
    }
}

fn v<T: serde::Serialize>(t: T) -> Value {
    serde_json::to_value(t).unwrap()
}

/// The full `VmConfig` as written (with upstream's default fields).
fn vm_json() -> Value {
    v(full_vm_config())
}

/// Reads `inner` as the part of a `VmConfig` that `wrap` puts it in, and
/// writes it back as it comes out there (`at` finds it).
fn roundtrip_in_vm(wrap: Value, at: fn(&Value) -> &Value) -> Option<Value> {
    roundtrip::<VmConfig>(&wrap).map(|c| at(&c).clone())
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "VmConfig",
            full: v(full_vm_config()),
            parses: parses::<VmConfig>,
        },
        Case {
            name: "CpusConfig",
            full: vm_json()["cpus"].clone(),
            parses: |c| parses::<VmConfig>(&json!({"cpus": c})),
        },
        Case {
            name: "CpuTopology",
            full: v(full_topology()),
            parses: parses::<CpuTopology>,
        },
        Case {
            name: "CpuAffinity",
            full: v(full_cpus().affinity.unwrap().remove(0)),
            parses: parses::<CpuAffinity>,
        },
        Case {
            name: "MemoryConfig",
            full: vm_json()["memory"].clone(),
            parses: |m| parses::<VmConfig>(&json!({"memory": m})),
        },
        Case {
            name: "MemoryZoneConfig",
            full: vm_json()["memory"]["zones"][0].clone(),
            parses: |z| parses::<VmConfig>(&json!({"memory": {"size": 0, "zones": [z]}})),
        },
        Case {
            name: "NumaConfig",
            full: v(full_numa()),
            parses: parses::<NumaConfig>,
        },
        Case {
            name: "NumaDistance",
            full: v(full_numa().distances.unwrap().remove(0)),
            parses: parses::<NumaDistance>,
        },
        Case {
            name: "PayloadConfig",
            full: v(full_payload()),
            parses: parses::<PayloadConfig>,
        },
        Case {
            name: "ConsoleConfig",
            full: vm_json()["console"].clone(),
            parses: |c| parses::<VmConfig>(&json!({"console": c})),
        },
        Case {
            name: "SerialConfig",
            full: vm_json()["serial"].clone(),
            parses: |c| parses::<VmConfig>(&json!({"serial": c})),
        },
        Case {
            name: "DebugConsoleConfig",
            full: vm_json()["debug_console"].clone(),
            parses: |c| parses::<VmConfig>(&json!({"debug_console": c})),
        },
        Case {
            name: "PlatformConfig",
            full: vm_json()["platform"].clone(),
            parses: |p| parses::<VmConfig>(&json!({"platform": p})),
        },
        Case {
            name: "VmInfo",
            full: v(VmInfo {
                config: full_vm_config(),
                state: VmState::Running,
                memory_actual_size: 1 << 30,
                device_tree: Some(BTreeMap::from([("balloon0".into(), full_device_node())])),
            }),
            parses: parses::<VmInfo>,
        },
        Case {
            name: "DeviceNode",
            full: v(full_device_node()),
            parses: parses::<DeviceNode>,
        },
        Case {
            name: "PciDeviceInfo",
            full: v(PciDeviceInfo {
                id: "_disk1".into(),
                bdf: "0000:00:05.0".into(),
            }),
            parses: parses::<PciDeviceInfo>,
        },
        Case {
            name: "VmmPingResponse",
            full: v(VmmPingResponse::for_this_process(
                "1.0",
                vec!["tiers".into()],
            )),
            parses: parses::<VmmPingResponse>,
        },
        Case {
            name: "RngConfig",
            full: vm_json()["rng"].clone(),
            parses: |r| parses::<VmConfig>(&json!({"rng": r})),
        },
        Case {
            name: "DiskConfig",
            full: vm_json()["disks"][0].clone(),
            parses: |d| parses::<VmConfig>(&json!({"disks": [d]})),
        },
        Case {
            name: "NetConfig",
            full: vm_json()["net"][0].clone(),
            parses: |n| parses::<VmConfig>(&json!({"net": [n]})),
        },
        Case {
            name: "BalloonConfig",
            full: vm_json()["balloon"].clone(),
            parses: |b| parses::<VmConfig>(&json!({"balloon": b})),
        },
        Case {
            name: "BalloonStats",
            full: v(full_balloon_stats()),
            parses: parses::<BalloonStatsResponse>,
        },
        Case {
            name: "BalloonTierStats",
            full: v(full_balloon_stats().tiers.remove(0)),
            parses: parses::<BalloonTierStats>,
        },
        Case {
            name: "VmResize",
            full: v(VmResizeData {
                desired_vcpus: Some(2),
                desired_ram: Some(1 << 30),
                desired_balloon: Some(BalloonSize { fmem: 1, smem: 2 }),
            }),
            parses: parses::<VmResizeData>,
        },
        Case {
            name: "VmResizeZone",
            full: v(full_resize_zone()),
            parses: parses::<VmResizeZoneData>,
        },
        Case {
            name: "VmResizeDisk",
            full: v(full_resize_disk()),
            parses: parses::<VmResizeDiskData>,
        },
        Case {
            name: "VmRemoveDevice",
            full: v(VmRemoveDeviceData { id: "root".into() }),
            parses: parses::<VmRemoveDeviceData>,
        },
    ]
}

fn full_resize_zone() -> VmResizeZoneData {
    VmResizeZoneData {
        id: "fast".into(),
        desired_ram: 2 << 30,
    }
}

fn full_resize_disk() -> VmResizeDiskData {
    VmResizeDiskData {
        id: "root".into(),
        desired_size: 1 << 30,
    }
}

#[test]
fn routes_in_the_file_are_exactly_the_routers() {
    let spec = spec();
    let servers = spec["servers"][0]["url"].as_str().unwrap();
    assert_eq!(
        format!("{}/", servers.trim_start_matches("http://localhost")),
        API_PREFIX
    );
    let mut in_file = BTreeSet::new();
    for (path, ops) in spec["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            in_file.insert((
                path.trim_start_matches('/').to_string(),
                method.to_uppercase(),
            ));
        }
    }
    let in_code: BTreeSet<_> = ROUTES
        .iter()
        .map(|r| (r.endpoint.to_string(), r.method.to_string()))
        .collect();
    assert_eq!(in_file, in_code);
}

#[test]
fn request_bodies_are_documented_exactly_for_json_routes() {
    let spec = spec();
    for r in ROUTES {
        let op = &spec["paths"][format!("/{}", r.endpoint)][r.method.to_lowercase()];
        let has_body = op.get("requestBody").is_some();
        assert_eq!(
            has_body,
            r.body == api::router::BodyKind::Json,
            "{}",
            r.endpoint
        );
        let ok = r.empty_status.to_string();
        if r.method == "PUT" {
            assert!(op["responses"].get(&ok).is_some(), "{} {ok}", r.endpoint);
        }
    }
}

#[test]
fn full_samples_validate_and_name_every_property() {
    let spec = spec();
    for case in cases() {
        let s = schema(&spec, case.name);
        validate(&spec, s, &case.full, case.name).unwrap();
        let props: BTreeSet<&String> = s["properties"].as_object().unwrap().keys().collect();
        let fields: BTreeSet<&String> = case.full.as_object().unwrap().keys().collect();
        assert_eq!(
            props, fields,
            "{}: schema properties vs serde fields",
            case.name
        );
    }
}

#[test]
fn required_lists_are_exactly_the_fields_serde_needs() {
    let spec = spec();
    for case in cases() {
        let s = schema(&spec, case.name);
        assert!(
            (case.parses)(&case.full),
            "{} full sample parses",
            case.name
        );
        let required: BTreeSet<String> = s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect();
        for field in case.full.as_object().unwrap().keys() {
            let mut without = case.full.clone();
            without.as_object_mut().unwrap().remove(field);
            let serde_needs = !(case.parses)(&without);
            assert_eq!(
                serde_needs,
                required.contains(field),
                "{}.{field}: required in schema = {}, serde needs it = {serde_needs}",
                case.name,
                required.contains(field)
            );
        }
    }
}

fn roundtrip_by_name(name: &str, v: &Value) -> Option<Value> {
    match name {
        "VmConfig" => roundtrip::<VmConfig>(v),
        "CpusConfig" => roundtrip_in_vm(json!({ "cpus": v }), |c| &c["cpus"]),
        "MemoryConfig" => roundtrip_in_vm(json!({ "memory": v }), |c| &c["memory"]),
        "MemoryZoneConfig" => roundtrip_in_vm(json!({"memory": {"size": 0, "zones": [v]}}), |c| {
            &c["memory"]["zones"][0]
        }),
        "NumaConfig" => roundtrip_in_vm(json!({ "numa": [v] }), |c| &c["numa"][0]),
        "SerialConfig" => roundtrip_in_vm(json!({ "serial": v }), |c| &c["serial"]),
        "ConsoleConfig" => roundtrip_in_vm(json!({ "console": v }), |c| &c["console"]),
        "DebugConsoleConfig" => {
            roundtrip_in_vm(json!({ "debug_console": v }), |c| &c["debug_console"])
        }
        "PlatformConfig" => roundtrip_in_vm(json!({ "platform": v }), |c| &c["platform"]),
        "VmInfo" => roundtrip::<VmInfo>(v),
        "DeviceNode" => roundtrip::<DeviceNode>(v),
        "PciDeviceInfo" => roundtrip::<PciDeviceInfo>(v),
        "VmmPingResponse" => roundtrip::<VmmPingResponse>(v),
        "BalloonConfig" => roundtrip_in_vm(json!({ "balloon": v }), |c| &c["balloon"]),
        "RngConfig" => roundtrip_in_vm(json!({ "rng": v }), |c| &c["rng"]),
        "DiskConfig" => roundtrip_in_vm(json!({ "disks": [v] }), |c| &c["disks"][0]),
        "NetConfig" => roundtrip_in_vm(json!({ "net": [v] }), |c| &c["net"][0]),
        "BalloonStats" => roundtrip::<BalloonStatsResponse>(v),
        "BalloonTierStats" => roundtrip::<BalloonTierStats>(v),
        "VmResize" => roundtrip::<VmResizeData>(v),
        "VmResizeZone" => roundtrip::<VmResizeZoneData>(v),
        "VmResizeDisk" => roundtrip::<VmResizeDiskData>(v),
        "VmRemoveDevice" => roundtrip::<VmRemoveDeviceData>(v),
        _ => None,
    }
}

#[test]
fn defaults_in_the_file_are_what_serde_fills_in() {
    let spec = spec();
    let mut checked = 0;
    for case in cases() {
        let s = schema(&spec, case.name);
        for (field, prop) in s["properties"].as_object().unwrap() {
            let default = prop.get("default").or_else(|| {
                let inner = prop.get("allOf").map_or(prop, |a| &a[0]);
                resolve(&spec, inner).get("default")
            });
            let mut without = case.full.clone();
            without.as_object_mut().unwrap().remove(field);
            let Some(filled) = roundtrip_by_name(case.name, &without) else {
                continue;
            };
            let got = &filled[field];
            match default {
                Some(want) => {
                    assert_eq!(got, want, "{}.{field} default", case.name);
                    checked += 1;
                }
                // A random default (NetConfig.mac) is marked and must
                // still validate against the property's schema.
                None if prop.get("x-default").and_then(Value::as_str) == Some("random") => {
                    validate(&spec, prop, got, &format!("{}.{field}", case.name)).unwrap();
                    let again = roundtrip_by_name(case.name, &without).unwrap();
                    assert_ne!(got, &again[field], "{}.{field} is not random", case.name);
                    checked += 1;
                }
                // Without a documented default, an omitted field is null or
                // absent (skipped when None).
                None => assert!(
                    got.is_null(),
                    "{}.{field} has undocumented default {got}",
                    case.name
                ),
            }
        }
    }
    assert!(checked >= 20, "only {checked} defaults checked");
}

#[test]
fn enums_list_exactly_the_rust_variants() {
    let spec = spec();
    let modes = [
        ConsoleOutputMode::Off,
        ConsoleOutputMode::Pty,
        ConsoleOutputMode::Tty,
        ConsoleOutputMode::File,
        ConsoleOutputMode::Socket,
        ConsoleOutputMode::Null,
    ];
    // Exhaustive match: a new variant fails to compile here.
    for m in modes {
        match m {
            ConsoleOutputMode::Off
            | ConsoleOutputMode::Pty
            | ConsoleOutputMode::Tty
            | ConsoleOutputMode::File
            | ConsoleOutputMode::Socket
            | ConsoleOutputMode::Null => {}
        }
    }
    let want: Vec<Value> = modes.iter().map(v).collect();
    for name in ["SerialConfig", "ConsoleConfig"] {
        assert_eq!(
            schema(&spec, name)["properties"]["mode"]["enum"]
                .as_array()
                .unwrap(),
            &want,
            "{name}"
        );
    }
    let states = [
        VmState::Created,
        VmState::Running,
        VmState::Shutdown,
        VmState::Paused,
    ];
    for s in states {
        match s {
            VmState::Created | VmState::Running | VmState::Shutdown | VmState::Paused => {}
        }
    }
    let want: Vec<Value> = states.iter().map(v).collect();
    assert_eq!(
        schema(&spec, "VmInfo")["properties"]["state"]["enum"]
            .as_array()
            .unwrap(),
        &want
    );
}

#[test]
fn defaults_and_minimal_values_validate_too() {
    let spec = spec();
    let minimal = [
        ("VmConfig", v(VmConfig::default())),
        ("VmConfig", json!({})),
        ("CpusConfig", v(CpusConfig::default())),
        ("MemoryConfig", v(MemoryConfig::default())),
        ("NumaConfig", v(NumaConfig::default())),
        ("PayloadConfig", v(PayloadConfig::default())),
        ("VmResize", v(VmResizeData::default())),
        ("VmResize", json!({"desired_balloon": 5})),
        ("VmResize", json!({"desired_balloon": null})),
        ("DeviceNode", v(DeviceNode::default())),
        ("ErrorBody", json!(["VM is not booted"])),
        ("VmCounters", json!({"balloon": {"inflate": 3}})),
    ];
    for (name, value) in minimal {
        validate(&spec, schema(&spec, name), &value, name).unwrap();
    }
    // Schema-level defaults of the nested configs are the Rust defaults,
    // as a `VmConfig` writes them.
    let default = v(VmConfig::default());
    assert_eq!(
        default["cpus"]["boot_vcpus"],
        v(CpusConfig::default().boot_vcpus)
    );
    assert_eq!(schema(&spec, "CpusConfig")["default"], default["cpus"]);
    assert_eq!(default["memory"]["size"], v(MemoryConfig::default().size));
    assert_eq!(schema(&spec, "MemoryConfig")["default"], default["memory"]);
}

#[test]
fn the_balloon_schema_accepts_and_rejects_what_serde_does() {
    let spec = spec();
    let s = schema(&spec, "VmResize");
    for body in [
        json!({"desired_balloon": 1}),
        json!({"desired_balloon": [1, 2]}),
        json!({"desired_balloon": [1]}),
        json!({"desired_balloon": [1, 2, 3]}),
        json!({"desired_balloon": -1}),
        json!({"desired_balloon": [1, -2]}),
        json!({"desired_balloon": "1G"}),
        json!({"desired_balloon": 1.5}),
        json!({"desired_vcpus": 0}),
        json!({"desired_vcpus": 1}),
        json!({"desired_vcpus": 256}),
        json!({"desired_ram": -1}),
        json!({"other": 1}),
    ] {
        let schema_ok = validate(&spec, s, &body, "VmResize").is_ok();
        let code_ok =
            api::router::parse_request("PUT", "/api/v1/vm.resize", body.to_string().as_bytes())
                .is_ok();
        assert_eq!(schema_ok, code_ok, "{body}");
    }
}

/// Full samples of the bodies of upstream's endpoints for features this VMM
/// lacks: every property of upstream's type, as upstream's ch-remote sends.
fn unsupported_bodies() -> Vec<(&'static str, Value)> {
    let zone_update = json!({"id": "fast", "host_numa_node": 1});
    vec![
        (
            "DeviceConfig",
            json!({"path": "/sys/bus/pci/devices/0000:01:00.0/", "iommu": false,
                   "pci_segment": 0, "pci_device_id": null, "id": "vfio0",
                   "x_nv_gpudirect_clique": null, "x_exclude_mmap_bars": [0]}),
        ),
        (
            "UserDeviceConfig",
            json!({"socket": "/run/vfio-user.sock", "id": "user0", "pci_segment": 0,
                   "pci_device_id": null}),
        ),
        (
            "FsConfig",
            json!({"tag": "myfs", "socket": "/run/virtiofsd.sock", "num_queues": 1,
                   "queue_size": 1024, "pci_segment": 0, "pci_device_id": null,
                   "id": "fs0"}),
        ),
        (
            "GenericVhostUserConfig",
            json!({"socket": "/run/vhost.sock", "device_type": 26, "queue_sizes": [256, 256],
                   "pci_segment": 0, "pci_device_id": null, "id": "vu0"}),
        ),
        (
            "PmemConfig",
            json!({"file": "/images/pmem.raw", "size": 1 << 30, "iommu": false,
                   "discard_writes": false, "pci_segment": 0, "pci_device_id": null,
                   "id": "pmem0"}),
        ),
        (
            "VsockConfig",
            json!({"cid": 3, "socket": "/run/vsock.sock", "iommu": false, "pci_segment": 0,
                   "pci_device_id": null, "id": "vsock0"}),
        ),
        (
            "VdpaConfig",
            json!({"path": "/dev/vhost-vdpa-0", "num_queues": 1, "iommu": false,
                   "pci_segment": 0, "pci_device_id": null, "id": "vdpa0"}),
        ),
        (
            "VmSnapshotConfig",
            json!({"destination_url": "file:///var/snap"}),
        ),
        (
            "VmCoredumpData",
            json!({"destination_url": "file:///var/core"}),
        ),
        (
            "RestoreConfig",
            json!({"source_url": "file:///var/snap", "prefault": false,
                   "memory_restore_mode": "Copy", "resume": false,
                   "zone_updates": [zone_update]}),
        ),
        (
            "ReceiveMigrationData",
            json!({"receiver_url": "unix:/run/mig.sock", "tls_dir": null,
                   "zone_updates": [zone_update]}),
        ),
        (
            "SendMigrationData",
            json!({"destination_url": "unix:/run/mig.sock", "local": false,
                   "preserve_source": false, "downtime_ms": 300, "timeout_s": 3600,
                   "timeout_strategy": "Cancel", "connections": 1, "tls_dir": null,
                   "memory_mode": "Precopy"}),
        ),
    ]
}

/// The schema a route's request body refers to.
fn body_schema(spec: &Value, endpoint: &str, method: &str) -> Option<String> {
    let op = &spec["paths"][format!("/{endpoint}")][method.to_lowercase()];
    let r = op
        .pointer("/requestBody/content/application~1json/schema/$ref")?
        .as_str()?;
    Some(r.strip_prefix("#/components/schemas/")?.to_owned())
}

fn parse_body(endpoint: &str, body: &Value) -> Result<ApiRequest, api::router::HttpError> {
    api::router::parse_request(
        "PUT",
        &format!("{API_PREFIX}{endpoint}"),
        body.to_string().as_bytes(),
    )
}

#[test]
fn every_documented_body_has_a_full_sample_the_router_accepts() {
    let spec = spec();
    let mut samples: BTreeMap<String, Value> = cases()
        .into_iter()
        .map(|c| (c.name.to_owned(), c.full))
        .collect();
    samples.extend(
        unsupported_bodies()
            .into_iter()
            .map(|(n, b)| (n.to_owned(), b)),
    );
    for r in ROUTES
        .iter()
        .filter(|r| r.body == api::router::BodyKind::Json)
    {
        let name = body_schema(&spec, r.endpoint, r.method)
            .unwrap_or_else(|| panic!("{}: no body schema", r.endpoint));
        let sample = samples
            .get(&name)
            .unwrap_or_else(|| panic!("{}: no sample of {name}", r.endpoint));
        validate(&spec, schema(&spec, &name), sample, &name).unwrap();
        let props: BTreeSet<&String> = schema(&spec, &name)["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        let fields: BTreeSet<&String> = sample.as_object().unwrap().keys().collect();
        assert_eq!(props, fields, "{name}: schema properties vs sample");
        match parse_body(r.endpoint, sample) {
            Ok(_) => {}
            // A full VmConfig parses; the sample's paths need not exist.
            Err(e) if r.endpoint == "vm.create" => assert_eq!(
                e.chain()[..3],
                [
                    "Error from API",
                    "The VM could not be created",
                    "Failed to validate config"
                ],
                "{e:?}"
            ),
            Err(e) => panic!("{}: {:?}", r.endpoint, e.chain()),
        }
    }
}

#[test]
fn bodies_of_missing_features_need_exactly_the_required_fields() {
    let spec = spec();
    let bodies: BTreeMap<&str, Value> = unsupported_bodies().into_iter().collect();
    let mut checked = 0;
    for r in ROUTES {
        let Some(name) = body_schema(&spec, r.endpoint, r.method) else {
            continue;
        };
        let Some(full) = bodies.get(name.as_str()) else {
            continue;
        };
        checked += 1;
        assert!(
            matches!(parse_body(r.endpoint, full), Ok(ApiRequest::Unsupported(_))),
            "{}",
            r.endpoint
        );
        let s = schema(&spec, &name);
        let required: BTreeSet<&str> = s["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        for field in full.as_object().unwrap().keys() {
            let mut without = full.clone();
            without.as_object_mut().unwrap().remove(field);
            let mut null = full.clone();
            null[field] = Value::Null;
            let router_needs = parse_body(r.endpoint, &without).is_err();
            assert_eq!(
                router_needs,
                required.contains(field.as_str()),
                "{name}.{field}: required in schema vs router"
            );
            assert_eq!(
                parse_body(r.endpoint, &null).is_err(),
                router_needs,
                "{name}.{field}: null"
            );
            if router_needs {
                let e = parse_body(r.endpoint, &without).unwrap_err();
                assert_eq!(e.status(), 400);
            }
        }
    }
    assert_eq!(checked, bodies.len(), "a body sample is not used");
}

#[test]
fn disk_and_net_bodies_accept_upstream_fields_as_vm_info_writes_them() {
    let spec = spec();
    for (endpoint, name, full) in [
        ("vm.add-disk", "DiskConfig", vm_json()["disks"][0].clone()),
        ("vm.add-net", "NetConfig", vm_json()["net"][0].clone()),
    ] {
        let r = parse_body(endpoint, &full).unwrap();
        // What the VMM receives is written back as the sample was.
        let back = match r {
            ApiRequest::VmAddDisk(d) => roundtrip_by_name(name, &v(*d)),
            ApiRequest::VmAddNet(n) => roundtrip_by_name(name, &v(*n)),
            other => panic!("{other:?}"),
        };
        assert_eq!(back.as_ref(), Some(&full), "{endpoint}");
        // A value of an upstream field that asks for more is refused.
        let mut bad = full.clone();
        bad["pci_segment"] = json!(1);
        assert!(validate(&spec, schema(&spec, name), &bad, name).is_err());
        let e = parse_body(endpoint, &bad).unwrap_err();
        assert_eq!(e.status(), 400, "{endpoint}");
    }
}
