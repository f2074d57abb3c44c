//! [`VocabSpec`] from a GGUF file's metadata (`strata_io::Metadata`).

use crate::{TokenizerError, VocabSpec};
use strata_io::Metadata;

fn meta_err(key: &str, e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Metadata {
        key: key.to_string(),
        message: e.to_string(),
    }
}

/// Reads the tokenizer keys of a GGUF file:
/// `tokenizer.ggml.{model, pre, tokens, token_type, scores, merges, bos_token_id, eos_token_id,
/// eot_token_id, eom_token_id, unknown_token_id, padding_token_id, add_bos_token, add_eos_token,
/// add_space_prefix}` and `tokenizer.chat_template`.
///
/// `model` and `tokens` are required; a special-token id of the wrong type or out of `u32` range
/// is ignored with a warning (llama.cpp would refuse the file; the default then applies).
/// Scores stored as integers are accepted, as llama.cpp does.
pub fn vocab_spec_from_gguf(meta: &Metadata) -> Result<VocabSpec, TokenizerError> {
    const P: &str = "tokenizer.ggml.";
    let key = |k: &str| format!("{P}{k}");

    let model = meta
        .str(&key("model"))
        .map_err(|e| meta_err(&key("model"), e))?
        .to_string();
    let pre = meta
        .opt_str(&key("pre"))
        .map_err(|e| meta_err(&key("pre"), e))?
        .map(str::to_string);
    let tokens: Vec<String> = meta
        .str_array_packed(&key("tokens"))
        .map_err(|e| meta_err(&key("tokens"), e))?
        .iter()
        .map(str::to_string)
        .collect();
    let token_types = meta
        .opt_i32_array(&key("token_type"))
        .map_err(|e| meta_err(&key("token_type"), e))?;
    let scores = match meta.opt_f32_array(&key("scores")) {
        Ok(s) => s,
        Err(_) => meta
            .opt_i32_array(&key("scores"))
            .map_err(|e| meta_err(&key("scores"), e))?
            .map(|v| v.into_iter().map(|x| x as f32).collect()),
    };
    let merges: Vec<String> = match meta.get(&key("merges")) {
        None => Vec::new(),
        Some(_) => meta
            .str_array_packed(&key("merges"))
            .map_err(|e| meta_err(&key("merges"), e))?
            .iter()
            .map(str::to_string)
            .collect(),
    };
    let id = |k: &str| -> Option<u32> {
        let full = key(k);
        match meta.opt_u32(&full) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(key = %full, error = %e, "ignoring special token id");
                None
            }
        }
    };
    let flag = |k: &str| -> Result<Option<bool>, TokenizerError> {
        let full = key(k);
        meta.opt_bool(&full).map_err(|e| meta_err(&full, e))
    };
    Ok(VocabSpec {
        model,
        pre,
        tokens,
        token_types,
        scores,
        merges,
        bos: id("bos_token_id"),
        eos: id("eos_token_id"),
        eot: id("eot_token_id"),
        eom: id("eom_token_id"),
        unk: id("unknown_token_id"),
        pad: id("padding_token_id"),
        add_bos: flag("add_bos_token")?,
        add_eos: flag("add_eos_token")?,
        add_space_prefix: flag("add_space_prefix")?,
        chat_template: meta
            .opt_str("tokenizer.chat_template")
            .map_err(|e| meta_err("tokenizer.chat_template", e))?
            .map(str::to_string),
    })
}
