//! Bad clients: half-written requests, disconnects, floods, oversized
//! bodies, a busy VMM, and shutdown through the kill-switch eventfd.

mod common;

use std::io::Write;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use api::client::{api_request, raw_request, Method};
use common::{read_until_close, status_of, write_raw, FakeOptions, Harness, CREATE_BODY};

#[test]
fn half_written_headers_do_not_block_others_and_are_closed() {
    let h = Harness::start();
    let mut slow = h.connect();
    write_raw(&mut slow, b"GET /api/v1/vmm.ping HTTP/1.1\r\nHost: loc");
    // Others are served while the slow client dawdles.
    for _ in 0..5 {
        assert_eq!(h.get("vmm.ping").status, 200);
    }
    // The server gives up on it after the header timeout (800 ms in tests).
    let t = Instant::now();
    let (_, closed) = read_until_close(&mut slow, Duration::from_secs(5));
    assert!(closed, "half-written request was never closed");
    assert!(t.elapsed() < Duration::from_secs(4));
    assert_eq!(h.get("vmm.ping").status, 200);
}

#[test]
fn half_written_body_gets_408_and_others_are_served() {
    let h = Harness::start();
    let mut slow = h.connect();
    write_raw(
        &mut slow,
        b"PUT /api/v1/vm.create HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"cpus\":",
    );
    assert_eq!(h.get("vmm.ping").status, 200);
    let (raw, _) = read_until_close(&mut slow, Duration::from_secs(5));
    assert_eq!(
        status_of(&raw),
        Some(408),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    assert_eq!(h.get("vm.info").status, 404, "nothing was created");
}

#[test]
fn clients_disconnecting_mid_request_leave_the_server_serving() {
    let h = Harness::start();
    let body = CREATE_BODY.as_bytes();
    let full = raw_request("PUT", "/api/v1/vm.create", Some(body));
    for cut in [1, 10, 40, full.len() - body.len() - 2, full.len() - 5] {
        let mut s = h.connect();
        write_raw(&mut s, &full[..cut]);
        drop(s);
    }
    // A client that sends a full request and leaves before the answer.
    let mut s = h.connect();
    write_raw(&mut s, &raw_request("PUT", "/api/v1/vm.boot", None));
    drop(s);
    assert_eq!(h.get("vmm.ping").status, 200);
    assert_eq!(h.get("vm.info").status, 404, "no partial create happened");
}

#[test]
fn fifty_concurrent_clients_all_get_answers() {
    let h = Arc::new(Harness::start());
    h.put_json("vm.create", CREATE_BODY);
    let barrier = Arc::new(Barrier::new(50));
    let threads: Vec<_> = (0..50)
        .map(|i| {
            let (h, barrier) = (h.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let r = match i % 3 {
                    0 => h.get("vmm.ping"),
                    1 => h.get("vm.info"),
                    _ => h.put("vm.pause"), // 500 unless booted (as upstream): still an answer
                };
                r.status
            })
        })
        .collect();
    let statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(statuses.len(), 50);
    assert!(
        statuses.iter().all(|s| [200, 500].contains(s)),
        "{statuses:?}"
    );
    assert_eq!(h.get("vmm.ping").status, 200);
}

#[test]
fn many_idle_connections_do_not_starve_new_clients_forever() {
    // More idle connections than connection slots: they are closed by the
    // header timeout, after which new clients are served.
    let options = api::ServerOptions {
        max_connections: 4,
        ..common::test_options()
    };
    let h = Harness::start_with(Default::default(), options, None);
    let idle: Vec<_> = (0..6).map(|_| h.connect()).collect();
    let t = Instant::now();
    assert_eq!(h.get("vmm.ping").status, 200);
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(idle);
}

#[test]
fn oversized_bodies_are_413_without_reading_them() {
    let h = Harness::start();
    // Declared too large: rejected on the header alone.
    let mut s = h.connect();
    write_raw(
        &mut s,
        b"PUT /api/v1/vm.create HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n",
    );
    let (raw, _) = read_until_close(&mut s, Duration::from_secs(5));
    assert_eq!(status_of(&raw), Some(413));
    // Chunked without a length: cut off at the limit.
    let mut s = h.connect();
    write_raw(
        &mut s,
        b"PUT /api/v1/vm.create HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    let chunk = vec![b' '; 64 * 1024];
    for _ in 0..20 {
        let _ = write!(s, "{:x}\r\n", chunk.len());
        write_raw(&mut s, &chunk);
        write_raw(&mut s, b"\r\n");
    }
    let (raw, _) = read_until_close(&mut s, Duration::from_secs(5));
    assert_eq!(status_of(&raw), Some(413));
    assert_eq!(h.get("vmm.ping").status, 200);
}

#[test]
fn garbage_instead_of_http_gets_400_or_a_close() {
    let h = Harness::start();
    for junk in [
        &b"\x00\x01\x02\r\n\r\n"[..],
        b"GARBAGE\r\n\r\n",
        b"GET /api/v1/vmm.ping HTTP/9.9\r\n\r\n",
    ] {
        let mut s = h.connect();
        write_raw(&mut s, junk);
        let (raw, closed) = read_until_close(&mut s, Duration::from_secs(5));
        assert!(closed);
        if let Some(code) = status_of(&raw) {
            assert!((400..500).contains(&code), "{code}");
        }
    }
    assert_eq!(h.get("vmm.ping").status, 200);
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let h = Harness::start();
    let mut s = h.connect();
    let one = b"GET /api/v1/vmm.ping HTTP/1.1\r\nHost: x\r\n\r\n";
    let last = b"GET /api/v1/vm.info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    write_raw(&mut s, one);
    write_raw(&mut s, one);
    write_raw(&mut s, last);
    let (raw, closed) = read_until_close(&mut s, Duration::from_secs(5));
    assert!(closed);
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(text.matches("HTTP/1.1 200 \r\n").count(), 2, "{text}");
    assert_eq!(text.matches("HTTP/1.1 404 \r\n").count(), 1, "{text}");
}

#[test]
fn a_busy_vmm_gives_503_instead_of_hanging() {
    let fake = FakeOptions {
        has_balloon: true,
        delay: Duration::from_millis(600),
    };
    let h = Harness::start_with(
        fake,
        common::test_options(),
        Some(Duration::from_millis(200)),
    );
    let r = h.get("vmm.ping");
    assert_eq!(r.status, 503);
    let chain: Vec<String> = serde_json::from_slice(&r.body).unwrap();
    assert!(
        chain.last().is_some_and(|l| l.contains("did not answer")),
        "{chain:?}"
    );
}

#[test]
fn kill_evt_stops_the_server_promptly_even_with_open_connections() {
    let mut h = Harness::start();
    let idle = h.connect();
    let mut half = h.connect();
    write_raw(&mut half, b"GET /api/v1/vmm.pi");
    assert_eq!(h.get("vmm.ping").status, 200);
    let took = h.kill_server();
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(!h.socket.exists(), "socket file removed");
    assert!(api_request(&h.socket, Method::Get, "vmm.ping", None).is_err());
    drop((idle, half));
}
