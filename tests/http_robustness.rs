//! End-to-end robustness of the real `strata-rt` binary over loopback HTTP: bad and hostile input
//! gets an OpenAI-style 4xx and the server keeps serving; overload answers 429/503 with
//! `Retry-After` while admitted requests complete; vanishing clients free their KV blocks; 8
//! concurrent streams each get exactly what they get alone; SIGTERM drains and exits 0.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::http::{self, chunks, open_stream, stream_text, CALL_TIMEOUT};
use common::TestServer;
use serde_json::{json, Value};

/// Checks an OpenAI error body: `{"error":{"message","type","param","code"}}`, all four present.
fn assert_error_body(what: &str, r: &http::Response) -> Value {
    assert!(r.header("content-type").is_some_and(|v| v.starts_with("application/json")), "{what}: content type {:?}", r.header("content-type"));
    let v = r.json();
    let e = v.get("error").and_then(Value::as_object).unwrap_or_else(|| panic!("{what}: no `error` object: {v}"));
    assert!(e.get("message").and_then(Value::as_str).is_some_and(|m| !m.is_empty()), "{what}: error.message: {v}");
    assert!(e.get("type").and_then(Value::as_str).is_some_and(|m| !m.is_empty()), "{what}: error.type: {v}");
    assert!(e.get("param").is_some_and(|p| p.is_null() || p.is_string()), "{what}: error.param present: {v}");
    assert!(e.get("code").is_some_and(|p| p.is_null() || p.is_string()), "{what}: error.code present: {v}");
    v["error"].clone()
}

/// A normal greedy request still works (the server kept serving).
fn assert_serving(s: &TestServer, after: &str) {
    let r = s.post("/v1/completions", &json!({"prompt": "Hello", "temperature": 0, "max_tokens": 2}));
    assert_eq!(r.status, 200, "after {after}: a normal request fails: {}", r.text());
    assert_eq!(r.json()["usage"]["completion_tokens"], 2, "after {after}");
}

struct Bad {
    what: &'static str,
    path: &'static str,
    body: Vec<u8>,
    status: u16,
    param: Option<&'static str>,
    code: Option<&'static str>,
}

fn bad(what: &'static str, path: &'static str, body: impl Into<Vec<u8>>, status: u16, param: Option<&'static str>, code: Option<&'static str>) -> Bad {
    Bad { what, path, body: body.into(), status, param, code }
}

const CHAT: &str = "/v1/chat/completions";
const CMPL: &str = "/v1/completions";

fn nested(depth: usize) -> String {
    format!(r#"{{"prompt": {}1{}}}"#, "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn bad_input_gets_an_openai_400_and_the_server_keeps_serving() {
    let s = TestServer::start_with(&[("STRATA_SERVER__MAX_BODY_BYTES", "1048576")]);
    let msgs = r#""messages": [{"role": "user", "content": "hi"}]"#;
    let cases = vec![
        // Malformed and not-JSON bodies.
        bad("malformed JSON", CHAT, format!("{{{msgs}, "), 400, None, None),
        bad("truncated JSON", CMPL, r#"{"prompt": "hi"#, 400, None, None),
        bad("empty body", CHAT, "", 400, None, None),
        bad("a JSON array body", CHAT, "[1, 2, 3]", 400, None, None),
        bad("a JSON string body", CMPL, r#""prompt""#, 400, None, None),
        bad("invalid UTF-8", CMPL, b"{\"prompt\": \"\xff\xfe\"}".to_vec(), 400, None, None),
        bad("trailing garbage", CMPL, r#"{"prompt": "hi"} {"x": 1}"#, 400, None, None),
        // Wrong types.
        bad("messages is a string", CHAT, r#"{"messages": "hello"}"#, 400, Some("messages"), None),
        bad("message is a number", CHAT, r#"{"messages": [5]}"#, 400, Some("messages[0]"), None),
        bad("content is a number", CHAT, r#"{"messages": [{"role": "user", "content": 5}]}"#, 400, Some("messages[0].content"), None),
        bad("temperature is a string", CHAT, format!(r#"{{{msgs}, "temperature": "hot"}}"#), 400, Some("temperature"), None),
        bad("max_tokens is a string", CMPL, r#"{"prompt": "hi", "max_tokens": "10"}"#, 400, Some("max_tokens"), None),
        bad("max_tokens is a decimal", CMPL, r#"{"prompt": "hi", "max_tokens": 1.5}"#, 400, Some("max_tokens"), None),
        bad("stream is a string", CHAT, format!(r#"{{{msgs}, "stream": "yes"}}"#), 400, Some("stream"), None),
        bad("prompt is a number", CMPL, r#"{"prompt": 5}"#, 400, Some("prompt"), None),
        bad("stop is a number", CMPL, r#"{"prompt": "hi", "stop": 5}"#, 400, Some("stop"), None),
        bad("model is a number", CHAT, format!(r#"{{{msgs}, "model": 5}}"#), 400, Some("model"), None),
        bad("stream_options is a string", CHAT, format!(r#"{{{msgs}, "stream": true, "stream_options": "x"}}"#), 400, Some("stream_options"), None),
        // Missing or empty.
        bad("no messages", CHAT, "{}", 400, Some("messages"), None),
        bad("empty messages", CHAT, r#"{"messages": []}"#, 400, Some("messages"), None),
        bad("unknown role", CHAT, r#"{"messages": [{"role": "wizard", "content": "hi"}]}"#, 400, Some("messages[0].role"), None),
        bad("no prompt", CMPL, "{}", 400, Some("prompt"), None),
        bad("empty prompt", CMPL, r#"{"prompt": ""}"#, 400, Some("prompt"), None),
        // Unknown model, n > 1.
        bad("unknown model (chat)", CHAT, format!(r#"{{{msgs}, "model": "gpt-4o"}}"#), 400, Some("model"), Some("model_not_found")),
        bad("unknown model (completions)", CMPL, r#"{"prompt": "hi", "model": "nope"}"#, 400, Some("model"), Some("model_not_found")),
        bad("n = 2", CHAT, format!(r#"{{{msgs}, "n": 2}}"#), 400, Some("n"), None),
        bad("n = 0", CMPL, r#"{"prompt": "hi", "n": 0}"#, 400, Some("n"), None),
        // Out of range and huge numbers.
        bad("huge n", CMPL, r#"{"prompt": "hi", "n": 18446744073709551616}"#, 400, Some("n"), None),
        bad("n = 1e30", CMPL, r#"{"prompt": "hi", "n": 1e30}"#, 400, Some("n"), None),
        bad("huge max_tokens", CMPL, r#"{"prompt": "hi", "max_tokens": 99999999999999999999999}"#, 400, Some("max_tokens"), None),
        bad("max_tokens beyond the context", CHAT, format!(r#"{{{msgs}, "max_tokens": 4096}}"#), 400, Some("max_tokens"), None),
        bad("max_tokens = 0", CMPL, r#"{"prompt": "hi", "max_tokens": 0}"#, 400, Some("max_tokens"), None),
        bad("negative max_tokens", CMPL, r#"{"prompt": "hi", "max_tokens": -5}"#, 400, Some("max_tokens"), None),
        bad("huge logprobs", CMPL, r#"{"prompt": "hi", "logprobs": 1000000}"#, 400, Some("logprobs"), None),
        bad("huge top_logprobs", CHAT, format!(r#"{{{msgs}, "logprobs": true, "top_logprobs": 1000000000}}"#), 400, Some("top_logprobs"), None),
        bad("temperature 5", CHAT, format!(r#"{{{msgs}, "temperature": 5}}"#), 400, Some("temperature"), None),
        bad("top_p -1", CMPL, r#"{"prompt": "hi", "top_p": -1}"#, 400, Some("top_p"), None),
        bad("huge top_k", CMPL, r#"{"prompt": "hi", "top_k": 1e300}"#, 400, Some("top_k"), None),
        // NaN and Infinity literals.
        bad("NaN temperature", CMPL, r#"{"prompt": "hi", "temperature": NaN}"#, 400, None, None),
        bad("Infinity top_p", CHAT, format!(r#"{{{msgs}, "top_p": Infinity}}"#), 400, None, None),
        bad("-Infinity seed", CMPL, r#"{"prompt": "hi", "seed": -Infinity}"#, 400, None, None),
        bad("1e999 temperature", CMPL, r#"{"prompt": "hi", "temperature": 1e999}"#, 400, None, None),
        // Stop strings.
        bad("empty stop string", CMPL, r#"{"prompt": "hi", "stop": ""}"#, 400, Some("stop"), None),
        bad("empty stop string in a list", CHAT, format!(r#"{{{msgs}, "stop": ["a", ""]}}"#), 400, Some("stop[1]"), None),
        bad("five stop strings", CMPL, r#"{"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}"#, 400, Some("stop"), None),
        // Token ids outside the vocabulary.
        bad("token id beyond the vocabulary", CMPL, r#"{"prompt": [1, 2, 4000000000]}"#, 400, None, None),
        bad("token id = vocab size", CMPL, r#"{"prompt": [49152]}"#, 400, None, None),
        bad("negative token id", CMPL, r#"{"prompt": [1, -1]}"#, 400, None, None),
        bad("decimal token id", CMPL, r#"{"prompt": [1, 2.5]}"#, 400, None, None),
        bad("two prompts", CMPL, r#"{"prompt": ["a", "b"]}"#, 400, Some("prompt"), None),
        bad("detokenize beyond the vocabulary", "/detokenize", r#"{"tokens": [4294967295]}"#, 400, Some("tokens[0]"), None),
        bad("detokenize negative", "/detokenize", r#"{"tokens": [-3]}"#, 400, Some("tokens[0]"), None),
        bad("tokenize without content", "/tokenize", r#"{}"#, 400, Some("content"), None),
        // Deep nesting: refused, not a stack overflow.
        bad("nesting 100 deep", CMPL, nested(100), 400, None, None),
        bad("nesting 200000 deep", CMPL, nested(200_000), 400, None, None),
        bad("deep object nesting", CHAT, format!("{}{}", r#"{"a":"#.repeat(50_000), "}".repeat(50_000)), 400, None, None),
        // Unsupported features are refused rather than ignored.
        bad("echo", CMPL, r#"{"prompt": "hi", "echo": true}"#, 400, Some("echo"), None),
        bad("best_of 3", CMPL, r#"{"prompt": "hi", "best_of": 3}"#, 400, Some("best_of"), None),
        bad("frequency_penalty", CHAT, format!(r#"{{{msgs}, "frequency_penalty": 1.0}}"#), 400, Some("frequency_penalty"), None),
        // Larger than server.max_body_bytes (1 MiB here).
        bad("a 2 MiB body", CMPL, format!(r#"{{"prompt": "{}"}}"#, "a".repeat(2 << 20)), 413, None, None),
    ];
    let mut failures = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let r = match http::request(s.addr(), "POST", c.path, &[("Content-Type", "application/json")], Some(&c.body), CALL_TIMEOUT) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{}: no answer: {e}", c.what));
                continue;
            }
        };
        if r.status != c.status {
            failures.push(format!("{}: status {} (expected {}): {}", c.what, r.status, c.status, r.text().chars().take(300).collect::<String>()));
            continue;
        }
        let e = assert_error_body(c.what, &r);
        if let Some(p) = c.param {
            if e["param"] != p {
                failures.push(format!("{}: param {} (expected {p:?}): {e}", c.what, e["param"]));
            }
        }
        if let Some(code) = c.code {
            if e["code"] != code {
                failures.push(format!("{}: code {} (expected {code:?}): {e}", c.what, e["code"]));
            }
        }
        if i % 10 == 9 {
            assert_serving(&s, c.what);
        }
    }
    assert!(failures.is_empty(), "{} of {} bad inputs were mishandled:\n{}", failures.len(), cases.len(), failures.join("\n"));
    assert_serving(&s, "all the bad inputs");
    s.wait_idle();
    let served = cases.len() / 10 + 1;
    assert_eq!(s.timing_log().len(), served, "refused requests log no timing record: {:?}", s.timing_log());
}

#[test]
fn context_length_errors_name_both_lengths() {
    let s = TestServer::start();
    // A prompt longer than the context (2048 tokens in the test config).
    let long: String = (0..2300).map(|i| format!("w{} ", i % 97)).collect();
    let n = s.post_ok("/tokenize", &json!({"content": long, "add_special": true}))["tokens"].as_array().map_or(0, Vec::len);
    assert!(n > 2048, "the long prompt has {n} tokens");
    for (path, body, param) in [
        (CMPL, json!({"prompt": long}), "prompt"),
        (CHAT, json!({"messages": [{"role": "user", "content": long}]}), "messages"),
        (CMPL, json!({"prompt": long, "stream": true}), "prompt"),
    ] {
        let r = s.post(path, &body);
        assert_eq!(r.status, 400, "{path}: {}", r.text());
        let e = assert_error_body(path, &r);
        assert_eq!(e["code"], "context_length_exceeded", "{e}");
        assert_eq!(e["param"], param, "{e}");
        let m = e["message"].as_str().expect("message");
        assert!(m.contains("2048"), "the message names the context length: {m}");
        if path == CMPL {
            assert!(m.contains(&n.to_string()), "the message names the prompt length {n}: {m}");
        } else {
            // The chat template adds tokens: some number above the context is named.
            assert!(numbers(m).iter().any(|&x| x > 2048), "the message names the prompt length: {m}");
        }
    }
    // Prompt + max_tokens beyond the context.
    let prompt = "The capital of France is";
    let p = s.post_ok("/tokenize", &json!({"content": prompt, "add_special": true}))["tokens"].as_array().map_or(0, Vec::len);
    let over = 2048 - p + 1;
    let r = s.post(CMPL, &json!({"prompt": prompt, "max_tokens": over}));
    assert_eq!(r.status, 400, "{}", r.text());
    let e = assert_error_body("max_tokens + prompt", &r);
    assert_eq!(e["code"], "context_length_exceeded", "{e}");
    let m = e["message"].as_str().expect("message");
    assert!(m.contains("2048") && m.contains(&p.to_string()) && m.contains(&over.to_string()), "names the context, the prompt ({p}) and max_tokens ({over}): {m}");
    assert_serving(&s, "context errors");
    assert!(s.timing_log().len() == 1, "only the normal request logged timing: {:?}", s.timing_log());
}

fn numbers(s: &str) -> Vec<u64> {
    s.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect()
}

#[test]
fn overload_answers_429_or_503_with_retry_after_and_admitted_requests_complete() {
    let s = TestServer::start_with(&[
        ("STRATA_SERVER__MAX_QUEUED_REQUESTS", "1"),
        ("STRATA_SERVER__MAX_RUNNING_REQUESTS", "1"),
        ("STRATA_BATCHING__MAX_SEQS", "1"),
    ]);
    const CLIENTS: usize = 8;
    const MAX_TOKENS: u64 = 64;
    let addr = s.addr();
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let body = json!({"prompt": "Once upon a time, there was a dragon who", "temperature": 0, "max_tokens": MAX_TOKENS, "stream": i % 2 == 1});
                barrier.wait();
                if i % 2 == 1 {
                    let sse = open_stream(addr, CMPL, &body, CALL_TIMEOUT).expect("a streaming answer");
                    if sse.status != 200 {
                        let (status, ra) = (sse.status, sse.header("retry-after").map(str::to_owned));
                        let r = http::Response { status, headers: sse.headers.clone(), body: sse.rest().into_bytes() };
                        return (status, ra, Some(r), None);
                    }
                    let events = sse.collect().expect("the stream");
                    let cs = chunks(&events);
                    (200, None, None, Some((stream_text(&cs), cs[0]["id"].as_str().unwrap_or_default().to_string(), cs.last().expect("chunks")["choices"][0]["finish_reason"].clone())))
                } else {
                    let r = http::post_json(addr, CMPL, &body);
                    if r.status != 200 {
                        return (r.status, r.header("retry-after").map(str::to_owned), Some(r), None);
                    }
                    let v = r.json();
                    assert_eq!(v["usage"]["completion_tokens"], MAX_TOKENS, "{v}");
                    (200, None, None, Some((v["choices"][0]["text"].as_str().unwrap_or_default().to_string(), v["id"].as_str().unwrap_or_default().to_string(), v["choices"][0]["finish_reason"].clone())))
                }
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().expect("a client thread")).collect();
    let mut texts = Vec::new();
    let mut ids = Vec::new();
    let mut refused = 0;
    for (status, retry_after, resp, ok) in results {
        match status {
            200 => {
                let (text, id, finish) = ok.expect("a result");
                assert_eq!(finish, "length", "an admitted request completes: {text:?}");
                texts.push(text);
                ids.push(id);
            }
            429 | 503 => {
                refused += 1;
                let ra = retry_after.unwrap_or_else(|| panic!("a {status} carries Retry-After"));
                assert!(ra.parse::<u64>().is_ok_and(|x| x >= 1), "Retry-After is whole seconds: {ra:?}");
                assert_error_body("overload", &resp.expect("a response"));
            }
            other => panic!("status {other}: {:?}", resp.map(|r| r.text())),
        }
    }
    eprintln!("overload: {} admitted and completed, {refused} refused", texts.len());
    assert!(refused >= 1, "8 simultaneous requests against 1 slot + 1 queue place: some are refused");
    assert!(!texts.is_empty(), "some requests are admitted");
    assert!(texts.windows(2).all(|w| w[0] == w[1]), "every admitted greedy request generates the same text: {texts:?}");
    s.wait_idle();
    assert_serving(&s, "the overload");
    let logged: Vec<String> = s.timing_log().iter().filter_map(|t| t["request_id"].as_str().map(str::to_owned)).collect();
    for id in &ids {
        assert!(logged.contains(id), "an admitted request {id} has its timing record: {logged:?}");
    }
    assert_eq!(logged.len(), ids.len() + 1, "one record per completed request: {logged:?}");
}

/// Opens a stream, reads `events` data lines, and returns the request id and the raw socket so
/// the caller decides how to vanish.
fn start_stream_raw(s: &TestServer, path: &str, body: &Value, events: usize) -> (String, TcpStream) {
    let mut sock = TcpStream::connect(s.addr()).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let b = body.to_string();
    write!(sock, "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}", s.addr(), b.len()).expect("write");
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.matches("data: ").count() < events {
        assert!(Instant::now() < deadline, "the stream did not start: {seen}");
        let n = sock.read(&mut buf).expect("read");
        assert!(n > 0, "the server closed the stream early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    let id = seen
        .split("data: ")
        .nth(1)
        .and_then(|l| l.lines().next())
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .and_then(|v| v["id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("the first chunk has an id: {seen}"));
    (id, sock)
}

#[test]
fn a_client_vanishing_mid_stream_frees_its_blocks() {
    let s = TestServer::start();
    let before = s.health();
    let total = before["kv_blocks_total"].as_u64().expect("total");
    assert_eq!(before["kv_blocks_free"].as_u64(), Some(total), "{before}");
    for (path, body) in [
        (CMPL, json!({"prompt": "Once upon a time, in a land far away,", "temperature": 0, "max_tokens": 1500, "stream": true})),
        (CHAT, json!({"messages": [{"role": "user", "content": "Write a very long essay about rivers."}], "temperature": 0, "max_tokens": 1500, "stream": true})),
    ] {
        let (id, sock) = start_stream_raw(&s, path, &body, 4);
        let during = s.health();
        assert_eq!(during["requests_running"], 1, "{during}");
        assert!(during["kv_blocks_free"].as_u64() < Some(total), "the running request holds blocks: {during}");
        let gone = Instant::now();
        drop(sock);
        // (10 s: on a CPU Vulkan device (lavapipe) sharing two cores with other tests' servers a
        // step can take seconds; a request that ran on to its end instead would log a timing
        // record, which the asserts below refuse.)
        let after = s.wait_health(Duration::from_secs(10), "the cancelled request ending", |h| h["requests_running"] == 0 && h["requests_waiting"] == 0);
        eprintln!("{path}: the vanished client's request ended {:?} after the disconnect", gone.elapsed());
        // A cancelled sequence is not cached: every block is free again.
        assert_eq!(after["kv_blocks_free"].as_u64(), Some(total), "the cancelled request's blocks are free: {after}");
        assert!(s.timing_log().iter().all(|t| t["request_id"] != id.as_str()), "a cancelled request {id} logs no timing record");
        assert!(s.timing_stderr().iter().all(|t| t["request_id"] != id.as_str()), "a cancelled request {id} logs no timing record on stderr");
    }
    assert_serving(&s, "vanishing clients");
}

#[test]
fn a_client_vanishing_during_a_non_streaming_request_frees_its_blocks() {
    let s = TestServer::start();
    let total = s.health()["kv_blocks_total"].as_u64().expect("total");
    let mut sock = TcpStream::connect(s.addr()).expect("connect");
    let b = json!({"prompt": "Once upon a time, in a land far away,", "temperature": 0, "max_tokens": 1500}).to_string();
    write!(sock, "POST {CMPL} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}", s.addr(), b.len()).expect("write");
    s.wait_health(Duration::from_secs(10), "the request running", |h| h["requests_running"] == 1);
    std::thread::sleep(Duration::from_millis(300));
    drop(sock);
    // 1500 tokens take ~10 s on 2 cores; a cancelled request ends far sooner.
    let after = s.wait_health(Duration::from_secs(3), "the abandoned non-streaming request ending", |h| h["requests_running"] == 0);
    assert_eq!(after["kv_blocks_free"].as_u64(), Some(total), "{after}");
    assert!(s.timing_log().is_empty(), "the abandoned request logs no timing: {:?}", s.timing_log());
    assert_serving(&s, "a vanished non-streaming client");
}

#[test]
fn eight_concurrent_streams_each_get_what_they_get_alone() {
    concurrent_streams_get_what_they_get_alone(&TestServer::start());
}

/// The same with every step's logits copied and sampled on several threads (a GPU's steps of
/// dozens of sequences of a large vocabulary take that path; the default model's never do).
#[test]
fn concurrent_streams_sampled_on_several_threads_get_what_they_get_alone() {
    concurrent_streams_get_what_they_get_alone(&TestServer::start_with(&[("STRATA_BATCHING__PARALLEL_SAMPLING_MIN_LOGITS", "1")]));
}

/// The interleaved product order keeps batch invariance end to end.
#[test]
fn concurrent_streams_with_interleaved_products_get_what_they_get_alone() {
    concurrent_streams_get_what_they_get_alone(&TestServer::start_with(&[("STRATA_DEVICES__CPU_PRODUCTS", "interleaved")]));
}

fn concurrent_streams_get_what_they_get_alone(s: &TestServer) {
    let prompts = [
        "The capital of France is",
        "def add(a, b):",
        "My favourite fruit is",
        "1, 2, 3, 4,",
        "The quick brown fox",
        "In the beginning",
        "Water boils at",
        "Roses are red,",
    ];
    let body = |p: &str| json!({"prompt": p, "temperature": 0, "max_tokens": 16, "stream": true, "stream_options": {"include_usage": true}});
    // Alone, one after another.
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| {
            let cs = chunks(&s.stream(CMPL, &body(p)));
            stream_text(&cs)
        })
        .collect();
    // Together.
    let addr = s.addr();
    let barrier = Arc::new(Barrier::new(prompts.len()));
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| {
            let (barrier, b) = (barrier.clone(), body(p));
            std::thread::spawn(move || {
                barrier.wait();
                let events = http::stream_all(addr, CMPL, &b);
                let cs = chunks(&events);
                (stream_text(&cs), cs.last().expect("usage chunk")["usage"].clone())
            })
        })
        .collect();
    let together: Vec<(String, Value)> = handles.into_iter().map(|h| h.join().expect("a client thread")).collect();
    let mut mismatches = Vec::new();
    for ((p, a), (t, usage)) in prompts.iter().zip(&alone).zip(&together) {
        if a != t {
            mismatches.push(format!("{p:?}: alone {a:?}, together {t:?} (usage {usage})"));
        }
    }
    assert!(mismatches.is_empty(), "concurrent greedy streams differ from their solo runs:\n{}", mismatches.join("\n"));
    s.wait_idle();
    assert_eq!(s.timing_log().len(), 16, "one timing record per stream");
}

#[test]
fn sigterm_with_a_stream_in_flight_exits_0() {
    let mut s = TestServer::start();
    // Decoding on lavapipe (the Vulkan suite) is some 40 times slower than on the CPU: a shorter
    // stream keeps the drain well inside the server's shutdown grace.
    let max_tokens = if common::server::split_devices() { 40 } else { 150 };
    let body = json!({"messages": [{"role": "user", "content": "Tell me about the history of Rome."}], "temperature": 0, "max_tokens": max_tokens, "stream": true});
    let mut sse = open_stream(s.addr(), CHAT, &body, CALL_TIMEOUT).expect("a stream");
    assert_eq!(sse.status, 200);
    for _ in 0..3 {
        sse.next_data().expect("an event").expect("the stream is open");
    }
    s.sigterm();
    // The in-flight stream ends cleanly: either it drains to `data: [DONE]`, or it closes.
    let mut rest = Vec::new();
    let mut clean = true;
    loop {
        match sse.next_data() {
            Ok(Some(d)) => rest.push(d),
            Ok(None) => break,
            Err(e) => {
                clean = false;
                eprintln!("the stream ended with an error: {e}");
                break;
            }
        }
    }
    let status = s.wait_exit(Duration::from_secs(40)).expect("the server exits after SIGTERM");
    assert_eq!(status.code(), Some(0), "SIGTERM ends the server with exit code 0 ({status})");
    assert!(clean, "the stream closes cleanly (its chunked framing complete), got {rest:?}");
    assert_eq!(rest.last().map(String::as_str), Some("[DONE]"), "the stream ends with [DONE]: {rest:?}");
    // It drained to its end, or (on a slow machine) ran into the shutdown grace and was told so.
    let cut_off = shutdown_error_position(&rest[..rest.len() - 1]);
    eprintln!("after SIGTERM the stream carried {} more events (cut off: {})", rest.len(), cut_off.is_some());
    assert!(s.stderr().contains("SIGTERM: shutting down"), "the server logged its shutdown");
}

/// Where a stream's chunks (without `[DONE]`) carry the shutdown's error, asserting that only its
/// last chunk may, and that every chunk is JSON.
fn shutdown_error_position(chunks: &[String]) -> Option<usize> {
    let mut at = None;
    for (i, d) in chunks.iter().enumerate() {
        let v: Value = serde_json::from_str(d).unwrap_or_else(|e| panic!("a chunk is JSON ({e}): {d}"));
        if let Some(e) = v.get("error") {
            assert_eq!(i + 1, chunks.len(), "only the last chunk may carry an error: {d}");
            let msg = e["message"].as_str().unwrap_or_default();
            assert!(msg.contains("shutting down"), "the error names the shutdown: {d}");
            at = Some(i);
        }
    }
    at
}

/// `server.request_timeout_s`: a stream that runs past it ends with an error naming the limit and
/// `[DONE]`, within a step or two (the limit is checked between the tokens of a greedy run too,
/// which a lone greedy request decodes in), and the server keeps serving.
#[test]
fn a_stream_past_the_time_limit_ends_with_an_error_naming_it() {
    let s = TestServer::start_with(&[("STRATA_SERVER__REQUEST_TIMEOUT_S", "3")]);
    // Counts on greedily for far longer than the limit (~60 s of decode on two cores).
    let body = json!({"prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "temperature": 0, "max_tokens": 2000, "stream": true});
    let started = Instant::now();
    let events = s.stream(CMPL, &body);
    let took = started.elapsed();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "the stream ends with [DONE]: {events:?}");
    assert!(events.len() >= 2, "{events:?}");
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap_or_else(|e| panic!("a chunk is JSON ({e}): {events:?}"));
    let msg = last["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("past the server's 3 s limit"), "the last chunk names the time limit: {last}");
    assert!(took < Duration::from_secs(30), "ended {took:?} after it started, the limit being 3 s");
    s.wait_idle();
    assert_serving(&s, "a stream past the time limit");
}

/// A streaming completion that counts on greedily (never an end-of-text before `max_tokens`),
/// after its first three events.
fn counting_stream(s: &TestServer, max_tokens: usize) -> http::Sse {
    let body = json!({"prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "temperature": 0, "max_tokens": max_tokens, "stream": true});
    let mut sse = open_stream(s.addr(), CMPL, &body, CALL_TIMEOUT).expect("a stream");
    assert_eq!(sse.status, 200);
    for _ in 0..3 {
        sse.next_data().expect("an event").expect("the stream is open");
    }
    sse
}

#[test]
fn a_second_sigterm_ends_the_streams_at_once() {
    // A grace far longer than the test may take: only the second signal can end the stream early.
    let mut s = TestServer::start_with(&[("STRATA_SERVER__SHUTDOWN_GRACE_S", "600")]);
    let mut sse = counting_stream(&s, 1900);
    s.sigterm();
    std::thread::sleep(Duration::from_millis(300));
    s.sigterm();
    let mut rest = Vec::new();
    while let Some(d) = sse.next_data().unwrap_or_else(|e| panic!("the stream closes cleanly, got {e} after {} events", rest.len())) {
        rest.push(d);
    }
    let status = s.wait_exit(Duration::from_secs(40)).expect("the server exits after the second SIGTERM");
    assert_eq!(status.code(), Some(0), "SIGTERM ends the server with exit code 0 ({status})");
    assert_eq!(rest.last().map(String::as_str), Some("[DONE]"), "the stream ends with [DONE]");
    // 1,900 tokens run for many seconds; the second signal ended them with the shutdown's error.
    assert!(shutdown_error_position(&rest[..rest.len() - 1]).is_some(), "the stream ended with the shutdown's error, after {} events", rest.len());
    assert!(s.stderr().contains("SIGTERM again"), "the server logged the second signal");
}

#[test]
fn sigterm_cuts_off_a_stream_still_running_when_the_grace_ends() {
    let grace_s = 2;
    let mut s = TestServer::start_with(&[("STRATA_SERVER__SHUTDOWN_GRACE_S", "2")]);
    // 1500 tokens: 10 s on the CPU here, far past the grace.
    let mut sse = counting_stream(&s, 1500);
    let signalled = Instant::now();
    s.sigterm();
    let mut rest = Vec::new();
    while let Some(d) = sse.next_data().unwrap_or_else(|e| panic!("the stream closes cleanly, got {e} after {} events", rest.len())) {
        rest.push(d);
    }
    let closed_s = signalled.elapsed().as_secs_f64();
    let status = s.wait_exit(Duration::from_secs(40)).expect("the server exits after SIGTERM");
    assert_eq!(status.code(), Some(0), "SIGTERM ends the server with exit code 0 ({status})");
    assert_eq!(rest.last().map(String::as_str), Some("[DONE]"), "the stream ends with [DONE]: {rest:?}");
    let cut_off = shutdown_error_position(&rest[..rest.len() - 1]);
    assert!(cut_off.is_some(), "a stream running past the grace ends with the shutdown's error: {:?}", &rest[rest.len().saturating_sub(3)..]);
    // At least one token after the signal, then the error and [DONE] (on lavapipe on a slow
    // machine a step has taken most of the grace).
    assert!(rest.len() >= 3, "the stream kept going during the grace: {rest:?}");
    // The grace, plus a step or so on a slow device.
    assert!(closed_s < grace_s as f64 + 20.0, "the stream was cut off {closed_s:.1} s after SIGTERM, the grace is {grace_s} s");
    eprintln!("cut off {closed_s:.1} s after SIGTERM, after {} more events", rest.len());
}
