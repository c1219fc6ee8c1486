//! The playground page at `/` over real TCP: served (HTML, a content security policy that keeps
//! it to this server) without the API key the API wants, and not at all with the page turned
//! off. Its behaviour in a browser is `cli/tests/python/webui.py`'s.

use crate::common::{start, tiny_llama};
use reqwest::blocking::Client;
use reqwest::StatusCode;

#[test]
fn the_page_is_served_without_the_key_and_only_when_on() {
    let base = start(tiny_llama("tiny-llama").api_key(Some("sekret".into())));
    for path in ["/", "/index.html"] {
        let r = Client::new().get(format!("{base}{path}")).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
        let policy = r.headers()["content-security-policy"].to_str().unwrap().to_string();
        assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"), "{policy}");
        let html = r.text().unwrap();
        assert!(html.contains("<title>engine playground</title>"));
        // nothing from elsewhere: no absolute URL in a src or href
        assert!(!html.contains("src=\"http") && !html.contains("href=\"http"), "external resources");
    }
    // the API behind it still wants the key
    assert_eq!(Client::new().get(format!("{base}/v1/models")).send().unwrap().status(), StatusCode::UNAUTHORIZED);
    let r = Client::new().post(format!("{base}/")).send().unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);

    let base = start(tiny_llama("tiny-llama").webui(false));
    assert_eq!(Client::new().get(format!("{base}/")).send().unwrap().status(), StatusCode::NOT_FOUND);
}
