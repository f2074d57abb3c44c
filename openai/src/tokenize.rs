//! llama-server's `POST /tokenize` and `POST /detokenize` shapes.

use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::json::{get, opt_bool, parse_object, type_error};
use crate::request::{token_ids, Limits};

/// A validated `POST /tokenize` body: `{"content": str, "add_special": bool,
/// "with_pieces": bool, "parse_special": bool}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenizeRequest {
    /// Text to tokenize.
    pub content: String,
    /// Add BOS/EOS as the model's tokenizer does (llama-server's default: false).
    pub add_special: bool,
    /// Answer `[{id, piece}]` instead of bare ids (default: false).
    pub with_pieces: bool,
    /// Treat special-token text (`<|im_start|>`) as the special token (default: true).
    pub parse_special: bool,
}

/// Parses a `POST /tokenize` body.
///
/// # Errors
/// 413 / 400 as for the completion endpoints; `content` is required and must be a string.
pub fn parse_tokenize_request(body: &[u8], limits: &Limits) -> Result<TokenizeRequest, ApiError> {
    let map = parse_object(body, limits.max_body_bytes)?;
    let content = match get(&map, "content") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => return Err(type_error("content", "a string", v)),
        None => {
            return Err(ApiError::invalid_param(
                "content",
                "Missing required parameter: 'content'.",
            ))
        }
    };
    Ok(TokenizeRequest {
        content,
        add_special: opt_bool(&map, "add_special")?.unwrap_or(false),
        with_pieces: opt_bool(&map, "with_pieces")?.unwrap_or(false),
        parse_special: opt_bool(&map, "parse_special")?.unwrap_or(true),
    })
}

/// A token piece's text: a string when its bytes are valid UTF-8, else the bytes (as
/// llama-server does).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Piece {
    /// Valid UTF-8.
    Text(String),
    /// Raw bytes (part of a multi-byte character).
    Bytes(Vec<u8>),
}

/// `{"id": 123, "piece": "Hello"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TokenPiece {
    /// Token id.
    pub id: u32,
    /// Its text.
    pub piece: Piece,
}

impl TokenPiece {
    /// From a token id and its raw bytes.
    pub fn new(id: u32, bytes: &[u8]) -> Self {
        let piece = match std::str::from_utf8(bytes) {
            Ok(s) => Piece::Text(s.to_owned()),
            Err(_) => Piece::Bytes(bytes.to_vec()),
        };
        TokenPiece { id, piece }
    }
}

/// The `tokens` of a tokenize answer: bare ids, or pieces when `with_pieces`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum TokenList {
    /// `[1, 2, 3]`
    Ids(Vec<u32>),
    /// `[{"id": 1, "piece": "a"}]`
    Pieces(Vec<TokenPiece>),
}

/// The body of a `POST /tokenize` answer: `{"tokens": [...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TokenizeResponse {
    /// The tokens.
    pub tokens: TokenList,
}

/// A validated `POST /detokenize` body: `{"tokens": [ids]}` (missing: empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetokenizeRequest {
    /// Token ids, each below `vocab_size`.
    pub tokens: Vec<u32>,
}

/// Parses a `POST /detokenize` body.
///
/// # Errors
/// 400 naming the index and the id of the first id outside the vocabulary, or of a non-integer.
pub fn parse_detokenize_request(
    body: &[u8],
    limits: &Limits,
) -> Result<DetokenizeRequest, ApiError> {
    let map = parse_object(body, limits.max_body_bytes)?;
    let tokens = match get(&map, "tokens") {
        None => Vec::new(),
        Some(Value::Array(a)) => token_ids(a, "tokens", limits.vocab_size)?,
        Some(v) => return Err(type_error("tokens", "an array of token ids", v)),
    };
    Ok(DetokenizeRequest { tokens })
}

/// The body of a `POST /detokenize` answer: `{"content": "..."}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DetokenizeResponse {
    /// The decoded text.
    pub content: String,
}
