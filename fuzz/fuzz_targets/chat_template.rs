//! Compiles arbitrary text as a chat template (templates come from model files: untrusted) and
//! renders it over a fixed conversation, with small limits: it must return, an error or text no
//! longer than the output limit, and never panic. Input: the template, then optionally a NUL
//! byte and a JSON context for `render_with` (messages with tool calls, tools, ...).
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_tokenizer::{ChatMessage, ChatTemplate, TemplateLimits};

const LIMITS: TemplateLimits = TemplateLimits {
    fuel: 200_000,
    recursion: 20,
    max_output_bytes: 1 << 16,
};

fuzz_target!(|data: &[u8]| {
    let (template, context) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let Ok(source) = std::str::from_utf8(template) else {
        return;
    };
    let Ok(t) = ChatTemplate::with_limits(source, "<s>", "</s>", LIMITS) else {
        return;
    };
    let messages = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi \u{1F600} <|im_start|>"),
        ChatMessage::new("assistant", "Hello."),
        ChatMessage::new("user", ""),
    ];
    for add_generation_prompt in [false, true] {
        if let Ok(text) = t.render(&messages, add_generation_prompt) {
            assert!(
                text.len() <= LIMITS.max_output_bytes,
                "{} bytes",
                text.len()
            );
        }
    }
    if let Some(Ok(v)) = context.map(serde_json::from_slice::<serde_json::Value>) {
        if let Ok(text) = t.render_with(&v, true) {
            assert!(
                text.len() <= LIMITS.max_output_bytes,
                "{} bytes",
                text.len()
            );
        }
    }
});
