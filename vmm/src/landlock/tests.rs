//! The rules follow the configuration, and after `restrict` a path outside
//! them cannot be opened. Restriction cannot be undone, so that check runs
//! in a child process (this test binary again).

use std::process::Command;

use vm_config::{ConsoleConfig, DiskConfig, MemoryZoneConfig, PayloadConfig};

use super::*;

const CHILD_ENV: &str = "VMM_LANDLOCK_TEST_CHILD";

#[test]
fn rules_name_every_file_of_the_configuration() {
    let mut c = VmConfig {
        payload: Some(PayloadConfig {
            kernel: Some("/k/vmlinuz".into()),
            initramfs: Some("/k/initrd".into()),
            cmdline: None,
            firmware: None,
        }),
        disks: Some(vec![
            DiskConfig::parse("path=/d/ro.img,readonly=on").unwrap(),
            DiskConfig::parse("path=/d/rw.img").unwrap(),
        ]),
        net: Some(vec![vm_config::NetConfig::parse("tap=tap0").unwrap()]),
        serial: ConsoleConfig::parse_serial("file=/logs/serial.log").unwrap(),
        ..Default::default()
    };
    c.memory.zones = Some(vec![MemoryZoneConfig::parse(
        "id=z,size=1G,file=/dev/dax0.0",
    )
    .unwrap()]);
    let rules = rules_for(&c, Some(Path::new("/run/vm/api.sock")));
    let has = |p: &str, a: Allow| rules.iter().any(|(q, b)| q == Path::new(p) && *b == a);
    assert!(has("/dev/kvm", Allow::ReadWrite));
    assert!(has("/k/vmlinuz", Allow::Read));
    assert!(has("/k/initrd", Allow::Read));
    assert!(has("/dev/urandom", Allow::Read));
    assert!(has("/d/ro.img", Allow::Read));
    assert!(has("/d/rw.img", Allow::ReadWrite));
    assert!(has("/dev/net/tun", Allow::ReadWrite));
    assert!(has("/dev/dax0.0", Allow::ReadWrite));
    assert!(has("/logs", Allow::ReadWrite));
    assert!(has("/run/vm", Allow::ReadWrite));
    assert!(!rules.iter().any(|(p, _)| p == Path::new("/")), "{rules:?}");
}

#[test]
fn child_outside_path_is_refused() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let inside = dir.join("inside");
    let log = dir.join("write-only");
    restrict(&[(inside.clone(), Allow::Read), (log.clone(), Allow::Write)]).expect("restrict");
    match std::fs::OpenOptions::new().append(true).open(&log) {
        Ok(_) => println!("write-only-opens-for-writing"),
        Err(e) => println!("write-only-refused-writing: {e}"),
    }
    match std::fs::read(&log) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            println!("write-only-read-refused")
        }
        other => println!("write-only-read: {other:?}"),
    }
    std::fs::read(&inside).expect("the allowed file opens");
    match std::fs::read(dir.join("outside")) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => println!("outside-refused"),
        other => println!("outside-opened: {other:?}"),
    }
    match std::fs::write(&inside, b"x") {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => println!("write-refused"),
        other => println!("write-allowed: {other:?}"),
    }
    // Threads started afterwards are confined too.
    let t = std::thread::spawn(move || std::fs::read(dir.join("outside")).is_err());
    if t.join().unwrap() {
        println!("thread-refused");
    }
}

#[test]
fn after_restrict_a_path_outside_the_rules_cannot_be_opened() {
    let dir = vmm_sys_util::tempdir::TempDir::new_with_prefix("/tmp/landlock-test-").unwrap();
    std::fs::write(dir.as_path().join("inside"), b"in").unwrap();
    std::fs::write(dir.as_path().join("outside"), b"out").unwrap();
    std::fs::write(dir.as_path().join("write-only"), b"").unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "landlock::tests::child_outside_path_is_refused",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.as_path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    for want in [
        "outside-refused",
        "write-refused",
        "thread-refused",
        "write-only-opens-for-writing",
        "write-only-read-refused",
    ] {
        assert!(stdout.contains(want), "{want} missing; stdout: {stdout}");
    }
}

#[test]
fn landlock_rules_are_parsed_as_upstream_spells_them() {
    assert_eq!(
        parse_rule("path=/d/hotplug,access=rw"),
        Ok((PathBuf::from("/d/hotplug"), Allow::ReadWrite))
    );
    assert_eq!(
        parse_rule("path=/k/vmlinuz,access=r"),
        Ok((PathBuf::from("/k/vmlinuz"), Allow::Read))
    );
    assert_eq!(
        parse_rule("path=/logs,access=w"),
        Ok((PathBuf::from("/logs"), Allow::Write))
    );
    for bad in [
        "path=/x,access=x",
        "path=/x",
        "access=rw",
        "path=,access=r",
        "path=/x,access=rw,mode=1",
    ] {
        let e = parse_rule(bad).unwrap_err();
        assert!(e.contains("--landlock-rules"), "{bad}: {e}");
    }
}

#[test]
fn without_a_configuration_the_rules_are_the_host_devices_and_the_socket_dir() {
    let rules = rules_without_config(Some(Path::new("/run/vm/api.sock")));
    let has = |p: &str, a: Allow| rules.iter().any(|(q, b)| q == Path::new(p) && *b == a);
    assert!(has("/dev/kvm", Allow::ReadWrite));
    assert!(has("/dev/urandom", Allow::Read));
    assert!(has("/run/vm", Allow::ReadWrite));
    assert_eq!(
        has("/dev/net/tun", Allow::ReadWrite),
        Path::new("/dev/net/tun").exists()
    );
    assert!(!rules.iter().any(|(p, _)| p == Path::new("/")), "{rules:?}");
}
