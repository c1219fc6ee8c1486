//! HTTP plumbing shared by the routes: the response body type, JSON and error responses, request
//! bodies read under the size limit and parsed as JSON objects (or typed requests), and
//! server-sent-event streams.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use crate::error::ApiError;

pub type Body = BoxBody<Bytes, Infallible>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(value).expect("a JSON value serialises")));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub fn ok_json(value: &Value) -> Response<Body> {
    json_response(StatusCode::OK, value)
}

pub fn text_response(content_type: &'static str, text: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(full(text));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

pub fn error_response(e: &ApiError) -> Response<Body> {
    error_with_body(e, &e.body())
}

/// [`error_response`] with Anthropic's error body (the Messages routes).
pub fn anthropic_error_response(e: &ApiError) -> Response<Body> {
    error_with_body(e, &e.anthropic_body())
}

fn error_with_body(e: &ApiError, body: &Value) -> Response<Body> {
    let mut r = json_response(e.status, body);
    if (e.status.is_server_error() && e.status != StatusCode::SERVICE_UNAVAILABLE) || e.status == StatusCode::REQUEST_TIMEOUT {
        // the same request would fail the same way: tell SDKs not to retry it
        r.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
    }
    if let Some(allow) = e.allow.as_deref().and_then(|a| HeaderValue::from_str(a).ok()) {
        r.headers_mut().insert(hyper::header::ALLOW, allow);
    }
    if e.status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert("retry-after", HeaderValue::from_static("1"));
    }
    r
}

/// Bytes of a body over its limit that are still read (and dropped) before the 413 goes out.
const DRAIN_BYTES: usize = 128 << 20;

/// Reads the whole body, refusing more than `limit` bytes with 413 and a body that has not
/// arrived within `timeout` with 408 (a client that stops sending keeps nothing waiting). Past
/// the limit the rest is read and dropped (up to `DRAIN_BYTES` more, within the same time):
/// a client still sending then reads the 413 instead of a broken pipe, as a socket closed with
/// unread data is reset.
pub async fn read_body(mut body: Incoming, limit: usize, timeout: std::time::Duration) -> Result<Bytes, ApiError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut kept: Vec<u8> = Vec::new();
    let mut over: Option<usize> = None; // bytes dropped since the limit was passed
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) if over.is_some() => break,
            Err(_) => return Err(ApiError::body_timeout(timeout)),
            Ok(None) => break,
            Ok(Some(Err(e))) if over.is_some() => {
                tracing::debug!("a body over its limit ended early: {e}");
                break;
            }
            Ok(Some(Err(e))) => return Err(ApiError::invalid(format!("could not read the request body: {e}"))),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else { continue }; // trailers
        match over.as_mut() {
            Some(dropped) => {
                *dropped += data.len();
                if *dropped > DRAIN_BYTES {
                    break;
                }
            }
            None if kept.len() + data.len() > limit => {
                over = Some(data.len());
                kept = Vec::new();
            }
            None => kept.extend_from_slice(&data),
        }
    }
    match over {
        Some(_) => Err(ApiError::too_large(limit)),
        None => Ok(Bytes::from(kept)),
    }
}

/// The body as a JSON object (400 for anything else).
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match crate::strict_json::from_slice(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::invalid("the request body must be a JSON object")),
        Err(e) => Err(ApiError::invalid(format!("the request body is not valid JSON: {e}"))),
    }
}

/// A request body as the typed request `T` (the routes added with the typed requests: tokens,
/// Messages, Responses). A wrong value is a 400 whose `param` is its whole path (`tokens[3]`), a
/// missing one a 400 `missing_required_parameter` naming it; the messages read as
/// `requests::parse` writes them.
pub fn typed<T: serde::de::DeserializeOwned>(body: Map<String, Value>) -> Result<T, ApiError> {
    typed_at(Value::Object(body), "")
}

/// A part of a request body as the typed `T`, its errors named by their path below `at` (the
/// part's own path, `input[2]`).
pub fn typed_at<T: serde::de::DeserializeOwned>(value: Value, at: &str) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = match (at, e.path().to_string()) {
            (at, p) if p == "." => at.to_string(),
            ("", p) => p,
            (at, p) if p.starts_with('[') => format!("{at}{p}"),
            (at, p) => format!("{at}.{p}"),
        };
        let path = if path.is_empty() { ".".to_string() } else { path };
        crate::requests::value_error(&path, &e.into_inner().to_string(), true)
    })
}

/// An internally tagged enum (`#[serde(tag = "type")]`) in a typed request, whose tag must be a
/// string: serde alone would also take a number, as the index of a variant.
#[derive(Debug)]
pub struct Tagged<T>(pub T);

impl<'de, T: serde::de::DeserializeOwned> serde::Deserialize<'de> for Tagged<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(d)?;
        match value.get("type") {
            Some(Value::String(_)) | None => serde_json::from_value(value).map(Tagged).map_err(D::Error::custom),
            Some(other) => Err(D::Error::custom(format!("type must be a string, not {other}"))),
        }
    }
}

/// The sending half of a server-sent-event stream: each send is one event, flushed.
/// A failed send means the client has gone (its request's generation is then dropped, which
/// cancels it and counts it in `requests_cancelled`).
pub struct SseSender {
    tx: mpsc::Sender<Bytes>,
}

impl SseSender {
    async fn send(&self, event: Bytes) -> bool {
        self.tx.send(event).await.is_ok()
    }

    /// Sends one `data: <compact JSON>` event; false when the client has disconnected.
    pub async fn send_json(&self, value: &Value) -> bool {
        let mut line = b"data: ".to_vec();
        line.extend(serde_json::to_vec(value).expect("a JSON value serialises"));
        line.extend(b"\n\n");
        self.send(Bytes::from(line)).await
    }

    /// Sends one named event (`event: <name>` then `data: <compact JSON>`), as the Messages and
    /// Responses streams type theirs; false when the client has disconnected.
    pub async fn send_event(&self, name: &str, value: &Value) -> bool {
        let mut line = format!("event: {name}\ndata: ").into_bytes();
        line.extend(serde_json::to_vec(value).expect("a JSON value serialises"));
        line.extend(b"\n\n");
        self.send(Bytes::from(line)).await
    }

    /// Bytes of another stream, passed on as they are.
    pub async fn send_raw(&self, bytes: Bytes) -> bool {
        self.send(bytes).await
    }

    /// An SSE comment line (`: text`), sent only if the stream has room for it now (a note on
    /// progress that may be skipped).
    pub fn try_comment(&self, text: &str) {
        let _ = self.tx.try_send(Bytes::from(format!(": {}\n\n", text.replace(['\n', '\r'], " "))));
    }

    /// The closing `data: [DONE]` event.
    pub async fn done(&self) -> bool {
        self.send(Bytes::from_static(b"data: [DONE]\n\n")).await
    }

    /// An SSE comment line: invisible to clients, it keeps proxies from timing out and tells
    /// whether the client is still there.
    pub async fn ping(&self) -> bool {
        self.send(Bytes::from_static(b": ping\n\n")).await
    }

    /// Resolves when the client has gone (the response body was dropped).
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// A `text/event-stream` response whose events come from the returned sender.
pub fn sse_response() -> (Response<Body>, SseSender) {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let stream = ReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    (r, SseSender { tx })
}
