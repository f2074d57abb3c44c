//! Tokenizer and chat template of a GGUF model, built from the file's own metadata, producing the
//! token ids llama.cpp produces for the same file and text.
//!
//! - [`VocabSpec`] is the tokenizer part of the GGUF metadata as plain data;
//!   [`vocab_spec_from_gguf`] fills it from `strata_io::Metadata`.
//! - [`Tokenizer`] encodes and decodes: GPT-2-style byte-level BPE (`tokenizer.ggml.model =
//!   "gpt2"`, pre-tokenizer picked by `tokenizer.ggml.pre`) and SentencePiece-style vocabularies
//!   (`"llama"`).
//! - [`IncrementalDecoder`] turns a stream of ids into complete UTF-8 text.
//! - [`ChatTemplate`] renders `tokenizer.chat_template` with `minijinja`.
//!
//! How llama.cpp is matched, piece by piece:
//! - special (control, user-defined, unknown) tokens are split out of the text first, longest
//!   first, exactly as llama.cpp's `tokenizer_st_partition`; user-defined tokens are split out even
//!   when `parse_special` is false (llama.cpp does so too);
//! - BPE pre-tokenization is a port of llama.cpp's (its hand-written matchers, its regexes on
//!   "collapsed" text, its Unicode tables), see [`pretokenize`](crate::pretokenize);
//! - the BPE merges run in the `tokenizers` crate's BPE model;
//! - SPM is a port of llama.cpp's algorithm (the `tokenizers` crate has no equivalent);
//! - BOS/EOS defaults, EOG detection by token text, forced control attributes for end-of-turn
//!   and fill-in-the-middle look-alikes follow `llama_vocab::impl::load`.
//!
//! Not supported (an error at build time): other vocabulary types (`bert`, `t5`, `rwkv`, ...),
//! pre-tokenizers not in [`SUPPORTED_PRE`]. Not reproduced: the per-model-name strip attributes
//! llama.cpp sets for Phi-3 and Jina models (the name is not in [`VocabSpec`]).

mod bpe;
mod chat;
mod decode;
mod gguf;
mod pretokenize;
mod spm;
mod unicode;
mod unicode_data;

pub use chat::{ChatMessage, ChatTemplate, TemplateLimits};
pub use decode::IncrementalDecoder;
pub use gguf::vocab_spec_from_gguf;
pub use pretokenize::SUPPORTED_PRE;

use std::collections::HashMap;

/// Errors of this crate; each names what it is about.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// `tokenizer.ggml.model` is not one this crate implements.
    #[error("unsupported tokenizer model '{0}' (supported: 'gpt2', 'llama')")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` is not known (llama.cpp refuses such files too).
    #[error("unknown pre-tokenizer type '{0}' (tokenizer.ggml.pre); see strata_tokenizer::SUPPORTED_PRE")]
    UnknownPreTokenizer(String),
    /// The vocabulary is empty or inconsistent.
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
    /// A metadata key is missing or of the wrong type.
    #[error("GGUF metadata key '{key}': {message}")]
    Metadata {
        /// The key.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// A pre-tokenizer expression failed to compile or to run.
    #[error("pre-tokenizer regex '{pattern}': {message}")]
    Regex {
        /// The expression as llama.cpp has it.
        pattern: String,
        /// The regex engine's message.
        message: String,
    },
    /// Building the model failed.
    #[error("building tokenizer: {0}")]
    Build(String),
    /// Encoding failed.
    #[error("encoding: {0}")]
    Encode(String),
    /// `add_special` asked for a BOS/EOS token the vocabulary does not have.
    #[error("the vocabulary has no {0} token, but add_special asked for it")]
    MissingSpecial(&'static str),
    /// An SPM vocabulary has no token for a byte it needs for byte fallback.
    #[error("no byte token <0x{0:02X}> (nor the single byte) in the vocabulary")]
    NoByteToken(u8),
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    InvalidTokenId {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The chat template failed to compile.
    #[error("chat template does not compile: {0}")]
    TemplateSyntax(String),
    /// The chat template failed to render (includes `raise_exception`, fuel and recursion limits).
    #[error("chat template failed to render: {0}")]
    TemplateRender(String),
}

/// The tokenizer part of a GGUF file's metadata (`tokenizer.ggml.*`, `tokenizer.chat_template`).
/// `None` means the key is absent; llama.cpp's defaults then apply.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VocabSpec {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE) or `"llama"` (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: the BPE pre-tokenizer name.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.scores` (SPM merge priorities).
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.merges` (`"left right"`).
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`.
    pub eot: Option<u32>,
    /// `tokenizer.ggml.eom_token_id`.
    pub eom: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

// llama.cpp's token attributes (llama_token_attr)
pub(crate) const ATTR_UNKNOWN: u16 = 1 << 0;
pub(crate) const ATTR_UNUSED: u16 = 1 << 1;
pub(crate) const ATTR_NORMAL: u16 = 1 << 2;
pub(crate) const ATTR_CONTROL: u16 = 1 << 3;
pub(crate) const ATTR_USER_DEFINED: u16 = 1 << 4;
pub(crate) const ATTR_BYTE: u16 = 1 << 5;

#[derive(Debug)]
enum Kind {
    Bpe {
        pre: Box<pretokenize::PreTokenizer>,
        model: Box<bpe::BpeModel>,
    },
    Spm,
}

/// A tokenizer built from a GGUF vocabulary. `Send + Sync`; share it in an `Arc`.
pub struct Tokenizer {
    kind: Kind,
    texts: Vec<String>,
    attrs: Vec<u16>,
    scores: Vec<f32>,
    token_to_id: HashMap<String, u32>,
    /// control, user-defined and unknown tokens, longest text first
    special_cache: Vec<u32>,
    /// token_to_piece(special = true) of every token
    pieces: Vec<Vec<u8>>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    eom: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    eog: Vec<bool>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    chat_template: Option<String>,
}

const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
];

/// A fragment of the text after special tokens are split out.
enum Frag {
    Text(usize, usize),
    Token(u32),
}

impl Tokenizer {
    /// Builds the tokenizer as llama.cpp's `llama_vocab::impl::load` does.
    pub fn from_spec(spec: &VocabSpec) -> Result<Tokenizer, TokenizerError> {
        let n = spec.tokens.len();
        if n == 0 {
            return Err(TokenizerError::InvalidVocab(
                "tokenizer.ggml.tokens is empty".into(),
            ));
        }
        if n > u32::MAX as usize {
            return Err(TokenizerError::InvalidVocab(format!(
                "{n} tokens is too many"
            )));
        }
        let is_spm = match spec.model.as_str() {
            "llama" => true,
            "gpt2" => false,
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };
        if let Some(s) = &spec.scores {
            if s.len() < n {
                return Err(TokenizerError::InvalidVocab(format!(
                    "tokenizer.ggml.scores has {} entries for {n} tokens",
                    s.len()
                )));
            }
        }
        if let Some(t) = &spec.token_types {
            if t.len() < n {
                return Err(TokenizerError::InvalidVocab(format!(
                    "tokenizer.ggml.token_type has {} entries for {n} tokens",
                    t.len()
                )));
            }
        }

        // per-type defaults
        let in_range = |id: u32| (id as usize) < n;
        let (mut bos, mut eos, mut unk): (Option<u32>, Option<u32>, Option<u32>) = if is_spm {
            (Some(1), Some(2), Some(0))
        } else {
            (Some(11), Some(11), None)
        };
        let pre = if is_spm {
            None
        } else {
            Some(pretokenize::PreTokenizer::for_name(spec.pre.as_deref())?)
        };
        let (mut add_bos, mut add_eos, mut add_space_prefix, clean_spaces) = match &pre {
            None => (true, false, true, false),
            Some(p) => (p.add_bos_default, false, false, p.clean_spaces),
        };
        if pre.as_ref().is_some_and(|p| p.no_bos) {
            bos = None;
        }
        if let Some(v) = spec.add_space_prefix {
            add_space_prefix = v;
        }

        // tokens, scores, attributes
        let mut texts = Vec::with_capacity(n);
        let mut token_to_id: HashMap<String, u32> = HashMap::with_capacity(n);
        let mut attrs = Vec::with_capacity(n);
        for (i, t) in spec.tokens.iter().enumerate() {
            let text = if t.is_empty() {
                tracing::warn!(id = i, "empty token in the vocabulary");
                format!("[EMPTY_{i}]")
            } else {
                t.clone()
            };
            token_to_id.insert(text.clone(), i as u32);
            texts.push(text);
            let attr = match spec.token_types.as_ref().map(|t| t[i]) {
                None | Some(1) => ATTR_NORMAL,
                Some(2) => ATTR_UNKNOWN,
                Some(3) => ATTR_CONTROL,
                Some(4) => ATTR_USER_DEFINED,
                Some(5) => ATTR_UNUSED,
                Some(6) => ATTR_BYTE,
                Some(_) => 0,
            };
            attrs.push(attr);
        }
        let scores: Vec<f32> = match &spec.scores {
            Some(s) => s[..n].to_vec(),
            None => vec![0.0; n],
        };

        // special ids from the file (out-of-range ones are ignored, as llama.cpp does)
        for v in [&mut bos, &mut eos, &mut unk] {
            if v.is_some_and(|id| !in_range(id)) {
                *v = None;
            }
        }
        let pick = |name: &str, given: Option<u32>, default: Option<u32>| match given {
            Some(id) if in_range(id) => Some(id),
            Some(id) => {
                tracing::warn!(
                    key = name,
                    id,
                    "special token id out of range, using the default"
                );
                default
            }
            None => default,
        };
        let bos = pick("bos_token_id", spec.bos, bos);
        let eos = pick("eos_token_id", spec.eos, eos);
        let unk = pick("unknown_token_id", spec.unk, unk);
        let pad = pick("padding_token_id", spec.pad, None);
        let mut eot = pick("eot_token_id", spec.eot, None);
        let mut eom = pick("eom_token_id", spec.eom, None);
        if let Some(v) = spec.add_bos {
            add_bos = v;
        }
        if let Some(v) = spec.add_eos {
            add_eos = v;
        }

        // auto-detection by text. llama.cpp walks an unordered_map, so when several texts match,
        // which one it picks is unspecified; we pick the lowest id.
        let find_first = |list: &[&str]| -> Option<u32> {
            list.iter()
                .filter_map(|t| token_to_id.get(*t).copied())
                .min()
        };
        let force_control = |id: u32, attrs: &mut Vec<u16>| {
            let a = &mut attrs[id as usize];
            if *a & ATTR_CONTROL == 0 {
                tracing::debug!(id, "control-looking token was not control-type; overriding");
                *a |= ATTR_CONTROL;
            }
        };
        if eot.is_none() {
            eot = find_first(EOT_TEXTS);
            if let Some(id) = eot {
                force_control(id, &mut attrs);
            }
        }
        if eom.is_none() {
            eom = find_first(EOM_TEXTS);
            if let Some(id) = eom {
                force_control(id, &mut attrs);
            }
        }
        let mut fim = Vec::new();
        for list in [
            FIM_PRE_TEXTS,
            FIM_SUF_TEXTS,
            FIM_MID_TEXTS,
            FIM_PAD_TEXTS,
            FIM_REP_TEXTS,
            FIM_SEP_TEXTS,
        ] {
            let id = find_first(list);
            if let Some(id) = id {
                force_control(id, &mut attrs);
            }
            fim.push(id);
        }
        let mut eog = vec![false; n];
        // fim pad, repo, sep end generation
        for id in fim[3..].iter().flatten() {
            eog[*id as usize] = true;
        }
        for t in EOG_TEXTS {
            if let Some(&id) = token_to_id.get(*t) {
                eog[id as usize] = true;
                force_control(id, &mut attrs);
            }
        }
        // gpt-oss: always render these
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(&id) = token_to_id.get(t) {
                attrs[id as usize] = ATTR_USER_DEFINED;
            }
        }
        for id in [eos, eot, eom].into_iter().flatten() {
            eog[id as usize] = true;
        }
        let eog_text =
            |eog: &[bool], t: &str| token_to_id.get(t).copied().filter(|&id| eog[id as usize]);
        // o200k_harmony / solar-open: <|end|> is not EOG there
        if let Some(end_id) = eog_text(&eog, "<|end|>") {
            let has = |t: &str| eog_text(&eog, t).is_some();
            let call = has("<|call|>") || has("<|calls|>");
            if call && (has("<|return|>") || has("<|flush|>")) {
                eog[end_id as usize] = false;
                attrs[end_id as usize] = ATTR_USER_DEFINED;
            }
        }
        // gemma4 / plamo: a normal </s>
        if let Some(s_id) = eog_text(&eog, "</s>") {
            if eog_text(&eog, "<|tool_response>").is_some()
                || eog_text(&eog, "<|plamo:eos|>").is_some()
            {
                eog[s_id as usize] = false;
                attrs[s_id as usize] = ATTR_NORMAL;
            }
        }

        let mut special_cache: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                attrs[id as usize] & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN) != 0
            })
            .collect();
        special_cache.sort_by(|a, b| texts[*b as usize].len().cmp(&texts[*a as usize].len()));

        let kind = match pre {
            None => Kind::Spm,
            Some(pre) => {
                let model = bpe::BpeModel::new(&token_to_id, &spec.merges, pre.ignore_merges)?;
                Kind::Bpe {
                    pre: Box::new(pre),
                    model: Box::new(model),
                }
            }
        };
        let mut tok = Tokenizer {
            kind,
            texts,
            attrs,
            scores,
            token_to_id,
            special_cache,
            pieces: Vec::new(),
            bos,
            eos,
            eot,
            eom,
            unk,
            pad,
            eog,
            add_bos,
            add_eos,
            add_space_prefix,
            clean_spaces,
            chat_template: spec.chat_template.clone(),
        };
        tok.pieces = (0..n as u32)
            .map(|id| decode::piece_uncached(&tok, id))
            .collect();
        Ok(tok)
    }

    /// Encodes `text` as llama.cpp's `llama_tokenize(vocab, text, add_special, parse_special)`.
    ///
    /// `add_special` adds BOS (and EOS) when the file's `add_bos_token`/`add_eos_token` (or
    /// llama.cpp's default for the vocabulary type and pre-tokenizer) say so. `parse_special`
    /// turns the texts of control tokens (e.g. `<|im_start|>`) into those tokens; user-defined
    /// tokens are always split out; when false, control-token texts are ordinary text.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        let frags = if text.is_empty() {
            Vec::new()
        } else {
            self.partition(text, parse_special)
        };
        if add_special && self.add_bos {
            out.push(self.bos.ok_or(TokenizerError::MissingSpecial("BOS"))?);
        }
        match &self.kind {
            Kind::Spm => {
                let mut prev_special = true;
                let mut buf = String::new();
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.push(' ');
                            }
                            buf.push_str(&text[s..e]);
                            let escaped = buf.replace(' ', "\u{2581}");
                            spm::tokenize(self, &escaped, &mut out)?;
                            prev_special = false;
                        }
                        Frag::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            Kind::Bpe { pre, model } => {
                let mut enc = String::new();
                for f in &frags {
                    match *f {
                        Frag::Text(s, e) => {
                            for word in pre.split(&text[s..e])? {
                                unicode::byte_encode(word, &mut enc);
                                model.tokenize_word(&enc, &mut out)?;
                            }
                        }
                        Frag::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.push(self.eos.ok_or(TokenizerError::MissingSpecial("EOS"))?);
        }
        Ok(out)
    }

    /// llama.cpp's `tokenizer_st_partition`: split special tokens out, longest first.
    fn partition(&self, text: &str, parse_special: bool) -> Vec<Frag> {
        let mut frags = vec![Frag::Text(0, text.len())];
        for &id in &self.special_cache {
            let attr = self.attrs[id as usize];
            if !parse_special && attr & (ATTR_CONTROL | ATTR_UNKNOWN) != 0 {
                continue;
            }
            let needle = self.texts[id as usize].as_str();
            if !frags
                .iter()
                .any(|f| matches!(*f, Frag::Text(s, e) if text[s..e].contains(needle)))
            {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Frag::Text(mut s, e) => {
                        while let Some(p) = text[s..e].find(needle) {
                            if p > 0 {
                                next.push(Frag::Text(s, s + p));
                            }
                            next.push(Frag::Token(id));
                            s += p + needle.len();
                        }
                        if s < e {
                            next.push(Frag::Text(s, e));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    /// Decodes ids to text as llama.cpp's `llama_detokenize(remove_special = false,
    /// unparse_special = false)`: control tokens render as nothing, user-defined tokens as their
    /// text, SPM's leading space (from `add_space_prefix`) is removed, and `clean_spaces` applies
    /// where the pre-tokenizer asks for it. Bytes that are not valid UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let bytes = self.decode_bytes(ids, false)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Like [`Tokenizer::decode`], returning the raw bytes; `render_special` renders control
    /// tokens' text (`unparse_special`).
    pub fn decode_bytes(
        &self,
        ids: &[u32],
        render_special: bool,
    ) -> Result<Vec<u8>, TokenizerError> {
        decode::detokenize(self, ids, render_special)
    }

    /// The raw bytes token `id` stands for (byte-level decoded; `<0xXX>` as the byte; control
    /// tokens as their text), as llama.cpp's `token_to_piece(special = true)`. `None` for ids
    /// outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Option<Vec<u8>> {
        self.pieces.get(id as usize).cloned()
    }

    /// The token's text as stored in the vocabulary (byte-level or `▁`-escaped form).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(String::as_str)
    }

    /// The id of a token by its vocabulary text (e.g. `"<|im_end|>"`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    /// The BOS token, if the vocabulary has one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The EOS token, if the vocabulary has one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The end-of-turn token (from the file, else detected by text as llama.cpp does).
    pub fn eot(&self) -> Option<u32> {
        self.eot
    }

    /// The end-of-message token (from the file, else `<|eom_id|>` if present).
    pub fn eom(&self) -> Option<u32> {
        self.eom
    }

    /// The unknown token, if any.
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }

    /// The padding token, if the file names one.
    pub fn pad(&self) -> Option<u32> {
        self.pad
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Whether generation stops at `id`: EOS, EOT, EOM, and the tokens llama.cpp treats as
    /// end-of-generation by their text (`<|im_end|>`, `<|eot_id|>`, `<|endoftext|>`,
    /// `<end_of_turn>`, FIM pad/repo/sep, ...).
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.eog.get(id as usize).copied().unwrap_or(false)
    }

    /// All end-of-generation ids, ascending.
    pub fn end_of_generation_ids(&self) -> Vec<u32> {
        (0..self.eog.len() as u32)
            .filter(|&i| self.eog[i as usize])
            .collect()
    }

    /// Whether `id` is a control token (after llama.cpp's overrides by text).
    pub fn is_control(&self, id: u32) -> bool {
        self.attrs
            .get(id as usize)
            .is_some_and(|a| a & ATTR_CONTROL != 0)
    }

    /// The file's `tokenizer.chat_template`, if any.
    pub fn chat_template_source(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The chat template of the file, compiled, with this vocabulary's BOS/EOS texts.
    pub fn chat_template(&self) -> Result<Option<ChatTemplate>, TokenizerError> {
        let Some(src) = self.chat_template.as_deref() else {
            return Ok(None);
        };
        let text = |id: Option<u32>| id.and_then(|i| self.token_text(i)).unwrap_or("");
        ChatTemplate::new(src, text(self.bos), text(self.eos)).map(Some)
    }

    /// The pre-tokenizer name in use (BPE) or `None` (SPM).
    pub fn pre_tokenizer(&self) -> Option<&str> {
        match &self.kind {
            Kind::Bpe { pre, .. } => Some(pre.name.as_str()),
            Kind::Spm => None,
        }
    }

    pub(crate) fn check_id(&self, id: u32) -> Result<(), TokenizerError> {
        if (id as usize) < self.texts.len() {
            Ok(())
        } else {
            Err(TokenizerError::InvalidTokenId {
                id,
                vocab_size: self.texts.len(),
            })
        }
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("pre_tokenizer", &self.pre_tokenizer())
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish_non_exhaustive()
    }
}

impl spm::SpmVocab for Tokenizer {
    fn text_to_token(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }
    fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }
    fn byte_to_token(&self, byte: u8) -> Result<u32, TokenizerError> {
        let hex = format!("<0x{byte:02X}>");
        if let Some(&id) = self.token_to_id.get(&hex) {
            return Ok(id);
        }
        let single = [byte];
        std::str::from_utf8(&single)
            .ok()
            .and_then(|s| self.token_to_id.get(s).copied())
            .ok_or(TokenizerError::NoByteToken(byte))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn tokenizer_is_send_sync() {
        assert_send_sync::<Tokenizer>();
        assert_send_sync::<ChatTemplate>();
    }
}
