//! strata-rt's OpenAI-compatible HTTP API, without the HTTP: the wire format and its rules.
//!
//! - [`parse_chat_request`] / [`parse_completion_request`] turn a raw body into a validated
//!   [`GenerationSpec`], or an [`ApiError`] (OpenAI's `{"error": {...}}`, 400 naming the
//!   parameter). Bodies are bounded in size, must be UTF-8, may nest at most
//!   [`MAX_JSON_DEPTH`] levels (checked by a flat scan before any recursive parser runs) and
//!   may not contain `NaN`/`Infinity`.
//! - [`ChatCompletion`], [`Completion`], [`ChatStream`], [`CompletionStream`], [`ModelList`]
//!   build the responses; [`sse_event`] and [`SSE_DONE`] frame the stream.
//! - [`StopMatcher`] finds stop strings across token boundaries.
//! - [`parse_tokenize_request`] / [`parse_detokenize_request`] follow llama-server's shapes.
//!
//! Decisions, where OpenAI leaves room:
//! - Unknown fields are ignored; `null` means "unset" for every field.
//! - `n` and `best_of` must be 1; `echo: true`, non-empty `suffix`, `tools`, `functions`,
//!   `logit_bias`, `tool_choice` other than `"none"`/`"auto"` and non-`text`
//!   `response_format` are refused with a 400 naming the parameter.
//! - `frequency_penalty` and `presence_penalty` are range-checked (-2..=2) and accepted only
//!   as 0: the sampler has no additive penalties, and mapping them onto the multiplicative
//!   `repetition_penalty` would change their meaning silently. Use `repetition_penalty`.
//! - Unknown model names are 400 with code `model_not_found` (OpenAI uses 404).
//! - `max_tokens` and `max_completion_tokens` are synonyms; both given and different: 400.
//! - `stream_options` without `stream: true` is ignored rather than refused.
//! - `top_k` is an extension: 0 disables it, negative values are refused, at most the
//!   vocabulary size.
//! - Chat content parts are joined with `"\n"`.

#![warn(missing_docs)]

mod error;
mod json;
mod request;
mod response;
mod sse;
mod stop;
mod tokenize;

pub use error::{ApiError, INVALID_REQUEST, SERVER_ERROR};
pub use json::MAX_JSON_DEPTH;
pub use request::{
    parse_chat_request, parse_completion_request, ChatMessage, GenerationSpec, Limits, PromptInput,
    Role, SamplingSpec, MAX_STOP_BYTES, MAX_STOP_STRINGS, MAX_TOP_LOGPROBS,
};
pub use response::{
    new_id, unix_now, AssistantMessage, ChatChoice, ChatChunkChoice, ChatCompletion,
    ChatCompletionChunk, ChatDelta, ChatLogprobs, ChatStream, ChatTokenLogprob, Completion,
    CompletionChoice, CompletionChunk, CompletionLogprobs, CompletionStream, FinishReason,
    ModelInfo, ModelList, PromptTokensDetails, TopLogprob, TopMap, Usage,
};
pub use sse::{sse_error, sse_event, SSE_DONE};
pub use stop::{StopMatcher, StopOutcome};
pub use tokenize::{
    parse_detokenize_request, parse_tokenize_request, DetokenizeRequest, DetokenizeResponse, Piece,
    TokenList, TokenPiece, TokenizeRequest, TokenizeResponse,
};
