//! The guard as a service over real TCP on 127.0.0.1, with the tiny Guardian 3.0 fixture as
//! guard (and the tiny llama fixture as chat model): policies, audit fields, conversation input,
//! per-risk metrics and requests of many clients judged together (`policy.rs`); guardrails on
//! chat completions (`guardrails.rs`).

mod guardrails;
mod policy;

use std::net::SocketAddr;
use std::sync::Arc;

use engine_tests::fixture;
use server::{Server, ServerBuilder};

pub const GUARD: &str = "guardian-tiny-3.0";

pub fn guard_path() -> std::path::PathBuf {
    fixture("guardian/models/guardian-tiny-3.0-q8_0.gguf")
}

/// Starts `builder`'s server on a free port in a background runtime; returns its base URL.
pub fn start(builder: ServerBuilder) -> String {
    let server = Arc::new(builder.build().unwrap());
    let (tx, rx) = std::sync::mpsc::channel::<SocketAddr>();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let (listener, addr) = Server::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            tx.send(addr).unwrap();
            server.serve(listener).await.unwrap();
        });
    });
    format!("http://{}", rx.recv().unwrap())
}
