//! The generation endpoints and tokenize/detokenize.

use std::sync::Arc;

use actix_web::web::{self, Bytes};
use actix_web::HttpResponse;
use futures_util::StreamExt;
use strata_model::sampling::SamplingParams;
use strata_openai::{
    ApiError, ChatLogprobs, ChatStream, ChatTokenLogprob, Completion, CompletionLogprobs, CompletionStream, FinishReason, GenerationSpec,
    PromptInput, StopMatcher, Usage,
};
use strata_tokenizer::{ChatMessage, IncrementalDecoder, Tokenizer};
use tokio::sync::mpsc;

use super::{error_response, AppState, Ready};
use crate::engine::StopReason;
use crate::scheduler::{GenEvent, GenRequest, RequestControl, SubmitError, TokenLogprob};

/// Reads the body, refusing it as soon as it passes `max` bytes.
async fn read_body(mut payload: web::Payload, max: usize) -> Result<Bytes, ApiError> {
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
        if body.len() + chunk.len() > max {
            return Err(ApiError::payload_too_large(body.len() + chunk.len(), max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Chat,
    Completion,
}

pub async fn chat_completions(state: web::Data<AppState>, payload: web::Payload) -> HttpResponse {
    generate(state, payload, Endpoint::Chat).await.unwrap_or_else(|e| refused(&e))
}

pub async fn completions(state: web::Data<AppState>, payload: web::Payload) -> HttpResponse {
    generate(state, payload, Endpoint::Completion).await.unwrap_or_else(|e| refused(&e))
}

/// Answers a generation request's error, counting it as a rejection when it is one (a 4xx or
/// 503 before admission; failures after admission are counted by the scheduler).
fn refused(e: &ApiError) -> HttpResponse {
    crate::metrics::request_rejected(e.status);
    error_response(e)
}

/// Renders (for chat) and tokenizes the prompt on the blocking pool.
async fn tokenize_prompt(ready: &Ready, prompt: PromptInput) -> Result<Vec<u32>, ApiError> {
    let model = ready.model.clone();
    let job = move || -> Result<Vec<u32>, ApiError> {
        let tok: &Tokenizer = &model.tokenizer;
        match prompt {
            PromptInput::Tokens(ids) => Ok(ids),
            PromptInput::Text(text) => tok.encode(&text, true, true).map_err(|e| ApiError::invalid_param("prompt", e.to_string())),
            PromptInput::Chat(messages) => {
                let template = model
                    .chat_template
                    .as_ref()
                    .ok_or_else(|| ApiError::bad_request("this model has no chat template; use /v1/completions"))?;
                let msgs: Vec<ChatMessage> = messages.iter().map(|m| ChatMessage::new(m.role.as_str(), m.content.clone())).collect();
                let text = template.render(&msgs, true).map_err(|e| ApiError::invalid_param("messages", format!("the chat template failed: {e}")))?;
                tok.encode(&text, true, true).map_err(|e| ApiError::invalid_param("messages", e.to_string()))
            }
        }
    };
    web::block(job).await.map_err(|e| ApiError::internal(format!("tokenizer pool: {e}")))?
}

fn sampling_params(spec: &GenerationSpec) -> SamplingParams {
    let d = SamplingParams::default();
    let s = &spec.sampling;
    SamplingParams {
        temperature: s.temperature.unwrap_or(d.temperature),
        top_k: s.top_k.unwrap_or(d.top_k),
        top_p: s.top_p.unwrap_or(d.top_p),
        min_p: s.min_p.unwrap_or(d.min_p),
        repetition_penalty: s.repetition_penalty.unwrap_or(d.repetition_penalty),
        seed: s.seed.unwrap_or_else(rand_seed),
        ..d
    }
}

/// A seed for requests that give none: different per request.
fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

async fn generate(state: web::Data<AppState>, payload: web::Payload, endpoint: Endpoint) -> Result<HttpResponse, ApiError> {
    let ready = state.ready()?;
    let body = read_body(payload, ready.limits.max_body_bytes).await?;
    let spec = match endpoint {
        Endpoint::Chat => strata_openai::parse_chat_request(&body, &ready.limits)?,
        Endpoint::Completion => strata_openai::parse_completion_request(&body, &ready.limits)?,
    };
    let prompt = tokenize_prompt(ready, spec.prompt.clone()).await?;
    let max_tokens = spec.resolve_max_tokens(prompt.len(), &ready.limits)?;
    let id = strata_openai::new_id(if endpoint == Endpoint::Chat { "chatcmpl-" } else { "cmpl-" });
    let span = tracing::info_span!("request", request_id = %id);
    // Bounded by construction: at most max_tokens tokens plus a start, an end and an error.
    let (tx, rx) = mpsc::channel(max_tokens + 4);
    let control = Arc::new(RequestControl::default());
    let prompt_tokens = prompt.len();
    let req = GenRequest { id: id.clone(), prompt, max_tokens, sampling: sampling_params(&spec), logprobs: spec.logprobs, control: control.clone(), events: tx, span };
    ready.scheduler.submit(req).map_err(|e| match e {
        SubmitError::QueueFull(_) => ApiError::rate_limited(1),
        SubmitError::Stopped => ApiError::overloaded(5).with_code("shutting_down"),
    })?;
    crate::metrics::prompt_tokens(prompt_tokens);
    let out = Output::new(ready, &spec, control, endpoint, id);
    if spec.stream {
        Ok(stream_response(out, rx))
    } else {
        collect_response(out, rx).await
    }
}

/// Turns tokens into text for one request: incremental detokenization, stop strings, logprobs.
struct Output {
    tokenizer: Arc<Tokenizer>,
    decoder: IncrementalDecoder,
    stop: StopMatcher,
    control: Arc<RequestControl>,
    endpoint: Endpoint,
    id: String,
    model: String,
    include_usage: bool,
    want_logprobs: bool,
    text_offset: usize,
    completion_tokens: usize,
}

/// One slice of output.
struct Piece {
    text: String,
    chat_lp: Option<ChatLogprobs>,
    cmpl_lp: Option<CompletionLogprobs>,
}

impl Output {
    fn new(ready: &Ready, spec: &GenerationSpec, control: Arc<RequestControl>, endpoint: Endpoint, id: String) -> Output {
        Output {
            tokenizer: ready.model.tokenizer.clone(),
            decoder: IncrementalDecoder::new(ready.model.tokenizer.clone()),
            stop: StopMatcher::new(&spec.stop),
            control,
            endpoint,
            id,
            model: spec.model.clone(),
            include_usage: spec.include_usage,
            want_logprobs: spec.logprobs.is_some(),
            text_offset: 0,
            completion_tokens: 0,
        }
    }

    fn token(&mut self, id: u32, lp: Option<&TokenLogprob>) -> Piece {
        self.completion_tokens += 1;
        let raw = self.decoder.push(id).unwrap_or_default();
        let out = self.stop.push(&raw);
        if out.stopped {
            self.control.request_stop();
        }
        let mut piece = Piece { text: out.emit, chat_lp: None, cmpl_lp: None };
        if let (true, Some(lp)) = (self.want_logprobs, lp) {
            let bytes = self.tokenizer.token_bytes(id).unwrap_or_default();
            let top_bytes: Vec<(Vec<u8>, f32)> = lp.top.iter().map(|&(t, l)| (self.tokenizer.token_bytes(t).unwrap_or_default(), l)).collect();
            let top: Vec<(&[u8], f32)> = top_bytes.iter().map(|(b, l)| (b.as_slice(), *l)).collect();
            match self.endpoint {
                Endpoint::Chat => piece.chat_lp = Some(ChatLogprobs { content: vec![ChatTokenLogprob::new(&bytes, lp.logprob, &top)] }),
                Endpoint::Completion => {
                    let mut c = CompletionLogprobs::default();
                    c.push(&bytes, lp.logprob, &top, self.text_offset);
                    piece.cmpl_lp = Some(c);
                }
            }
        }
        self.text_offset += piece.text.len();
        piece
    }

    /// The text held back at the end (a partial character, a possible stop-string prefix).
    fn flush(&mut self) -> String {
        if self.stop.stopped() {
            return String::new();
        }
        let rest = self.decoder.finish();
        let mut out = self.stop.push(&rest).emit;
        out.push_str(&self.stop.finish());
        self.text_offset += out.len();
        out
    }

    fn finish_reason(&self, stop: StopReason) -> FinishReason {
        if self.stop.stopped() {
            return FinishReason::Stop;
        }
        match stop {
            StopReason::Length => FinishReason::Length,
            _ => FinishReason::Stop,
        }
    }
}

/// How often a non-streaming response writes a byte of whitespace while it waits.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(250);

/// A non-streaming answer. Errors before admission get their own status. After it, the 200 and
/// its headers go out at once and the body is JSON preceded by whitespace written every
/// [`HEARTBEAT`] (JSON allows leading whitespace): writing is the only way to notice a client
/// that went away, which drops this body, which cancels the sequence and frees its KV blocks.
/// A failure during generation is then answered in the body as an OpenAI error object.
async fn collect_response(out: Output, mut rx: mpsc::Receiver<GenEvent>) -> Result<HttpResponse, ApiError> {
    let reused = match rx.recv().await {
        Some(GenEvent::Started { reused_tokens }) => reused_tokens,
        Some(GenEvent::Error(msg)) => return Err(ApiError::internal(msg)),
        Some(_) | None => return Err(ApiError::internal("the scheduler ended the request without an answer")),
    };
    let body = Box::pin(collect_body(out, rx, reused));
    let start = tokio::time::Instant::now() + HEARTBEAT;
    let ticks = tokio::time::interval_at(start, HEARTBEAT);
    let stream = futures_util::stream::unfold((Some(body), ticks), |(body, mut ticks)| async move {
        let mut body = body?;
        tokio::select! {
            done = &mut body => {
                let json = done.unwrap_or_else(|e| e.to_json());
                Some((Ok::<_, actix_web::Error>(Bytes::from(json)), (None, ticks)))
            }
            _ = ticks.tick() => Some((Ok(Bytes::from_static(b" ")), (Some(body), ticks))),
        }
    });
    Ok(HttpResponse::Ok().content_type("application/json").streaming(stream))
}

/// Collects a generation into its JSON body.
async fn collect_body(mut out: Output, mut rx: mpsc::Receiver<GenEvent>, reused: usize) -> Result<String, ApiError> {
    let mut text = String::new();
    let mut chat_lp = ChatLogprobs { content: Vec::new() };
    let mut cmpl_lp = CompletionLogprobs::default();
    while let Some(ev) = rx.recv().await {
        match ev {
            GenEvent::Started { .. } => {}
            GenEvent::Token { id, logprob } => {
                let p = out.token(id, logprob.as_ref());
                text.push_str(&p.text);
                if let Some(c) = p.chat_lp {
                    chat_lp.content.extend(c.content);
                }
                if let Some(c) = p.cmpl_lp {
                    cmpl_lp.tokens.extend(c.tokens);
                    cmpl_lp.token_logprobs.extend(c.token_logprobs);
                    cmpl_lp.top_logprobs.extend(c.top_logprobs);
                    cmpl_lp.text_offset.extend(c.text_offset);
                }
            }
            GenEvent::Done(summary) => {
                text.push_str(&out.flush());
                let reason = out.finish_reason(summary.stop);
                let usage = Usage::new(summary.prompt_tokens, summary.completion_tokens, summary.reused_tokens.max(reused));
                let created = strata_openai::unix_now();
                let body = match out.endpoint {
                    Endpoint::Chat => serde_json::to_string(&strata_openai::ChatCompletion::new(out.id.clone(), created, out.model.clone(), text, out.want_logprobs.then_some(chat_lp), reason, usage)),
                    Endpoint::Completion => serde_json::to_string(&Completion::new(out.id.clone(), created, out.model.clone(), text, out.want_logprobs.then_some(cmpl_lp), reason, usage)),
                };
                return body.map_err(|e| ApiError::internal(e.to_string()));
            }
            GenEvent::Error(msg) => {
                return Err(ApiError::internal(msg));
            }
        }
    }
    Err(ApiError::internal("the scheduler ended the request without an answer"))
}

/// Server-sent events in OpenAI's chunk format, ending with `data: [DONE]`. When the client goes
/// away, actix drops this stream, which drops the receiver: the scheduler sees it at the next step
/// and frees the sequence's KV blocks.
fn stream_response(out: Output, rx: mpsc::Receiver<GenEvent>) -> HttpResponse {
    struct St {
        out: Output,
        rx: mpsc::Receiver<GenEvent>,
        chat: ChatStream,
        cmpl: CompletionStream,
        done: bool,
        sent_role: bool,
        reused: usize,
    }
    let mut chat = ChatStream::new(out.model.clone(), out.include_usage);
    chat.id = out.id.clone();
    let mut cmpl = CompletionStream::new(out.model.clone(), out.include_usage);
    cmpl.id = out.id.clone();
    let st = St { out, rx, chat, cmpl, done: false, sent_role: false, reused: 0 };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let mut frame = String::new();
        if st.out.endpoint == Endpoint::Chat && !st.sent_role {
            st.sent_role = true;
            frame.push_str(&strata_openai::sse_event(&st.chat.role()));
        }
        loop {
            let Some(ev) = st.rx.recv().await else {
                st.done = true;
                let e = ApiError::internal("the scheduler ended the request without an answer");
                frame.push_str(&strata_openai::sse_error(&e));
                frame.push_str(strata_openai::SSE_DONE);
                break;
            };
            match ev {
                GenEvent::Started { reused_tokens } => {
                    st.reused = reused_tokens;
                    if !frame.is_empty() {
                        break;
                    }
                }
                GenEvent::Token { id, logprob } => {
                    let p = st.out.token(id, logprob.as_ref());
                    if !p.text.is_empty() || p.chat_lp.is_some() || p.cmpl_lp.is_some() {
                        let chunk = match st.out.endpoint {
                            Endpoint::Chat => strata_openai::sse_event(&st.chat.content(p.text, p.chat_lp)),
                            Endpoint::Completion => strata_openai::sse_event(&st.cmpl.text(p.text, p.cmpl_lp)),
                        };
                        frame.push_str(&chunk);
                        break;
                    }
                }
                GenEvent::Done(summary) => {
                    let rest = st.out.flush();
                    if !rest.is_empty() {
                        frame.push_str(&match st.out.endpoint {
                            Endpoint::Chat => strata_openai::sse_event(&st.chat.content(rest, None)),
                            Endpoint::Completion => strata_openai::sse_event(&st.cmpl.text(rest, None)),
                        });
                    }
                    let reason = st.out.finish_reason(summary.stop);
                    let usage = Usage::new(summary.prompt_tokens, summary.completion_tokens, summary.reused_tokens.max(st.reused));
                    match st.out.endpoint {
                        Endpoint::Chat => {
                            frame.push_str(&strata_openai::sse_event(&st.chat.finish(reason)));
                            if let Some(u) = st.chat.usage(usage) {
                                frame.push_str(&strata_openai::sse_event(&u));
                            }
                        }
                        Endpoint::Completion => {
                            frame.push_str(&strata_openai::sse_event(&st.cmpl.finish(reason)));
                            if let Some(u) = st.cmpl.usage(usage) {
                                frame.push_str(&strata_openai::sse_event(&u));
                            }
                        }
                    }
                    frame.push_str(strata_openai::SSE_DONE);
                    st.done = true;
                    break;
                }
                GenEvent::Error(msg) => {
                    frame.push_str(&strata_openai::sse_error(&ApiError::internal(msg)));
                    frame.push_str(strata_openai::SSE_DONE);
                    st.done = true;
                    break;
                }
            }
        }
        Some((Ok::<_, actix_web::Error>(Bytes::from(frame)), st))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream)
}

pub async fn tokenize(state: web::Data<AppState>, payload: web::Payload) -> HttpResponse {
    let run = async {
        let ready = state.ready()?;
        let body = read_body(payload, ready.limits.max_body_bytes).await?;
        let req = strata_openai::parse_tokenize_request(&body, &ready.limits)?;
        let model = ready.model.clone();
        let ids = web::block(move || model.tokenizer.encode(&req.content, req.add_special, req.parse_special).map(|ids| (ids, req.with_pieces)))
            .await
            .map_err(|e| ApiError::internal(format!("tokenizer pool: {e}")))?
            .map_err(|e| ApiError::invalid_param("content", e.to_string()))?;
        let (ids, with_pieces) = ids;
        let tokens = if with_pieces {
            strata_openai::TokenList::Pieces(ids.iter().map(|&id| strata_openai::TokenPiece::new(id, &ready.model.tokenizer.token_bytes(id).unwrap_or_default())).collect())
        } else {
            strata_openai::TokenList::Ids(ids)
        };
        Ok::<_, ApiError>(HttpResponse::Ok().json(strata_openai::TokenizeResponse { tokens }))
    };
    run.await.unwrap_or_else(|e| error_response(&e))
}

pub async fn detokenize(state: web::Data<AppState>, payload: web::Payload) -> HttpResponse {
    let run = async {
        let ready = state.ready()?;
        let body = read_body(payload, ready.limits.max_body_bytes).await?;
        let req = strata_openai::parse_detokenize_request(&body, &ready.limits)?;
        // Special tokens are rendered, as llama-server does, so /tokenize and /detokenize round-trip.
        let bytes = ready.model.tokenizer.decode_bytes(&req.tokens, true).map_err(|e| ApiError::invalid_param("tokens", e.to_string()))?;
        let content = String::from_utf8_lossy(&bytes).into_owned();
        Ok::<_, ApiError>(HttpResponse::Ok().json(strata_openai::DetokenizeResponse { content }))
    };
    run.await.unwrap_or_else(|e| error_response(&e))
}
