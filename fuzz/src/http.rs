//! The server's real handler (`Server::handler`, the hyper service `engine-cli serve` runs) over
//! an in-memory connection: each request goes through hyper's HTTP/1 parser and the router,
//! body reading, JSON parsing and the route, as over TCP, without a socket per fuzz input.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;

use engine::gguf::GgufFile;
use engine::model::Model;
use engine::transcribe::{Segment, TranscribeError, TranscribeOptions, Transcriber, Transcription};
use engine_tests::shaped::MICRO_LLAMA;
use server::{ModelSpec, Server};

use crate::{fixture, REQUEST_DEADLINE};

/// The routes that take a body, each with the content type its body has.
pub const POST_ROUTES: &[&str] = &[
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/guard",
    "/v1/guard/scan",
    "/v1/guard/batch",
    "/v1/moderations",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/v1/models",
    "/v1/rerank",
    "/infill",
];

/// The model id the fuzz server serves.
pub const MODEL: &str = "tiny";

/// A transcription backend for the multipart target: the target is the form parsing of
/// `/v1/audio/transcriptions` (what reaches the backend is the audio bytes and the options),
/// so the backend only reports what it was given, as the real one's output would be shaped.
struct EchoTranscriber;

impl Transcriber for EchoTranscriber {
    fn model_id(&self) -> &str {
        "whisper-fuzz"
    }

    fn transcribe(&self, audio: &[u8], options: &TranscribeOptions) -> Result<Transcription, TranscribeError> {
        let text = format!("{} bytes, language {:?}, prompt {:?}", audio.len(), options.language, options.prompt);
        let end = audio.len() as f64 / 32_000.0;
        Ok(Transcription {
            text: text.clone(),
            language: options.language.clone(),
            duration: Some(end),
            segments: vec![Segment { start: 0.0, end, text, ..Segment::default() }],
        })
    }
}

/// The server under test and the runtime that drives it, made once per process: a micro llama
/// with the tiny llama fixture's vocabulary ([`MICRO_LLAMA`], random weights: fast enough in an
/// instrumented build) as chat, embedding and (generic) guard model with a 256-token context, a 250 ms
/// default deadline (a valid request's generation ends soon: the target is the handling of
/// requests, not the decoding), and the transcription route served.
pub struct Harness {
    runtime: tokio::runtime::Runtime,
    server: Arc<Server>,
}

impl Harness {
    pub fn get() -> &'static Harness {
        static HARNESS: OnceLock<Harness> = OnceLock::new();
        HARNESS.get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime");
            let template = GgufFile::open(fixture("models/tiny-llama-Q8_0.gguf")).expect("the tiny llama fixture reads");
            let file = engine_tests::shaped::make(&MICRO_LLAMA, &template).expect("the micro llama is made");
            let model = Arc::new(Model::from_file(file).expect("the micro llama loads"));
            let spec = ModelSpec { id: MODEL.into(), model, chat: true, guard: true, n_ctx: Some(256), draft: None };
            let server = runtime.block_on(async {
                Server::builder()
                    .model(spec)
                    .request_timeouts(Some(Duration::from_millis(250)), Some(Duration::from_secs(1)))
                    .transcriber(Arc::new(EchoTranscriber))
                    .build()
                    .expect("the fuzz server builds")
            });
            Harness { runtime, server: Arc::new(server) }
        })
    }

    /// Sends one request and reads its whole answer (a stream to its end). Returns the status
    /// and body. A request the server leaves unanswered past [`REQUEST_DEADLINE`] panics: a
    /// hang is a finding.
    pub fn send(&self, method: &str, path: &str, content_type: &[u8], body: Vec<u8>) -> (StatusCode, Bytes) {
        let handler = self.server.handler();
        let request = Request::builder().method(method).uri(path).header("host", "fuzz");
        let request = match hyper::header::HeaderValue::from_bytes(content_type) {
            Ok(value) => request.header("content-type", value),
            Err(_) => request,
        };
        let request = request.body(Full::new(Bytes::from(body))).expect("a well-formed request");
        self.runtime.block_on(async move {
            let (client_io, server_io) = tokio::io::duplex(1 << 16);
            let serving = tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(server_io), handler));
            let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(client_io)).await.expect("handshake");
            let driving = tokio::spawn(connection);
            let answer = tokio::time::timeout(REQUEST_DEADLINE, async {
                let response = sender.send_request(request).await.expect("the server answers");
                let status = response.status();
                let body = response.into_body().collect().await.expect("the answer's body reads to its end").to_bytes();
                (status, body)
            })
            .await
            .unwrap_or_else(|_| panic!("no complete answer to {method} {path} within {REQUEST_DEADLINE:?}"));
            drop(sender);
            let _ = driving.await;
            let _ = serving.await;
            answer
        })
    }
}

/// Every answer is either a success or an OpenAI-shaped error: a JSON object with `error.message`
/// and `error.type` (4xx for the client's mistakes; a 5xx is a finding unless the request ran
/// out of time or the server was busy).
pub fn check_answer(path: &str, status: StatusCode, body: &[u8]) {
    if status.is_success() {
        return;
    }
    let json: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{path}: a {status} whose body is not JSON ({e}): {:?}", String::from_utf8_lossy(body)));
    let error = &json["error"];
    assert!(error["message"].is_string() && error["type"].is_string(), "{path}: a {status} without an OpenAI-shaped error: {json}");
    assert!(
        status.is_client_error() || status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::GATEWAY_TIMEOUT,
        "{path}: the server failed with {status}: {json}"
    );
}
