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
    assert_eq!(h.put_json("vm.create", CREATE_BODY).status, 409);
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
fn wrong_state_actions_are_409_with_a_json_error_body() {
    let h = Harness::start();
    h.put_json("vm.create", CREATE_BODY);
    let r = h.put("vm.resume");
    assert_eq!(r.status, 409);
    assert_eq!(error_chain(&r), ["VM is not booted"]);
    h.put("vm.boot");
    let r = h.put("vm.boot");
    assert_eq!(r.status, 409);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(error_chain(&r), ["VM is already booted"]);
    let r = h.put("vm.resume");
    assert_eq!(r.status, 409);
    assert_eq!(
        error_chain(&r),
        ["invalid VM state transition from Running to Running"]
    );
}

#[test]
fn actions_without_a_vm_are_404() {
    let h = Harness::start();
    for endpoint in [
        "vm.boot",
        "vm.shutdown",
        "vm.reboot",
        "vm.pause",
        "vm.resume",
        "vm.power-button",
    ] {
        let r = h.put(endpoint);
        assert_eq!(r.status, 404, "{endpoint}");
        assert_eq!(error_chain(&r), ["VM is not created"]);
    }
    assert_eq!(h.get("vm.counters").status, 404);
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
    assert_eq!(chain[0], "invalid JSON body for vm.resize");
    assert!(chain[1].contains("two-element array"), "{chain:?}");
    let r = h.put_json("vm.resize", r#"{"desired_vcpus":2}"#);
    assert_eq!(r.status, 400);
    assert!(error_chain(&r)[0].contains("not supported"));
}

#[test]
fn resize_without_a_balloon_is_409() {
    let h = Harness::start_with(Default::default(), common::test_options(), None);
    h.put_json("vm.create", CREATE_BODY);
    let r = h.put_json("vm.resize", r#"{"desired_balloon":[1,1]}"#);
    assert_eq!(r.status, 409);
    assert_eq!(error_chain(&r), ["VM has no balloon device"]);
}

#[test]
fn http_layer_errors_over_the_socket() {
    let h = Harness::start();
    let r = h.get("vm.nothing");
    assert_eq!(r.status, 404);
    assert_eq!(error_chain(&r), ["unknown API endpoint /api/v1/vm.nothing"]);
    let r = h.put("vm.info");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET"));
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
        err.contains("409") && err.contains("VM is already created"),
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
        !ok && err.contains("400") && err.contains("not supported"),
        "{err}"
    );
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
