//! A valid GPT-2-style byte-level BPE vocabulary of any size, built deterministically.
//!
//! Layout of the vocabulary:
//! 1. ids 0..256: the 256 byte tokens, token `b` being byte `b` written with GPT-2's
//!    byte-to-unicode mapping (`' '` is `Ġ`, `'\n'` is `Ċ`, printable ASCII is itself).
//! 2. Merged tokens, each the concatenation of two earlier tokens, with a matching
//!    `tokenizer.ggml.merges` entry (`"left right"`) in rank order. The first ones are learned by
//!    plain BPE training on a small embedded English + code text (`corpus.txt`), so common pairs
//!    merge first; once that runs out of pairs seen twice, the rest extend earlier merged tokens
//!    by one letter each, in English letter-frequency order, until the vocabulary is full.
//! 3. The last three ids: `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` (control tokens).
//!
//! Every token string is unique and made only of byte-to-unicode characters (so llama.cpp can
//! decode every token), and every merge's result is in the vocabulary.

use std::collections::{HashMap, HashSet};

/// The special tokens, appended at the end of the vocabulary in this order.
pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// The smallest vocabulary [`build_vocab`] accepts: the bytes, one merge, the special tokens.
pub const MIN_VOCAB: usize = 256 + 1 + SPECIAL_TOKENS.len();

/// GGUF `token_type` of ordinary tokens.
pub const TOKEN_TYPE_NORMAL: i32 = 1;
/// GGUF `token_type` of control (special) tokens.
pub const TOKEN_TYPE_CONTROL: i32 = 3;

/// The text the first merges are learned from.
const CORPUS: &str = include_str!("corpus.txt");

/// Letters appended to earlier tokens once the learned merges run out, most frequent first.
const FILL_LETTERS: &[u8] = b"etaoinshrdlcumwfgypbvkjxqz";

/// A generated vocabulary, ready for the `tokenizer.ggml.*` keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthVocab {
    /// Token strings, by id.
    pub tokens: Vec<String>,
    /// GGUF token types, by id ([`TOKEN_TYPE_NORMAL`] or [`TOKEN_TYPE_CONTROL`]).
    pub token_types: Vec<i32>,
    /// Merges `"left right"`, highest priority first.
    pub merges: Vec<String>,
    /// `<|endoftext|>`: the BOS and padding token.
    pub endoftext_id: u32,
    /// `<|im_start|>`.
    pub im_start_id: u32,
    /// `<|im_end|>`: the EOS token (end of a chat turn).
    pub im_end_id: u32,
}

/// GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves, the other 68 bytes
/// to U+0100 onwards, in byte order.
pub fn byte_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for (b, slot) in table.iter_mut().enumerate() {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let code = if printable {
            b as u32
        } else {
            let c = next;
            next += 1;
            c
        };
        // Every code here is below 0x144, a valid scalar value.
        *slot = char::from_u32(code).unwrap_or('\u{fffd}');
    }
    table
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Class {
    Letter,
    Digit,
    Space,
    Other,
}

fn class(c: char) -> Class {
    if c.is_alphabetic() {
        Class::Letter
    } else if c.is_numeric() {
        Class::Digit
    } else if c.is_whitespace() {
        Class::Space
    } else {
        Class::Other
    }
}

/// Splits `text` roughly as GPT-2's pre-tokenizer does: an optional leading space plus a run of
/// letters or of punctuation; single digits; runs of whitespace (leaving a last space that is
/// followed by a word to that word).
fn words(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end_of = |i: usize| chars.get(i).map_or(text.len(), |&(p, _)| p);
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        let (_, c) = chars[i];
        let mut cls = class(c);
        if c == ' ' {
            if let Some(&(_, n)) = chars.get(i + 1) {
                let nc = class(n);
                if nc == Class::Letter || nc == Class::Other {
                    i += 1;
                    cls = nc;
                }
            }
        }
        match cls {
            Class::Digit => i += 1,
            Class::Space => {
                while i < chars.len() && class(chars[i].1) == Class::Space {
                    i += 1;
                }
                // Leave a trailing ' ' to the word after it.
                if i < chars.len() && i - start > 1 && chars[i - 1].1 == ' ' {
                    i -= 1;
                }
            }
            cls => {
                while i < chars.len() && class(chars[i].1) == cls {
                    i += 1;
                }
            }
        }
        out.push(&text[end_of(start)..end_of(i)]);
    }
    out
}

/// Builds a vocabulary of exactly `vocab_size` tokens (at least [`MIN_VOCAB`]).
///
/// # Errors
/// A description when `vocab_size` is too small.
pub fn build_vocab(vocab_size: usize) -> Result<SynthVocab, String> {
    if vocab_size < MIN_VOCAB {
        return Err(format!(
            "vocab_size {vocab_size} is below the minimum of {MIN_VOCAB}"
        ));
    }
    let n_normal = vocab_size - SPECIAL_TOKENS.len();
    let b2u = byte_to_unicode();
    let mut tokens: Vec<String> = b2u.iter().map(|c| c.to_string()).collect();
    let mut ids: HashMap<String, u32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let mut merges: Vec<String> = Vec::new();

    // 1. BPE training on the embedded corpus, words weighted by their counts. Ties go to the
    //    lowest (left, right) pair so the result does not depend on hash order.
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for w in words(CORPUS) {
        *counts.entry(w).or_default() += 1;
    }
    let mut corpus: Vec<(Vec<u32>, u64)> = counts
        .into_iter()
        .filter(|(w, _)| !w.chars().any(|c| c.is_ascii_digit()))
        .map(|(w, n)| (w.bytes().map(u32::from).collect(), n))
        .collect();
    corpus.sort();
    while tokens.len() < n_normal {
        let mut pairs: HashMap<(u32, u32), u64> = HashMap::new();
        for (syms, n) in &corpus {
            for p in syms.windows(2) {
                *pairs.entry((p[0], p[1])).or_default() += n;
            }
        }
        let best = pairs
            .into_iter()
            .filter(|&(_, n)| n >= 2)
            .max_by(|(pa, na), (pb, nb)| na.cmp(nb).then(pb.cmp(pa)));
        let Some(((a, b), _)) = best else { break };
        let text = format!("{}{}", tokens[a as usize], tokens[b as usize]);
        merges.push(format!("{} {}", tokens[a as usize], tokens[b as usize]));
        // Two different pairs can spell the same string: the merge then points at the token
        // that already exists.
        let id = match ids.get(&text) {
            Some(&id) => id,
            None => {
                let id = tokens.len() as u32;
                ids.insert(text.clone(), id);
                tokens.push(text);
                id
            }
        };
        for (syms, _) in &mut corpus {
            let mut j = 0;
            while j + 1 < syms.len() {
                if syms[j] == a && syms[j + 1] == b {
                    syms[j] = id;
                    syms.remove(j + 1);
                }
                j += 1;
            }
        }
    }

    // 2. Fill: extend each merged token (in id order, the new ones included) by one letter.
    let letters: Vec<u32> = FILL_LETTERS.iter().map(|&b| u32::from(b)).collect();
    let mut base = if tokens.len() > 256 {
        256
    } else {
        usize::from(b'a')
    };
    let mut seen_texts: HashSet<String> = tokens.iter().cloned().collect();
    'fill: while tokens.len() < n_normal {
        if base >= tokens.len() {
            return Err(format!("could not build {n_normal} distinct tokens"));
        }
        for &l in &letters {
            if tokens.len() >= n_normal {
                break 'fill;
            }
            let text = format!("{}{}", tokens[base], tokens[l as usize]);
            if seen_texts.insert(text.clone()) {
                merges.push(format!("{} {}", tokens[base], tokens[l as usize]));
                tokens.push(text);
            }
        }
        base += 1;
    }

    let mut token_types = vec![TOKEN_TYPE_NORMAL; tokens.len()];
    let first_special = tokens.len() as u32;
    for s in SPECIAL_TOKENS {
        tokens.push(s.to_string());
        token_types.push(TOKEN_TYPE_CONTROL);
    }
    Ok(SynthVocab {
        tokens,
        token_types,
        merges,
        endoftext_id: first_special,
        im_start_id: first_special + 1,
        im_end_id: first_special + 2,
    })
}

/// A ChatML chat template (Jinja), as Qwen and SmolLM2 instruct models use.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synth_vocab_is_valid() {
        for size in [MIN_VOCAB, 512, 1024, 49152] {
            let v = build_vocab(size).unwrap();
            assert_eq!(v.tokens.len(), size);
            assert_eq!(v.token_types.len(), size);
            let unique: HashSet<&String> = v.tokens.iter().collect();
            assert_eq!(unique.len(), size, "duplicate token strings");
            // Each merge joins two tokens that exist and its result exists.
            let ids: HashMap<&str, usize> = v
                .tokens
                .iter()
                .enumerate()
                .map(|(i, t)| (t.as_str(), i))
                .collect();
            for (rank, m) in v.merges.iter().enumerate() {
                let (a, b) = m.split_once(' ').unwrap();
                assert!(!b.contains(' '));
                assert!(
                    ids.contains_key(a) && ids.contains_key(b),
                    "merge {rank} {m:?}: unknown part"
                );
                let joined = format!("{a}{b}");
                assert!(ids[joined.as_str()] >= 256, "merge {rank} {m:?}: no result");
            }
            let b2u: HashSet<char> = byte_to_unicode().into_iter().collect();
            for (t, ty) in v.tokens.iter().zip(&v.token_types) {
                if *ty == TOKEN_TYPE_NORMAL {
                    assert!(t.chars().all(|c| b2u.contains(&c)), "{t:?}");
                }
            }
            assert_eq!(v.tokens[v.im_end_id as usize], "<|im_end|>");
        }
        // Common English pairs are learned first.
        let v = build_vocab(512).unwrap();
        assert!(
            v.merges[..20]
                .iter()
                .any(|m| m == "Ġ t" || m == "h e" || m == "t h"),
            "{:?}",
            &v.merges[..20]
        );
        assert_eq!(v, build_vocab(512).unwrap());
    }

    #[test]
    fn synth_words_split() {
        assert_eq!(
            words("Hello, world  x\n\n  fn a1"),
            ["Hello", ",", " world", " ", " x", "\n\n ", " fn", " a", "1"]
        );
    }
}
