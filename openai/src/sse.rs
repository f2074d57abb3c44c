//! Server-sent events framing, as OpenAI streams it.

use serde::Serialize;

use crate::error::ApiError;

/// The last event of every stream.
pub const SSE_DONE: &str = "data: [DONE]\n\n";

/// One event: `data: {json}\n\n`. serde_json escapes newlines inside strings, so the payload is
/// always one line. Should serialization fail (it cannot for this crate's types), the event
/// carries an OpenAI error body instead.
pub fn sse_event<T: Serialize + ?Sized>(value: &T) -> String {
    match serde_json::to_string(value) {
        Ok(json) => format!("data: {json}\n\n"),
        Err(e) => sse_error(&ApiError::internal(format!(
            "could not serialize a stream event: {e}"
        ))),
    }
}

/// An error in the middle of a stream, as OpenAI sends it: `data: {"error": {...}}\n\n`.
/// Follow it with [`SSE_DONE`] or close the stream.
pub fn sse_error(err: &ApiError) -> String {
    format!("data: {}\n\n", err.to_json())
}
