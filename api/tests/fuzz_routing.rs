//! Property tests of request parsing and routing, and a bounded
//! deterministic random driver that throws mutated requests at the real
//! server (the HTTP-parser fuzz target without cargo-fuzz).

mod common;

use std::time::Duration;

use api::router::{parse_request, HttpError, API_PREFIX, MAX_BODY_SIZE, ROUTES};
use api::{ApiRequest, BalloonSize, VmResizeData};
use proptest::prelude::*;
use serde_json::Value;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        "[a-z_]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("cpus".to_string()),
                    Just("memory".to_string()),
                    Just("boot_vcpus".to_string()),
                    Just("max_vcpus".to_string()),
                    Just("size".to_string()),
                    Just("desired_balloon".to_string()),
                    Just("desired_vcpus".to_string()),
                    Just("payload".to_string()),
                    Just("kernel".to_string()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn endpoint() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            ROUTES
                .iter()
                .map(|r| r.endpoint.to_string())
                .collect::<Vec<_>>()
        ),
        "[a-z.\\-/%]{0,16}",
    ]
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GET".to_string()),
        Just("PUT".to_string()),
        Just("POST".to_string()),
        Just("DELETE".to_string()),
        "[A-Z]{0,7}",
    ]
}

/// The reference model of the balloon field: a non-negative integer, or an
/// array of exactly two of them.
fn balloon_model(v: &Value) -> Option<BalloonSize> {
    match v {
        Value::Number(n) => n.as_u64().map(BalloonSize::from),
        Value::Array(a) if a.len() == 2 => Some(BalloonSize {
            fmem: a[0].as_u64()?,
            smem: a[1].as_u64()?,
        }),
        _ => None,
    }
}

/// `FUZZ_CASES` (scripts/fuzz.sh raises it), else `default`: the parser
/// properties and the server driver honour it like every fuzz target.
fn cases(default: u32) -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(512)))]

    #[test]
    fn routing_never_panics_and_answers_a_client_error(
        method in method(),
        endpoint in endpoint(),
        prefixed in any::<bool>(),
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let path = if prefixed { format!("{API_PREFIX}{endpoint}") } else { endpoint.clone() };
        match parse_request(&method, &path, &body) {
            Ok(req) => {
                let route = ROUTES.iter().find(|r| r.endpoint == req.endpoint()).unwrap();
                prop_assert!(prefixed);
                prop_assert_eq!(route.endpoint, endpoint.as_str());
                prop_assert_eq!(route.method, method.as_str());
            }
            Err(e) => {
                let known = prefixed && ROUTES.iter().any(|r| r.endpoint == endpoint);
                let status = e.status();
                prop_assert!([400, 404].contains(&status), "{status}");
                prop_assert_eq!(status == 404, !known, "{}", e);
                prop_assert!(!api::router::error_chain(&e).is_empty());
            }
        }
    }

    #[test]
    fn create_with_random_json_is_accepted_or_400(value in json_value()) {
        let body = value.to_string();
        match parse_request("PUT", "/api/v1/vm.create", body.as_bytes()) {
            Ok(ApiRequest::VmCreate(cfg)) => prop_assert!(cfg.validate().is_ok()),
            Ok(other) => prop_assert!(false, "{other:?}"),
            Err(e) => prop_assert_eq!(e.status(), 400, "{}", e),
        }
    }

    #[test]
    fn balloon_field_matches_the_model(value in json_value()) {
        let body = serde_json::json!({ "desired_balloon": value }).to_string();
        let parsed = parse_request("PUT", "/api/v1/vm.resize", body.as_bytes());
        match (balloon_model(&value), value.is_null(), parsed) {
            (Some(want), _, Ok(ApiRequest::VmResize(d))) => {
                prop_assert_eq!(d.desired_balloon, Some(want))
            }
            (None, true, Ok(ApiRequest::VmResize(d))) => prop_assert_eq!(d.desired_balloon, None),
            (None, false, Err(HttpError::BadBody { .. })) => {}
            (model, _, got) => prop_assert!(false, "model {model:?} vs {got:?} for {value}"),
        }
    }

    #[test]
    fn resize_data_round_trips(
        vcpus in proptest::option::of(1u8..),
        ram in proptest::option::of(any::<u64>()),
        balloon in proptest::option::of((any::<u64>(), any::<u64>())),
    ) {
        let data = VmResizeData {
            desired_vcpus: vcpus,
            desired_ram: ram,
            desired_balloon: balloon.map(|(fmem, smem)| BalloonSize { fmem, smem }),
        };
        let body = serde_json::to_vec(&data).unwrap();
        let got = parse_request("PUT", "/api/v1/vm.resize", &body).unwrap();
        prop_assert_eq!(got, ApiRequest::VmResize(data));
    }
}

#[test]
fn bodies_just_over_the_limit_are_413_on_every_route() {
    let body = vec![b'{'; MAX_BODY_SIZE + 1];
    for r in ROUTES {
        let e = parse_request(r.method, &format!("{API_PREFIX}{}", r.endpoint), &body).unwrap_err();
        assert_eq!(e.status(), 413, "{}", r.endpoint);
    }
}

/// xorshift64*: a fixed seed keeps the run reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutate(rng: &mut Rng, mut bytes: Vec<u8>) -> Vec<u8> {
    for _ in 0..=rng.below(4) {
        if bytes.is_empty() {
            break;
        }
        let i = rng.below(bytes.len());
        match rng.below(4) {
            0 => bytes[i] = rng.next() as u8,
            1 => {
                bytes.remove(i);
            }
            2 => bytes.insert(i, b"\r\n:{[0- "[rng.below(8)]),
            _ => bytes.truncate(i),
        }
    }
    bytes
}

#[test]
fn random_mutated_requests_never_stop_the_server() {
    let h = common::Harness::start();
    let seeds: Vec<Vec<u8>> = ROUTES
        .iter()
        .map(|r| {
            let body =
                (r.body == api::router::BodyKind::Json).then_some(common::CREATE_BODY.as_bytes());
            api::client::raw_request(r.method, &format!("{API_PREFIX}{}", r.endpoint), body)
        })
        .filter(|raw| !raw.windows(12).any(|w| w == b"vmm.shutdown"))
        .collect();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut answered = 0;
    let requests = cases(150);
    for _ in 0..requests {
        let seed = seeds[rng.below(seeds.len())].clone();
        let raw = mutate(&mut rng, seed);
        let mut s = h.connect();
        common::write_raw(&mut s, &raw);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let (reply, _) = common::read_until_close(&mut s, Duration::from_secs(3));
        if let Some(code) = common::status_of(&reply) {
            answered += 1;
            // 500 is upstream's answer to a wrong-state action (its body
            // says so); anything else must be a client error or success.
            let vmm_error = String::from_utf8_lossy(&reply).contains("[\"Error from API\"");
            assert!(
                code < 500 || (code == 500 && vmm_error),
                "{code} for {:?}",
                String::from_utf8_lossy(&raw)
            );
        }
    }
    if std::env::var_os("FUZZ_STATS").is_some() {
        println!("FUZZSTAT http requests={requests} answered={answered}");
    }
    assert!(
        answered > requests / 5,
        "only {answered} answers to {requests} requests"
    );
    assert_eq!(h.get("vmm.ping").status, 200);
}
