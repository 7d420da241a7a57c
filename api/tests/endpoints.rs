//! Every endpoint through the real server on a real UNIX socket, with the
//! fake VMM behind it; and ch-remote end to end.

mod common;

use std::process::{Command, Stdio};

use api::{VmInfo, VmState, VmmPingResponse};
use common::{Harness, CREATE_BODY};

fn error_chain(r: &api::client::HttpResponse) -> Vec<String> {
    serde_json::from_slice(&r.body).unwrap_or_else(|_| {
        panic!(
            "error body is not a JSON array of strings: {:?}",
            String::from_utf8_lossy(&r.body)
        )
    })
}

fn state(h: &Harness) -> VmState {
    let r = h.get("vm.info");
    assert_eq!(r.status, 200);
    serde_json::from_slice::<VmInfo>(&r.body).unwrap().state
}

#[test]
fn ping_answers_200_with_upstream_headers() {
    let h = Harness::start();
    let r = h.get("vmm.ping");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("server"), Some("Cloud Hypervisor API"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let ping: VmmPingResponse = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(ping.pid, i64::from(std::process::id()));
}

#[test]
fn full_life_cycle_reports_each_state() {
    let h = Harness::start();
    assert_eq!(h.get("vm.info").status, 404, "no VM yet");
    let r = h.put_json("vm.create", CREATE_BODY);
    assert_eq!((r.status, r.body.len()), (204, 0));
    assert_eq!(state(&h), VmState::Created);
    assert_eq!(h.put_json("vm.create", CREATE_BODY).status, 500);
    assert_eq!(h.put("vm.boot").status, 204);
    assert_eq!(state(&h), VmState::Running);
    assert_eq!(h.put("vm.pause").status, 204);
    assert_eq!(state(&h), VmState::Paused);
    assert_eq!(h.put("vm.resume").status, 204);
    assert_eq!(state(&h), VmState::Running);
    assert_eq!(h.put("vm.reboot").status, 204);
    assert_eq!(state(&h), VmState::Running);
    let counters = h.get("vm.counters");
    assert_eq!(counters.status, 200);
    let _: api::VmCounters = serde_json::from_slice(&counters.body).unwrap();
    assert_eq!(h.put("vm.power-button").status, 204);
    assert_eq!(state(&h), VmState::Shutdown);
    assert_eq!(h.put("vm.boot").status, 204);
    assert_eq!(h.put("vm.shutdown").status, 204);
    assert_eq!(state(&h), VmState::Shutdown);
    assert_eq!(h.put("vm.delete").status, 204);
    assert_eq!(h.get("vm.info").status, 404);
    assert_eq!(h.put("vm.delete").status, 204, "delete without VM is fine");
}

#[test]
fn info_returns_the_created_config() {
    let h = Harness::start();
    h.put_json("vm.create", CREATE_BODY);
    let info: VmInfo = serde_json::from_slice(&h.get("vm.info").body).unwrap();
    assert_eq!(info.config.memory.size, 1 << 30);
    assert_eq!(info.memory_actual_size, 1 << 30);
    assert_eq!(info.state, VmState::Created);
}

#[test]
fn wrong_state_actions_are_500_with_upstreams_error_chain() {
    let h = Harness::start();
    h.put_json("vm.create", CREATE_BODY);
    let r = h.put("vm.resume");
    assert_eq!(r.status, 500);
    assert_eq!(
        error_chain(&r),
        [
            "Error from API",
            "The VM could not resume",
            "VM is not running"
        ]
    );
    h.put("vm.boot");
    let r = h.put("vm.boot");
    assert_eq!(r.status, 500);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        error_chain(&r),
        [
            "Error from API",
            "The VM could not boot",
            "VM is already created"
        ]
    );
    let r = h.put("vm.resume");
    assert_eq!(r.status, 500);
    assert_eq!(
        error_chain(&r),
        [
            "Error from API",
            "The VM could not resume",
            "Cannot resume VM",
            "Failed to resume migratable component",
            "Invalid transition: InvalidStateTransition(Running, Running)"
        ]
    );
}

#[test]
fn actions_without_a_vm_answer_as_upstream() {
    let h = Harness::start();
    // 404 where upstream looks for the VM, 500 where it asks whether it runs.
    for (endpoint, status, reason) in [
        ("vm.boot", 404, "VM config is missing"),
        ("vm.reboot", 404, "VM is not created"),
        ("vm.shutdown", 500, "VM is not running"),
        ("vm.pause", 500, "VM is not running"),
        ("vm.resume", 500, "VM is not running"),
        ("vm.power-button", 500, "VM is not running"),
        ("vm.nmi", 500, "VM is not running"),
    ] {
        let r = h.put(endpoint);
        assert_eq!(r.status, status, "{endpoint}");
        assert_eq!(error_chain(&r)[2], reason, "{endpoint}");
    }
    assert_eq!(h.get("vm.counters").status, 500);
    assert_eq!(h.get("vm.info").status, 404);
    let r = h.put_json("vm.add-fs", r#"{"tag":"t","socket":"/tmp/s"}"#);
    assert_eq!(r.status, 404);
}

#[test]
fn responses_are_framed_as_upstreams_micro_http() {
    let h = Harness::start();
    for (method, endpoint, head) in [
        (
            "GET",
            "vmm.ping",
            "HTTP/1.1 200 \r\nServer: Cloud Hypervisor API\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nContent-Length: ",
        ),
        (
            "PUT",
            "vm.delete",
            "HTTP/1.1 204 \r\nServer: Cloud Hypervisor API\r\nConnection: keep-alive\r\n\r\n",
        ),
        (
            "GET",
            "vm.info",
            "HTTP/1.1 404 \r\nServer: Cloud Hypervisor API\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nContent-Length: ",
        ),
    ] {
        let mut stream = h.connect();
        let request = format!("{method} /api/v1/{endpoint} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        common::write_raw(&mut stream, request.as_bytes());
        let (raw, _) = common::read_until_close(&mut stream, std::time::Duration::from_secs(1));
        let text = String::from_utf8_lossy(&raw);
        assert!(text.starts_with(head), "{endpoint}: {text:?}");
    }
}

#[test]
fn resize_balloon_by_tier_and_reject_bad_values() {
    let h = Harness::start();
    h.put_json("vm.create", CREATE_BODY);
    let r = h.put_json("vm.resize", r#"{"desired_balloon":[268435456,134217728]}"#);
    assert_eq!(r.status, 204);
    let info: VmInfo = serde_json::from_slice(&h.get("vm.info").body).unwrap();
    assert_eq!(info.memory_actual_size, (1 << 30) - (384 << 20));
    assert_eq!(
        h.put_json("vm.resize", r#"{"desired_balloon":268435456}"#)
            .status,
        204
    );
    let r = h.put_json("vm.resize", r#"{"desired_balloon":[1,2,3]}"#);
    assert_eq!(r.status, 400);
    let chain = error_chain(&r);
    assert_eq!(chain[0], "Failed to deserialize JSON");
    assert!(chain[1].contains("two-element array"), "{chain:?}");
    let r = h.put_json("vm.resize", r#"{"desired_vcpus":2}"#);
    assert_eq!(r.status, 500);
    assert!(error_chain(&r)[2].contains("not supported"));
}

#[test]
fn resize_without_a_balloon_is_500_as_upstream() {
    let h = Harness::start_with(Default::default(), common::test_options(), None);
    h.put_json("vm.create", CREATE_BODY);
    let r = h.put_json("vm.resize", r#"{"desired_balloon":[1,1]}"#);
    assert_eq!(r.status, 500);
    assert_eq!(
        error_chain(&r),
        [
            "Error from API",
            "The VM could not be resized",
            "Error from device manager",
            "Missing virtio-balloon, can't proceed as expected"
        ]
    );
}

#[test]
fn http_layer_errors_over_the_socket() {
    let h = Harness::start();
    let r = h.get("vm.nothing");
    assert_eq!(r.status, 404);
    assert_eq!(error_chain(&r), ["Not Found"]);
    let r = h.put("vm.info");
    assert_eq!(r.status, 400);
    assert_eq!(error_chain(&r)[0], "Bad Request");
    assert_eq!(h.put("vm.create").status, 400, "missing body");
    assert_eq!(h.put_json("vm.create", "{").status, 400);
    assert_eq!(h.put_json("vm.create", r#"{"cpus":1}"#).status, 400);
    let r = h.put_json("vm.create", r#"{"unknown":true}"#);
    assert_eq!(r.status, 400);
    assert!(error_chain(&r)[1].contains("unknown field"));
}

#[test]
fn vmm_shutdown_answers_200_then_the_vmm_and_server_stop() {
    let mut h = Harness::start();
    h.put_json("vm.create", CREATE_BODY);
    let r = h.put("vmm.shutdown");
    assert_eq!((r.status, r.body.len()), (200, 0));
    let served = h.join_all();
    assert_eq!(served, 2);
    assert!(!h.socket.exists(), "socket file removed at shutdown");
}

fn ch_remote(h: &Harness, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ch-remote"))
        .arg("--api-socket")
        .arg(&h.socket)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ch-remote runs");
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn ch_remote_drives_every_subcommand() {
    let mut h = Harness::start();
    let (ok, out, _) = ch_remote(&h, &["ping"], None);
    assert!(ok);
    assert!(out.contains("\n  \"build_version\""), "pretty JSON: {out}");

    let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
    let cfg = dir.as_path().join("vm.json");
    std::fs::write(&cfg, common::CREATE_BODY).unwrap();
    assert!(ch_remote(&h, &["create", cfg.to_str().unwrap()], None).0);
    let (ok, _, err) = ch_remote(&h, &["create", "-"], Some(CREATE_BODY));
    assert!(!ok);
    assert!(
        err.contains("500") && err.contains("VM is already created"),
        "{err}"
    );
    assert!(ch_remote(&h, &["delete"], None).0);
    assert!(ch_remote(&h, &["create"], Some(CREATE_BODY)).0, "stdin");

    for cmd in ["boot", "pause", "resume", "reboot"] {
        let (ok, out, err) = ch_remote(&h, &[cmd], None);
        assert!(ok, "{cmd}: {err}");
        assert!(out.is_empty());
    }
    let (ok, out, _) = ch_remote(&h, &["info"], None);
    assert!(ok);
    let info: VmInfo = serde_json::from_str(&out).unwrap();
    assert_eq!(info.state, VmState::Running);
    assert!(ch_remote(&h, &["counters"], None).0);
    assert!(ch_remote(&h, &["resize", "--balloon", "[256M,128M]"], None).0);
    let info: VmInfo = serde_json::from_str(&ch_remote(&h, &["info"], None).1).unwrap();
    assert_eq!(info.memory_actual_size, (1 << 30) - (384 << 20));
    assert!(ch_remote(&h, &["resize", "--balloon", "64M"], None).0);
    let (ok, _, err) = ch_remote(&h, &["resize", "--balloon", "[1G,2G,3G]"], None);
    assert!(!ok && err.contains("FMEM,SMEM"), "{err}");
    let (ok, _, err) = ch_remote(&h, &["resize", "--cpus", "2"], None);
    assert!(
        !ok && err.contains("500") && err.contains("not supported"),
        "{err}"
    );
    let (ok, _, err) = ch_remote(&h, &["add-fs", "tag=t,socket=/tmp/s"], None);
    assert!(!ok && err.contains("not supported"), "{err}");
    let (ok, _, err) = ch_remote(&h, &["resize-zone", "--id", "z", "--size", "1G"], None);
    assert!(!ok && err.contains("500"), "{err}");
    assert!(ch_remote(&h, &["power-button"], None).0);
    assert!(ch_remote(&h, &["boot"], None).0);
    assert!(ch_remote(&h, &["shutdown"], None).0);
    assert!(ch_remote(&h, &["delete"], None).0);
    let (ok, _, err) = ch_remote(&h, &["info"], None);
    assert!(
        !ok && err.contains("404") && err.contains("VM is not created"),
        "{err}"
    );
    assert!(ch_remote(&h, &["shutdown-vmm"], None).0);
    h.join_all();
    let (ok, _, err) = ch_remote(&h, &["ping"], None);
    assert!(!ok && err.contains("cannot connect"), "{err}");
}
