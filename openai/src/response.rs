//! Response bodies: chat and text completions, their streaming chunks, usage, logprobs, and the
//! model list. Field names and shapes follow OpenAI's API reference.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A stop string or the end-of-generation token: `"stop"`.
    Stop,
    /// `max_tokens` or the context was reached: `"length"`.
    Length,
}

/// Seconds since the Unix epoch (the `created` field).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A fresh, unpredictable response id: `prefix` followed by 24 hex digits
/// (use `"chatcmpl-"` for chat and `"cmpl-"` for text completions).
pub fn new_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // RandomState is randomly keyed per process: SipHash of (counter, time) is unpredictable.
    let s = RandomState::new();
    let mut h1 = s.build_hasher();
    h1.write_u64(n);
    h1.write_u128(nanos);
    let a = h1.finish();
    let mut h2 = s.build_hasher();
    h2.write_u64(a);
    h2.write_u64(n);
    let b = h2.finish();
    format!("{prefix}{a:016x}{:08x}", b >> 32)
}

/// Token counts of a request. `prompt_tokens_details.cached_tokens` is how many prompt tokens
/// were served from a reused KV prefix (OpenAI's field for prompt caching).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens in the prompt (after the chat template).
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// `prompt_tokens + completion_tokens`.
    pub total_tokens: usize,
    /// Prompt details.
    pub prompt_tokens_details: PromptTokensDetails,
}

/// `usage.prompt_tokens_details`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV cells were reused from an earlier request.
    pub cached_tokens: usize,
}

impl Usage {
    /// Usage with `total_tokens` computed.
    pub fn new(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}

/// OpenAI reports impossible tokens (probability 0) as -9999.0; JSON has no `-Infinity`, and
/// serde_json would write `null` for it.
fn finite_logprob<S: Serializer>(x: &f32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f32(clean_logprob(*x))
}

fn clean_logprob(x: f32) -> f32 {
    if x.is_finite() {
        x
    } else {
        -9999.0
    }
}

// ---------------------------------------------------------------- logprobs

/// One alternative in chat logprobs: `{token, logprob, bytes}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopLogprob {
    /// The token's text (lossy when its bytes are not valid UTF-8 alone).
    pub token: String,
    /// Natural-log probability (non-finite values are written as -9999.0).
    #[serde(serialize_with = "finite_logprob")]
    pub logprob: f32,
    /// The token's exact bytes.
    pub bytes: Option<Vec<u8>>,
}

impl TopLogprob {
    /// From a token's raw bytes.
    pub fn new(token_bytes: &[u8], logprob: f32) -> Self {
        TopLogprob {
            token: String::from_utf8_lossy(token_bytes).into_owned(),
            logprob,
            bytes: Some(token_bytes.to_vec()),
        }
    }
}

/// One chosen token in chat logprobs: `{token, logprob, bytes, top_logprobs}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatTokenLogprob {
    /// The token's text (lossy when its bytes are not valid UTF-8 alone).
    pub token: String,
    /// Natural-log probability (non-finite values are written as -9999.0).
    #[serde(serialize_with = "finite_logprob")]
    pub logprob: f32,
    /// The token's exact bytes.
    pub bytes: Option<Vec<u8>>,
    /// The most likely alternatives at this position, most likely first.
    pub top_logprobs: Vec<TopLogprob>,
}

impl ChatTokenLogprob {
    /// From a token's raw bytes and its alternatives `(bytes, logprob)`.
    pub fn new(token_bytes: &[u8], logprob: f32, top: &[(&[u8], f32)]) -> Self {
        ChatTokenLogprob {
            token: String::from_utf8_lossy(token_bytes).into_owned(),
            logprob,
            bytes: Some(token_bytes.to_vec()),
            top_logprobs: top.iter().map(|(b, lp)| TopLogprob::new(b, *lp)).collect(),
        }
    }
}

/// A chat choice's `logprobs`: `{"content": [...]}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatLogprobs {
    /// One entry per generated token.
    pub content: Vec<ChatTokenLogprob>,
}

/// A text completion choice's `logprobs`:
/// `{tokens, token_logprobs, top_logprobs, text_offset}` (parallel arrays).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CompletionLogprobs {
    /// Each token's text.
    pub tokens: Vec<String>,
    /// Each token's log-probability.
    #[serde(serialize_with = "finite_logprobs")]
    pub token_logprobs: Vec<f32>,
    /// Per position, the alternatives as a `{token: logprob}` object (most likely first;
    /// duplicate texts keep the first).
    pub top_logprobs: Vec<TopMap>,
    /// Each token's byte offset in the completion text (continuing across stream chunks).
    pub text_offset: Vec<usize>,
}

fn finite_logprobs<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|x| clean_logprob(*x)))
}

/// An ordered `{token: logprob}` object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopMap(pub Vec<(String, f32)>);

impl Serialize for TopMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        let mut seen = std::collections::HashSet::new();
        for (k, v) in &self.0 {
            if seen.insert(k.as_str()) {
                m.serialize_entry(k, &clean_logprob(*v))?;
            }
        }
        m.end()
    }
}

impl CompletionLogprobs {
    /// Appends one token: its bytes, log-probability, alternatives and byte offset in the text.
    pub fn push(
        &mut self,
        token_bytes: &[u8],
        logprob: f32,
        top: &[(&[u8], f32)],
        text_offset: usize,
    ) {
        self.tokens
            .push(String::from_utf8_lossy(token_bytes).into_owned());
        self.token_logprobs.push(logprob);
        self.top_logprobs.push(TopMap(
            top.iter()
                .map(|(b, lp)| (String::from_utf8_lossy(b).into_owned(), *lp))
                .collect(),
        ));
        self.text_offset.push(text_offset);
    }
}

// ---------------------------------------------------------------- chat

/// `choices[].message` of a chat completion.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AssistantMessage {
    /// Always `"assistant"`.
    pub role: &'static str,
    /// The generated text.
    pub content: String,
}

/// One choice of a chat completion.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatChoice {
    /// Always 0 (n = 1).
    pub index: u32,
    /// The reply.
    pub message: AssistantMessage,
    /// `null` unless logprobs were asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// Why it ended.
    pub finish_reason: FinishReason,
}

/// The body of a non-streaming chat completion (`"object": "chat.completion"`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatCompletion {
    /// `chatcmpl-…`
    pub id: String,
    /// Always `"chat.completion"`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model name.
    pub model: String,
    /// Exactly one choice.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
}

impl ChatCompletion {
    /// A one-choice chat completion.
    pub fn new(
        id: String,
        created: u64,
        model: String,
        content: String,
        logprobs: Option<ChatLogprobs>,
        finish_reason: FinishReason,
        usage: Usage,
    ) -> Self {
        ChatCompletion {
            id,
            object: "chat.completion",
            created,
            model,
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content,
                },
                logprobs,
                finish_reason,
            }],
            usage,
        }
    }
}

/// `choices[].delta` of a chat chunk; absent fields are omitted (`{}` on the finishing chunk).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatDelta {
    /// `"assistant"` on the first chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// New text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// One choice of a chat chunk.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatChunkChoice {
    /// Always 0.
    pub index: u32,
    /// What is new.
    pub delta: ChatDelta,
    /// Logprobs of the tokens in this delta, or `null`.
    pub logprobs: Option<ChatLogprobs>,
    /// `null` until the finishing chunk.
    pub finish_reason: Option<FinishReason>,
}

/// A streaming chat chunk (`"object": "chat.completion.chunk"`).
///
/// `usage` is omitted when `include_usage` is off; with it on, it is `null` on every chunk
/// except the last, which has `choices: []` and the usage.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatCompletionChunk {
    /// Same on every chunk of a stream.
    pub id: String,
    /// Always `"chat.completion.chunk"`.
    pub object: &'static str,
    /// Same on every chunk of a stream.
    pub created: u64,
    /// The model name.
    pub model: String,
    /// One choice, or none on the usage chunk.
    pub choices: Vec<ChatChunkChoice>,
    /// `None`: omitted; `Some(None)`: `null`; `Some(Some(u))`: the usage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// Makes the chunks of one chat stream, in OpenAI's order:
/// [`role`](ChatStream::role) (`{"role":"assistant","content":""}`), then
/// [`content`](ChatStream::content) deltas, then [`finish`](ChatStream::finish) (empty delta
/// with the finish reason), then, when `include_usage`, [`usage`](ChatStream::usage); then
/// [`crate::SSE_DONE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatStream {
    /// `chatcmpl-…`
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model name.
    pub model: String,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

impl ChatStream {
    /// A stream with a fresh id and the current time.
    pub fn new(model: impl Into<String>, include_usage: bool) -> Self {
        ChatStream {
            id: new_id("chatcmpl-"),
            created: unix_now(),
            model: model.into(),
            include_usage,
        }
    }

    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices,
            usage: self.include_usage.then_some(usage),
        }
    }

    fn one(
        &self,
        delta: ChatDelta,
        logprobs: Option<ChatLogprobs>,
        finish: Option<FinishReason>,
    ) -> ChatCompletionChunk {
        self.chunk(
            vec![ChatChunkChoice {
                index: 0,
                delta,
                logprobs,
                finish_reason: finish,
            }],
            None,
        )
    }

    /// The first chunk: `delta: {"role": "assistant", "content": ""}`.
    pub fn role(&self) -> ChatCompletionChunk {
        self.one(
            ChatDelta {
                role: Some("assistant"),
                content: Some(String::new()),
            },
            None,
            None,
        )
    }

    /// A content delta, with the logprobs of its tokens when asked for.
    pub fn content(
        &self,
        text: impl Into<String>,
        logprobs: Option<ChatLogprobs>,
    ) -> ChatCompletionChunk {
        self.one(
            ChatDelta {
                role: None,
                content: Some(text.into()),
            },
            logprobs,
            None,
        )
    }

    /// The finishing chunk: `delta: {}` and the finish reason.
    pub fn finish(&self, reason: FinishReason) -> ChatCompletionChunk {
        self.one(ChatDelta::default(), None, Some(reason))
    }

    /// The usage chunk (`choices: []`), or `None` when `include_usage` is off.
    pub fn usage(&self, usage: Usage) -> Option<ChatCompletionChunk> {
        self.include_usage
            .then(|| self.chunk(Vec::new(), Some(usage)))
    }
}

// ---------------------------------------------------------------- text completions

/// One choice of a text completion or text completion chunk.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompletionChoice {
    /// The generated text (in a chunk: the new text).
    pub text: String,
    /// Always 0.
    pub index: u32,
    /// `null` unless logprobs were asked for.
    pub logprobs: Option<CompletionLogprobs>,
    /// `null` on stream chunks until the finishing one.
    pub finish_reason: Option<FinishReason>,
}

/// A text completion, whole or as a stream chunk (`"object": "text_completion"` in both cases,
/// as OpenAI does).
///
/// `usage`: whole responses always carry it; on chunks it is omitted unless `include_usage`,
/// then `null` except on the last chunk (`choices: []`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Completion {
    /// `cmpl-…`
    pub id: String,
    /// Always `"text_completion"`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model name.
    pub model: String,
    /// One choice, or none on the usage chunk.
    pub choices: Vec<CompletionChoice>,
    /// See the type's doc.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

/// A streaming text completion chunk (same shape as [`Completion`]).
pub type CompletionChunk = Completion;

impl Completion {
    /// A whole (non-streaming) one-choice text completion.
    pub fn new(
        id: String,
        created: u64,
        model: String,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish_reason: FinishReason,
        usage: Usage,
    ) -> Self {
        Completion {
            id,
            object: "text_completion",
            created,
            model,
            choices: vec![CompletionChoice {
                text,
                index: 0,
                logprobs,
                finish_reason: Some(finish_reason),
            }],
            usage: Some(Some(usage)),
        }
    }
}

/// Makes the chunks of one text completion stream: [`text`](CompletionStream::text) chunks,
/// then [`finish`](CompletionStream::finish) (`text: ""` and the finish reason), then, when
/// `include_usage`, [`usage`](CompletionStream::usage); then [`crate::SSE_DONE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletionStream {
    /// `cmpl-…`
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The model name.
    pub model: String,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

impl CompletionStream {
    /// A stream with a fresh id and the current time.
    pub fn new(model: impl Into<String>, include_usage: bool) -> Self {
        CompletionStream {
            id: new_id("cmpl-"),
            created: unix_now(),
            model: model.into(),
            include_usage,
        }
    }

    fn chunk(&self, choices: Vec<CompletionChoice>, usage: Option<Usage>) -> CompletionChunk {
        Completion {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.model.clone(),
            choices,
            usage: self.include_usage.then_some(usage),
        }
    }

    /// A text chunk, with the logprobs of its tokens when asked for.
    pub fn text(
        &self,
        text: impl Into<String>,
        logprobs: Option<CompletionLogprobs>,
    ) -> CompletionChunk {
        self.chunk(
            vec![CompletionChoice {
                text: text.into(),
                index: 0,
                logprobs,
                finish_reason: None,
            }],
            None,
        )
    }

    /// The finishing chunk: `text: ""` and the finish reason.
    pub fn finish(&self, reason: FinishReason) -> CompletionChunk {
        self.chunk(
            vec![CompletionChoice {
                text: String::new(),
                index: 0,
                logprobs: None,
                finish_reason: Some(reason),
            }],
            None,
        )
    }

    /// The usage chunk (`choices: []`), or `None` when `include_usage` is off.
    pub fn usage(&self, usage: Usage) -> Option<CompletionChunk> {
        self.include_usage
            .then(|| self.chunk(Vec::new(), Some(usage)))
    }
}

// ---------------------------------------------------------------- models

/// One entry of `GET /v1/models`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelInfo {
    /// The served name.
    pub id: String,
    /// Always `"model"`.
    pub object: &'static str,
    /// Unix seconds (e.g. when the model was loaded).
    pub created: u64,
    /// Owner shown to clients.
    pub owned_by: String,
}

/// The body of `GET /v1/models`: `{"object": "list", "data": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelList {
    /// Always `"list"`.
    pub object: &'static str,
    /// The models.
    pub data: Vec<ModelInfo>,
}

impl ModelList {
    /// One entry per name, all with the same `created` and `owned_by`.
    pub fn new(names: &[String], created: u64, owned_by: &str) -> Self {
        ModelList {
            object: "list",
            data: names
                .iter()
                .map(|n| ModelInfo {
                    id: n.clone(),
                    object: "model",
                    created,
                    owned_by: owned_by.to_owned(),
                })
                .collect(),
        }
    }
}
