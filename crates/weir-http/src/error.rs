//! [`ApiError`]: every error the HTTP API answers, as JSON `{"error": NAME, "message": TEXT,
//! ...}` with a status code that fits.
//!
//! NAME is the refusal's variant name (`Busy`, `Halted`, `UnknownLimit`, …) or, for a
//! request that was not served, the failure's (`NoLeader`, `Unavailable`, `OutcomeUnknown`,
//! `BadRequest`, `NotFound`). A refusal's own fields follow as keys (`retry_at_ms`,
//! `scope`, `reason`, `running`, …), so scripts read them without parsing the message.
//!
//! Status codes: 400 invalid input, 401 no or an unknown token, 403 a role that may not,
//! 408 a body that did not arrive in time, 413 a body above its bound, 404 an unknown
//! limit, session or route, 409 a
//! conflict with the state (halted, a settlement key reused, a released ticket), 429 busy or
//! over a ceiling (`Retry-After` when the log says when), 503 not served now (no leader,
//! no quorum, unreachable, outcome unknown).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::bounds::{
    BODY_BYTES_MAX, BODY_READ_TIMEOUT, DRAIN_BYTES_MAX, DRAIN_TIMEOUT, FORWARD_RETRY_MAX,
};
use weir_client::ClientError;
use weir_core::bounds::NAME_BYTES_MAX;
use weir_core::machine::Refusal;
use weir_proto::protocol::Failure;
use weir_server::metrics::refusal_kind;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// The JSON body: `error`, `message`, and any fields of the refusal.
    pub body: Map<String, Value>,
    /// Seconds for `Retry-After`, when known.
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    /// An error named `name` with `message` and no further fields.
    pub fn new(status: StatusCode, name: &str, message: impl Into<String>) -> ApiError {
        let mut body = Map::new();
        body.insert("error".into(), json!(name));
        body.insert("message".into(), json!(message.into()));
        ApiError {
            status,
            body,
            retry_after_s: None,
        }
    }

    /// A 400 for input the API itself refuses before sending anything.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "Invalid", message)
    }

    /// A refusal of the machine. `now_ms` (this node's log clock) turns `Busy {retry_at_ms}`
    /// into a `Retry-After` of whole seconds, at least 1.
    pub fn refused(refusal: &Refusal, now_ms: u64) -> ApiError {
        let status = match refusal {
            Refusal::Invalid(_) | Refusal::TooLarge { .. } => StatusCode::BAD_REQUEST,
            Refusal::UnknownLimit { .. }
            | Refusal::UnknownSession { .. }
            | Refusal::LimitRemoved { .. } => StatusCode::NOT_FOUND,
            Refusal::Halted { .. }
            | Refusal::Conflict { .. }
            | Refusal::TicketReleased { .. }
            | Refusal::Placed { .. } => StatusCode::CONFLICT,
            Refusal::Busy { .. }
            | Refusal::QueueFull { .. }
            | Refusal::AtCapacity { .. }
            | Refusal::TooManyRuns { .. }
            | Refusal::BudgetExhausted { .. } => StatusCode::TOO_MANY_REQUESTS,
            // Its tenant lives in another group now: asked there, it is decided.
            Refusal::Moved { .. } => StatusCode::MISDIRECTED_REQUEST,
        };
        let mut e = ApiError::new(status, refusal_kind(refusal), refusal.to_string());
        // The refusal's fields, from its own serialization: {"Busy": {"retry_at_ms": ..}}.
        if let Ok(Value::Object(outer)) = serde_json::to_value(refusal)
            && let Some((_, Value::Object(fields))) = outer.into_iter().next()
        {
            e.body.extend(fields);
        }
        if let Refusal::Busy {
            retry_at_ms: Some(at),
        } = refusal
        {
            let wait_ms = at.saturating_sub(now_ms);
            e.body.insert("retry_after_ms".into(), json!(wait_ms));
            e.retry_after_s = Some(wait_ms.div_ceil(1_000).max(1));
        }
        e
    }

    /// A request the cluster did not serve.
    pub fn client(e: &ClientError) -> ApiError {
        let unavailable = StatusCode::SERVICE_UNAVAILABLE;
        let (status, name) = match e {
            // No node it tried took the request: no leader was found (the nodes it tried
            // are down or electing), which is what the caller needs to know.
            ClientError::Unreachable(_) => (unavailable, "NoLeader"),
            ClientError::OutcomeUnknown(_) => (unavailable, "OutcomeUnknown"),
            ClientError::Protocol(_) => (StatusCode::INTERNAL_SERVER_ERROR, "Internal"),
            // The leader refused the request's token (tables out of step between nodes).
            ClientError::Refused(_) => (StatusCode::UNAUTHORIZED, "Unauthenticated"),
            ClientError::Failed(f) => match f {
                Failure::NotLeader { .. } => (unavailable, "NoLeader"),
                Failure::Unavailable(_) => (unavailable, "Unavailable"),
                Failure::OutcomeUnknown(_) => (unavailable, "OutcomeUnknown"),
                Failure::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
                Failure::Forbidden(_) => (StatusCode::FORBIDDEN, "Forbidden"),
                // A session's request for a tenant another group decides (a session is
                // one group's): the caller opens a session there (`Weir-Group`).
                Failure::WrongGroup { .. } => (StatusCode::MISDIRECTED_REQUEST, "WrongGroup"),
                Failure::Unplaced { .. } => (unavailable, "Unplaced"),
            },
        };
        let message = match e {
            ClientError::Unreachable(m) => format!("{} (last try: {m})", no_leader_message()),
            ClientError::OutcomeUnknown(m) | ClientError::Protocol(m) | ClientError::Refused(m) => {
                m.clone()
            }
            ClientError::Failed(Failure::NotLeader { leader: None }) => no_leader_message(),
            ClientError::Failed(Failure::WrongGroup { tenant, group }) => format!(
                "tenant {tenant} lives in group {group}: a session of group {group} acts for \
                 it (open one with the header `Weir-Group: {group}`, and send that header \
                 with every request of the session)"
            ),
            ClientError::Failed(f) => f.to_string(),
        };
        let mut error = ApiError::new(status, name, message);
        if let ClientError::Failed(Failure::WrongGroup { tenant, group }) = e {
            error.body.insert("tenant".into(), json!(tenant));
            error.body.insert("group".into(), json!(group));
        }
        error
    }
}

/// The text of a 503 `NoLeader` for a forwarded request (`forward.rs`, rule 2).
fn no_leader_message() -> String {
    format!(
        "no leader known yet to this node after {FORWARD_RETRY_MAX:?} (an election may be \
         under way): try again, or another node"
    )
}

impl From<ClientError> for ApiError {
    fn from(e: ClientError) -> ApiError {
        ApiError::client(&e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(Value::Object(self.body))).into_response();
        if let Some(s) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}

/// What a handler returns.
pub type ApiResult = Result<Response, ApiError>;

/// A JSON request body, read whatever its content type (so `curl -d` works as is); an
/// empty body is `{}`. Every body the API takes is a JSON object: bad JSON, another kind
/// of value, an unknown field or a field of the wrong type answers 400 `Invalid` naming
/// the problem and the field.
pub struct JsonBody<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(declared) = declared.filter(|&n| n > BODY_BYTES_MAX as u64) {
            drain(req.into_body()).await;
            return Err(too_large(declared.to_string()));
        }
        let bytes = tokio::time::timeout(
            BODY_READ_TIMEOUT,
            axum::body::Bytes::from_request(req, state),
        )
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "RequestTimeout",
                format!("the request body did not arrive within {BODY_READ_TIMEOUT:?}"),
            )
        })?
        .map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                too_large("more".into())
            } else {
                ApiError::invalid(format!("request body: {e}"))
            }
        })?;
        // Only a body of no bytes is `{}`: whitespace alone is not JSON, and a client that
        // sends it meant to send something.
        let bytes: &[u8] = if bytes.is_empty() { b"{}" } else { &bytes };
        parse_object(bytes).map(JsonBody)
    }
}

/// A body parsed into `T`, which is declared as a JSON object: anything else (an array,
/// `null`, a number) is refused, as is a field of the wrong type or one `T` does not know,
/// with a message naming the field.
fn parse_object<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // A key twice in one object is refused: parsers disagree on which one wins (serde_json
    // keeps the last), so `{"concurrent":1,"concurrent":100000}` would mean what a proxy
    // or a person reading the body before this node did not.
    serde_json::from_slice::<UniqueKeys>(bytes)
        .map_err(|e| ApiError::invalid(format!("request body: {e}")))?;
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid(format!("request body: {e}")))?;
    if !value.is_object() {
        let kind = match value {
            serde_json::Value::Array(_) => "an array",
            serde_json::Value::Null => "null",
            serde_json::Value::Bool(_) => "a boolean",
            serde_json::Value::Number(_) => "a number",
            _ => "a string",
        };
        return Err(ApiError::invalid(format!(
            "request body: expected a JSON object, got {kind}"
        )));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        let why = e.into_inner();
        match field.as_str() {
            "." => ApiError::invalid(format!("request body: {why}")),
            _ => ApiError::invalid(format!("request body: field {field}: {why}")),
        }
    })
}

/// A JSON value read only to check that no object in it names a key twice.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<UniqueKeys, D::Error> {
        d.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<UniqueKeys>()?;
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "the key {key:?} appears twice in one object"
                )));
            }
        }
        Ok(UniqueKeys)
    }
}

/// The 413 for a body of `declared` bytes.
fn too_large(declared: String) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PayloadTooLarge",
        format!("the request body is {declared} bytes, the bound is {BODY_BYTES_MAX}"),
    )
}

/// Reads and drops up to [`DRAIN_BYTES_MAX`] of a body that will not be used, for at most
/// [`DRAIN_TIMEOUT`], so a client still sending it reads the answer rather than a reset.
pub async fn drain(body: axum::body::Body) {
    use futures_util::StreamExt;
    let mut chunks = body.into_data_stream();
    let mut seen = 0usize;
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while let Some(Ok(chunk)) = chunks.next().await {
            seen += chunk.len();
            if seen > DRAIN_BYTES_MAX {
                return;
            }
        }
    })
    .await;
}

/// Path parameters; a parameter that does not parse (a session id that is not a number)
/// or breaks its bound ([`check_path_param`]) answers 400 `Invalid`.
pub struct Params<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for Params<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        let raw = axum::extract::RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(format!("path: {e}")))?;
        for (param, value) in &raw {
            check_path_param(param, value)?;
        }
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Params(p.0))
            .map_err(|e| ApiError::invalid(format!("path: {e}")))
    }
}

/// The edge's check of a path parameter, the same on reads as on writes: a name (tenant,
/// limit, agent, run, period) is 1..=`NAME_BYTES_MAX` bytes and a key 1..=`KEY_BYTES_MAX`,
/// printable (`weir_core::machine::name_rule`), and a session id is never 0. A read of a
/// name no write could create is refused rather than answered empty.
fn check_path_param(param: &str, value: &str) -> Result<(), ApiError> {
    let max = match param {
        "tenant" | "name" | "agent" | "run" | "period" => Some(NAME_BYTES_MAX),
        "key" => Some(weir_core::bounds::KEY_BYTES_MAX),
        _ => None,
    };
    if let Some(max) = max {
        if value.is_empty() || value.len() > max {
            return Err(ApiError::invalid(format!(
                "path: {param} is {} bytes, not in 1..={max}",
                value.len()
            )));
        }
        weir_core::machine::name_rule(param, value, max)
            .map_err(|why| ApiError::invalid(format!("path: {why}")))?;
    }
    if param == "session" && value == "0" {
        return Err(ApiError::invalid("path: session 0 is never a session"));
    }
    Ok(())
}

/// Query-string parameters; one that does not parse (a page size that is not a number) or
/// that the route does not know answers 400 `Invalid` naming it.
pub struct QueryParams<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for QueryParams<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|e| ApiError::invalid(format!("query: {}", e.body_text())))
    }
}
