//! Runs the OpenAI endpoints' request parsers on arbitrary bytes (the first byte picks the
//! endpoint) and checks every promise their documentation makes about a request they accept:
//! the ranges of the sampling parameters, `max_tokens`, `logprobs`, the stop strings, the token
//! ids, a non-empty chat; that `resolve_max_tokens` keeps prompt + completion inside the
//! context; and that every refusal serializes to a JSON error object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_openai::{
    parse_chat_request, parse_completion_request, parse_detokenize_request, parse_tokenize_request,
    ApiError, GenerationSpec, Limits, PromptInput, MAX_STOP_BYTES, MAX_STOP_STRINGS,
    MAX_TOP_LOGPROBS,
};

const VOCAB: usize = 49_152;
const CONTEXT: usize = 2_048;

fn limits() -> Limits {
    Limits {
        max_body_bytes: 1 << 16,
        max_context: CONTEXT,
        vocab_size: VOCAB,
        default_max_tokens: 256,
        served_model_names: vec!["smollm2".into(), "other".into()],
    }
}

fn check_error(e: &ApiError) {
    let v: serde_json::Value =
        serde_json::from_str(&e.to_json()).expect("an error serializes to JSON");
    assert!(
        v.get("error")
            .and_then(|e| e.get("message"))
            .and_then(|m| m.as_str())
            .is_some(),
        "{v}"
    );
}

fn in_unit(x: Option<f32>, hi: f32) -> bool {
    x.is_none_or(|x| x.is_finite() && (0.0..=hi).contains(&x))
}

fn check_spec(spec: &GenerationSpec, limits: &Limits) {
    assert!(
        limits.served_model_names.contains(&spec.model),
        "model {:?}",
        spec.model
    );
    match &spec.prompt {
        PromptInput::Tokens(ids) => assert!(ids.iter().all(|&id| (id as usize) < VOCAB)),
        PromptInput::Chat(messages) => assert!(!messages.is_empty()),
        PromptInput::Text(_) => {}
    }
    if let Some(m) = spec.max_tokens {
        assert!((1..=CONTEXT).contains(&m), "max_tokens {m}");
    }
    let s = &spec.sampling;
    assert!(
        in_unit(s.temperature, 2.0) && in_unit(s.top_p, 1.0) && in_unit(s.min_p, 1.0),
        "{s:?}"
    );
    assert!(s.top_k.is_none_or(|k| k <= VOCAB), "{s:?}");
    assert!(
        s.repetition_penalty
            .is_none_or(|p| p.is_finite() && (0.01..=100.0).contains(&p)),
        "{s:?}"
    );
    assert!(
        spec.stop.len() <= MAX_STOP_STRINGS
            && spec
                .stop
                .iter()
                .all(|s| (1..=MAX_STOP_BYTES).contains(&s.len())),
        "{:?}",
        spec.stop
    );
    assert!(spec.logprobs.is_none_or(|n| n <= MAX_TOP_LOGPROBS));
    assert!(spec.stream || !spec.include_usage);
    // Whatever the prompt's length, the budget keeps prompt + completion inside the context.
    for prompt_tokens in [0, 1, 7, CONTEXT / 2, CONTEXT - 1, CONTEXT, CONTEXT + 5] {
        match spec.resolve_max_tokens(prompt_tokens, limits) {
            Ok(budget) => {
                assert!(
                    budget >= 1 && prompt_tokens >= 1 && prompt_tokens + budget <= CONTEXT,
                    "{prompt_tokens} + {budget}"
                );
                assert!(spec.max_tokens.is_none_or(|m| m == budget));
            }
            Err(e) => check_error(&e),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    let limits = limits();
    match which % 4 {
        0 | 1 => {
            let parsed = if which % 4 == 0 {
                parse_chat_request(body, &limits)
            } else {
                parse_completion_request(body, &limits)
            };
            match parsed {
                Ok(spec) => check_spec(&spec, &limits),
                Err(e) => check_error(&e),
            }
        }
        2 => match parse_tokenize_request(body, &limits) {
            Ok(_) => {}
            Err(e) => check_error(&e),
        },
        _ => match parse_detokenize_request(body, &limits) {
            Ok(r) => assert!(r.tokens.iter().all(|&id| (id as usize) < VOCAB)),
            Err(e) => check_error(&e),
        },
    }
});
