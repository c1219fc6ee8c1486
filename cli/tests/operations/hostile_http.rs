//! Hostile HTTP against `engine-cli serve` over real TCP: slow-loris headers and bodies, a body
//! that never ends, oversize headers, 10,000 idle connections, invalid UTF-8, out-of-range
//! numbers in every numeric field, deep nesting, duplicate keys, wrong content types,
//! pipelining and `Expect: 100-continue`. Each gets a 4xx OpenAI-shaped error or a clean close;
//! the server keeps serving others, nothing answers 5xx, and its memory comes back to where it
//! was.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use engine_tests::{fixture, ServeProcess};
use reqwest::blocking::Client;
use serde_json::{json, Value};

const MODEL: &str = "tiny-llama-Q8_0";
const MAX_CONNECTIONS: usize = 64;
/// The server's connections beyond `--max-connections` for `/health`, `/ready` and `/metrics`.
const OPERATIONS_RESERVE: usize = 32;

/// The tiny model served with 64 connections at most and a header timeout of `header_timeout`
/// seconds (bodies: 1 s).
fn serve(header_timeout: &str) -> ServeProcess {
    let model = fixture("models/tiny-llama-Q8_0.gguf");
    let args = [
        "-m".as_ref(),
        model.as_os_str(),
        "-c".as_ref(),
        "512".as_ref(),
        "--header-timeout".as_ref(),
        header_timeout.as_ref(),
        "--body-timeout".as_ref(),
        "1".as_ref(),
        "--max-connections".as_ref(),
        "64".as_ref(),
    ];
    ServeProcess::start(Path::new(env!("CARGO_BIN_EXE_engine-cli")), &args)
}

fn address(base: &str) -> String {
    base.trim_start_matches("http://").to_string()
}

/// Writes `request` on a fresh connection (then optionally waits), reads until the server
/// closes or `limit` passes; what came back.
fn exchange(base: &str, request: &[u8], limit: Duration) -> String {
    let mut s = TcpStream::connect(address(base)).unwrap();
    s.set_read_timeout(Some(limit)).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The status of a raw HTTP response (0 when the connection closed without one).
fn status_of(response: &str) -> u16 {
    response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The JSON body of a raw response (after its head).
fn body_of(response: &str) -> Value {
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {response}"))
}

fn post_json(base: &str, path: &str, body: &[u8], content_type: &str) -> String {
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    exchange(base, &request, Duration::from_secs(10))
}

fn healthy(base: &str) -> bool {
    Client::new().get(format!("{base}/health")).timeout(Duration::from_secs(5)).send().is_ok_and(|r| r.status() == 200)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A 4xx with an OpenAI-shaped error body naming what went wrong.
fn assert_refused(response: &str, what: &str) {
    let status = status_of(response);
    assert!((400..500).contains(&status), "{what}: {response}");
    let body = body_of(response);
    assert!(body["error"]["message"].is_string() && body["error"]["type"].is_string(), "{what}: {response}");
}

#[test]
fn hostile_requests_get_a_4xx_or_a_clean_close_and_the_server_keeps_serving() {
    let _serial = crate::serial();
    let server = serve("1");
    let base = server.base.clone();
    let chat = json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    // warm up, then the memory to come back to
    assert_eq!(status_of(&post_json(&base, "/v1/chat/completions", chat.to_string().as_bytes(), "application/json")), 200);
    let baseline = rss_kib(server.pid());
    let warm = Instant::now();

    // slow-loris headers: the connection is closed after the header timeout
    let started = Instant::now();
    let r = exchange(&base, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n", Duration::from_secs(10));
    assert!(started.elapsed() < Duration::from_secs(5) && (r.is_empty() || status_of(&r) == 408), "{r}");
    // a body that stops coming: 408 after the body timeout
    let r = exchange(
        &base,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\":",
        Duration::from_secs(10),
    );
    assert_eq!(status_of(&r), 408, "{r}");
    assert_eq!(body_of(&r)["error"]["code"], "request_timeout");
    // a chunked body that never ends: the same
    let r = exchange(
        &base,
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{\"mod\r\n",
        Duration::from_secs(10),
    );
    assert_eq!(status_of(&r), 408, "{r}");
    // oversize headers: refused (431) or closed
    let big = format!("GET /health HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "a".repeat(200_000));
    let r = exchange(&base, big.as_bytes(), Duration::from_secs(10));
    assert!(r.is_empty() || status_of(&r) == 431, "{}", &r[..r.len().min(200)]);
    // invalid UTF-8 inside a JSON string
    let mut bad = br#"{"model": "tiny-llama-Q8_0", "messages": [{"role": "user", "content": ""#.to_vec();
    bad.extend_from_slice(&[0xff, 0xfe, 0xc0]);
    bad.extend_from_slice(br#""}]}"#);
    assert_refused(&post_json(&base, "/v1/chat/completions", &bad, "application/json"), "invalid UTF-8");
    // deep nesting, duplicate keys, a body that is not JSON
    let deep = format!(r#"{{"model": "{MODEL}", "messages": {}{}}}"#, "[".repeat(50_000), "]".repeat(50_000));
    assert_refused(&post_json(&base, "/v1/chat/completions", deep.as_bytes(), "application/json"), "deep nesting");
    let duplicate =
        format!(r#"{{"model": "{MODEL}", "max_tokens": 1, "max_tokens": 100000, "messages": [{{"role": "user", "content": "Hi"}}]}}"#);
    let r = post_json(&base, "/v1/chat/completions", duplicate.as_bytes(), "application/json");
    assert_refused(&r, "duplicate keys");
    assert!(body_of(&r)["error"]["message"].as_str().unwrap().contains("duplicate key \"max_tokens\""), "{r}");
    let form = "--b\r\ncontent-disposition: form-data; name=\"model\"\r\n\r\nx\r\n--b--\r\n";
    assert_refused(
        &post_json(&base, "/v1/chat/completions", form.as_bytes(), "multipart/form-data; boundary=b"),
        "multipart to a JSON route",
    );
    // JSON sent as text/plain is read as JSON (as curl -d sends it)
    assert_eq!(status_of(&post_json(&base, "/v1/chat/completions", chat.to_string().as_bytes(), "text/plain")), 200);

    eprintln!("single attacks done after {:?}", warm.elapsed());
    // numbers out of range in every numeric field of every generation route: 4xx, never 5xx
    let huge = ["1e400", "-1e400", "1e308", "-1", "18446744073709551616", "-9223372036854775809", "0.5"];
    let routes: [(&str, Value, &[&str]); 5] = [
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
            &[
                "temperature",
                "top_p",
                "top_k",
                "min_p",
                "repetition_penalty",
                "presence_penalty",
                "frequency_penalty",
                "seed",
                "n",
                "max_tokens",
                "max_completion_tokens",
                "top_logprobs",
                "timeout",
            ],
        ),
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": "Hi", "max_tokens": 2}),
            &["temperature", "top_k", "n", "max_tokens", "logprobs", "best_of", "seed", "timeout"],
        ),
        ("/v1/embeddings", json!({"model": MODEL, "input": "Hi"}), &["dimensions"]),
        ("/v1/responses", json!({"model": MODEL, "input": "Hi", "max_output_tokens": 2}), &["temperature", "top_p", "max_output_tokens"]),
        (
            "/v1/messages",
            json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
            &["temperature", "top_p", "top_k", "max_tokens"],
        ),
    ];
    for (path, body, fields) in routes {
        for field in fields {
            for number in huge {
                let text = body.to_string();
                let text = format!("{{\"{field}\": {number}, {}", &text[1..]);
                let r = post_json(&base, path, text.as_bytes(), "application/json");
                let status = status_of(&r);
                assert!(status == 200 || (400..500).contains(&status), "{path} {field}={number}: {r}");
                if status != 200 {
                    assert_refused(&r, &format!("{path} {field}={number}"));
                }
            }
        }
    }

    eprintln!("numbers done after {:?}", warm.elapsed());
    // pipelining: two requests in one write, two answers in order
    let r = exchange(
        &base,
        b"GET /health HTTP/1.1\r\nhost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        Duration::from_secs(10),
    );
    assert_eq!(r.matches("HTTP/1.1 200 OK").count(), 2, "{r}");
    assert!(r.find("\"status\":\"ok\"").unwrap() < r.find("\"object\":\"list\"").unwrap(), "{r}");
    // Expect: 100-continue is honoured
    let mut s = TcpStream::connect(address(&base)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = chat.to_string();
    write!(s, "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n", body.len()).unwrap();
    let mut first = [0u8; 25];
    s.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(body.as_bytes()).unwrap();
    let mut rest = String::new();
    let _ = s.read_to_string(&mut rest);
    assert_eq!(status_of(&rest), 200, "{rest}");

    // 10,000 idle connections: past the limit each is answered 503 at once; the idle ones are
    // closed after the header timeout, and the server serves again
    // as many as this process may open (10,000 where the hard limit of open files allows)
    let wanted = 10_000.min(engine_tests::raise_fd_limit(10_300).saturating_sub(300) as usize);
    assert!(wanted >= 2 * MAX_CONNECTIONS, "too few file descriptors for the test: {wanted}");
    let mut idle = Vec::with_capacity(wanted);
    let opening = Instant::now();
    for _ in 0..wanted {
        match TcpStream::connect(address(&base)) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connection {} refused by the kernel: {e}", idle.len()),
        }
    }
    let opened_in = opening.elapsed();
    eprintln!("{wanted} connections opened in {opened_in:?}");
    let (mut refused, mut closed) = (0, 0);
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let r = String::from_utf8_lossy(&out);
        match status_of(&r) {
            503 => {
                assert_eq!(body_of(&r)["error"]["code"], "too_many_connections", "{r}");
                refused += 1;
            }
            0 | 408 => closed += 1,
            _ => panic!("an idle connection got {r}"),
        }
    }
    drop(idle);
    eprintln!("of them {refused} refused (503), {closed} closed after the header timeout");
    assert_eq!(refused + closed, wanted);
    // a slot (or one of the operations reserve) is held at most one header timeout (1 s): while
    // the connections were being opened, at most that many per second of them got one
    let windows = opened_in.as_secs() as usize + 3;
    let slots = MAX_CONNECTIONS + OPERATIONS_RESERVE;
    assert!(refused > 0 && closed <= slots * windows, "refused {refused}, closed {closed} in {opened_in:?}");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(healthy(&base), "the server does not answer after the attacks");
    assert_eq!(status_of(&post_json(&base, "/v1/chat/completions", chat.to_string().as_bytes(), "application/json")), 200);
    let after = rss_kib(server.pid());
    eprintln!("RSS before the attacks {baseline} KiB, after {after} KiB");
    assert!(after < baseline + 32 * 1024, "RSS grew from {baseline} KiB to {after} KiB");
}

/// A client holding every connection slot with idle connections (a 30-second header timeout, as
/// by default) does not lock the probes and the metrics scraper out: `/health`, `/ready` and
/// `/metrics` answer from the operations reserve, whose idle connections are cut after a second;
/// any other route there is 503 `too_many_connections`, and the API answers again once the
/// idle connections are gone.
#[test]
fn the_operations_routes_answer_while_idle_connections_hold_every_slot() {
    let server = serve("30");
    let base = server.base.clone();
    // every slot, the whole reserve, and more
    let flood: Vec<TcpStream> =
        (0..MAX_CONNECTIONS + 2 * OPERATIONS_RESERVE).map(|_| TcpStream::connect(address(&base)).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let flooded = Instant::now();
    for path in ["/health", "/ready", "/metrics"] {
        // retried as a probe is retried: the flood's spill into the reserve is cut after a second
        loop {
            let r = exchange(&base, format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes(), Duration::from_secs(5));
            if status_of(&r) == 200 {
                break;
            }
            assert_eq!(status_of(&r), 503, "{path}: {r}");
            assert!(flooded.elapsed() < Duration::from_secs(5), "{path} is locked out by idle connections: {r}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let answered_in = flooded.elapsed();
    eprintln!("with {} idle connections open: /health, /ready and /metrics answered within {answered_in:?}", flood.len());
    // the idle connections still hold every slot: an API request has none
    let r = exchange(&base, b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", Duration::from_secs(5));
    assert_eq!(status_of(&r), 503, "{r}");
    assert_eq!(body_of(&r)["error"]["code"], "too_many_connections", "{r}");
    drop(flood);
    let again = Instant::now();
    while status_of(&exchange(&base, b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n", Duration::from_secs(5))) != 200 {
        assert!(again.elapsed() < Duration::from_secs(5), "the API does not answer after the idle connections closed");
        std::thread::sleep(Duration::from_millis(100));
    }
}
