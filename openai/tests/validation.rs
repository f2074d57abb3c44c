//! Every validation rule of the request parsers, and hostile input.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_openai::*;

fn limits() -> Limits {
    Limits {
        max_body_bytes: 1 << 20,
        max_context: 2048,
        vocab_size: 49152,
        default_max_tokens: 512,
        served_model_names: vec!["smollm2".into(), "alias".into()],
    }
}

fn chat(extra: Value) -> Result<GenerationSpec, ApiError> {
    let mut body = json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    parse_chat_request(body.to_string().as_bytes(), &limits())
}

fn cmpl(extra: Value) -> Result<GenerationSpec, ApiError> {
    let mut body = json!({"model": "smollm2", "prompt": "Once upon"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    parse_completion_request(body.to_string().as_bytes(), &limits())
}

/// Asserts a 400 whose `param` is `param` and whose message mentions it (and `needle`).
#[track_caller]
fn bad(r: Result<GenerationSpec, ApiError>, param: &str, needle: &str) {
    let e = r.expect_err("expected an error");
    assert_eq!(e.status, 400, "{e:?}");
    assert_eq!(e.kind, "invalid_request_error");
    assert_eq!(e.param.as_deref(), Some(param), "{e:?}");
    assert!(
        e.message.contains(param),
        "message should name {param}: {}",
        e.message
    );
    assert!(
        e.message.contains(needle),
        "message should contain {needle:?}: {}",
        e.message
    );
    // The body is OpenAI's shape.
    let v: Value = serde_json::from_str(&e.to_json()).unwrap();
    assert_eq!(v["error"]["param"], param);
}

#[test]
fn minimal_chat_request_normalizes() {
    let s = chat(json!({})).unwrap();
    assert_eq!(s.model, "smollm2");
    assert_eq!(
        s.prompt,
        PromptInput::Chat(vec![ChatMessage {
            role: Role::User,
            content: "hi".into()
        }])
    );
    assert_eq!(s.max_tokens, None);
    assert_eq!(s.sampling, SamplingSpec::default());
    assert!(s.stop.is_empty() && !s.stream && !s.include_usage && s.logprobs.is_none());
}

#[test]
fn full_chat_request_normalizes() {
    let body = json!({
        "model": "alias",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": "dev"},
            {"role": "user", "name": "bob", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "tool", "tool_call_id": "x", "content": "42"}
        ],
        "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
        "frequency_penalty": 0, "presence_penalty": 0.0, "seed": -1,
        "max_completion_tokens": 100, "stop": ["\n\n", "END"], "n": 1,
        "stream": true, "stream_options": {"include_usage": true},
        "logprobs": true, "top_logprobs": 5, "user": "u1",
        "response_format": {"type": "text"}, "tools": [], "tool_choice": "none",
        "store": false, "metadata": {"a": "b"}, "parallel_tool_calls": false, "service_tier": "auto"
    });
    let s = parse_chat_request(body.to_string().as_bytes(), &limits()).unwrap();
    assert_eq!(s.model, "alias");
    let PromptInput::Chat(m) = &s.prompt else {
        panic!()
    };
    let roles: Vec<_> = m.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "developer", "user", "assistant", "tool"]);
    assert_eq!(m[2].content, "a\nb");
    assert_eq!(m[3].content, "");
    assert_eq!(s.sampling.temperature, Some(0.7));
    assert_eq!(s.sampling.top_p, Some(0.9));
    assert_eq!(s.sampling.top_k, Some(40));
    assert_eq!(s.sampling.min_p, Some(0.05));
    assert_eq!(s.sampling.repetition_penalty, Some(1.1));
    assert_eq!(s.sampling.seed, Some(u64::MAX));
    assert_eq!(s.max_tokens, Some(100));
    assert_eq!(s.stop, ["\n\n", "END"]);
    assert!(s.stream && s.include_usage);
    assert_eq!(s.logprobs, Some(5));
    assert_eq!(s.user.as_deref(), Some("u1"));
    // Messages serialize ready for a chat template.
    assert_eq!(
        serde_json::to_value(&m[0]).unwrap(),
        json!({"role": "system", "content": "be brief"})
    );
}

#[test]
fn nulls_are_unset() {
    let s = chat(
        json!({"temperature": null, "stop": null, "n": null, "max_tokens": null, "model": null,
                        "stream": null, "logprobs": null, "tools": null}),
    )
    .unwrap();
    assert_eq!(s.sampling, SamplingSpec::default());
    assert_eq!(s.model, "smollm2");
}

#[test]
fn model_rules() {
    let e = chat(json!({"model": "gpt-4"})).unwrap_err();
    assert_eq!(
        (e.status, e.code.as_deref(), e.param.as_deref()),
        (400, Some("model_not_found"), Some("model"))
    );
    assert!(e.message.contains("gpt-4"));
    // Missing model: the first served name.
    let body = json!({"messages": [{"role": "user", "content": "x"}]}).to_string();
    assert_eq!(
        parse_chat_request(body.as_bytes(), &limits())
            .unwrap()
            .model,
        "smollm2"
    );
    // No served names configured: anything goes.
    let l = Limits {
        served_model_names: vec![],
        ..limits()
    };
    let body =
        json!({"model": "whatever", "messages": [{"role": "user", "content": "x"}]}).to_string();
    assert_eq!(
        parse_chat_request(body.as_bytes(), &l).unwrap().model,
        "whatever"
    );
    bad(chat(json!({"model": 5})), "model", "expected a string");
    // A hostile huge name is not echoed in full.
    let e = chat(json!({"model": "x".repeat(100_000)})).unwrap_err();
    assert!(e.message.len() < 400);
}

#[test]
fn sampling_ranges() {
    bad(chat(json!({"temperature": -0.1})), "temperature", "minimum");
    bad(chat(json!({"temperature": 2.5})), "temperature", "maximum");
    bad(
        chat(json!({"temperature": "hot"})),
        "temperature",
        "expected a number",
    );
    assert_eq!(
        chat(json!({"temperature": 2}))
            .unwrap()
            .sampling
            .temperature,
        Some(2.0)
    );
    assert_eq!(
        chat(json!({"temperature": 0}))
            .unwrap()
            .sampling
            .temperature,
        Some(0.0)
    );
    bad(chat(json!({"top_p": 1.01})), "top_p", "maximum");
    bad(chat(json!({"top_p": -1})), "top_p", "minimum");
    bad(chat(json!({"min_p": 2})), "min_p", "maximum");
    bad(chat(json!({"min_p": true})), "min_p", "expected a number");
    bad(chat(json!({"top_k": -1})), "top_k", "negative");
    bad(chat(json!({"top_k": 49153})), "top_k", "maximum");
    bad(chat(json!({"top_k": 1.5})), "top_k", "integer");
    assert_eq!(chat(json!({"top_k": 0})).unwrap().sampling.top_k, Some(0));
    assert_eq!(
        chat(json!({"top_k": 49152})).unwrap().sampling.top_k,
        Some(49152)
    );
    bad(
        chat(json!({"repetition_penalty": 0})),
        "repetition_penalty",
        "minimum",
    );
    bad(
        chat(json!({"repetition_penalty": 1000})),
        "repetition_penalty",
        "maximum",
    );
    bad(
        chat(json!({"frequency_penalty": 0.5})),
        "frequency_penalty",
        "not supported",
    );
    bad(
        chat(json!({"presence_penalty": -0.5})),
        "presence_penalty",
        "not supported",
    );
    bad(
        chat(json!({"presence_penalty": 3})),
        "presence_penalty",
        "maximum",
    );
    bad(chat(json!({"seed": 1.5})), "seed", "integer");
    bad(chat(json!({"seed": "1"})), "seed", "integer");
    bad(chat(json!({"seed": 1e30})), "seed", "maximum");
    assert_eq!(
        chat(json!({"seed": 18446744073709551615u64}))
            .unwrap()
            .sampling
            .seed,
        Some(u64::MAX)
    );
    assert_eq!(chat(json!({"seed": 7})).unwrap().sampling.seed, Some(7));
}

#[test]
fn max_tokens_rules() {
    bad(chat(json!({"max_tokens": 0})), "max_tokens", "minimum");
    bad(chat(json!({"max_tokens": -5})), "max_tokens", "minimum");
    bad(chat(json!({"max_tokens": 2049})), "max_tokens", "<= 2048");
    bad(chat(json!({"max_tokens": 1e30})), "max_tokens", "maximum");
    bad(chat(json!({"max_tokens": 12.5})), "max_tokens", "integer");
    bad(chat(json!({"max_tokens": "100"})), "max_tokens", "integer");
    bad(
        chat(json!({"max_completion_tokens": 0})),
        "max_completion_tokens",
        "minimum",
    );
    bad(
        chat(json!({"max_completion_tokens": 10, "max_tokens": 20})),
        "max_completion_tokens",
        "max_tokens",
    );
    assert_eq!(
        chat(json!({"max_completion_tokens": 10, "max_tokens": 10}))
            .unwrap()
            .max_tokens,
        Some(10)
    );
    assert_eq!(
        chat(json!({"max_tokens": 2048})).unwrap().max_tokens,
        Some(2048)
    );
    assert_eq!(
        chat(json!({"max_tokens": 64.0})).unwrap().max_tokens,
        Some(64)
    );
    assert_eq!(cmpl(json!({"max_tokens": 7})).unwrap().max_tokens, Some(7));
}

#[test]
fn resolve_max_tokens_against_context() {
    let l = limits();
    let s = chat(json!({})).unwrap();
    assert_eq!(s.resolve_max_tokens(100, &l).unwrap(), 512);
    assert_eq!(s.resolve_max_tokens(2000, &l).unwrap(), 48);
    let e = s.resolve_max_tokens(3000, &l).unwrap_err();
    assert_eq!(
        (e.status, e.code.as_deref(), e.param.as_deref()),
        (400, Some("context_length_exceeded"), Some("messages"))
    );
    assert!(
        e.message.contains("2048") && e.message.contains("3000"),
        "{}",
        e.message
    );
    assert!(s
        .resolve_max_tokens(2048, &l)
        .unwrap_err()
        .message
        .contains("no room"));
    assert!(s.resolve_max_tokens(0, &l).is_err());
    let s = chat(json!({"max_tokens": 1000})).unwrap();
    assert_eq!(s.resolve_max_tokens(1048, &l).unwrap(), 1000);
    let e = s.resolve_max_tokens(1049, &l).unwrap_err();
    assert_eq!(e.code.as_deref(), Some("context_length_exceeded"));
    assert!(
        e.message.contains("2049") && e.message.contains("1049") && e.message.contains("1000"),
        "{}",
        e.message
    );
    let c = cmpl(json!({})).unwrap();
    assert_eq!(
        c.resolve_max_tokens(5000, &l).unwrap_err().param.as_deref(),
        Some("prompt")
    );
}

#[test]
fn n_rules() {
    bad(chat(json!({"n": 2})), "n", "must be 1");
    bad(chat(json!({"n": 0})), "n", "minimum");
    bad(chat(json!({"n": 99999999999u64})), "n", "must be 1");
    bad(chat(json!({"n": 1e300})), "n", "must be 1");
    bad(chat(json!({"n": "1"})), "n", "integer");
    assert!(chat(json!({"n": 1})).is_ok());
    bad(cmpl(json!({"n": 3})), "n", "must be 1");
    bad(cmpl(json!({"best_of": 2})), "best_of", "only 1");
}

#[test]
fn stop_rules() {
    assert_eq!(chat(json!({"stop": "x"})).unwrap().stop, ["x"]);
    assert!(chat(json!({"stop": []})).unwrap().stop.is_empty());
    bad(chat(json!({"stop": ""})), "stop", "must not be empty");
    bad(
        chat(json!({"stop": ["a", ""]})),
        "stop[1]",
        "must not be empty",
    );
    bad(
        chat(json!({"stop": ["a", "b", "c", "d", "e"]})),
        "stop",
        "at most 4",
    );
    bad(
        chat(json!({"stop": ["a", 5]})),
        "stop[1]",
        "expected a string",
    );
    bad(
        chat(json!({"stop": 5})),
        "stop",
        "expected a string or an array",
    );
    bad(chat(json!({"stop": "x".repeat(257)})), "stop", "256 bytes");
    assert!(chat(json!({"stop": "é".repeat(128)})).is_ok());
    bad(
        chat(json!({"stop": ["é".repeat(129)]})),
        "stop[0]",
        "256 bytes",
    );
}

#[test]
fn stream_rules() {
    let s = chat(json!({"stream": true})).unwrap();
    assert!(s.stream && !s.include_usage);
    // include_usage only applies to streams.
    assert!(
        !chat(json!({"stream": false, "stream_options": {"include_usage": true}}))
            .unwrap()
            .include_usage
    );
    bad(chat(json!({"stream": "yes"})), "stream", "boolean");
    bad(
        chat(json!({"stream": true, "stream_options": true})),
        "stream_options",
        "object",
    );
    bad(
        chat(json!({"stream": true, "stream_options": {"include_usage": 1}})),
        "stream_options.include_usage",
        "boolean",
    );
}

#[test]
fn logprobs_rules() {
    assert_eq!(chat(json!({"logprobs": true})).unwrap().logprobs, Some(0));
    assert_eq!(chat(json!({"logprobs": false})).unwrap().logprobs, None);
    bad(chat(json!({"logprobs": 5})), "logprobs", "boolean");
    bad(
        chat(json!({"logprobs": true, "top_logprobs": 21})),
        "top_logprobs",
        "maximum",
    );
    bad(
        chat(json!({"logprobs": true, "top_logprobs": 1000})),
        "top_logprobs",
        "maximum",
    );
    bad(
        chat(json!({"logprobs": true, "top_logprobs": -1})),
        "top_logprobs",
        "minimum",
    );
    bad(
        chat(json!({"top_logprobs": 3})),
        "top_logprobs",
        "'logprobs' must be set",
    );
    assert_eq!(chat(json!({"top_logprobs": 0})).unwrap().logprobs, None);
    assert_eq!(cmpl(json!({"logprobs": 5})).unwrap().logprobs, Some(5));
    assert_eq!(cmpl(json!({"logprobs": 0})).unwrap().logprobs, Some(0));
    bad(cmpl(json!({"logprobs": 21})), "logprobs", "maximum");
    bad(cmpl(json!({"logprobs": true})), "logprobs", "integer");
}

#[test]
fn refused_features() {
    bad(
        chat(json!({"tools": [{"type": "function", "function": {"name": "f"}}]})),
        "tools",
        "not supported",
    );
    bad(
        chat(json!({"functions": [{"name": "f"}]})),
        "functions",
        "not supported",
    );
    bad(chat(json!({"tools": {}})), "tools", "expected an array");
    bad(
        chat(json!({"tool_choice": "required"})),
        "tool_choice",
        "not supported",
    );
    bad(
        chat(json!({"response_format": {"type": "json_object"}})),
        "response_format.type",
        "not supported",
    );
    bad(
        chat(json!({"response_format": "json"})),
        "response_format",
        "expected an object",
    );
    bad(
        chat(json!({"logit_bias": {"50256": -100}})),
        "logit_bias",
        "not supported",
    );
    assert!(chat(json!({"logit_bias": {}})).is_ok());
    bad(chat(json!({"user": 5})), "user", "string");
    bad(cmpl(json!({"echo": true})), "echo", "not supported");
    assert!(cmpl(json!({"echo": false})).is_ok());
    bad(cmpl(json!({"suffix": "end"})), "suffix", "not supported");
}

#[test]
fn message_rules() {
    let l = limits();
    let p = |v: Value| parse_chat_request(v.to_string().as_bytes(), &l);
    bad(p(json!({})), "messages", "Missing");
    bad(p(json!({"messages": []})), "messages", "empty");
    bad(
        p(json!({"messages": "hi"})),
        "messages",
        "expected an array",
    );
    bad(
        p(json!({"messages": ["hi"]})),
        "messages[0]",
        "expected an object",
    );
    bad(
        p(json!({"messages": [{"content": "x"}]})),
        "messages[0].role",
        "Missing",
    );
    bad(
        p(json!({"messages": [{"role": "wizard", "content": "x"}]})),
        "messages[0].role",
        "wizard",
    );
    bad(
        p(json!({"messages": [{"role": "function", "content": "x"}]})),
        "messages[0].role",
        "Supported values",
    );
    bad(
        p(json!({"messages": [{"role": 1, "content": "x"}]})),
        "messages[0].role",
        "string",
    );
    bad(
        p(json!({"messages": [{"role": "user"}]})),
        "messages[0].content",
        "Missing",
    );
    bad(
        p(json!({"messages": [{"role": "user", "content": null}]})),
        "messages[0].content",
        "Missing",
    );
    bad(
        p(json!({"messages": [{"role": "user", "content": 5}]})),
        "messages[0].content",
        "expected a string or an array",
    );
    bad(
        p(
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
        ),
        "messages[1].content[0].type",
        "image_url",
    );
    bad(
        p(json!({"messages": [{"role": "user", "content": [{"text": "x"}]}]})),
        "messages[0].content[0].type",
        "Missing",
    );
    bad(
        p(json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]})),
        "messages[0].content[0].text",
        "Missing",
    );
    bad(
        p(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})),
        "messages[0].content[0].text",
        "string",
    );
    bad(
        p(json!({"messages": [{"role": "user", "content": ["x"]}]})),
        "messages[0].content[0]",
        "expected an object",
    );
}

#[test]
fn prompt_rules() {
    assert_eq!(
        cmpl(json!({"prompt": "x"})).unwrap().prompt,
        PromptInput::Text("x".into())
    );
    assert_eq!(
        cmpl(json!({"prompt": ""})).unwrap().prompt,
        PromptInput::Text("".into())
    );
    assert_eq!(
        cmpl(json!({"prompt": ["only"]})).unwrap().prompt,
        PromptInput::Text("only".into())
    );
    assert_eq!(
        cmpl(json!({"prompt": [1, 2, 49151]})).unwrap().prompt,
        PromptInput::Tokens(vec![1, 2, 49151])
    );
    assert_eq!(
        cmpl(json!({"prompt": [[1, 2]]})).unwrap().prompt,
        PromptInput::Tokens(vec![1, 2])
    );
    bad(
        cmpl(json!({"prompt": ["a", "b"]})),
        "prompt",
        "only one prompt",
    );
    bad(
        cmpl(json!({"prompt": [[1], [2]]})),
        "prompt",
        "only one prompt",
    );
    bad(cmpl(json!({"prompt": []})), "prompt", "empty");
    bad(cmpl(json!({"prompt": [[]]})), "prompt[0]", "empty");
    bad(cmpl(json!({"prompt": 5})), "prompt", "expected a string");
    bad(cmpl(json!({"prompt": [{}]})), "prompt[0]", "Invalid type");
    bad(cmpl(json!({"prompt": [1, "a"]})), "prompt[1]", "token id");
    bad(cmpl(json!({"prompt": [1, 1.5]})), "prompt[1]", "token id");
    bad(cmpl(json!({"prompt": [49152]})), "prompt[0]", "49152");
    bad(cmpl(json!({"prompt": [-1]})), "prompt[0]", "-1");
    bad(
        cmpl(json!({"prompt": [99999999999999u64]})),
        "prompt[0]",
        "99999999999999",
    );
    bad(
        cmpl(json!({"prompt": [[1, 70000]]})),
        "prompt[0][1]",
        "70000",
    );
    let body = json!({"model": "smollm2"}).to_string();
    bad(
        parse_completion_request(body.as_bytes(), &limits()),
        "prompt",
        "Missing",
    );
}

#[test]
fn malformed_bodies() {
    let l = limits();
    for body in [
        &b""[..],
        b"   ",
        b"{",
        b"{\"messages\": [}",
        b"[1,2]",
        b"\"str\"",
        b"null",
        b"42",
        b"{\"a\":1}garbage",
    ] {
        let e = parse_chat_request(body, &l).unwrap_err();
        assert_eq!(e.status, 400, "{body:?}");
        assert_eq!(e.kind, "invalid_request_error");
    }
    let e = parse_chat_request(b"[1,2]", &l).unwrap_err();
    assert!(
        e.message.contains("JSON object") && e.message.contains("an array"),
        "{}",
        e.message
    );
    // Not UTF-8.
    let e = parse_chat_request(b"{\"messages\": \"\xff\xfe\"}", &l).unwrap_err();
    assert!(e.message.contains("UTF-8"), "{}", e.message);
    // A UTF-8 character cut in half at the end.
    let mut cut = br#"{"messages":[{"role":"user","content":"caf"#.to_vec();
    cut.push(0xc3);
    assert!(parse_chat_request(&cut, &l)
        .unwrap_err()
        .message
        .contains("UTF-8"));
    // Too big.
    let small = Limits {
        max_body_bytes: 10,
        ..limits()
    };
    let e = parse_chat_request(
        br#"{"messages": [{"role":"user","content":"hello"}]}"#,
        &small,
    )
    .unwrap_err();
    assert_eq!(e.status, 413);
}

#[test]
fn nan_and_infinity_are_refused_clearly() {
    for lit in ["NaN", "Infinity", "-Infinity", "nan", "inf"] {
        let body =
            format!(r#"{{"messages":[{{"role":"user","content":"x"}}],"temperature":{lit}}}"#);
        let e = parse_chat_request(body.as_bytes(), &limits()).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(
            e.message.contains("NaN and Infinity are not JSON numbers"),
            "{}",
            e.message
        );
    }
    // Inside strings they are text.
    let body = r#"{"messages":[{"role":"user","content":"NaN Infinity"}]}"#;
    assert!(parse_chat_request(body.as_bytes(), &limits()).is_ok());
    // A number too large for f64 is a parse error, not a panic.
    let body = r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":1e999}"#;
    assert_eq!(
        parse_chat_request(body.as_bytes(), &limits())
            .unwrap_err()
            .status,
        400
    );
}

#[test]
fn deep_nesting_is_refused_quickly() {
    let l = Limits {
        max_body_bytes: 1 << 22,
        ..limits()
    };
    for open in ["[", "{\"a\":"] {
        let body = open.repeat(100_000);
        let t = Instant::now();
        let e = parse_chat_request(body.as_bytes(), &l).unwrap_err();
        assert!(e.message.contains("64 levels"), "{}", e.message);
        assert!(t.elapsed() < Duration::from_secs(1));
    }
    // Nesting inside an ignored field, closed properly: still refused.
    let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let body = format!(r#"{{"messages":[{{"role":"user","content":"x"}}],"extra":{deep}}}"#);
    assert!(parse_chat_request(body.as_bytes(), &l).is_err());
    // 64 levels in total is fine.
    let ok = format!("{}{}", "[".repeat(60), "]".repeat(60));
    let body = format!(r#"{{"messages":[{{"role":"user","content":"x"}}],"extra":{ok}}}"#);
    assert!(parse_chat_request(body.as_bytes(), &l).is_ok());
}

#[test]
fn unknown_fields_are_ignored() {
    let s = chat(
        json!({"frobnicate": {"a": [1, 2, {"b": null}]}, "reasoning_effort": "low", "modalities": ["text"]}),
    );
    assert!(s.is_ok());
}

#[test]
fn tokenize_and_detokenize() {
    let l = limits();
    let r = parse_tokenize_request(br#"{"content": "hello"}"#, &l).unwrap();
    assert_eq!(
        r,
        TokenizeRequest {
            content: "hello".into(),
            add_special: false,
            with_pieces: false,
            parse_special: true
        }
    );
    let r = parse_tokenize_request(
        br#"{"content": "x", "add_special": true, "with_pieces": true}"#,
        &l,
    )
    .unwrap();
    assert!(r.add_special && r.with_pieces);
    let e = parse_tokenize_request(br#"{"content": 5}"#, &l).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("content"));
    assert!(parse_tokenize_request(br#"{}"#, &l).is_err());
    assert!(parse_tokenize_request(br#"{"content": "x", "with_pieces": "yes"}"#, &l).is_err());

    assert_eq!(
        parse_detokenize_request(br#"{"tokens": [1, 2]}"#, &l)
            .unwrap()
            .tokens,
        [1, 2]
    );
    assert!(parse_detokenize_request(br#"{}"#, &l)
        .unwrap()
        .tokens
        .is_empty());
    let e = parse_detokenize_request(br#"{"tokens": [1, 4000000000]}"#, &l).unwrap_err();
    assert_eq!((e.status, e.param.as_deref()), (400, Some("tokens[1]")));
    assert!(e.message.contains("4000000000"), "{}", e.message);
    let e = parse_detokenize_request(br#"{"tokens": [-3]}"#, &l).unwrap_err();
    assert!(e.message.contains("-3"));
    assert!(parse_detokenize_request(br#"{"tokens": "1 2"}"#, &l).is_err());
}
