//! `engine-cli serve` as operators run it (one test binary: each links once): flags for models
//! managed at run time and the drain (`serve.rs`), hostile clients (`hostile_http.rs`), and
//! replicas behind nginx with the Kubernetes manifests (`replicas.rs`).

mod hostile_http;
mod replicas;
mod serve;

/// One test of this binary at a time: the hostile-client test holds 10,000 sockets, and the
/// others start servers and nginx of their own.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
