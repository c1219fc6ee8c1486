//! What the server's test binaries share: a server started on a free port of 127.0.0.1 in a
//! background runtime.
// each test binary uses the part it needs
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use server::{Server, ServerBuilder};

/// Serves `server` on a free port; returns its base URL and the serving thread.
pub fn start_server(server: Arc<Server>) -> (String, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let (listener, addr) = Server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            tx.send(addr).unwrap();
            server.serve(listener).await.unwrap();
        });
    });
    (format!("http://{}", rx.recv().unwrap()), handle)
}

/// Builds and serves `builder`'s server; returns its base URL.
pub fn start(builder: ServerBuilder) -> String {
    start_server(Arc::new(builder.build().unwrap())).0
}

/// The events of an SSE body as (name, data), read by a real SSE parser (`eventsource-stream`);
/// the body must end with a complete event.
pub fn sse_records(text: &str) -> Vec<(String, String)> {
    use eventsource_stream::Eventsource;
    use futures_util::StreamExt;
    assert!(text.ends_with("\n\n"), "events end with a blank line");
    let body = futures_util::stream::iter([Ok::<_, std::convert::Infallible>(bytes::Bytes::from(text.to_string()))]);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let events: Vec<_> = rt.block_on(body.eventsource().collect());
    events
        .into_iter()
        .map(|e| {
            let e = e.unwrap_or_else(|err| panic!("not an SSE stream: {err}\n{text}"));
            (e.event, e.data)
        })
        .collect()
}

/// The named events of an SSE body (`event:` name, `data:` JSON); each event's `type` field
/// must equal its name.
pub fn named_events(text: &str) -> Vec<(String, serde_json::Value)> {
    sse_records(text)
        .into_iter()
        .map(|(name, data)| {
            let data: serde_json::Value = serde_json::from_str(&data).unwrap_or_else(|err| panic!("{err}: {data}"));
            assert_eq!(data["type"], name.as_str(), "an event's type is its name: {data}");
            (name, data)
        })
        .collect()
}

/// The tiny llama fixture served as a chat model with id `id` (context 512).
pub fn tiny_llama(id: &str) -> server::ServerBuilder {
    let model = Arc::new(engine::model::Model::load(engine_tests::fixture("models/tiny-llama-Q8_0.gguf")).unwrap());
    Server::builder().model(server::ModelSpec { id: id.into(), model, chat: true, guard: false, n_ctx: Some(512), draft: None })
}

/// POSTs `body` as JSON; the status and the JSON answer.
pub fn post(base: &str, path: &str, body: serde_json::Value) -> (reqwest::StatusCode, serde_json::Value) {
    let r = reqwest::blocking::Client::new().post(format!("{base}{path}")).json(&body).send().unwrap();
    (r.status(), r.json().unwrap())
}

/// The tiny llama fixture with a chat template that opens a thinking block for the reply (as
/// Qwen3's and DeepSeek-R1's do): written to memory with the GGUF writer and loaded from there.
pub fn thinking_model() -> Arc<engine::model::Model> {
    use engine::gguf::{GgufFile, GgufWriter};
    const TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
                            {% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
    let file = GgufFile::open(engine_tests::fixture("models/tiny-llama-Q8_0.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata() {
        if key != "tokenizer.chat_template" {
            w.add(key.clone(), value.clone()).unwrap();
        }
    }
    w.add("tokenizer.chat_template", TEMPLATE.to_string()).unwrap();
    for t in file.tensors() {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, file.tensor_data(t)).unwrap();
    }
    let mut bytes = Vec::new();
    w.write(&mut bytes).unwrap();
    Arc::new(engine::model::Model::from_file(Arc::new(GgufFile::from_bytes(bytes).unwrap())).unwrap())
}
