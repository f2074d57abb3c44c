//! GPT-2-style byte-level BPE: words from [`crate::pretokenize`], byte-level encoded, merged by the
//! `tokenizers` crate's BPE model built from the file's tokens and merges.
//!
//! The merge loop of `tokenizers` (lowest rank first, leftmost on ties, pairs re-validated when
//! popped) is the one llama.cpp's `llm_tokenizer_bpe_session` runs, and its `ignore_merges` is
//! llama.cpp's. Differences handled here:
//! - duplicate merges: llama.cpp keeps the first rank, `tokenizers` the last; we drop later copies;
//! - merges whose parts or result are not tokens: `tokenizers` refuses them at build time; llama.cpp
//!   keeps them (and would fall back to per-byte tokens for the result). We leave them out and
//!   count them in a warning; well-formed vocabularies have none;
//! - duplicate token strings: the last id wins, as in llama.cpp's `token_to_id`.

use crate::TokenizerError;
use std::collections::{HashMap, HashSet};
use tokenizers::models::bpe::BPE;
use tokenizers::Model;

/// The BPE merge model of one vocabulary.
pub(crate) struct BpeModel {
    model: BPE,
}

impl std::fmt::Debug for BpeModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpeModel").finish_non_exhaustive()
    }
}

impl BpeModel {
    /// Builds the model from `token_to_id` (already deduplicated, last id wins) and the file's
    /// merges (`"left right"`, split at the first space after the first byte, as llama.cpp does).
    pub fn new(
        token_to_id: &HashMap<String, u32>,
        merges: &[String],
        ignore_merges: bool,
    ) -> Result<BpeModel, TokenizerError> {
        let mut seen: HashSet<(&str, &str)> = HashSet::with_capacity(merges.len());
        let mut pairs: Vec<(String, String)> = Vec::with_capacity(merges.len());
        let mut skipped = 0usize;
        for m in merges {
            // llama.cpp: word.find(' ', 1)
            let Some(pos) = m
                .as_bytes()
                .iter()
                .skip(1)
                .position(|&b| b == b' ')
                .map(|p| p + 1)
            else {
                skipped += 1;
                continue;
            };
            let (a, b) = (&m[..pos], &m[pos + 1..]);
            if !seen.insert((a, b)) {
                continue;
            }
            let merged = format!("{a}{b}");
            if !token_to_id.contains_key(a)
                || !token_to_id.contains_key(b)
                || !token_to_id.contains_key(&merged)
            {
                skipped += 1;
                continue;
            }
            pairs.push((a.to_string(), b.to_string()));
        }
        if skipped > 0 {
            tracing::warn!(
                skipped,
                "BPE merges left out: malformed, or parts not in the vocabulary"
            );
        }
        let vocab: tokenizers::models::bpe::Vocab =
            token_to_id.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let model = BPE::builder()
            .vocab_and_merges(vocab, pairs)
            .ignore_merges(ignore_merges)
            .build()
            .map_err(|e| TokenizerError::Build(format!("BPE model: {e}")))?;
        Ok(BpeModel { model })
    }

    /// Appends the ids of one byte-level encoded word.
    pub fn tokenize_word(&self, word: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        let toks = self
            .model
            .tokenize(word)
            .map_err(|e| TokenizerError::Encode(format!("BPE: {e}")))?;
        out.extend(toks.into_iter().map(|t| t.id));
        Ok(())
    }
}
