//! Chat and text completion requests: parsing, validation, and the normalized
//! [`GenerationSpec`] the engine consumes.
//!
//! Every rule refuses with a 400 whose message (and `param`) names the parameter. Unknown fields
//! are ignored: OpenAI clients send many (`store`, `metadata`, `service_tier`, ...).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::json::{get, int_value, opt_bool, opt_f64, opt_int, opt_str, parse_object, type_error};

/// Most stop strings per request (OpenAI's limit).
pub const MAX_STOP_STRINGS: usize = 4;
/// Longest stop string, in bytes.
pub const MAX_STOP_BYTES: usize = 256;
/// Most `top_logprobs` (chat) or `logprobs` (completions) alternatives per token.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// What the server accepts; the caller builds it from the config and the loaded model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body, in bytes (larger: 413).
    pub max_body_bytes: usize,
    /// The model's context length in tokens (prompt + completion); `max_tokens` above it: 400.
    pub max_context: usize,
    /// Vocabulary size: token ids must be below it. 0 means "unknown, don't check".
    pub vocab_size: usize,
    /// Completion length when the request gives none (further capped by the room left in the
    /// context; see [`GenerationSpec::resolve_max_tokens`]).
    pub default_max_tokens: usize,
    /// Names the `model` field may take. A missing `model` means the first. Empty: any name is
    /// accepted (and echoed back).
    pub served_model_names: Vec<String>,
}

/// A chat message's author.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `system`
    System,
    /// `developer` (OpenAI's newer name for system instructions; templates usually treat it as
    /// `system`, which is the caller's choice)
    Developer,
    /// `user`
    User,
    /// `assistant`
    Assistant,
    /// `tool` (a tool result)
    Tool,
}

impl Role {
    /// The wire name (`"user"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" => Role::System,
            "developer" => Role::Developer,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// One chat message, normalized: the content is plain text (text parts joined with `"\n"`).
/// Serializes as `{"role": "user", "content": "..."}`, ready for a chat template.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// Author.
    pub role: Role,
    /// Text content; `""` for an assistant message whose content was `null`.
    pub content: String,
}

/// The prompt of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptInput {
    /// A completion prompt as text (to be tokenized).
    Text(String),
    /// A completion prompt as token ids, each already checked to be below `vocab_size`.
    Tokens(Vec<u32>),
    /// A chat conversation (to be rendered by the chat template, then tokenized). Never empty.
    Chat(Vec<ChatMessage>),
}

/// Sampling parameters the client set. `None`: not given, use the server's default.
///
/// Ranges enforced: temperature 0..=2, top_p 0..=1, min_p 0..=1, top_k 0..=vocab_size
/// (0 = off), repetition_penalty 0.01..=100.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SamplingSpec {
    /// 0 means greedy.
    pub temperature: Option<f32>,
    /// 0 means no top-k cut.
    pub top_k: Option<usize>,
    /// 1 means no nucleus cut.
    pub top_p: Option<f32>,
    /// 0 means no min-p cut.
    pub min_p: Option<f32>,
    /// 1 means no penalty (llama.cpp's multiplicative repetition penalty).
    pub repetition_penalty: Option<f32>,
    /// RNG seed; negative JSON seeds are taken as their two's-complement `u64`.
    pub seed: Option<u64>,
}

/// A validated request, normalized for the engine (both endpoints produce it).
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationSpec {
    /// The model name to echo back in responses (the requested one, or the default).
    pub model: String,
    /// The prompt.
    pub prompt: PromptInput,
    /// The completion limit the client asked for (`max_completion_tokens` or `max_tokens`),
    /// 1..=`max_context`; `None` when not given. Use [`GenerationSpec::resolve_max_tokens`]
    /// once the prompt is tokenized.
    pub max_tokens: Option<usize>,
    /// Sampling parameters.
    pub sampling: SamplingSpec,
    /// Stop strings: 0..=4, each 1..=256 bytes. Feed them to [`crate::StopMatcher`].
    pub stop: Vec<String>,
    /// Whether to answer with server-sent events.
    pub stream: bool,
    /// Streaming only: send `usage: null` on every chunk and a last chunk with
    /// `choices: []` and the usage (`stream_options.include_usage`). Always false when not
    /// streaming.
    pub include_usage: bool,
    /// `Some(n)`: return log-probabilities of the chosen tokens with the `n` (0..=20) most
    /// likely alternatives at each position. `None`: no logprobs.
    pub logprobs: Option<usize>,
    /// The `user` field, for logs only.
    pub user: Option<String>,
}

impl GenerationSpec {
    /// The error `param` naming this request's prompt: `"messages"` or `"prompt"`.
    pub fn prompt_param(&self) -> &'static str {
        match self.prompt {
            PromptInput::Chat(_) => "messages",
            _ => "prompt",
        }
    }

    /// The completion budget once the prompt is tokenized to `prompt_tokens` tokens.
    ///
    /// With `max_tokens` given: prompt + max_tokens must fit in `max_context`. Without:
    /// `min(default_max_tokens, room left)`, at least 1.
    ///
    /// # Errors
    /// 400 for an empty prompt; 400 `context_length_exceeded` (naming both lengths) when the
    /// prompt leaves no room, or prompt + `max_tokens` exceeds the context.
    pub fn resolve_max_tokens(
        &self,
        prompt_tokens: usize,
        limits: &Limits,
    ) -> Result<usize, ApiError> {
        let param = self.prompt_param();
        let ctx = limits.max_context;
        if prompt_tokens == 0 {
            return Err(ApiError::invalid_param(
                param,
                format!("The '{param}' resulted in 0 tokens; it must not be empty."),
            ));
        }
        if prompt_tokens >= ctx {
            return Err(ApiError::context_exceeded_prompt(param, prompt_tokens, ctx));
        }
        let room = ctx - prompt_tokens;
        match self.max_tokens {
            Some(m) if m > room => Err(ApiError::context_length_exceeded_with_completion(
                param,
                prompt_tokens,
                m,
                ctx,
            )),
            Some(m) => Ok(m),
            None => Ok(limits.default_max_tokens.min(room).max(1)),
        }
    }
}

/// Parses and validates a `POST /v1/chat/completions` body.
///
/// # Errors
/// 413 for a body over `limits.max_body_bytes`; otherwise 400 (`invalid_request_error`,
/// naming the parameter) for anything malformed, out of range or unsupported, and 400
/// `model_not_found` for an unknown model.
pub fn parse_chat_request(body: &[u8], limits: &Limits) -> Result<GenerationSpec, ApiError> {
    let map = parse_object(body, limits.max_body_bytes)?;
    let messages = parse_messages(&map)?;
    refuse_chat_only_features(&map)?;
    let logprobs = opt_bool(&map, "logprobs")?.unwrap_or(false);
    let top = opt_int(&map, "top_logprobs", 0, MAX_TOP_LOGPROBS as i128)?;
    let logprobs = match (logprobs, top) {
        (true, top) => Some(top.unwrap_or(0) as usize),
        (false, Some(t)) if t > 0 => return Err(ApiError::invalid_param(
            "top_logprobs",
            "Invalid 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is used.",
        )),
        (false, _) => None,
    };
    common(&map, limits, PromptInput::Chat(messages), logprobs)
}

/// Parses and validates a `POST /v1/completions` body.
///
/// `prompt` may be a string, an array of one string, an array of token ids, or an array of one
/// array of token ids; more than one prompt is refused. `logprobs` is an integer 0..=20.
///
/// # Errors
/// As [`parse_chat_request`]; token ids outside the vocabulary are refused naming the id.
pub fn parse_completion_request(body: &[u8], limits: &Limits) -> Result<GenerationSpec, ApiError> {
    let map = parse_object(body, limits.max_body_bytes)?;
    let prompt = parse_prompt(&map, limits.vocab_size)?;
    if opt_bool(&map, "echo")? == Some(true) {
        return Err(ApiError::invalid_param(
            "echo",
            "'echo' is not supported by this server; leave it unset or false.",
        ));
    }
    if let Some(s) = opt_str(&map, "suffix")? {
        if !s.is_empty() {
            return Err(ApiError::invalid_param(
                "suffix",
                "'suffix' (insertion) is not supported by this server.",
            ));
        }
    }
    if let Some(b) = opt_int(&map, "best_of", 1, i128::MAX)? {
        if b != 1 {
            return Err(ApiError::invalid_param(
                "best_of",
                "Invalid 'best_of': only 1 is supported by this server.",
            ));
        }
    }
    let logprobs = opt_int(&map, "logprobs", 0, MAX_TOP_LOGPROBS as i128)?.map(|n| n as usize);
    common(&map, limits, prompt, logprobs)
}

/// Fields both endpoints share.
fn common(
    map: &Map<String, Value>,
    limits: &Limits,
    prompt: PromptInput,
    logprobs: Option<usize>,
) -> Result<GenerationSpec, ApiError> {
    let model = parse_model(map, limits)?;

    if let Some(n) = opt_int(map, "n", 1, i128::MAX)? {
        if n != 1 {
            let shown = get(map, "n").map(Value::to_string).unwrap_or_default();
            return Err(ApiError::invalid_param(
                "n",
                format!("Invalid 'n': this server generates one choice per request; 'n' must be 1, but got {shown}."),
            ));
        }
    }

    let ctx = limits.max_context as i128;
    let max_tokens = opt_int(map, "max_tokens", 1, ctx)?;
    let max_completion = opt_int(map, "max_completion_tokens", 1, ctx)?;
    let max_tokens =
        match (max_completion, max_tokens) {
            (Some(a), Some(b)) if a != b => return Err(ApiError::invalid_param(
                "max_completion_tokens",
                format!(
                    "'max_completion_tokens' ({a}) and 'max_tokens' ({b}) disagree; set only one."
                ),
            )),
            (Some(a), _) | (None, Some(a)) => Some(a as usize),
            (None, None) => None,
        };

    let temperature = opt_f64(map, "temperature", 0.0, 2.0)?;
    let top_p = opt_f64(map, "top_p", 0.0, 1.0)?;
    let min_p = opt_f64(map, "min_p", 0.0, 1.0)?;
    let top_k_max = if limits.vocab_size > 0 {
        limits.vocab_size as i128
    } else {
        i128::from(u32::MAX)
    };
    let top_k = match get(map, "top_k") {
        None => None,
        Some(v) => {
            if matches!(v, Value::Number(n) if n.as_f64().is_some_and(|x| x < 0.0)) {
                return Err(ApiError::invalid_param(
                    "top_k",
                    "Invalid 'top_k': must not be negative; use 0 to disable the top-k cut.",
                ));
            }
            Some(int_value(v, "top_k", 0, top_k_max)? as usize)
        }
    };
    let repetition_penalty = opt_f64(map, "repetition_penalty", 0.01, 100.0)?;
    for p in ["frequency_penalty", "presence_penalty"] {
        if let Some(x) = opt_f64(map, p, -2.0, 2.0)? {
            if x != 0.0 {
                return Err(ApiError::invalid_param(
                    p,
                    format!(
                        "'{p}' is not supported by this server (only 0 is accepted); use \
                         'repetition_penalty' instead."
                    ),
                ));
            }
        }
    }
    let seed = opt_int(map, "seed", i128::from(i64::MIN), i128::from(u64::MAX))?.map(|s| s as u64);

    let stop = parse_stop(map)?;
    let stream = opt_bool(map, "stream")?.unwrap_or(false);
    let include_usage = match get(map, "stream_options") {
        None => false,
        Some(Value::Object(o)) => match get(o, "include_usage") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => return Err(type_error("stream_options.include_usage", "a boolean", v)),
        },
        Some(v) => return Err(type_error("stream_options", "an object", v)),
    } && stream;

    if let Some(bias) = get(map, "logit_bias") {
        match bias {
            Value::Object(o) if o.is_empty() => {}
            Value::Object(_) => {
                return Err(ApiError::invalid_param(
                    "logit_bias",
                    "'logit_bias' is not supported by this server.",
                ))
            }
            v => return Err(type_error("logit_bias", "an object", v)),
        }
    }
    let user = opt_str(map, "user")?.map(str::to_owned);

    Ok(GenerationSpec {
        model,
        prompt,
        max_tokens,
        sampling: SamplingSpec {
            temperature: temperature.map(|x| x as f32),
            top_k,
            top_p: top_p.map(|x| x as f32),
            min_p: min_p.map(|x| x as f32),
            repetition_penalty: repetition_penalty.map(|x| x as f32),
            seed,
        },
        stop,
        stream,
        include_usage,
        logprobs,
        user,
    })
}

fn parse_model(map: &Map<String, Value>, limits: &Limits) -> Result<String, ApiError> {
    let names = &limits.served_model_names;
    match opt_str(map, "model")? {
        None => Ok(names.first().cloned().unwrap_or_default()),
        Some(m) if names.is_empty() || names.iter().any(|n| n == m) => Ok(m.to_owned()),
        Some(m) => {
            // Don't echo megabytes of a hostile name back.
            let shown: String = m.chars().take(200).collect();
            Err(ApiError::model_not_found(&shown))
        }
    }
}

fn parse_stop(map: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let items: Vec<(String, &Value)> = match get(map, "stop") {
        None => return Ok(Vec::new()),
        Some(v @ Value::String(_)) => vec![("stop".to_owned(), v)],
        Some(Value::Array(a)) => {
            if a.len() > MAX_STOP_STRINGS {
                return Err(ApiError::invalid_param(
                    "stop",
                    format!("Invalid 'stop': at most {MAX_STOP_STRINGS} stop strings are allowed, but got {}.", a.len()),
                ));
            }
            a.iter()
                .enumerate()
                .map(|(i, v)| (format!("stop[{i}]"), v))
                .collect()
        }
        Some(v) => return Err(type_error("stop", "a string or an array of strings", v)),
    };
    let mut out = Vec::with_capacity(items.len());
    for (param, v) in items {
        let Value::String(s) = v else {
            return Err(type_error(&param, "a string", v));
        };
        if s.is_empty() {
            return Err(ApiError::invalid_param(
                &param,
                format!("Invalid '{param}': stop strings must not be empty."),
            ));
        }
        if s.len() > MAX_STOP_BYTES {
            return Err(ApiError::invalid_param(
                &param,
                format!("Invalid '{param}': stop strings are at most {MAX_STOP_BYTES} bytes, but got {}.", s.len()),
            ));
        }
        out.push(s.clone());
    }
    Ok(out)
}

fn parse_messages(map: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let arr = match get(map, "messages") {
        None => {
            return Err(ApiError::invalid_param(
                "messages",
                "Missing required parameter: 'messages'.",
            ))
        }
        Some(Value::Array(a)) => a,
        Some(v) => return Err(type_error("messages", "an array", v)),
    };
    if arr.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "Invalid 'messages': empty array. Expected at least one message.",
        ));
    }
    let mut out = Vec::with_capacity(arr.len());
    for (i, m) in arr.iter().enumerate() {
        let p = format!("messages[{i}]");
        let Value::Object(o) = m else {
            return Err(type_error(&p, "an object", m));
        };
        let role = match get(o, "role") {
            None => {
                return Err(ApiError::invalid_param(
                    format!("{p}.role"),
                    format!("Missing required parameter: '{p}.role'."),
                ))
            }
            Some(Value::String(s)) => Role::parse(s).ok_or_else(|| {
                let shown: String = s.chars().take(64).collect();
                ApiError::invalid_param(
                    format!("{p}.role"),
                    format!(
                        "Invalid value for '{p}.role': '{shown}'. Supported values are: 'system', \
                         'developer', 'user', 'assistant' and 'tool'."
                    ),
                )
            })?,
            Some(v) => return Err(type_error(&format!("{p}.role"), "a string", v)),
        };
        let cp = format!("{p}.content");
        let content = match get(o, "content") {
            None if role == Role::Assistant => String::new(),
            None => {
                return Err(ApiError::invalid_param(
                    &cp,
                    format!("Missing required parameter: '{cp}'."),
                ))
            }
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => text_parts(parts, &cp)?,
            Some(v) => return Err(type_error(&cp, "a string or an array of content parts", v)),
        };
        out.push(ChatMessage { role, content });
    }
    Ok(out)
}

/// Joins `[{type: "text", text}]` parts with `"\n"` (as vLLM does); other part types are refused.
fn text_parts(parts: &[Value], param: &str) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let pp = format!("{param}[{j}]");
        let Value::Object(o) = part else {
            return Err(type_error(&pp, "an object", part));
        };
        match get(o, "type") {
            Some(Value::String(t)) if t == "text" => {}
            Some(Value::String(t)) => {
                let shown: String = t.chars().take(64).collect();
                return Err(ApiError::invalid_param(
                    format!("{pp}.type"),
                    format!("Invalid value for '{pp}.type': '{shown}'. Only 'text' content parts are supported."),
                ));
            }
            Some(v) => return Err(type_error(&format!("{pp}.type"), "a string", v)),
            None => {
                return Err(ApiError::invalid_param(
                    format!("{pp}.type"),
                    format!("Missing required parameter: '{pp}.type'."),
                ))
            }
        }
        match get(o, "text") {
            Some(Value::String(s)) => texts.push(s.as_str()),
            Some(v) => return Err(type_error(&format!("{pp}.text"), "a string", v)),
            None => {
                return Err(ApiError::invalid_param(
                    format!("{pp}.text"),
                    format!("Missing required parameter: '{pp}.text'."),
                ))
            }
        }
    }
    Ok(texts.join("\n"))
}

/// Refuses what strata-rt does not do for chat: tools, function calling, non-text output formats.
fn refuse_chat_only_features(map: &Map<String, Value>) -> Result<(), ApiError> {
    for key in ["tools", "functions"] {
        match get(map, key) {
            None => {}
            Some(Value::Array(a)) if a.is_empty() => {}
            Some(Value::Array(_)) => {
                return Err(ApiError::invalid_param(
                    key,
                    format!("'{key}' (tool / function calling) is not supported by this server."),
                ))
            }
            Some(v) => return Err(type_error(key, "an array", v)),
        }
    }
    match get(map, "tool_choice") {
        None => {}
        Some(Value::String(s)) if s == "none" || s == "auto" => {}
        Some(_) => {
            return Err(ApiError::invalid_param(
                "tool_choice",
                "'tool_choice' other than \"none\" or \"auto\" is not supported: this server does not call tools.",
            ))
        }
    }
    match get(map, "response_format") {
        None => {}
        Some(Value::Object(o)) => match get(o, "type") {
            Some(Value::String(t)) if t == "text" => {}
            Some(Value::String(t)) => {
                let shown: String = t.chars().take(64).collect();
                return Err(ApiError::invalid_param(
                    "response_format.type",
                    format!("Invalid value for 'response_format.type': '{shown}' is not supported by this server; only 'text' is."),
                ));
            }
            Some(v) => return Err(type_error("response_format.type", "a string", v)),
            None => {
                return Err(ApiError::invalid_param(
                    "response_format.type",
                    "Missing required parameter: 'response_format.type'.",
                ))
            }
        },
        Some(v) => return Err(type_error("response_format", "an object", v)),
    }
    Ok(())
}

fn parse_prompt(map: &Map<String, Value>, vocab: usize) -> Result<PromptInput, ApiError> {
    let v = match get(map, "prompt") {
        None => {
            return Err(ApiError::invalid_param(
                "prompt",
                "Missing required parameter: 'prompt'.",
            ))
        }
        Some(v) => v,
    };
    let arr = match v {
        Value::String(s) => return Ok(PromptInput::Text(s.clone())),
        Value::Array(a) => a,
        v => {
            return Err(type_error(
                "prompt",
                "a string, an array of strings or an array of token ids",
                v,
            ))
        }
    };
    if arr.is_empty() {
        return Err(ApiError::invalid_param(
            "prompt",
            "Invalid 'prompt': empty array.",
        ));
    }
    match &arr[0] {
        Value::Number(_) => Ok(PromptInput::Tokens(token_ids(arr, "prompt", vocab)?)),
        Value::String(_) | Value::Array(_) if arr.len() > 1 => Err(ApiError::invalid_param(
            "prompt",
            format!(
                "Invalid 'prompt': only one prompt per request is supported, but got {} prompts.",
                arr.len()
            ),
        )),
        Value::String(s) => Ok(PromptInput::Text(s.clone())),
        Value::Array(ids) => {
            if ids.is_empty() {
                return Err(ApiError::invalid_param(
                    "prompt[0]",
                    "Invalid 'prompt[0]': empty array of token ids.",
                ));
            }
            Ok(PromptInput::Tokens(token_ids(ids, "prompt[0]", vocab)?))
        }
        other => Err(type_error(
            "prompt[0]",
            "a string, a token id or an array of token ids",
            other,
        )),
    }
}

/// Token ids, each an integer below `vocab` (any u32 when `vocab` is 0).
pub(crate) fn token_ids(arr: &[Value], param: &str, vocab: usize) -> Result<Vec<u32>, ApiError> {
    let mut out = Vec::with_capacity(arr.len());
    for (i, v) in arr.iter().enumerate() {
        let p = format!("{param}[{i}]");
        let Value::Number(n) = v else {
            return Err(type_error(&p, "an integer token id", v));
        };
        let id = match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => i128::from(u),
            (None, Some(i)) => i128::from(i),
            _ => return Err(type_error(&p, "an integer token id", v)),
        };
        let in_vocab = id >= 0 && id <= i128::from(u32::MAX) && (vocab == 0 || id < vocab as i128);
        if !in_vocab {
            let range = if vocab == 0 {
                u32::MAX as usize
            } else {
                vocab - 1
            };
            return Err(ApiError::invalid_param(
                &p,
                format!("Invalid token id {id} in '{p}': outside the vocabulary (valid ids are 0..={range})."),
            ));
        }
        out.push(id as u32);
    }
    Ok(out)
}
