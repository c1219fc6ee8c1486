//! A guardrail pipeline over the HTTP API: scan the user's message with the guard before the
//! chat completion, and the assistant's answer (with the question as context) after it; refuse
//! at either step when a risk is flagged. Guardrails are application code: the server judges,
//! the application decides.
//!
//! ```sh
//! ./scripts/serve-demo.sh        # in another terminal
//! cargo run --release -p server --example guardrails -- \
//!     http://127.0.0.1:8080 qwen2.5-coder-0.5b-instruct-q4_k_m "How do I sort a list in Python?"
//! ```
//! Arguments: base URL, chat model id, the message, and optionally the guard model id (default:
//! the chat model id). Exit code 0 answered, 1 refused, 2 error.

use serde_json::{json, Value};

fn post(client: &reqwest::blocking::Client, url: &str, body: &Value) -> Result<Value, String> {
    let response = client.post(url).json(body).send().map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let body: Value = response.json().map_err(|e| format!("{url}: {e}"))?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(format!("{url}: {status}: {}", body["error"]["message"].as_str().unwrap_or("unknown error")))
    }
}

/// The flagged risks of a guard response, most confident first.
fn flagged(verdicts: &Value) -> Vec<String> {
    let mut hits: Vec<(f64, String)> = verdicts["verdicts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["unsafe"] == true)
        .map(|v| (v["confidence"].as_f64().unwrap_or(0.0), v["risk"].as_str().unwrap_or("?").to_string()))
        .collect();
    hits.sort_by(|a, b| b.0.total_cmp(&a.0));
    hits.into_iter().map(|(_, r)| r).collect()
}

fn run() -> Result<bool, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [base, model, message, rest @ ..] = args.as_slice() else {
        return Err("usage: guardrails <base-url> <chat-model> <message> [guard-model]".into());
    };
    let guard = rest.first().unwrap_or(model);
    let client = reqwest::blocking::Client::builder().timeout(std::time::Duration::from_secs(600)).build().map_err(|e| e.to_string())?;

    let before = post(&client, &format!("{base}/v1/guard/scan"), &json!({"model": guard, "input": {"user": message}}))?;
    let risks = flagged(&before);
    if !risks.is_empty() {
        println!("refused: the message was flagged for {}", risks.join(", "));
        return Ok(false);
    }
    let chat = json!({"model": model, "messages": [{"role": "user", "content": message}], "max_tokens": 256});
    let reply = post(&client, &format!("{base}/v1/chat/completions"), &chat)?;
    let answer = reply["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string();
    let after = post(&client, &format!("{base}/v1/guard/scan"), &json!({"model": guard, "input": {"user": message, "assistant": answer}}))?;
    let risks = flagged(&after);
    if !risks.is_empty() {
        println!("refused: the answer was flagged for {}", risks.join(", "));
        return Ok(false);
    }
    println!("{answer}");
    Ok(true)
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
