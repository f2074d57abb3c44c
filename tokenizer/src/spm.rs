//! SentencePiece-style ("llama") vocabularies: llama.cpp's `llm_tokenizer_spm_session`, ported.
//!
//! Start from single UTF-8 characters; repeatedly merge the adjacent pair whose concatenation is a
//! token with the highest score (leftmost on ties); symbols that are not tokens fall back to
//! `<0xXX>` byte tokens. The `tokenizers` crate has no model with these rules (its BPE ranks
//! pairs, not merged pieces, and breaks ties differently), so this is implemented directly.

use crate::TokenizerError;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    n: usize,
    prev: isize,
    next: isize,
}

struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// What the SPM algorithm needs to know about the vocabulary.
pub(crate) trait SpmVocab {
    fn text_to_token(&self, text: &str) -> Option<u32>;
    fn score(&self, id: u32) -> f32;
    fn byte_to_token(&self, byte: u8) -> Result<u32, TokenizerError>;
}

/// Tokenizes `text` (already whitespace-escaped with `▁`) and appends the ids.
pub(crate) fn tokenize<V: SpmVocab>(
    vocab: &V,
    text: &str,
    out: &mut Vec<u32>,
) -> Result<(), TokenizerError> {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    let n_chars = text.chars().count();
    for (i, (off, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol {
            start: off,
            n: c.len_utf8(),
            prev: i as isize - 1,
            next: if i + 1 == n_chars { -1 } else { i as isize + 1 },
        });
    }
    let mut queue: BinaryHeap<Bigram> = BinaryHeap::new();
    let mut rev_merge: HashMap<&str, (usize, usize)> = HashMap::new();

    for i in 1..symbols.len() {
        try_add(
            vocab,
            text,
            i as isize - 1,
            i as isize,
            &symbols,
            &mut queue,
            &mut rev_merge,
        );
    }

    while let Some(b) = queue.pop() {
        let (ln, rn) = (symbols[b.left].n, symbols[b.right].n);
        if ln == 0 || rn == 0 || ln + rn != b.size {
            continue;
        }
        symbols[b.left].n += rn;
        symbols[b.right].n = 0;
        let rnext = symbols[b.right].next;
        symbols[b.left].next = rnext;
        if rnext >= 0 {
            symbols[rnext as usize].prev = b.left as isize;
        }
        let lprev = symbols[b.left].prev;
        try_add(
            vocab,
            text,
            lprev,
            b.left as isize,
            &symbols,
            &mut queue,
            &mut rev_merge,
        );
        try_add(
            vocab,
            text,
            b.left as isize,
            rnext,
            &symbols,
            &mut queue,
            &mut rev_merge,
        );
    }

    if symbols.is_empty() {
        return Ok(());
    }
    let mut i: isize = 0;
    while i != -1 {
        let sym = symbols[i as usize];
        resegment(vocab, text, &symbols, &rev_merge, sym, out)?;
        i = sym.next;
    }
    Ok(())
}

/// llama.cpp's `try_add_bigram`: queue the pair if its concatenation is a token.
fn try_add<'t, V: SpmVocab>(
    vocab: &V,
    text: &'t str,
    left: isize,
    right: isize,
    symbols: &[Symbol],
    queue: &mut BinaryHeap<Bigram>,
    rev_merge: &mut HashMap<&'t str, (usize, usize)>,
) {
    if left < 0 || right < 0 {
        return;
    }
    let (l, r) = (left as usize, right as usize);
    let s = symbols[l].start;
    let piece = &text[s..s + symbols[l].n + symbols[r].n];
    let Some(id) = vocab.text_to_token(piece) else {
        return;
    };
    queue.push(Bigram {
        left: l,
        right: r,
        score: vocab.score(id),
        size: piece.len(),
    });
    rev_merge.insert(piece, (l, r));
}

/// llama.cpp's `resegment`: a symbol that is a token is emitted; one that came from a merge is
/// split back into its halves; anything else becomes byte tokens. Iterative, with a bound, so a
/// pathological vocabulary cannot recurse without end.
fn resegment<V: SpmVocab>(
    vocab: &V,
    text: &str,
    symbols: &[Symbol],
    rev_merge: &HashMap<&str, (usize, usize)>,
    sym: Symbol,
    out: &mut Vec<u32>,
) -> Result<(), TokenizerError> {
    let mut stack = vec![sym];
    let mut budget = 4 * text.len() + 16;
    while let Some(s) = stack.pop() {
        budget = budget.saturating_sub(1);
        let piece = &text[s.start..s.start + s.n];
        if let Some(id) = vocab.text_to_token(piece) {
            out.push(id);
            continue;
        }
        match rev_merge.get(piece) {
            Some(&(l, r)) if budget > 0 => {
                // push right first so left comes out first
                stack.push(symbols[r]);
                stack.push(symbols[l]);
            }
            _ => {
                for &byte in piece.as_bytes() {
                    out.push(vocab.byte_to_token(byte)?);
                }
            }
        }
    }
    Ok(())
}
