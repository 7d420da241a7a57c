//! HTTP routing as pure functions: `(method, path, body)` → [`ApiRequest`]
//! or an [`HttpError`], and [`ApiResult`] → status and body. No I/O here,
//! so every rule is unit-tested and fuzzed without a server.
//!
//! Every endpoint of upstream Cloud Hypervisor v53 is known, and answers
//! as upstream's server does (documented in docs/api.md and the OpenAPI
//! file), so that upstream's clients read our answers as theirs:
//! * 200 with a JSON body (`vm.info`, `vm.counters`, `vm.balloon-stats`,
//!   `vmm.ping`), 200 without a body for `vmm.shutdown`, 204 for every
//!   other action.
//! * 400: wrong method, a body on an action that takes none, a missing or
//!   malformed JSON body, a configuration that fails validation (naming
//!   the field and value).
//! * 404: unknown path, or no VM (no configuration for `vm.boot`).
//! * 500: the action is not allowed in the VM's state, the feature is not
//!   in this VMM, or the VMM failed.
//! * 408: the body did not arrive in time. 413: body over [`MAX_BODY_SIZE`].
//!   503: the VMM did not answer in time. (Upstream has no such limits.)
//!
//! Error bodies are a JSON array of strings, outermost first, as
//! upstream's: `["Error from API", "The VM could not be paused", "VM is
//! not running"]`, `["Failed to deserialize JSON", "<serde's reason>"]`,
//! `["Not Found"]`, `["Bad Request", "<why>"]`.

use serde_json::Value;

use vm_config::{compat, DiskConfig, NetConfig, ValidationError, VmConfig};

use crate::protocol::{ApiError, ApiRequest, ApiResponse, ApiResult, Needs, UnsupportedAction};
use crate::types::{VmRemoveDeviceData, VmResizeData, VmResizeDiskData, VmResizeZoneData};

/// Every endpoint lives under this prefix.
pub const API_PREFIX: &str = "/api/v1/";

/// Largest request body accepted (413 above it). A full `VmConfig` is a few
/// KiB; 1 MiB leaves room and bounds memory per connection.
pub const MAX_BODY_SIZE: usize = 1 << 20;

/// Whether an endpoint reads a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// No body may be sent (400 otherwise, as upstream).
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
    /// Upstream's context line of an error answer ("The VM could not boot").
    pub context: &'static str,
    build: fn(&[u8]) -> Result<ApiRequest, HttpError>,
}

impl Route {
    /// Turns the body into the request.
    pub fn build(&self, body: &[u8]) -> Result<ApiRequest, HttpError> {
        match self.body {
            BodyKind::Json if body.is_empty() => Err(HttpError::MissingBody {
                endpoint: self.endpoint,
            }),
            BodyKind::None if !body.is_empty() => Err(HttpError::UnexpectedBody {
                endpoint: self.endpoint,
            }),
            _ => (self.build)(body).map_err(|e| e.in_context(self.context)),
        }
    }
}

macro_rules! route {
    ($endpoint:literal, $method:literal, $status:literal, $context:literal, None, $req:expr) => {
        Route {
            endpoint: $endpoint,
            method: $method,
            body: BodyKind::None,
            empty_status: $status,
            context: $context,
            build: |_| Ok($req),
        }
    };
    ($endpoint:literal, $method:literal, $status:literal, $context:literal, Json, $build:expr) => {
        Route {
            endpoint: $endpoint,
            method: $method,
            body: BodyKind::Json,
            empty_status: $status,
            context: $context,
            build: $build,
        }
    };
}

/// An endpoint for a feature this VMM lacks: the body must have the
/// fields upstream requires; the VMM answers the state error or 500.
macro_rules! unsupported {
    ($endpoint:literal, $context:literal, $feature:literal, $needs:expr, [$($field:literal),*]) => {
        route!($endpoint, "PUT", 204, $context, Json, |body| {
            require_fields($endpoint, body, &[$($field),*])?;
            Ok(ApiRequest::Unsupported(UnsupportedAction {
                endpoint: $endpoint,
                feature: $feature,
                needs: $needs,
            }))
        })
    };
}

/// The route table: upstream v53's endpoints plus `vm.balloon-stats`.
pub static ROUTES: &[Route] = &[
    route!(
        "vm.create",
        "PUT",
        204,
        "The VM could not be created",
        Json,
        build_vm_create
    ),
    route!(
        "vm.boot",
        "PUT",
        204,
        "The VM could not boot",
        None,
        ApiRequest::VmBoot
    ),
    route!(
        "vm.shutdown",
        "PUT",
        204,
        "The VM could not shutdown",
        None,
        ApiRequest::VmShutdown
    ),
    route!(
        "vm.reboot",
        "PUT",
        204,
        "The VM could not reboot",
        None,
        ApiRequest::VmReboot
    ),
    route!(
        "vm.pause",
        "PUT",
        204,
        "The VM could not be paused",
        None,
        ApiRequest::VmPause
    ),
    route!(
        "vm.resume",
        "PUT",
        204,
        "The VM could not resume",
        None,
        ApiRequest::VmResume
    ),
    route!(
        "vm.power-button",
        "PUT",
        204,
        "Error triggering power button",
        None,
        ApiRequest::VmPowerButton
    ),
    route!(
        "vm.nmi",
        "PUT",
        204,
        "Error triggering NMI",
        None,
        ApiRequest::VmNmi
    ),
    route!(
        "vm.delete",
        "PUT",
        204,
        "The VM could not be deleted",
        None,
        ApiRequest::VmDelete
    ),
    route!(
        "vm.info",
        "GET",
        204,
        "The VM info is not available",
        None,
        ApiRequest::VmInfo
    ),
    route!(
        "vm.counters",
        "GET",
        204,
        "The VM info is not available",
        None,
        ApiRequest::VmCounters
    ),
    route!(
        "vm.resize",
        "PUT",
        204,
        "The VM could not be resized",
        Json,
        build_vm_resize
    ),
    route!(
        "vm.resize-zone",
        "PUT",
        204,
        "The memory zone could not be resized",
        Json,
        |b| Ok(ApiRequest::VmResizeZone(json::<VmResizeZoneData>(
            "vm.resize-zone",
            b
        )?))
    ),
    route!(
        "vm.resize-disk",
        "PUT",
        204,
        "The disk could not be resized",
        Json,
        |b| Ok(ApiRequest::VmResizeDisk(json::<VmResizeDiskData>(
            "vm.resize-disk",
            b
        )?))
    ),
    route!(
        "vm.add-disk",
        "PUT",
        204,
        "The disk could not be added to the VM",
        Json,
        build_add_disk
    ),
    route!(
        "vm.add-net",
        "PUT",
        204,
        "The network device could not be added to the VM",
        Json,
        build_add_net
    ),
    route!(
        "vm.remove-device",
        "PUT",
        204,
        "The device could not be removed from the VM",
        Json,
        |b| Ok(ApiRequest::VmRemoveDevice(json::<VmRemoveDeviceData>(
            "vm.remove-device",
            b
        )?))
    ),
    unsupported!(
        "vm.add-device",
        "The device could not be added to the VM",
        "VFIO device assignment",
        Needs::Vm,
        ["path"]
    ),
    unsupported!(
        "vm.add-user-device",
        "The user device could not be added to the VM",
        "vfio-user devices",
        Needs::Vm,
        ["socket"]
    ),
    unsupported!(
        "vm.add-fs",
        "The fs could not be added to the VM",
        "virtio-fs",
        Needs::Vm,
        ["tag", "socket"]
    ),
    unsupported!(
        "vm.add-generic-vhost-user",
        "The generic vhost-user device could not be added to the VM",
        "vhost-user devices",
        Needs::Vm,
        ["socket", "device_type", "queue_sizes"]
    ),
    unsupported!(
        "vm.add-pmem",
        "The pmem device could not be added to the VM",
        "virtio-pmem",
        Needs::Vm,
        ["file"]
    ),
    unsupported!(
        "vm.add-vsock",
        "The vsock device could not be added to the VM",
        "virtio-vsock",
        Needs::Vm,
        ["cid", "socket"]
    ),
    unsupported!(
        "vm.add-vdpa",
        "The vDPA device could not be added to the VM",
        "vDPA devices",
        Needs::Vm,
        ["path"]
    ),
    unsupported!(
        "vm.snapshot",
        "The VM could not be snapshotted",
        "snapshot",
        Needs::Running,
        ["destination_url"]
    ),
    unsupported!(
        "vm.coredump",
        "The VM could not be coredumped",
        "guest coredump",
        Needs::Running,
        ["destination_url"]
    ),
    unsupported!(
        "vm.restore",
        "The VM could not be restored",
        "restore from a snapshot",
        Needs::NoVm,
        ["source_url"]
    ),
    unsupported!(
        "vm.send-migration",
        "Error dispatching the migration worker",
        "live migration",
        Needs::Running,
        ["destination_url"]
    ),
    unsupported!(
        "vm.receive-migration",
        "Error receiving migration",
        "live migration",
        Needs::NoVm,
        ["receiver_url"]
    ),
    route!(
        "vm.balloon-stats",
        "GET",
        204,
        "The balloon statistics are not available",
        None,
        ApiRequest::VmBalloonStats
    ),
    route!(
        "vmm.ping",
        "GET",
        204,
        "The VMM could not be pinged",
        None,
        ApiRequest::VmmPing
    ),
    route!(
        "vmm.shutdown",
        "PUT",
        200,
        "The VMM could not shutdown",
        None,
        ApiRequest::VmmShutdown
    ),
];

/// Deserializes `body` as `T`, then checks that the JSON had the shape of
/// `T`'s own serialization: serde's derived structs also accept a JSON
/// array of the field values (`[null, null]` for `VmResize`), and unit
/// enums accept `{"Off": null}`, which the API contract does not allow.
fn json<T: serde::de::DeserializeOwned + serde::Serialize>(
    endpoint: &'static str,
    body: &[u8],
) -> Result<T, HttpError> {
    let input: Value =
        serde_json::from_slice(body).map_err(|source| HttpError::BadBody { endpoint, source })?;
    json_value(endpoint, input)
}

/// A device body as upstream's ch-remote sends it: every upstream field
/// present with its default. `strip` drops those that ask for nothing and
/// refuses (400, naming field and value) those that ask for a feature we
/// lack.
fn upstream_json(
    endpoint: &'static str,
    body: &[u8],
    strip: fn(&mut Value) -> Result<(), compat::Unsupported>,
) -> Result<Value, HttpError> {
    let mut input: Value =
        serde_json::from_slice(body).map_err(|source| HttpError::BadBody { endpoint, source })?;
    strip(&mut input).map_err(|e| HttpError::Api(ApiError::BadRequest(e.to_string())))?;
    Ok(input)
}

/// [`json`] of an already parsed body.
fn json_value<T: serde::de::DeserializeOwned + serde::Serialize>(
    endpoint: &'static str,
    input: Value,
) -> Result<T, HttpError> {
    let bad = |source| HttpError::BadBody { endpoint, source };
    let value: T = serde_json::from_value(input.clone()).map_err(bad)?;
    let canonical = serde_json::to_value(&value).map_err(bad)?;
    check_shape(&input, &canonical, "body").map_err(|reason| HttpError::BadShape {
        endpoint,
        source: ShapeError(reason),
    })?;
    Ok(value)
}

/// For endpoints whose body we do not model: a JSON object that has every
/// field upstream requires.
fn require_fields(endpoint: &'static str, body: &[u8], fields: &[&str]) -> Result<(), HttpError> {
    let bad = |source| HttpError::BadBody { endpoint, source };
    let input: Value = serde_json::from_slice(body).map_err(bad)?;
    let Value::Object(map) = input else {
        return Err(HttpError::BadShape {
            endpoint,
            source: ShapeError(format!("body: expected an object, got {}", kind(&input))),
        });
    };
    match fields
        .iter()
        .find(|f| map.get(**f).is_none_or(Value::is_null))
    {
        Some(missing) => Err(HttpError::BadShape {
            endpoint,
            source: ShapeError(format!("missing field `{missing}`")),
        }),
        None => Ok(()),
    }
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
        .map_err(|source| HttpError::InvalidConfig {
            context: "The VM could not be created",
            source,
        })?;
    Ok(ApiRequest::VmCreate(Box::new(config)))
}

fn build_add_disk(body: &[u8]) -> Result<ApiRequest, HttpError> {
    let disk = upstream_json("vm.add-disk", body, compat::strip_upstream_disk_fields)?;
    let disk: DiskConfig = json_value("vm.add-disk", disk)?;
    Ok(ApiRequest::VmAddDisk(Box::new(disk)))
}

fn build_add_net(body: &[u8]) -> Result<ApiRequest, HttpError> {
    let net = upstream_json("vm.add-net", body, compat::strip_upstream_net_fields)?;
    let net: NetConfig = json_value("vm.add-net", net)?;
    Ok(ApiRequest::VmAddNet(Box::new(net)))
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
    #[error("Not Found")]
    NotFound {
        /// The path asked for.
        path: String,
    },
    /// Known endpoint, wrong method (upstream: 400 "Bad Request").
    #[error("Bad Request")]
    MethodNotAllowed {
        /// Why, for the second line of the body.
        #[source]
        source: Detail,
    },
    /// A body is required and none was sent.
    #[error("Bad Request")]
    MissingBody {
        /// Endpoint name.
        endpoint: &'static str,
    },
    /// A body was sent to an action that takes none.
    #[error("Bad Request")]
    UnexpectedBody {
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
    #[error("Failed to deserialize JSON")]
    BadBody {
        /// Endpoint name.
        endpoint: &'static str,
        /// What serde found.
        #[source]
        source: serde_json::Error,
    },
    /// The body parsed, but not in the documented shape (an array where an
    /// object is expected, say).
    #[error("Failed to deserialize JSON")]
    BadShape {
        /// Endpoint name.
        endpoint: &'static str,
        /// Where and what.
        #[source]
        source: ShapeError,
    },
    /// The configuration parsed but is not valid.
    #[error("Failed to validate config")]
    InvalidConfig {
        /// The endpoint's context line.
        context: &'static str,
        /// Why.
        #[source]
        source: ValidationError,
    },
    /// The VMM (or the path to it) answered with an error, before the
    /// endpoint's context is known.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The VMM answered with an error for an endpoint.
    #[error("Error from API")]
    Vmm {
        /// The endpoint's context line.
        context: &'static str,
        /// The VMM's error.
        error: ApiError,
    },
}

/// A one-line reason under a generic error line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Detail(String);

impl HttpError {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            Self::NotFound { .. } => 404,
            Self::MethodNotAllowed { .. }
            | Self::MissingBody { .. }
            | Self::UnexpectedBody { .. }
            | Self::BadBody { .. }
            | Self::BadShape { .. }
            | Self::InvalidConfig { .. } => 400,
            Self::BodyTooLarge { .. } => 413,
            Self::BodyTimeout(_) => 408,
            Self::Api(e) | Self::Vmm { error: e, .. } => e.status(),
        }
    }

    /// An [`HttpError::Api`] becomes an [`HttpError::Vmm`] of `context`.
    fn in_context(self, context: &'static str) -> Self {
        match self {
            Self::Api(error) => Self::Vmm { context, error },
            other => other,
        }
    }

    /// The JSON error body's lines, outermost first.
    pub fn chain(&self) -> Vec<String> {
        match self {
            Self::Vmm { context, error } => {
                let mut chain = vec!["Error from API".to_owned(), (*context).to_owned()];
                chain.extend(error.reasons());
                chain
            }
            Self::InvalidConfig { context, .. } => {
                let mut chain = vec!["Error from API".to_owned(), (*context).to_owned()];
                chain.extend(error_chain(self));
                chain
            }
            Self::MissingBody { endpoint } => {
                vec![
                    "Bad Request".into(),
                    format!("{endpoint} needs a JSON body"),
                ]
            }
            Self::UnexpectedBody { endpoint } => {
                vec!["Bad Request".into(), format!("{endpoint} takes no body")]
            }
            _ => error_chain(self),
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
        let method: String = method.chars().take(32).collect();
        return Err(HttpError::MethodNotAllowed {
            source: Detail(format!(
                "{} does not support {method}; use {}",
                route.endpoint, route.method
            )),
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
}

/// The `source()` chain of an error as strings, outermost first.
pub fn error_chain(err: &dyn std::error::Error) -> Vec<String> {
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
    let body = serde_json::to_vec(&err.chain()).unwrap_or_else(|_| b"[]".to_vec());
    HttpReply {
        status: err.status(),
        body: Some(body),
    }
}

/// The answer for the VMM's result to a request on `route`.
pub fn reply_for(route: &Route, result: ApiResult) -> HttpReply {
    let body = match result {
        Err(error) => {
            return error_reply(&HttpError::Vmm {
                context: route.context,
                error,
            })
        }
        Ok(ApiResponse::Empty) => {
            return HttpReply {
                status: route.empty_status,
                body: None,
            }
        }
        Ok(ApiResponse::VmInfo(info)) => serde_json::to_vec(&info),
        Ok(ApiResponse::VmCounters(counters)) => serde_json::to_vec(&counters),
        Ok(ApiResponse::VmmPing(ping)) => serde_json::to_vec(&ping),
        Ok(ApiResponse::BalloonStats(stats)) => serde_json::to_vec(&stats),
        Ok(ApiResponse::PciDeviceInfo(info)) => serde_json::to_vec(&info),
    };
    match body {
        Ok(body) => HttpReply {
            status: 200,
            body: Some(body),
        },
        Err(e) => reply_for(
            route,
            Err(ApiError::Internal(format!(
                "cannot serialize the answer: {e}"
            ))),
        ),
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
    fn bodies_of_bodiless_actions_are_400_like_upstream() {
        let e = parse_request("PUT", "/api/v1/vm.boot", b"{}").unwrap_err();
        assert_eq!(e.status(), 400);
        assert_eq!(e.chain()[0], "Bad Request");
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
        let chain = e.chain();
        assert_eq!(
            chain[..3],
            [
                "Error from API",
                "The VM could not be created",
                "Failed to validate config"
            ]
        );
        assert!(chain[3].starts_with("--cpus"), "{chain:?}");
    }

    #[test]
    fn bad_json_error_body_carries_the_serde_reason() {
        let e = parse_request("PUT", "/api/v1/vm.create", br#"{"bogus":1}"#).unwrap_err();
        let reply = error_reply(&e);
        assert_eq!(reply.status, 400);
        let chain: Vec<String> = serde_json::from_slice(&reply.body.unwrap()).unwrap();
        assert_eq!(chain[0], "Failed to deserialize JSON");
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

    fn status_err(method: &str, path: &str) -> HttpError {
        parse_request(method, path, b"").unwrap_err()
    }

    #[test]
    fn unknown_paths_are_404_and_wrong_methods_400() {
        assert_eq!(status_of("GET", "/api/v1/vm.nope", ""), 404);
        assert_eq!(status_of("GET", "/api/v2/vm.info", ""), 404);
        assert_eq!(status_of("GET", "/api/v1/vm.info/", ""), 404);
        assert_eq!(status_of("GET", "/", ""), 404);
        assert_eq!(status_of("GET", "", ""), 404);
        let e = parse_request("PUT", "/api/v1/vm.info", b"").unwrap_err();
        assert_eq!(e.status(), 400);
        assert_eq!(
            e.chain(),
            ["Bad Request", "vm.info does not support PUT; use GET"]
        );
        assert_eq!(status_of("GET", "/api/v1/vm.boot", ""), 400);
        assert_eq!(status_of("POST", "/api/v1/vm.create", "{}"), 400);
        assert_eq!(status_of("DELETE", "/api/v1/vm.delete", ""), 400);
        assert_eq!(
            error_reply(&status_err("GET", "/api/v1/vm.nope"))
                .body
                .unwrap(),
            br#"["Not Found"]"#
        );
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
        let r = reply_for(boot, Err(ApiError::VmAlreadyCreated));
        assert_eq!(r.status, 500);
        assert_eq!(
            r.body.unwrap(),
            br#"["Error from API","The VM could not boot","VM is already created"]"#
        );
        let r = reply_for(boot, Err(ApiError::VmMissingConfig));
        assert_eq!(r.status, 404);
        let counters = find_route("GET", "/api/v1/vm.counters").unwrap();
        let r = reply_for(counters, Ok(ApiResponse::VmCounters(Default::default())));
        assert_eq!((r.status, r.body.unwrap()), (200, b"{}".to_vec()));
    }

    #[test]
    fn every_upstream_v53_endpoint_is_known() {
        // ch-remote v53's subcommands map to these (plus ping/shutdown-vmm).
        for endpoint in [
            "vm.add-device",
            "vm.add-disk",
            "vm.add-fs",
            "vm.add-generic-vhost-user",
            "vm.add-net",
            "vm.add-pmem",
            "vm.add-user-device",
            "vm.add-vdpa",
            "vm.add-vsock",
            "vm.boot",
            "vm.coredump",
            "vm.counters",
            "vm.create",
            "vm.delete",
            "vm.info",
            "vm.nmi",
            "vm.pause",
            "vm.power-button",
            "vm.reboot",
            "vm.receive-migration",
            "vm.remove-device",
            "vm.resize",
            "vm.resize-disk",
            "vm.resize-zone",
            "vm.restore",
            "vm.resume",
            "vm.send-migration",
            "vm.shutdown",
            "vm.snapshot",
            "vmm.ping",
            "vmm.shutdown",
        ] {
            assert!(ROUTES.iter().any(|r| r.endpoint == endpoint), "{endpoint}");
        }
    }

    #[test]
    fn unsupported_feature_bodies_need_upstreams_required_fields() {
        let path = "/api/v1/vm.add-fs";
        assert_eq!(status_of("PUT", path, r#"{"tag":"t"}"#), 400);
        assert_eq!(status_of("PUT", path, r#"[1]"#), 400);
        let r = parse_request("PUT", path, br#"{"tag":"t","socket":"/s","num_queues":1}"#);
        assert!(matches!(r, Ok(ApiRequest::Unsupported(a)) if a.feature == "virtio-fs"));
    }

    #[test]
    fn route_table_has_unique_endpoints() {
        let mut names: Vec<_> = ROUTES.iter().map(|r| r.endpoint).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ROUTES.len());
    }
}
