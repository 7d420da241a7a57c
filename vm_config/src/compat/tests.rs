//! Upstream v53 bodies in, errors naming field and value out.

use crate::{ConsoleOutputMode, VmConfig};

/// Upstream v53's `vm.info` config for a minimal `vm.create`, as it is.
const UPSTREAM_MINIMAL: &str = r#"{"cpus":{"boot_vcpus":1,"max_vcpus":1,"kvm_hyperv":false,"max_phys_bits":46,"features":{"amx":false},"nested":true,"core_scheduling":"Vm","profile":"Host"},"memory":{"size":536870912,"mergeable":false,"hotplug_method":"Acpi","shared":false,"hugepages":false,"prefault":false,"reserve":false,"thp":true},"payload":{"kernel":"/boot/vmlinuz","cmdline":"console=ttyS0"},"rng":{"pci_segment":0,"src":"/dev/urandom"},"serial":{"mode":"Null"},"console":{"mode":"Tty","pci_segment":0},"debug_console":{"mode":"Off","iobase":233},"pvpanic":false,"iommu":false,"watchdog":false,"landlock_enable":false}"#;

/// A richer body (zones, NUMA, disk and NIC with upstream's keys, balloon,
/// platform), accepted by upstream v53's `vm.create`.
const UPSTREAM_RICH: &str = include_str!("upstream_rich.json");

fn parse(s: &str) -> Result<VmConfig, String> {
    serde_json::from_str::<VmConfig>(s).map_err(|e| e.to_string())
}

fn check(c: &VmConfig) {
    c.validate_with(&|n| n < 2).expect("valid");
}

#[test]
fn upstream_minimal_info_is_accepted_with_upstream_defaults() {
    let c = parse(UPSTREAM_MINIMAL).unwrap();
    check(&c);
    assert_eq!(c.console.mode, ConsoleOutputMode::Tty);
    assert_eq!(c.serial.mode, ConsoleOutputMode::Null);
    assert_eq!(
        c,
        parse(r#"{"payload":{"kernel":"/boot/vmlinuz","cmdline":"console=ttyS0"}}"#).unwrap()
    );
}

#[test]
fn upstream_rich_body_is_accepted() {
    let c = parse(UPSTREAM_RICH).unwrap();
    assert_eq!((c.cpus.boot_vcpus, c.cpus.max_vcpus), (2, 4));
    check(&c);
}

#[test]
fn every_upstream_field_at_its_default_round_trips() {
    for s in [UPSTREAM_MINIMAL, UPSTREAM_RICH] {
        let c = parse(s).unwrap();
        let again = parse(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(c, again);
    }
}

#[test]
fn values_we_do_not_do_name_field_and_value() {
    let base: serde_json::Value = serde_json::from_str(UPSTREAM_RICH).unwrap();
    let cases: &[(&str, serde_json::Value, &str)] = &[
        (
            "/disks/0/vhost_user",
            true.into(),
            "disks[0].vhost_user=true",
        ),
        ("/disks/0/pci_segment", 1.into(), "disks[0].pci_segment=1"),
        (
            "/net/0/vhost_mode",
            "Server".into(),
            "net[0].vhost_mode=\"Server\"",
        ),
        (
            "/cpus/core_scheduling",
            "Vcpu".into(),
            "cpus.core_scheduling=\"Vcpu\"",
        ),
        ("/cpus/nested", false.into(), "cpus.nested=false"),
        (
            "/memory/hotplugged_size",
            (1u64 << 30).into(),
            "memory.hotplugged_size=1073741824",
        ),
        ("/console/pci_segment", 2.into(), "console.pci_segment=2"),
        (
            "/debug_console/mode",
            "Tty".into(),
            "debug_console.mode=\"Tty\"",
        ),
        (
            "/platform/num_pci_segments",
            2.into(),
            "platform.num_pci_segments=2",
        ),
        ("/pvpanic", true.into(), "pvpanic=true"),
        ("/rng/pci_device_id", 3.into(), "rng.pci_device_id=3"),
        ("/numa/0/device_id", "x".into(), "numa[0].device_id=\"x\""),
    ];
    for (ptr, value, want) in cases {
        let mut v = base.clone();
        let (parent, key) = ptr.rsplit_once('/').unwrap();
        v.pointer_mut(parent)
            .and_then(|p| p.as_object_mut())
            .unwrap()
            .insert(key.to_owned(), value.clone());
        let e = parse(&v.to_string()).unwrap_err();
        assert!(
            e.contains(want) && e.contains("not supported"),
            "{ptr}: {e}"
        );
    }
    let mut v = base.clone();
    v["vsock"] = serde_json::json!({"cid": 3, "socket": "/s"});
    assert!(parse(&v.to_string()).unwrap_err().contains("vsock="));
}

#[test]
fn unsupported_console_modes_fail_validation_naming_the_field() {
    for (body, want) in [
        (r#"{"console":{"mode":"Pty"}}"#, "console.mode=Pty"),
        (
            r#"{"serial":{"mode":"Socket","socket":"/s"}}"#,
            "serial.mode=Socket",
        ),
    ] {
        let e = parse(body).unwrap().validate_with(&|_| true).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
}

/// What upstream v53's strict parts require of our serialized config: the
/// keys it reads with a type, and nothing it would refuse.
#[test]
fn our_serialization_is_shaped_like_upstream() {
    let c = parse(UPSTREAM_RICH).unwrap();
    let v = serde_json::to_value(&c).unwrap();
    assert!(v["cpus"]["boot_vcpus"].is_u64() && v["cpus"]["max_vcpus"].is_u64());
    assert!(v["memory"]["size"].is_u64());
    assert_eq!(v["console"]["mode"], "Off");
    assert_eq!(v["serial"]["mode"], "File");
    assert!(
        v["balloon"]["size"].is_u64(),
        "single-tier balloon is an integer"
    );
    for d in v["disks"].as_array().unwrap() {
        assert!(d["path"].is_string());
    }
    let d = serde_json::to_value(VmConfig::default()).unwrap();
    assert_eq!(d["console"]["mode"], "Tty");
}

#[test]
fn serialized_config_carries_upstream_defaults() {
    let v = serde_json::to_value(parse(UPSTREAM_RICH).unwrap()).unwrap();
    assert_eq!(v["cpus"]["core_scheduling"], "Vm");
    assert_eq!(v["debug_console"]["iobase"], 233);
    assert_eq!(v["disks"][0]["pci_segment"], 0);
    assert_eq!(v["memory"]["zones"][1]["reserve"], false);
    assert_eq!(v["net"][0]["offload_csum"], true);
    for (path, d) in super::DEFAULTS {
        assert!(
            serde_json::from_str::<serde_json::Value>(d)
                .unwrap()
                .is_object(),
            "{path}"
        );
    }
}

/// Upstream v53's `vm.info` platform for `--platform` with SMBIOS fields
/// (captured from upstream), and the same through the older key names.
#[test]
fn upstream_platform_smbios_fields_are_kept_and_written_back() {
    let upstream_info = r#"{"num_pci_segments":1,"iommu_address_width_bits":64,
        "system_serial_number":"ds=nocloud;s=http://10.0.0.1/",
        "system_uuid":"4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6","oem_strings":["o1","o2"],
        "system_manufacturer":"M","system_product_name":"P","system_version":"V",
        "system_family":"F","system_sku_number":"S","chassis_asset_tag":"T",
        "iommufd":false,"vfio_p2p_dma":true}"#;
    let mut v: serde_json::Value = serde_json::from_str(UPSTREAM_MINIMAL).unwrap();
    v["platform"] = serde_json::from_str(upstream_info).unwrap();
    let c = parse(&v.to_string()).unwrap();
    check(&c);
    let p = &c.platform;
    assert_eq!(
        p.system_serial_number.as_deref(),
        Some("ds=nocloud;s=http://10.0.0.1/")
    );
    assert_eq!(p.oem_strings.as_deref().unwrap(), ["o1", "o2"]);
    assert_eq!(p.chassis_asset_tag.as_deref(), Some("T"));
    // vm.info writes back exactly what upstream's does.
    let out = serde_json::to_value(&c).unwrap();
    assert_eq!(
        out["platform"],
        serde_json::from_str::<serde_json::Value>(upstream_info).unwrap()
    );

    let mut old = serde_json::from_str::<serde_json::Value>(UPSTREAM_MINIMAL).unwrap();
    old["platform"] =
        serde_json::json!({"serial_number": "s", "uuid": "4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6"});
    let c = parse(&old.to_string()).unwrap();
    assert_eq!(c.platform.system_serial_number.as_deref(), Some("s"));
    let out = serde_json::to_value(&c).unwrap();
    assert_eq!(out["platform"]["system_serial_number"], "s");
    assert!(out["platform"].get("serial_number").is_none());

    // `null` is "no platform", as upstream; a bad UUID fails validation.
    let mut null = serde_json::from_str::<serde_json::Value>(UPSTREAM_MINIMAL).unwrap();
    null["platform"] = serde_json::Value::Null;
    assert_eq!(
        parse(&null.to_string()).unwrap(),
        parse(UPSTREAM_MINIMAL).unwrap()
    );
    let mut bad = serde_json::from_str::<serde_json::Value>(UPSTREAM_MINIMAL).unwrap();
    bad["platform"] = serde_json::json!({"system_uuid": "nope"});
    let e = parse(&bad.to_string())
        .unwrap()
        .validate_with(&|_| true)
        .unwrap_err();
    assert!(
        e.to_string().contains("--platform: system_uuid 'nope'"),
        "{e}"
    );
    bad["platform"] = serde_json::json!({"tdx": true});
    assert!(parse(&bad.to_string()).unwrap_err().contains("tdx"));
}
