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
