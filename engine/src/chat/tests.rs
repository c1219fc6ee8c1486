//! Unit tests of the chat-template environment: each pins one behaviour of Python's jinja2 +
//! transformers that the renderer must share (expected strings are what Python prints).

use serde_json::json;

use super::*;

fn render_src(source: &str, extra: serde_json::Value) -> Result<String, ChatError> {
    let t = ChatTemplate::new(source, Some("<s>"), Some("</s>"))?;
    let input = ChatInput { extra: extra.as_object().cloned().unwrap_or_default(), ..ChatInput::default() };
    t.render(&input)
}

fn r(source: &str, extra: serde_json::Value) -> String {
    render_src(source, extra).unwrap_or_else(|e| panic!("{source}: {e}"))
}

#[test]
fn template_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ChatTemplate>();
}

#[test]
fn tojson_uses_python_spacing_and_no_html_escaping() {
    let x = json!({"a": 1, "b": [1, 2.5, true, null], "c": "<tag attr=\"v\">&'x'</tag>"});
    assert_eq!(r("{{ x | tojson }}", json!({ "x": x })), r#"{"a": 1, "b": [1, 2.5, true, null], "c": "<tag attr=\"v\">&'x'</tag>"}"#);
    // Empty containers, key order kept (no sorting unless asked).
    assert_eq!(r("{{ x | tojson }}", json!({"x": {"z": {}, "y": []}})), r#"{"z": {}, "y": []}"#);
    assert_eq!(r("{{ x | tojson(sort_keys=true) }}", json!({"x": {"z": 1, "y": 2}})), r#"{"y": 2, "z": 1}"#);
    assert_eq!(r("{{ x | tojson(separators=(',', ':')) }}", json!({"x": {"a": [1, 2]}})), r#"{"a":[1,2]}"#);
    // Control characters escaped as json.dumps does.
    assert_eq!(r("{{ x | tojson }}", json!({"x": "a\nb\t\u{1}\"\\"})), r#""a\nb\t\u0001\"\\""#);
}

#[test]
fn tojson_indent_breaks_lines_without_trailing_spaces() {
    let x = json!({"name": "f", "args": {"a": [1, 2], "e": {}}});
    let want = "{\n  \"name\": \"f\",\n  \"args\": {\n    \"a\": [\n      1,\n      2\n    ],\n    \"e\": {}\n  }\n}";
    assert_eq!(r("{{ x | tojson(indent=2) }}", json!({ "x": x })), want);
    // Positional arguments follow HF's signature: (ensure_ascii, indent, separators, sort_keys).
    assert_eq!(r("{{ x | tojson(false, 2) }}", json!({ "x": x })), want);
    // indent=0 still breaks lines.
    assert_eq!(r("{{ [1, 2] | tojson(indent=0) }}", json!({})), "[\n1,\n2\n]");
}

#[test]
fn tojson_keeps_non_ascii_unless_asked() {
    assert_eq!(r("{{ 'héllo ✓ 😀' | tojson }}", json!({})), "\"héllo ✓ 😀\"");
    assert_eq!(r("{{ 'héllo ✓ 😀' | tojson(ensure_ascii=true) }}", json!({})), r#""h\u00e9llo \u2713 \ud83d\ude00""#);
}

#[test]
fn tojson_formats_floats_like_python() {
    assert_eq!(r("{{ x | tojson }}", json!({"x": [1.0, 1e16, 0.00001, 0.1]})), "[1.0, 1e+16, 1e-05, 0.1]");
    assert_eq!(r("{{ x }}", json!({"x": 1e16})), "1e+16");
}

#[test]
fn raise_exception_gives_its_message() {
    let err = render_src("{% if true %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}", json!({})).unwrap_err();
    match &err {
        ChatError::Raised(m) => assert_eq!(m, "Conversation roles must alternate"),
        other => panic!("expected Raised, got {other:?}"),
    }
    assert_eq!(err.to_string(), "chat template raised an exception: Conversation roles must alternate");
}

#[test]
fn chatml_fallback() {
    let t = ChatTemplate::chatml();
    assert!(t.is_fallback());
    let mut input = ChatInput::new(vec![json!({"role": "system", "content": "You are terse."}), json!({"role": "user", "content": "Hi!"})]);
    assert_eq!(t.render(&input).unwrap(), "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n");
    input.add_generation_prompt = true;
    assert_eq!(
        t.render(&input).unwrap(),
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    );
    // Content given as text parts is joined.
    let input = ChatInput::new(vec![json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})]);
    assert_eq!(t.render(&input).unwrap(), "<|im_start|>user\nab<|im_end|>\n");
    let input = ChatInput::new(vec![json!({"role": "assistant", "content": null})]);
    assert_eq!(t.render(&input).unwrap(), "<|im_start|>assistant\n<|im_end|>\n");
}

#[test]
fn syntax_error_names_the_line() {
    let err = ChatTemplate::new("{% for m in messages %}\n{{ m.content }}\n{{ m.role + }}\n{% endfor %}", None, None).unwrap_err();
    match &err {
        ChatError::Syntax { line, .. } => assert_eq!(*line, 3),
        other => panic!("expected Syntax, got {other:?}"),
    }
    assert!(err.to_string().starts_with("chat template syntax error at line 3: "), "{err}");
    let err = ChatTemplate::new("{% if x %}\nunclosed", None, None).unwrap_err();
    assert!(matches!(err, ChatError::Syntax { .. }), "{err:?}");
}

#[test]
fn whitespace_rules_are_hf_ones() {
    // trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before it,
    // and one trailing newline of the source is dropped.
    let src = "A\n  {% if true %}\n  B\n  {% endif %}\nC\n";
    assert_eq!(r(src, json!({})), "A\n  B\nC");
}

#[test]
fn values_print_as_python_prints_them() {
    assert_eq!(
        r("{{ x }}", json!({"x": {"a": true, "b": null, "c": "it's", "d": [1, "x"]}})),
        r#"{'a': True, 'b': None, 'c': "it's", 'd': [1, 'x']}"#
    );
    assert_eq!(r("{{ none }}|{{ true }}|{{ undefined_name }}", json!({})), "None|True|");
    assert!(render_src("{{ undefined_name.attr }}", json!({})).is_err());
}

#[test]
fn python_methods_work() {
    assert_eq!(r("{{ '  a b  '.strip().split(' ') }}", json!({})), "['a', 'b']");
    assert_eq!(r("{{ 'abc'.startswith('a') }}", json!({})), "True");
    assert_eq!(r("{% for k, v in x.items() %}{{ k }}={{ v }};{% endfor %}", json!({"x": {"b": 1, "a": 2}})), "b=1;a=2;");
    assert_eq!(r("{{ x.get('missing', 'd') }}", json!({"x": {}})), "d");
}

#[test]
fn strftime_now_reads_the_given_clock() {
    let t = ChatTemplate::new("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %d, %Y') }}", None, None).unwrap();
    let now = chrono::NaiveDate::from_ymd_opt(2025, 1, 15).unwrap().and_hms_opt(9, 30, 0).unwrap();
    let input = ChatInput { now: Some(now), ..ChatInput::default() };
    assert_eq!(t.render(&input).unwrap(), "15 Jan 2025|January 15, 2025");
    let t = ChatTemplate::new("{{ strftime_now('%Q') }}", None, None).unwrap();
    assert!(t.render(&input).is_err());
}

#[test]
fn special_tokens_are_defined_only_when_given() {
    let t = ChatTemplate::new("{{ bos_token is defined }}{{ eos_token }}", None, Some("</s>")).unwrap();
    assert_eq!(t.render(&ChatInput::default()).unwrap(), "False</s>");
}

#[test]
fn generation_tags_render_their_body() {
    let src = "{% for m in messages %}\n{% generation %}\n{{ m.content }}\n{%- endgeneration %}\n{% endfor %}";
    let t = ChatTemplate::new(src, None, None).unwrap();
    let input = ChatInput::new(vec![json!({"role": "assistant", "content": "x"}), json!({"role": "user", "content": "y"})]);
    assert_eq!(t.render(&input).unwrap(), "xy");
    // Whitespace control around the tags as jinja2 applies it (string from Python).
    let src = "a\n  {% generation %}  \n b {%- endgeneration +%}  c {% generation -%}\n d\n{% endgeneration %}\ne";
    assert_eq!(r(src, json!({})), "a\n  \n b  c d\ne");
}

#[test]
fn reasoning_fields_are_aliased_like_hf() {
    let m = alias_reasoning_fields(&json!({"role": "assistant", "content": "a", "reasoning": "r"}));
    assert_eq!(m.to_string(), r#"{"thinking":"r","role":"assistant","content":"a","reasoning":"r","reasoning_content":"r"}"#);
    let m = json!({"role": "user", "content": "a"});
    assert_eq!(alias_reasoning_fields(&m), m);
}

#[test]
fn none_is_not_iterable() {
    let err = render_src("a\n{% for t in tools %}{{ t }}{% endfor %}", json!({"tools": null})).unwrap_err();
    assert!(err.to_string().contains("'NoneType' object is not iterable"), "{err}");
    // Undefined iterates as empty, as jinja2's Undefined does.
    assert_eq!(r("{% for t in nothing %}x{% endfor %}|{{ nothing is iterable }}|{{ none is iterable }}", json!({})), "|True|False");
    assert_eq!(r("{{ 'ab' is sequence }}{{ {} is sequence }}{{ nothing is sequence }}{{ 1 is sequence }}", json!({})), "TrueTrueTrueFalse");
}

#[test]
fn rsplit_is_pythons() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(rsplit("a-b-c", Some("-"), 1).unwrap(), s(&["a-b", "c"]));
    assert_eq!(rsplit("a-b-c", Some("-"), -1).unwrap(), s(&["a", "b", "c"]));
    assert_eq!(rsplit("  a b  c ", None, 1).unwrap(), s(&["  a b", "c"]));
    assert_eq!(rsplit("  a b  c ", None, -1).unwrap(), s(&["a", "b", "c"]));
    assert_eq!(rsplit(" a ", None, 0).unwrap(), s(&[" a"]));
    assert!(rsplit("", None, -1).unwrap().is_empty());
    assert!(rsplit("a", Some(""), -1).is_err());
}

#[test]
fn filters_follow_jinja2() {
    assert_eq!(r("{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ '12'|int + 1 }}|{{ 'x'|float }}|{{ nothing|length }}", json!({})), "0|7|13|0.0|0");
    assert_eq!(r("{{ 1e16|string }}|{{ 'a b_c, d'|wordcount }}", json!({})), "1e+16|3");
}

/// SmolVLM's template reads each message's content as a list of typed parts: a string content
/// is given to it as one text part (as llama.cpp does), so the text shows; a template that
/// prints string contents gets them as strings.
#[test]
fn a_template_that_reads_only_typed_parts_gets_the_text_as_one_part() {
    let smolvlm = "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";
    let t = ChatTemplate::new(smolvlm, None, None).unwrap();
    assert!(t.typed_content);
    let input = ChatInput { add_generation_prompt: true, ..ChatInput::new(vec![json!({"role": "user", "content": "What is this?"})]) };
    assert_eq!(t.render(&input).unwrap(), "<|im_start|>User: What is this?<end_of_utterance>\nAssistant:");
    let plain = ChatTemplate::new("{% for m in messages %}{{ m['content'] }}{% endfor %}", None, None).unwrap();
    assert!(!plain.typed_content);
    assert_eq!(plain.render(&ChatInput::new(vec![json!({"role": "user", "content": "hi"})])).unwrap(), "hi");
}

/// gpt-oss's template writes each function's description above it: a function without one (the
/// field is optional in OpenAI's API) renders with an empty comment instead of failing.
#[test]
fn a_harmony_function_without_a_description_renders() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/templates/openai-gpt-oss-120b.jinja");
    let t = ChatTemplate::new(&std::fs::read_to_string(path).unwrap(), None, None).unwrap();
    let tool = |description: Option<&str>| {
        let mut function = json!({"name": "get_time", "parameters": {"type": "object", "properties": {}}});
        if let Some(d) = description {
            function["description"] = json!(d);
        }
        json!({"type": "function", "function": function})
    };
    let input = |tools| ChatInput {
        messages: vec![json!({"role": "user", "content": "Time?"})],
        tools: Some(tools),
        add_generation_prompt: true,
        ..ChatInput::default()
    };
    let described = t.render(&input(vec![tool(Some("The time"))])).unwrap();
    assert!(described.contains("// The time\ntype get_time = () => any;"), "{described}");
    let bare = t.render(&input(vec![tool(None)])).unwrap();
    assert!(bare.contains("// \ntype get_time = () => any;"), "{bare}");
    let null = t.render(&input(vec![json!({"type": "function", "function": {"name": "get_time", "description": null}})])).unwrap();
    assert!(null.contains("// \ntype get_time = () => any;"), "{null}");
}
