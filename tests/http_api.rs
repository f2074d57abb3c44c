//! End-to-end: the OpenAI-compatible API of the real `strata-rt` binary over loopback HTTP with the
//! default model: response shapes, streaming chunks, tokenize/detokenize, greedy output equal to
//! `strata-rt generate`, stop strings, logprobs, prefix reuse across chat turns, timing lines.
//!
//! Every generation is greedy (`temperature: 0`) and short; each test starts its own server.

mod common;

use std::collections::HashMap;

use common::http::{chunks, stream_text};
use common::TestServer;
use serde_json::{json, Value};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

fn assert_id(id: &Value, prefix: &str) {
    let s = id.as_str().unwrap_or_else(|| panic!("id is a string: {id}"));
    assert!(s.starts_with(prefix) && s.len() > prefix.len() + 8, "id {s:?} starts with {prefix:?}");
}

fn assert_usage(u: &Value) -> (u64, u64, u64) {
    let p = u["prompt_tokens"].as_u64().unwrap_or_else(|| panic!("usage.prompt_tokens: {u}"));
    let c = u["completion_tokens"].as_u64().unwrap_or_else(|| panic!("usage.completion_tokens: {u}"));
    assert_eq!(u["total_tokens"].as_u64(), Some(p + c), "usage.total_tokens: {u}");
    let cached = u["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or_else(|| panic!("usage.prompt_tokens_details.cached_tokens: {u}"));
    assert!(cached <= p, "cached_tokens <= prompt_tokens: {u}");
    assert!(p > 0, "a prompt has tokens: {u}");
    (p, c, cached)
}

fn chat_body(user: &str, max_tokens: u64) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": user}], "temperature": 0, "max_tokens": max_tokens})
}

fn completion_body(prompt: &str, max_tokens: u64) -> Value {
    json!({"model": MODEL, "prompt": prompt, "temperature": 0, "max_tokens": max_tokens})
}

fn with(mut body: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().expect("an object") {
        body[k] = v.clone();
    }
    body
}

#[test]
fn health_models_metrics_and_unknown_routes() {
    let s = TestServer::start();
    let h = s.health();
    assert_eq!(h["status"], "ok", "{h}");
    assert_eq!(h["model"], MODEL, "{h}");
    assert_eq!(h["requests_running"], 0, "{h}");
    assert_eq!(h["requests_waiting"], 0, "{h}");
    let total = h["kv_blocks_total"].as_u64().expect("kv_blocks_total");
    assert!(total > 0 && h["kv_blocks_free"].as_u64() == Some(total), "an idle fresh server has every block free: {h}");

    let m = s.get("/v1/models");
    assert_eq!(m.status, 200, "{}", m.text());
    assert!(m.header("content-type").is_some_and(|v| v.starts_with("application/json")));
    let m = m.json();
    assert_eq!(m["object"], "list", "{m}");
    let data = m["data"].as_array().expect("data is an array");
    assert_eq!(data.len(), 1, "{m}");
    assert_eq!(data[0]["id"], MODEL, "{m}");
    assert_eq!(data[0]["object"], "model", "{m}");
    assert!(data[0]["created"].is_u64() && data[0]["owned_by"].is_string(), "{m}");

    let metrics = s.get("/metrics");
    assert_eq!(metrics.status, 200);
    assert!(metrics.header("content-type").is_some_and(|v| v.starts_with("text/plain")), "{:?}", metrics.headers);

    for (method, path) in [("GET", "/v1/nothing"), ("POST", "/v2/chat/completions"), ("GET", "/")] {
        let r = common::http::request(s.addr(), method, path, &[], None, common::http::CALL_TIMEOUT).expect("a request");
        assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
        assert!(e["error"]["message"].is_string(), "{e}");
    }
    // A generation endpoint answers only POST.
    let r = s.get("/v1/chat/completions");
    assert!(r.status == 404 || r.status == 405, "GET /v1/chat/completions: {} {}", r.status, r.text());
}

#[test]
fn non_streaming_shapes() {
    let s = TestServer::start();
    // Chat.
    let c = s.post_ok("/v1/chat/completions", &chat_body("What is 2+2?", 8));
    assert_id(&c["id"], "chatcmpl-");
    assert_eq!(c["object"], "chat.completion", "{c}");
    assert_eq!(c["model"], MODEL, "{c}");
    assert!(c["created"].as_u64().is_some_and(|t| t > 1_600_000_000), "{c}");
    let choices = c["choices"].as_array().expect("choices");
    assert_eq!(choices.len(), 1, "{c}");
    let ch = &choices[0];
    assert_eq!(ch["index"], 0, "{c}");
    assert_eq!(ch["message"]["role"], "assistant", "{c}");
    assert!(ch["message"]["content"].is_string(), "{c}");
    assert!(ch["logprobs"].is_null(), "no logprobs unless asked: {c}");
    let (_, completion, cached) = assert_usage(&c["usage"]);
    assert_eq!(cached, 0, "a fresh server has nothing cached: {c}");
    assert!((1..=8).contains(&completion), "{c}");
    match ch["finish_reason"].as_str() {
        Some("length") => assert_eq!(completion, 8, "{c}"),
        Some("stop") => {}
        other => panic!("finish_reason {other:?}: {c}"),
    }

    // Completion; no `model` means the served one.
    let c = s.post_ok("/v1/completions", &json!({"prompt": "Once upon a time", "temperature": 0, "max_tokens": 6}));
    assert_id(&c["id"], "cmpl-");
    assert_eq!(c["object"], "text_completion", "{c}");
    assert_eq!(c["model"], MODEL, "{c}");
    let ch = &c["choices"][0];
    assert_eq!(c["choices"].as_array().map(Vec::len), Some(1), "{c}");
    assert_eq!(ch["index"], 0, "{c}");
    assert!(ch["text"].as_str().is_some_and(|t| !t.is_empty()), "{c}");
    assert!(ch["logprobs"].is_null(), "{c}");
    assert_eq!(ch["finish_reason"], "length", "{c}");
    let (_, completion, _) = assert_usage(&c["usage"]);
    assert_eq!(completion, 6, "{c}");

    // Token ids as the prompt, and `max_completion_tokens`.
    let ids = s.post_ok("/tokenize", &json!({"content": "Once upon a time"}))["tokens"].clone();
    let c2 = s.post_ok("/v1/completions", &json!({"prompt": ids, "temperature": 0, "max_completion_tokens": 6}));
    assert_eq!(c2["choices"][0]["text"], c["choices"][0]["text"], "a prompt as token ids generates the same: {c2} vs {c}");
    assert_eq!(c2["usage"]["prompt_tokens"], c["usage"]["prompt_tokens"]);
}

/// Checks one chat stream's chunks; returns its text and the usage chunk if any.
fn check_chat_stream(events: &[String], include_usage: bool) -> (String, Option<Value>) {
    let cs = chunks(events);
    assert!(cs.len() >= 3, "role, content, finish: {events:?}");
    let id = cs[0]["id"].clone();
    assert_id(&id, "chatcmpl-");
    for c in &cs {
        assert_eq!(c["id"], id, "every chunk has the stream's id: {c}");
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        assert_eq!(c["model"], MODEL, "{c}");
        assert_eq!(c["created"], cs[0]["created"], "{c}");
        if include_usage {
            assert!(c.get("usage").is_some(), "with include_usage every chunk has `usage` (null or the usage): {c}");
        } else {
            assert!(c.get("usage").is_none_or(Value::is_null), "no usage without include_usage: {c}");
        }
    }
    assert_eq!(cs[0]["choices"][0]["delta"]["role"], "assistant", "the first chunk has the role: {}", cs[0]);
    let (body, usage) = if include_usage {
        let last = cs.last().expect("chunks");
        assert_eq!(last["choices"], json!([]), "the usage chunk has `choices: []`: {last}");
        assert_usage(&last["usage"]);
        (&cs[..cs.len() - 1], Some(last["usage"].clone()))
    } else {
        (&cs[..], None)
    };
    let fin = body.last().expect("a finishing chunk");
    let reason = fin["choices"][0]["finish_reason"].as_str();
    assert!(matches!(reason, Some("stop" | "length")), "the last choice chunk has finish_reason: {fin}");
    for c in &body[..body.len() - 1] {
        assert_eq!(c["choices"].as_array().map(Vec::len), Some(1), "{c}");
        assert!(c["choices"][0]["finish_reason"].is_null(), "only the last chunk finishes: {c}");
        if include_usage {
            assert!(c["usage"].is_null(), "usage is null before the last chunk: {c}");
        }
    }
    for c in &body[1..] {
        assert!(c["choices"][0]["delta"].get("role").is_none(), "only the first chunk has the role: {c}");
    }
    (stream_text(body), usage)
}

#[test]
fn streaming_chunks() {
    let s = TestServer::start();
    let body = chat_body("Name three colors.", 12);
    let whole = s.post_ok("/v1/chat/completions", &body);
    let whole_text = whole["choices"][0]["message"]["content"].as_str().expect("content").to_string();

    let events = s.stream("/v1/chat/completions", &with(body.clone(), json!({"stream": true})));
    let (text, usage) = check_chat_stream(&events, false);
    assert!(usage.is_none());
    assert_eq!(text, whole_text, "streamed and whole greedy answers agree");

    let events = s.stream("/v1/chat/completions", &with(body.clone(), json!({"stream": true, "stream_options": {"include_usage": true}})));
    let (text, usage) = check_chat_stream(&events, true);
    assert_eq!(text, whole_text);
    let usage = usage.expect("a usage chunk");
    assert_eq!(usage["prompt_tokens"], whole["usage"]["prompt_tokens"], "{usage} vs {}", whole["usage"]);
    assert_eq!(usage["completion_tokens"], whole["usage"]["completion_tokens"], "{usage} vs {}", whole["usage"]);

    // include_usage without stream is ignored (no error).
    let r = s.post_ok("/v1/chat/completions", &with(body.clone(), json!({"stream": false, "stream_options": {"include_usage": true}})));
    assert_eq!(r["choices"][0]["message"]["content"], whole_text.as_str());

    // Text completions stream.
    let cbody = completion_body("The three primary colors are", 10);
    let whole = s.post_ok("/v1/completions", &cbody);
    let events = s.stream("/v1/completions", &with(cbody.clone(), json!({"stream": true, "stream_options": {"include_usage": true}})));
    let cs = chunks(&events);
    let id = cs[0]["id"].clone();
    assert_id(&id, "cmpl-");
    for c in &cs {
        assert_eq!(c["id"], id, "{c}");
        assert_eq!(c["object"], "text_completion", "{c}");
    }
    let last = cs.last().expect("chunks");
    assert_eq!(last["choices"], json!([]), "{last}");
    assert_eq!(last["usage"]["completion_tokens"], whole["usage"]["completion_tokens"], "{last}");
    let fin = &cs[cs.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"], "{fin}");
    assert_eq!(stream_text(&cs), whole["choices"][0]["text"].as_str().expect("text"));
    let events = s.stream("/v1/completions", &with(cbody, json!({"stream": true})));
    let cs = chunks(&events);
    assert!(cs.iter().all(|c| c.get("usage").is_none_or(Value::is_null)), "{events:?}");
    assert_eq!(stream_text(&cs), whole["choices"][0]["text"].as_str().expect("text"));
}

#[test]
fn tokenize_detokenize_round_trip() {
    let s = TestServer::start();
    for text in ["Hello, world!", "  leading spaces and ünïcödé 🦀 字", "line\nbreaks\tand tabs"] {
        let t = s.post_ok("/tokenize", &json!({"content": text}));
        let ids = t["tokens"].as_array().unwrap_or_else(|| panic!("tokens: {t}"));
        assert!(!ids.is_empty() && ids.iter().all(Value::is_u64), "{t}");
        let d = s.post_ok("/detokenize", &json!({"tokens": ids}));
        assert_eq!(d["content"], text, "round trip of {text:?} through {t}");
        let p = s.post_ok("/tokenize", &json!({"content": text, "with_pieces": true}));
        let pieces = p["tokens"].as_array().expect("pieces");
        assert_eq!(pieces.len(), ids.len(), "{p}");
        for (piece, id) in pieces.iter().zip(ids) {
            assert_eq!(&piece["id"], id, "{p}");
            assert!(piece["piece"].is_string() || piece["piece"].is_array(), "{p}");
        }
    }
    let d = s.post_ok("/detokenize", &json!({"tokens": []}));
    assert_eq!(d["content"], "", "{d}");
}

/// `/tokenize` parses special tokens by default (`parse_special: true`, as llama-server does), so
/// `/detokenize` must render them back, as llama-server's does (`common_token_to_piece(...,
/// special = true)`): the round trip of a chat-template string holds.
#[test]
fn tokenize_detokenize_round_trip_with_special_tokens() {
    let s = TestServer::start();
    let t = s.post_ok("/tokenize", &json!({"content": "<|im_start|>"}));
    assert_eq!(t["tokens"].as_array().map(Vec::len), Some(1), "a special token is one token when parsed as special: {t}");
    let text = "<|im_start|>user\nHi<|im_end|>";
    let t = s.post_ok("/tokenize", &json!({"content": text}));
    let d = s.post_ok("/detokenize", &json!({"tokens": t["tokens"]}));
    assert_eq!(d["content"], text, "round trip of {text:?} through {t}");
}

#[test]
fn greedy_output_over_http_equals_generate() {
    let s = TestServer::start();
    for prompt in ["The capital of France is", "def fibonacci(n):\n"] {
        let cli = s.generate_cli(prompt, 24, false);
        let c = s.post_ok("/v1/completions", &completion_body(prompt, 24));
        assert_eq!(c["choices"][0]["text"].as_str(), Some(cli.as_str()), "completions vs `strata-rt generate` for {prompt:?}: {c}");
        let events = s.stream("/v1/completions", &with(completion_body(prompt, 24), json!({"stream": true})));
        assert_eq!(stream_text(&chunks(&events)), cli, "streamed completions vs `strata-rt generate` for {prompt:?}");
    }
    let prompt = "Write one sentence about the sea.";
    let cli = s.generate_cli(prompt, 24, true);
    let c = s.post_ok("/v1/chat/completions", &chat_body(prompt, 24));
    assert_eq!(c["choices"][0]["message"]["content"].as_str(), Some(cli.as_str()), "chat vs `strata-rt generate --chat`: {c}");
}

/// The value of an unlabelled counter in the server's `/metrics` text.
fn counter_value(s: &TestServer, name: &str) -> f64 {
    let text = s.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} sample in /metrics:\n{text}"))
}

/// Greedy runs (`batching.greedy_run_tokens`): a lone greedy request decodes in runs whose steps
/// go ahead of the host (on a GPU each is submitted before the token before it is read), cut
/// by max_tokens mid-run here (runs of 5). The tokens, their count and the finish reason are
/// those of a server taking one step at a time.
#[test]
fn greedy_runs_give_the_tokens_of_single_steps() {
    let runs = TestServer::start_with(&[("STRATA_BATCHING__GREEDY_RUN_TOKENS", "5")]);
    let steps = TestServer::start_with(&[("STRATA_BATCHING__GREEDY_RUN_TOKENS", "0")]);
    for (prompt, max_tokens) in [("The capital of France is", 23), ("def fibonacci(n):\n", 8)] {
        let a = runs.post_ok("/v1/completions", &completion_body(prompt, max_tokens));
        let b = steps.post_ok("/v1/completions", &completion_body(prompt, max_tokens));
        assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"], "{prompt:?}: runs {a} against single steps {b}");
        assert_eq!(a["choices"][0]["finish_reason"], b["choices"][0]["finish_reason"], "{a} {b}");
        assert_eq!(a["usage"]["completion_tokens"], b["usage"]["completion_tokens"], "{a} {b}");
    }
    let ran = counter_value(&runs, "strata_greedy_run_tokens_total");
    assert!(ran >= 10.0, "the lone greedy requests decoded in runs: {ran} tokens");
    assert_eq!(counter_value(&steps, "strata_greedy_run_tokens_total"), 0.0, "greedy_run_tokens = 0 turns runs off");
    // Logprobs need every step's logits: no run.
    let before = counter_value(&runs, "strata_greedy_run_tokens_total");
    let lp = runs.post_ok("/v1/completions", &with(completion_body("Water boils at", 6), json!({"logprobs": 2})));
    assert!(lp["choices"][0]["logprobs"].is_object(), "{lp}");
    assert_eq!(counter_value(&runs, "strata_greedy_run_tokens_total"), before, "a request with logprobs takes single steps");
}

/// A stop string taken from the middle of the unconstrained greedy text.
fn pick_stop(text: &str) -> (String, String) {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    assert!(chars.len() >= 12, "the greedy text is long enough to cut: {text:?}");
    // Three characters starting at a non-space near the middle.
    let mut k = chars.len() / 2;
    while k + 3 < chars.len() && chars[k].1.is_whitespace() {
        k += 1;
    }
    let start = chars[k].0;
    let end = chars.get(k + 3).map_or(text.len(), |c| c.0);
    let stop = text[start..end].to_string();
    let expect = text[..text.find(&stop).expect("the stop string occurs")].to_string();
    (stop, expect)
}

#[test]
fn stop_strings_end_the_output_before_them() {
    let s = TestServer::start();
    let prompt = "List the days of the week:";
    let free = s.post_ok("/v1/completions", &completion_body(prompt, 24));
    let text = free["choices"][0]["text"].as_str().expect("text").to_string();
    let (stop, expect) = pick_stop(&text);

    let c = s.post_ok("/v1/completions", &with(completion_body(prompt, 24), json!({"stop": [stop.clone(), "@@never@@"]})));
    assert_eq!(c["choices"][0]["text"].as_str(), Some(expect.as_str()), "stop {stop:?} in {text:?}: {c}");
    assert_eq!(c["choices"][0]["finish_reason"], "stop", "{c}");
    let (_, completion, _) = assert_usage(&c["usage"]);
    assert!(completion < 24, "generation ended at the stop string: {c}");

    let events = s.stream("/v1/completions", &with(completion_body(prompt, 24), json!({"stop": stop.clone(), "stream": true})));
    let cs = chunks(&events);
    assert_eq!(stream_text(&cs), expect, "streamed, stop {stop:?} in {text:?}");
    assert_eq!(cs.last().expect("chunks")["choices"][0]["finish_reason"], "stop");

    // Chat, with a stop string from its own greedy answer.
    let body = chat_body("Tell me a short story about a cat.", 24);
    let free = s.post_ok("/v1/chat/completions", &body);
    let text = free["choices"][0]["message"]["content"].as_str().expect("content").to_string();
    let (stop, expect) = pick_stop(&text);
    let c = s.post_ok("/v1/chat/completions", &with(body.clone(), json!({"stop": stop.clone()})));
    assert_eq!(c["choices"][0]["message"]["content"].as_str(), Some(expect.as_str()), "chat stop {stop:?} in {text:?}: {c}");
    assert_eq!(c["choices"][0]["finish_reason"], "stop", "{c}");
    let (text2, _) = check_chat_stream(&s.stream("/v1/chat/completions", &with(body, json!({"stop": stop.clone(), "stream": true}))), false);
    assert_eq!(text2, expect, "streamed chat stop {stop:?} in {text:?}");
    // The next request without stop strings generates the whole text again.
    let again = s.post_ok("/v1/chat/completions", &chat_body("Tell me a short story about a cat.", 24));
    assert_eq!(again["choices"][0]["message"]["content"].as_str(), Some(text.as_str()), "{again}");
}

#[test]
fn logprobs_shapes() {
    let s = TestServer::start();
    // Chat: logprobs + top_logprobs 3.
    let c = s.post_ok("/v1/chat/completions", &with(chat_body("Say hello.", 6), json!({"logprobs": true, "top_logprobs": 3})));
    let n = c["usage"]["completion_tokens"].as_u64().expect("completion_tokens") as usize;
    let content = c["choices"][0]["logprobs"]["content"].as_array().unwrap_or_else(|| panic!("choices[0].logprobs.content: {c}"));
    // An end-of-generation token is not part of the content and has no entry.
    assert_eq!(content.len(), n, "one logprob entry per completion token: {c}");
    let mut joined = Vec::new();
    for e in content {
        let tok = e["token"].as_str().unwrap_or_else(|| panic!("token: {e}"));
        let lp = e["logprob"].as_f64().unwrap_or_else(|| panic!("logprob: {e}"));
        assert!(lp <= 0.0, "{e}");
        let bytes: Vec<u8> = e["bytes"].as_array().unwrap_or_else(|| panic!("bytes: {e}")).iter().map(|b| b.as_u64().expect("a byte") as u8).collect();
        if let Ok(t) = std::str::from_utf8(&bytes) {
            assert_eq!(t, tok, "{e}");
        }
        joined.extend_from_slice(&bytes);
        let top = e["top_logprobs"].as_array().unwrap_or_else(|| panic!("top_logprobs: {e}"));
        assert_eq!(top.len(), 3, "{e}");
        let lps: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().expect("logprob")).collect();
        assert!(lps.windows(2).all(|w| w[0] >= w[1]), "most likely first: {e}");
        assert!(top.iter().all(|t| t["token"].is_string() && t["bytes"].is_array()), "{e}");
        // Greedy: the chosen token is the most likely one.
        assert_eq!(top[0]["token"], e["token"], "greedy picks the top token: {e}");
        assert!((lps[0] - lp).abs() < 1e-4, "{e}");
    }
    assert_eq!(String::from_utf8_lossy(&joined), c["choices"][0]["message"]["content"].as_str().expect("content"), "the tokens spell the content");

    // Completions: logprobs 2.
    let c = s.post_ok("/v1/completions", &with(completion_body("The sky is", 6), json!({"logprobs": 2})));
    let lp = &c["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap_or_else(|| panic!("logprobs.tokens: {c}"));
    let token_lps = lp["token_logprobs"].as_array().unwrap_or_else(|| panic!("logprobs.token_logprobs: {c}"));
    let tops = lp["top_logprobs"].as_array().unwrap_or_else(|| panic!("logprobs.top_logprobs: {c}"));
    let offsets = lp["text_offset"].as_array().unwrap_or_else(|| panic!("logprobs.text_offset: {c}"));
    let m = c["usage"]["completion_tokens"].as_u64().expect("completion_tokens") as usize;
    assert!(m >= 1 && tokens.len() == m, "one entry per completion token: {c}");
    assert!(token_lps.len() == m && tops.len() == m && offsets.len() == m, "{c}");
    let text = c["choices"][0]["text"].as_str().expect("text");
    assert_eq!(tokens.iter().map(|t| t.as_str().expect("a token string")).collect::<String>(), text, "the tokens spell the text: {c}");
    let mut prev = 0;
    for i in 0..m {
        let top = tops[i].as_object().unwrap_or_else(|| panic!("top_logprobs[{i}] is an object: {c}"));
        assert!(!top.is_empty() && top.len() <= 2, "{c}");
        let best = top.values().map(|v| v.as_f64().expect("a number")).fold(f64::NEG_INFINITY, f64::max);
        let chosen = token_lps[i].as_f64().expect("a number");
        assert!(chosen <= 0.0 && (best - chosen).abs() < 1e-4, "greedy: the chosen token is the best: {c}");
        let off = offsets[i].as_u64().expect("an offset");
        assert!(off >= prev, "text_offset grows: {c}");
        prev = off;
    }
    assert_eq!(offsets[0], 0, "{c}");

    // Streaming chat logprobs: every content chunk carries its tokens' logprobs. (A different
    // prompt: repeating one reuses its cached prefix, which is checked elsewhere.)
    let events = s.stream("/v1/chat/completions", &with(chat_body("Say goodbye.", 6), json!({"logprobs": true, "top_logprobs": 3, "stream": true, "stream_options": {"include_usage": true}})));
    let cs = chunks(&events);
    let streamed: Vec<Value> = cs.iter().filter_map(|c| c["choices"].get(0).and_then(|ch| ch["logprobs"]["content"].as_array())).flatten().cloned().collect();
    let n = cs.last().expect("usage chunk")["usage"]["completion_tokens"].as_u64().expect("completion_tokens") as usize;
    assert_eq!(streamed.len(), n, "one streamed logprob entry per completion token: {events:?}");
    assert!(streamed.iter().all(|e| e["top_logprobs"].as_array().map(Vec::len) == Some(3)), "{events:?}");
    for c in &cs {
        if let Some(lp) = c["choices"].get(0).map(|ch| &ch["logprobs"]) {
            if !lp.is_null() {
                let text: String = lp["content"].as_array().expect("content").iter().map(|e| e["token"].as_str().unwrap_or_default()).collect();
                assert_eq!(c["choices"][0]["delta"]["content"].as_str(), Some(text.as_str()), "a chunk's logprobs spell its delta: {c}");
            }
        }
    }

    // Streaming completion logprobs equal the whole answer's (a short prompt: nothing to reuse).
    let body = with(completion_body("The sky is", 6), json!({"logprobs": 2}));
    let events = s.stream("/v1/completions", &with(body, json!({"stream": true})));
    let cs = chunks(&events);
    let mut tokens_s = Vec::new();
    let mut lps_s = Vec::new();
    for c in &cs {
        let lp = &c["choices"][0]["logprobs"];
        if !lp.is_null() {
            tokens_s.extend(lp["tokens"].as_array().expect("tokens").iter().cloned());
            lps_s.extend(lp["token_logprobs"].as_array().expect("token_logprobs").iter().cloned());
        }
    }
    assert_eq!(&tokens_s, tokens, "streamed vs whole completion logprob tokens: {events:?}");
    assert_eq!(&lps_s, token_lps, "streamed vs whole token_logprobs: {events:?}");
}

#[test]
fn follow_up_chat_turn_reuses_the_prefix_and_generates_the_same() {
    let first_turn = json!([
        {"role": "system", "content": "You are a helpful assistant who answers briefly."},
        {"role": "user", "content": "What is the capital of Italy?"}
    ]);
    let s = TestServer::start();
    let r1 = s.post_ok("/v1/chat/completions", &json!({"messages": first_turn, "temperature": 0, "max_tokens": 16}));
    assert_eq!(r1["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "nothing cached on a fresh server: {r1}");
    let answer = r1["choices"][0]["message"]["content"].as_str().expect("content").to_string();
    let mut turn2 = first_turn.as_array().expect("messages").clone();
    turn2.push(json!({"role": "assistant", "content": answer}));
    turn2.push(json!({"role": "user", "content": "And of France?"}));
    let body2 = json!({"messages": turn2, "temperature": 0, "max_tokens": 16});
    let r2 = s.post_ok("/v1/chat/completions", &body2);
    let (prompt2, _, cached2) = assert_usage(&r2["usage"]);
    let (prompt1, _, _) = assert_usage(&r1["usage"]);
    assert!(cached2 > 0, "the follow-up turn reuses the first turn's prefix: {r2}");
    assert!(cached2 < prompt2 && cached2 <= prompt1 + 16, "{r2}");
    let timing = s.timing_log();
    let rec = timing.iter().find(|t| t["request_id"] == r2["id"]).unwrap_or_else(|| panic!("a timing record for {}: {timing:?}", r2["id"]));
    assert_eq!(rec["reused_tokens"].as_u64(), Some(cached2), "the timing record names the reused tokens: {rec}");

    // The same turn without reuse: a fresh server computes the whole prompt.
    drop(s);
    let fresh = TestServer::start();
    let r2_fresh = fresh.post_ok("/v1/chat/completions", &body2);
    assert_eq!(r2_fresh["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{r2_fresh}");
    assert_eq!(r2_fresh["usage"]["prompt_tokens"].as_u64(), Some(prompt2));
    // The reused cells hold exactly what a fresh prefill computes (with prefill and decode on
    // different devices, only prompt cells are cached, so the first answer is prefilled again).
    assert_eq!(
        r2["choices"][0]["message"]["content"], r2_fresh["choices"][0]["message"]["content"],
        "greedy output with prefix reuse equals the output without"
    );
    // And the exact same request again reuses (nearly) the whole prompt and still agrees.
    let r2_again = fresh.post_ok("/v1/chat/completions", &body2);
    let (_, _, cached_again) = assert_usage(&r2_again["usage"]);
    assert!(cached_again > 0, "{r2_again}");
    assert_eq!(r2_again["choices"][0]["message"]["content"], r2_fresh["choices"][0]["message"]["content"]);
}

/// The same chat request twice: the second reuses the first's cached prompt (all but the last
/// token) and must generate the same greedy tokens, with the same logprobs.
#[test]
fn a_repeated_request_reuses_its_prefix_and_generates_the_same() {
    let s = TestServer::start();
    let body = with(chat_body("Say hello.", 6), json!({"logprobs": true, "top_logprobs": 2}));
    let first = s.post_ok("/v1/chat/completions", &body);
    let second = s.post_ok("/v1/chat/completions", &body);
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "{first}");
    assert!(second["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() > Some(0), "the repeat reuses the cached prompt: {second}");
    let lps = |v: &Value| -> Vec<(String, f64)> {
        v["choices"][0]["logprobs"]["content"].as_array().expect("logprobs").iter().map(|e| (e["token"].as_str().unwrap_or_default().to_string(), e["logprob"].as_f64().unwrap_or(0.0))).collect()
    };
    assert_eq!(
        second["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"],
        "greedy output with prefix reuse equals the output without; tokens and logprobs without reuse {:?}, with {:?}",
        lps(&first),
        lps(&second)
    );
    for ((t1, l1), (t2, l2)) in lps(&first).iter().zip(&lps(&second)) {
        assert_eq!(t1, t2);
        assert!((l1 - l2).abs() < 1e-2, "logprob of {t1:?}: {l1} without reuse, {l2} with");
    }
}

#[test]
fn one_timing_line_per_completed_request() {
    let s = TestServer::start();
    let mut expected: HashMap<String, Value> = HashMap::new();
    let c = s.post_ok("/v1/chat/completions", &chat_body("Hi!", 5));
    expected.insert(c["id"].as_str().expect("id").into(), c["usage"].clone());
    let c = s.post_ok("/v1/completions", &completion_body("One, two, three,", 7));
    expected.insert(c["id"].as_str().expect("id").into(), c["usage"].clone());
    let cs = chunks(&s.stream("/v1/chat/completions", &with(chat_body("Count to three.", 4), json!({"stream": true, "stream_options": {"include_usage": true}}))));
    expected.insert(cs[0]["id"].as_str().expect("id").into(), cs.last().expect("usage chunk")["usage"].clone());
    let cs = chunks(&s.stream("/v1/completions", &with(completion_body("A B C", 3), json!({"stream": true, "stream_options": {"include_usage": true}}))));
    expected.insert(cs[0]["id"].as_str().expect("id").into(), cs.last().expect("usage chunk")["usage"].clone());
    // Refused requests log nothing.
    assert_eq!(s.post("/v1/completions", &json!({"prompt": "x", "n": 2})).status, 400);
    assert_eq!(s.post_raw("/v1/chat/completions", b"{not json").status, 400);
    s.wait_idle();

    for (source, records) in [("timing log", s.timing_log()), ("stderr", s.timing_stderr())] {
        assert_eq!(records.len(), expected.len(), "{source}: one record per completed request: {records:#?}");
        for rec in &records {
            let id = rec["request_id"].as_str().unwrap_or_else(|| panic!("{source}: request_id: {rec}"));
            let usage = expected.get(id).unwrap_or_else(|| panic!("{source}: a record for an unknown request {id}: {rec}"));
            assert_eq!(rec["prompt_tokens"], usage["prompt_tokens"], "{source}: {rec} vs {usage}");
            assert_eq!(rec["generated_tokens"], usage["completion_tokens"], "{source}: {rec} vs {usage}");
            assert_eq!(rec["reused_tokens"], usage["prompt_tokens_details"]["cached_tokens"], "{source}: {rec} vs {usage}");
            assert!(matches!(rec["stop_reason"].as_str(), Some("length" | "stop")), "{source}: {rec}");
            for k in ["prefill_ms", "decode_ms", "wall_ms"] {
                assert!(rec[k].as_f64().is_some_and(|x| x >= 0.0), "{source}: {k}: {rec}");
            }
            assert!(rec["wall_ms"].as_f64() >= rec["prefill_ms"].as_f64(), "{source}: {rec}");
        }
        let mut ids: Vec<&str> = records.iter().filter_map(|r| r["request_id"].as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), expected.len(), "{source}: request ids are distinct: {records:#?}");
    }
}
