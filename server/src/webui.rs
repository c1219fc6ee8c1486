//! The playground page at `/` (`webui/index.html`: chat, guard, moderation and transcription
//! panels in one file, embedded in the binary), with a content security policy that lets it
//! reach nothing but this server.

use hyper::header::{HeaderValue, CONTENT_SECURITY_POLICY};
use hyper::Response;

use crate::http::{text_response, Body};

const PAGE: &str = include_str!("../webui/index.html");

/// Inline script and style are the page's own; every fetch goes to this origin.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'";

pub fn page() -> Response<Body> {
    let mut r = text_response("text/html; charset=utf-8", PAGE);
    r.headers_mut().insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    r
}
