//! HTTP routing as pure functions: `(method, path, body)` → [`ApiRequest`]
//! or an [`HttpError`], and [`ApiResult`] → status and body. No I/O here,
//! so every rule is unit-tested and fuzzed without a server.
//!
//! Status codes (documented in docs/api.md and the OpenAPI file):
//! * 200 with a JSON body (`vm.info`, `vm.counters`, `vm.balloon-stats`,
//!   `vmm.ping`), 200 without
//!   a body for `vmm.shutdown` (as upstream), 204 for every other action.
//! * 400: missing/invalid JSON body, wrong types, unknown fields, a
//!   configuration that fails validation, unsupported features.
//! * 404: unknown path, or the VM is not created.
//! * 405 (with `Allow`): a known path with the wrong method. Upstream answers
//!   400 here; 405 is what HTTP specifies and still a client error.
//! * 408: the body did not arrive in time. 413: body over [`MAX_BODY_SIZE`].
//! * 409: the action is not allowed in the VM's current state.
//! * 500: the VMM failed or is gone. 503: the VMM did not answer in time.
//!
//! Error bodies are a JSON array of strings, the error's `source()` chain
//! from outermost to innermost (newest upstream's format), e.g.
//! `["invalid JSON body for vm.create", "unknown field `foo`, …"]`.

use std::error::Error as StdError;

use serde_json::Value;

use vm_config::{ValidationError, VmConfig};

use crate::protocol::{ApiError, ApiRequest, ApiResponse, ApiResult};
use crate::types::VmResizeData;

/// Every endpoint lives under this prefix.
pub const API_PREFIX: &str = "/api/v1/";

/// Largest request body accepted (413 above it). A full `VmConfig` is a few
/// KiB; 1 MiB leaves room and bounds memory per connection.
pub const MAX_BODY_SIZE: usize = 1 << 20;

/// Whether an endpoint reads a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// Any body is ignored (as upstream).
    None,
    /// A JSON body is required.
    Json,
}

/// One row of the route table: the single source for the router, the
/// OpenAPI consistency test and ch-remote.
#[derive(Debug)]
pub struct Route {
    /// Endpoint name after [`API_PREFIX`], e.g. `vm.boot`.
    pub endpoint: &'static str,
    /// `GET` or `PUT`.
    pub method: &'static str,
    /// Whether a body is read.
    pub body: BodyKind,
    /// Status of a successful answer without body.
    pub empty_status: u16,
    build: fn(&[u8]) -> Result<ApiRequest, HttpError>,
}

impl Route {
    /// Turns the body into the request (the body is ignored for
    /// [`BodyKind::None`]).
    pub fn build(&self, body: &[u8]) -> Result<ApiRequest, HttpError> {
        if self.body == BodyKind::Json && body.is_empty() {
            return Err(HttpError::MissingBody {
                endpoint: self.endpoint,
            });
        }
        (self.build)(body)
    }
}

macro_rules! simple {
    ($endpoint:literal, $method:literal, $status:literal, $req:expr) => {
        Route {
            endpoint: $endpoint,
            method: $method,
            body: BodyKind::None,
            empty_status: $status,
            build: |_| Ok($req),
        }
    };
}

/// The route table.
pub static ROUTES: &[Route] = &[
    Route {
        endpoint: "vm.create",
        method: "PUT",
        body: BodyKind::Json,
        empty_status: 204,
        build: build_vm_create,
    },
    simple!("vm.boot", "PUT", 204, ApiRequest::VmBoot),
    simple!("vm.shutdown", "PUT", 204, ApiRequest::VmShutdown),
    simple!("vm.reboot", "PUT", 204, ApiRequest::VmReboot),
    simple!("vm.pause", "PUT", 204, ApiRequest::VmPause),
    simple!("vm.resume", "PUT", 204, ApiRequest::VmResume),
    simple!("vm.power-button", "PUT", 204, ApiRequest::VmPowerButton),
    simple!("vm.delete", "PUT", 204, ApiRequest::VmDelete),
    simple!("vm.info", "GET", 204, ApiRequest::VmInfo),
    simple!("vm.counters", "GET", 204, ApiRequest::VmCounters),
    Route {
        endpoint: "vm.resize",
        method: "PUT",
        body: BodyKind::Json,
        empty_status: 204,
        build: build_vm_resize,
    },
    simple!("vm.balloon-stats", "GET", 204, ApiRequest::VmBalloonStats),
    simple!("vmm.ping", "GET", 204, ApiRequest::VmmPing),
    simple!("vmm.shutdown", "PUT", 200, ApiRequest::VmmShutdown),
];

/// Deserializes `body` as `T`, then checks that the JSON had the shape of
/// `T`'s own serialization: serde's derived structs also accept a JSON
/// array of the field values (`[null, null]` for `VmResize`), and unit
/// enums accept `{"Off": null}`, which the API contract does not allow.
fn json<T: serde::de::DeserializeOwned + serde::Serialize>(
    endpoint: &'static str,
    body: &[u8],
) -> Result<T, HttpError> {
    let bad = |source| HttpError::BadBody { endpoint, source };
    let input: Value = serde_json::from_slice(body).map_err(bad)?;
    let value: T = serde_json::from_value(input.clone()).map_err(bad)?;
    let canonical = serde_json::to_value(&value).map_err(bad)?;
    check_shape(&input, &canonical, "body").map_err(|reason| HttpError::BadShape {
        endpoint,
        source: ShapeError(reason),
    })?;
    Ok(value)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `input` must have the JSON kinds of `canonical` (what serde writes back)
/// everywhere, except that a `[fmem, 0]` balloon pair is written back as
/// the integer `fmem`, and a `null` field may be left out.
fn check_shape(input: &Value, canonical: &Value, at: &str) -> Result<(), String> {
    match (input, canonical) {
        (Value::Object(i), Value::Object(c)) => i.iter().try_for_each(|(k, iv)| match c.get(k) {
            Some(cv) => check_shape(iv, cv, &format!("{at}.{k}")),
            None if iv.is_null() => Ok(()),
            None => Err(format!("{at}.{k}: unexpected field")),
        }),
        (Value::Array(i), Value::Array(c)) if i.len() == c.len() => i
            .iter()
            .zip(c)
            .enumerate()
            .try_for_each(|(n, (iv, cv))| check_shape(iv, cv, &format!("{at}[{n}]"))),
        (Value::Array(_), Value::Number(_)) => Ok(()),
        (i, c) if kind(i) == kind(c) => Ok(()),
        (i, c) => Err(format!("{at}: expected {}, got {}", kind(c), kind(i))),
    }
}

/// Why a body that serde accepted does not have the contract's shape.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(String);

fn build_vm_create(body: &[u8]) -> Result<ApiRequest, HttpError> {
    let config: VmConfig = json("vm.create", body)?;
    config
        .validate()
        .map_err(|source| HttpError::InvalidConfig { source })?;
    Ok(ApiRequest::VmCreate(Box::new(config)))
}

fn build_vm_resize(body: &[u8]) -> Result<ApiRequest, HttpError> {
    let data: VmResizeData = json("vm.resize", body)?;
    if data.desired_vcpus == Some(0) {
        return Err(ApiError::BadRequest("desired_vcpus must be at least 1".into()).into());
    }
    Ok(ApiRequest::VmResize(data))
}

/// A request the HTTP layer rejects before (or instead of) the VMM.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// No such endpoint.
    #[error("unknown API endpoint {path}")]
    NotFound {
        /// The path asked for.
        path: String,
    },
    /// Known endpoint, wrong method.
    #[error("{endpoint} does not support {method}; use {allowed}")]
    MethodNotAllowed {
        /// Endpoint name.
        endpoint: &'static str,
        /// Method used.
        method: String,
        /// The method to use.
        allowed: &'static str,
    },
    /// A body is required and none was sent.
    #[error("{endpoint} needs a JSON body")]
    MissingBody {
        /// Endpoint name.
        endpoint: &'static str,
    },
    /// The body is larger than [`MAX_BODY_SIZE`].
    #[error("request body larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body could not be read (client went away, or too slow).
    #[error("request body not received: {0}")]
    BodyTimeout(String),
    /// The body is not the JSON the endpoint expects.
    #[error("invalid JSON body for {endpoint}")]
    BadBody {
        /// Endpoint name.
        endpoint: &'static str,
        /// What serde found.
        #[source]
        source: serde_json::Error,
    },
    /// The body parsed, but not in the documented shape (an array where an
    /// object is expected, say).
    #[error("invalid JSON body for {endpoint}")]
    BadShape {
        /// Endpoint name.
        endpoint: &'static str,
        /// Where and what.
        #[source]
        source: ShapeError,
    },
    /// The configuration parsed but is not valid.
    #[error("invalid VM configuration")]
    InvalidConfig {
        /// Why.
        #[source]
        source: ValidationError,
    },
    /// The VMM (or the path to it) answered with an error.
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl HttpError {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            Self::NotFound { .. } => 404,
            Self::MethodNotAllowed { .. } => 405,
            Self::MissingBody { .. }
            | Self::BadBody { .. }
            | Self::BadShape { .. }
            | Self::InvalidConfig { .. } => 400,
            Self::BodyTooLarge { .. } => 413,
            Self::BodyTimeout(_) => 408,
            Self::Api(e) => e.status(),
        }
    }

    /// The `Allow` header value for 405 answers.
    pub fn allow(&self) -> Option<&'static str> {
        match self {
            Self::MethodNotAllowed { allowed, .. } => Some(allowed),
            _ => None,
        }
    }
}

/// Finds the route for `method` and `path` (a path without query string).
pub fn find_route(method: &str, path: &str) -> Result<&'static Route, HttpError> {
    let not_found = || HttpError::NotFound {
        path: path.chars().take(256).collect(),
    };
    let endpoint = path.strip_prefix(API_PREFIX).ok_or_else(not_found)?;
    let route = ROUTES
        .iter()
        .find(|r| r.endpoint == endpoint)
        .ok_or_else(not_found)?;
    if route.method != method {
        return Err(HttpError::MethodNotAllowed {
            endpoint: route.endpoint,
            method: method.chars().take(32).collect(),
            allowed: route.method,
        });
    }
    Ok(route)
}

/// The whole request parse: route, size check, body.
pub fn parse_request(method: &str, path: &str, body: &[u8]) -> Result<ApiRequest, HttpError> {
    let route = find_route(method, path)?;
    if body.len() > MAX_BODY_SIZE {
        return Err(HttpError::BodyTooLarge {
            limit: MAX_BODY_SIZE,
        });
    }
    route.build(body)
}

/// An HTTP answer, before it is put on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpReply {
    /// Status code.
    pub status: u16,
    /// JSON body, if any.
    pub body: Option<Vec<u8>>,
    /// `Allow` header for 405.
    pub allow: Option<&'static str>,
}

/// The JSON error body: the `source()` chain as an array of strings.
pub fn error_chain(err: &dyn StdError) -> Vec<String> {
    let mut chain = vec![err.to_string()];
    let mut next = err.source();
    while let Some(e) = next {
        chain.push(e.to_string());
        next = e.source();
    }
    chain
}

/// The answer for an error.
pub fn error_reply(err: &HttpError) -> HttpReply {
    let body = serde_json::to_vec(&error_chain(err)).unwrap_or_else(|_| b"[]".to_vec());
    HttpReply {
        status: err.status(),
        body: Some(body),
        allow: err.allow(),
    }
}

/// The answer for the VMM's result to a request on `route`.
pub fn reply_for(route: &Route, result: ApiResult) -> HttpReply {
    let body = match result {
        Err(e) => return error_reply(&HttpError::Api(e)),
        Ok(ApiResponse::Empty) => {
            return HttpReply {
                status: route.empty_status,
                body: None,
                allow: None,
            }
        }
        Ok(ApiResponse::VmInfo(info)) => serde_json::to_vec(&info),
        Ok(ApiResponse::VmCounters(counters)) => serde_json::to_vec(&counters),
        Ok(ApiResponse::VmmPing(ping)) => serde_json::to_vec(&ping),
        Ok(ApiResponse::BalloonStats(stats)) => serde_json::to_vec(&stats),
    };
    match body {
        Ok(body) => HttpReply {
            status: 200,
            body: Some(body),
            allow: None,
        },
        Err(e) => {
            error_reply(&ApiError::Internal(format!("cannot serialize the answer: {e}")).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::BalloonSize;

    fn status_of(method: &str, path: &str, body: &str) -> u16 {
        match parse_request(method, path, body.as_bytes()) {
            Ok(_) => 200,
            Err(e) => e.status(),
        }
    }

    #[test]
    fn every_simple_route_parses_without_body() {
        let cases = [
            ("PUT", "vm.boot", ApiRequest::VmBoot),
            ("PUT", "vm.shutdown", ApiRequest::VmShutdown),
            ("PUT", "vm.reboot", ApiRequest::VmReboot),
            ("PUT", "vm.pause", ApiRequest::VmPause),
            ("PUT", "vm.resume", ApiRequest::VmResume),
            ("PUT", "vm.power-button", ApiRequest::VmPowerButton),
            ("PUT", "vm.delete", ApiRequest::VmDelete),
            ("GET", "vm.info", ApiRequest::VmInfo),
            ("GET", "vm.counters", ApiRequest::VmCounters),
            ("GET", "vmm.ping", ApiRequest::VmmPing),
            ("PUT", "vmm.shutdown", ApiRequest::VmmShutdown),
        ];
        for (method, endpoint, want) in cases {
            let path = format!("{API_PREFIX}{endpoint}");
            assert_eq!(parse_request(method, &path, b"").unwrap(), want);
            assert_eq!(want.endpoint(), endpoint);
        }
    }

    #[test]
    fn bodies_of_bodiless_actions_are_ignored_like_upstream() {
        let r = parse_request("PUT", "/api/v1/vm.boot", b"{not json").unwrap();
        assert_eq!(r, ApiRequest::VmBoot);
    }

    #[test]
    fn create_accepts_upstream_shaped_minimal_config() {
        let body = r#"{"cpus":{"boot_vcpus":2,"max_vcpus":2},
            "memory":{"size":1073741824},
            "payload":{"kernel":"/boot/vmlinuz","cmdline":"console=ttyS0"}}"#;
        let ApiRequest::VmCreate(cfg) =
            parse_request("PUT", "/api/v1/vm.create", body.as_bytes()).unwrap()
        else {
            panic!("not a create");
        };
        assert_eq!(cfg.cpus.boot_vcpus, 2);
        assert_eq!(cfg.memory.size, 1 << 30);
    }

    #[test]
    fn create_rejects_bad_json_wrong_types_unknown_fields_and_missing_body() {
        let path = "/api/v1/vm.create";
        assert_eq!(status_of("PUT", path, ""), 400);
        assert_eq!(status_of("PUT", path, "{"), 400);
        assert_eq!(status_of("PUT", path, "[]"), 400);
        assert_eq!(status_of("PUT", path, r#"{"memory":{"size":"1G"}}"#), 400);
        assert_eq!(
            status_of("PUT", path, r#"{"cpus":{"boot_vcpus":-1,"max_vcpus":1}}"#),
            400
        );
        assert_eq!(status_of("PUT", path, r#"{"bogus":1}"#), 400);
        assert_eq!(
            status_of("PUT", path, r#"{"memory":{"size":1073741824,"x":1}}"#),
            400
        );
    }

    #[test]
    fn create_runs_config_validation() {
        let e = parse_request(
            "PUT",
            "/api/v1/vm.create",
            br#"{"cpus":{"boot_vcpus":4,"max_vcpus":2}}"#,
        )
        .unwrap_err();
        assert_eq!(e.status(), 400);
        let chain = error_chain(&e);
        assert_eq!(chain[0], "invalid VM configuration");
        assert!(chain[1].starts_with("--cpus"), "{chain:?}");
    }

    #[test]
    fn bad_json_error_body_carries_the_serde_reason() {
        let e = parse_request("PUT", "/api/v1/vm.create", br#"{"bogus":1}"#).unwrap_err();
        let reply = error_reply(&e);
        assert_eq!(reply.status, 400);
        let chain: Vec<String> = serde_json::from_slice(&reply.body.unwrap()).unwrap();
        assert_eq!(chain[0], "invalid JSON body for vm.create");
        assert!(chain[1].contains("unknown field `bogus`"), "{chain:?}");
    }

    #[test]
    fn structs_given_as_arrays_and_enums_as_maps_are_400() {
        for (path, body) in [
            ("/api/v1/vm.resize", "[null, null]"),
            ("/api/v1/vm.resize", "[1, 2, 3]"),
            ("/api/v1/vm.create", r#"{"cpus":[2,2]}"#),
            ("/api/v1/vm.create", r#"{"serial":{"mode":{"Null":null}}}"#),
            ("/api/v1/vm.create", r#"{"numa":[[0]]}"#),
        ] {
            let e = parse_request("PUT", path, body.as_bytes()).unwrap_err();
            assert_eq!(e.status(), 400, "{body}");
            assert_eq!(error_chain(&e).len(), 2, "{body}: {e:?}");
        }
        // Nulls for optional fields are still fine.
        let r = parse_request("PUT", "/api/v1/vm.resize", br#"{"desired_ram":null}"#);
        assert_eq!(r.unwrap(), ApiRequest::VmResize(VmResizeData::default()));
        let r = parse_request("PUT", "/api/v1/vm.resize", br#"{"desired_balloon":[5,0]}"#);
        assert!(r.is_ok());
    }

    #[test]
    fn resize_parses_integer_and_tier_pair() {
        let r = parse_request("PUT", "/api/v1/vm.resize", br#"{"desired_balloon":[1,2]}"#);
        assert_eq!(
            r.unwrap(),
            ApiRequest::VmResize(VmResizeData {
                desired_balloon: Some(BalloonSize { fmem: 1, smem: 2 }),
                ..Default::default()
            })
        );
        let r = parse_request("PUT", "/api/v1/vm.resize", br#"{"desired_balloon":7}"#);
        assert_eq!(
            r.unwrap(),
            ApiRequest::VmResize(VmResizeData {
                desired_balloon: Some(BalloonSize { fmem: 7, smem: 0 }),
                ..Default::default()
            })
        );
    }

    #[test]
    fn resize_rejects_bad_values() {
        let path = "/api/v1/vm.resize";
        for body in [
            r#"{"desired_balloon":[1]}"#,
            r#"{"desired_balloon":[1,2,3]}"#,
            r#"{"desired_balloon":-1}"#,
            r#"{"desired_balloon":"1G"}"#,
            r#"{"desired_vcpus":0}"#,
            r#"{"desired_vcpus":300}"#,
            r#"{"desired_ram":-5}"#,
            r#"{"desired_memory":5}"#,
            "",
        ] {
            assert_eq!(status_of("PUT", path, body), 400, "{body}");
        }
    }

    #[test]
    fn unknown_paths_are_404_and_wrong_methods_405() {
        assert_eq!(status_of("GET", "/api/v1/vm.nope", ""), 404);
        assert_eq!(status_of("GET", "/api/v2/vm.info", ""), 404);
        assert_eq!(status_of("GET", "/api/v1/vm.info/", ""), 404);
        assert_eq!(status_of("GET", "/", ""), 404);
        assert_eq!(status_of("GET", "", ""), 404);
        let e = parse_request("PUT", "/api/v1/vm.info", b"").unwrap_err();
        assert_eq!(e.status(), 405);
        assert_eq!(e.allow(), Some("GET"));
        assert_eq!(status_of("GET", "/api/v1/vm.boot", ""), 405);
        assert_eq!(status_of("POST", "/api/v1/vm.create", "{}"), 405);
        assert_eq!(status_of("DELETE", "/api/v1/vm.delete", ""), 405);
    }

    #[test]
    fn oversized_bodies_are_413_even_for_bodiless_routes() {
        let big = vec![b' '; MAX_BODY_SIZE + 1];
        for path in ["/api/v1/vm.create", "/api/v1/vm.boot"] {
            let e = parse_request("PUT", path, &big).unwrap_err();
            assert_eq!(e.status(), 413);
        }
    }

    #[test]
    fn replies_map_results_to_statuses() {
        let boot = find_route("PUT", "/api/v1/vm.boot").unwrap();
        assert_eq!(reply_for(boot, Ok(ApiResponse::Empty)).status, 204);
        assert_eq!(reply_for(boot, Ok(ApiResponse::Empty)).body, None);
        let bye = find_route("PUT", "/api/v1/vmm.shutdown").unwrap();
        assert_eq!(reply_for(bye, Ok(ApiResponse::Empty)).status, 200);
        let r = reply_for(boot, Err(ApiError::VmAlreadyBooted));
        assert_eq!(r.status, 409);
        assert_eq!(r.body.unwrap(), br#"["VM is already booted"]"#);
        let counters = find_route("GET", "/api/v1/vm.counters").unwrap();
        let r = reply_for(counters, Ok(ApiResponse::VmCounters(Default::default())));
        assert_eq!((r.status, r.body.unwrap()), (200, b"{}".to_vec()));
    }

    #[test]
    fn route_table_has_unique_endpoints() {
        let mut names: Vec<_> = ROUTES.iter().map(|r| r.endpoint).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ROUTES.len());
    }
}
