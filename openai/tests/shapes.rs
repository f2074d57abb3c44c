//! Serialized shapes, compared with OpenAI's (and llama-server's) JSON.

use serde_json::{json, Value};
use strata_openai::*;

fn v<T: serde::Serialize>(x: &T) -> Value {
    serde_json::to_value(x).unwrap()
}

#[test]
fn error_body() {
    let e = ApiError::invalid_param("temperature", "bad");
    assert_eq!(
        serde_json::from_str::<Value>(&e.to_json()).unwrap(),
        json!({"error": {"message": "bad", "type": "invalid_request_error", "param": "temperature", "code": null}})
    );
    let e = ApiError::context_length_exceeded(5000, 4096);
    assert_eq!(e.status, 400);
    assert_eq!(
        e.to_value(),
        json!({"error": {
            "message": "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
    );
    let e = ApiError::context_length_exceeded_with_completion("prompt", 100, 4000, 4096);
    assert!(
        e.message
            .contains("you requested 4100 tokens (100 in the prompt, 4000 in the completion)"),
        "{}",
        e.message
    );
    let e = ApiError::overloaded(2);
    assert_eq!(
        (e.status, e.retry_after_s, e.kind),
        (503, Some(2), "server_error")
    );
    let e = ApiError::rate_limited(1);
    assert_eq!((e.status, e.retry_after_s), (429, Some(1)));
    assert_eq!(ApiError::not_found("no such route").status, 404);
    let e = ApiError::internal("boom");
    assert_eq!((e.status, e.kind), (500, "server_error"));
    assert_eq!(e.to_string(), "boom");
    let e = ApiError::model_not_found("gpt-4");
    assert_eq!(
        e.to_value(),
        json!({"error": {"message": "The model `gpt-4` does not exist or you do not have access to it.",
                          "type": "invalid_request_error", "param": "model", "code": "model_not_found"}})
    );
    assert_eq!(ApiError::payload_too_large(10, 5).status, 413);
}

#[test]
fn chat_completion_shape() {
    let c = ChatCompletion::new(
        "chatcmpl-1".into(),
        1700000000,
        "smollm2".into(),
        "Hello!".into(),
        None,
        FinishReason::Stop,
        Usage::new(9, 3, 4),
    );
    assert_eq!(
        v(&c),
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "smollm2",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12,
                      "prompt_tokens_details": {"cached_tokens": 4}}
        })
    );
}

#[test]
fn chat_logprobs_shape() {
    let lp = ChatLogprobs {
        content: vec![ChatTokenLogprob::new(
            b"Hi",
            -0.25,
            &[(&b"Hi"[..], -0.25), (&b"\xe2\x82"[..], f32::NEG_INFINITY)],
        )],
    };
    assert_eq!(
        v(&lp),
        json!({"content": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105], "top_logprobs": [
            {"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
            {"token": "\u{fffd}", "logprob": -9999.0, "bytes": [226, 130]}
        ]}]})
    );
}

#[test]
fn completion_logprobs_shape() {
    let mut lp = CompletionLogprobs::default();
    lp.push(
        b" the",
        -0.5,
        &[(&b" the"[..], -0.5), (&b" a"[..], -1.5)],
        0,
    );
    lp.push(b" cat", f32::NAN, &[], 4);
    assert_eq!(
        v(&lp),
        json!({"tokens": [" the", " cat"], "token_logprobs": [-0.5, -9999.0],
               "top_logprobs": [{" the": -0.5, " a": -1.5}, {}], "text_offset": [0, 4]})
    );
    // Alternatives keep their order in the object.
    let s = serde_json::to_string(&TopMap(vec![
        ("z".into(), -0.1),
        ("a".into(), -0.2),
        ("z".into(), -3.0),
    ]))
    .unwrap();
    assert_eq!(s, r#"{"z":-0.1,"a":-0.2}"#);
}

#[test]
fn chat_stream_shapes_without_usage() {
    let st = ChatStream {
        id: "chatcmpl-x".into(),
        created: 1,
        model: "m".into(),
        include_usage: false,
    };
    let head =
        json!({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m"});
    let with = |choices: Value| {
        let mut h = head.clone();
        h["choices"] = choices;
        h
    };
    assert_eq!(
        v(&st.role()),
        with(
            json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}])
        )
    );
    assert_eq!(
        v(&st.content("Hel", None)),
        with(
            json!([{"index": 0, "delta": {"content": "Hel"}, "logprobs": null, "finish_reason": null}])
        )
    );
    assert_eq!(
        v(&st.finish(FinishReason::Length)),
        with(json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}]))
    );
    assert!(st.usage(Usage::new(1, 2, 0)).is_none());
}

#[test]
fn chat_stream_shapes_with_usage() {
    let st = ChatStream {
        id: "chatcmpl-x".into(),
        created: 1,
        model: "m".into(),
        include_usage: true,
    };
    assert_eq!(v(&st.role())["usage"], Value::Null);
    assert!(v(&st.role()).as_object().unwrap().contains_key("usage"));
    assert_eq!(v(&st.content("a", None))["usage"], Value::Null);
    assert_eq!(v(&st.finish(FinishReason::Stop))["usage"], Value::Null);
    assert_eq!(
        v(&st.usage(Usage::new(5, 2, 3)).unwrap()),
        json!({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
               "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                         "prompt_tokens_details": {"cached_tokens": 3}}})
    );
    let lp = ChatLogprobs {
        content: vec![ChatTokenLogprob::new(b"a", -1.0, &[])],
    };
    assert_eq!(
        v(&st.content("a", Some(lp)))["choices"][0]["logprobs"],
        json!({"content": [{"token": "a", "logprob": -1.0, "bytes": [97], "top_logprobs": []}]})
    );
}

#[test]
fn completion_shapes() {
    let c = Completion::new(
        "cmpl-1".into(),
        2,
        "m".into(),
        "text".into(),
        None,
        FinishReason::Length,
        Usage::new(1, 1, 0),
    );
    assert_eq!(
        v(&c),
        json!({"id": "cmpl-1", "object": "text_completion", "created": 2, "model": "m",
               "choices": [{"text": "text", "index": 0, "logprobs": null, "finish_reason": "length"}],
               "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2,
                         "prompt_tokens_details": {"cached_tokens": 0}}})
    );
    let st = CompletionStream {
        id: "cmpl-2".into(),
        created: 3,
        model: "m".into(),
        include_usage: false,
    };
    assert_eq!(
        v(&st.text("ab", None)),
        json!({"id": "cmpl-2", "object": "text_completion", "created": 3, "model": "m",
               "choices": [{"text": "ab", "index": 0, "logprobs": null, "finish_reason": null}]})
    );
    assert_eq!(
        v(&st.finish(FinishReason::Stop))["choices"][0],
        json!({"text": "", "index": 0, "logprobs": null, "finish_reason": "stop"})
    );
    assert!(st.usage(Usage::new(1, 1, 0)).is_none());
    let st = CompletionStream {
        include_usage: true,
        ..st
    };
    assert_eq!(v(&st.text("ab", None))["usage"], Value::Null);
    let u = v(&st.usage(Usage::new(1, 1, 0)).unwrap());
    assert_eq!(u["choices"], json!([]));
    assert_eq!(u["usage"]["total_tokens"], 2);
}

#[test]
fn models_shape() {
    let m = ModelList::new(&["smollm2".to_string()], 1700000000, "strata-rt");
    assert_eq!(
        v(&m),
        json!({"object": "list", "data": [{"id": "smollm2", "object": "model", "created": 1700000000, "owned_by": "strata-rt"}]})
    );
}

#[test]
fn tokenize_shapes() {
    assert_eq!(
        v(&TokenizeResponse {
            tokens: TokenList::Ids(vec![1, 2])
        }),
        json!({"tokens": [1, 2]})
    );
    let pieces = TokenList::Pieces(vec![
        TokenPiece::new(5, b"Hi"),
        TokenPiece::new(6, b"\xe2\x82"),
    ]);
    assert_eq!(
        v(&TokenizeResponse { tokens: pieces }),
        json!({"tokens": [{"id": 5, "piece": "Hi"}, {"id": 6, "piece": [226, 130]}]})
    );
    assert_eq!(
        v(&DetokenizeResponse {
            content: "Hi".into()
        }),
        json!({"content": "Hi"})
    );
}

#[test]
fn sse_framing() {
    let st = ChatStream {
        id: "c".into(),
        created: 1,
        model: "m".into(),
        include_usage: false,
    };
    let ev = sse_event(&st.content("line1\nline2", None));
    assert!(ev.starts_with("data: {") && ev.ends_with("}\n\n"));
    assert_eq!(
        ev.matches('\n').count(),
        2,
        "payload must be one line: {ev:?}"
    );
    assert_eq!(SSE_DONE, "data: [DONE]\n\n");
    let ev = sse_error(&ApiError::internal("x"));
    assert!(ev.starts_with("data: {\"error\":"));
}

#[test]
fn ids_are_fresh() {
    let a = new_id("chatcmpl-");
    let b = new_id("chatcmpl-");
    assert!(a.starts_with("chatcmpl-") && a.len() == "chatcmpl-".len() + 24);
    assert_ne!(a, b);
    let s = ChatStream::new("m", true);
    assert!(s.id.starts_with("chatcmpl-") && s.created > 1_600_000_000);
    assert!(CompletionStream::new("m", false).id.starts_with("cmpl-"));
}
