//! Detokenization: llama.cpp's `token_to_piece` and `detokenize`, and an incremental decoder.

use crate::unicode::char_to_byte;
use crate::{
    Kind, Tokenizer, TokenizerError, ATTR_BYTE, ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN,
    ATTR_USER_DEFINED,
};
use std::sync::Arc;

/// llama.cpp's `token_to_piece(id, lstrip = 0, special = true)`, without the cache.
pub(crate) fn piece_uncached(tok: &Tokenizer, id: u32) -> Vec<u8> {
    let attr = tok.attrs[id as usize];
    let text = &tok.texts[id as usize];
    if attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED) != 0 {
        return text.as_bytes().to_vec();
    }
    if attr & ATTR_NORMAL != 0 {
        return match tok.kind {
            Kind::Spm => text.replace('\u{2581}', " ").into_bytes(),
            Kind::Bpe { .. } => byte_level_decode(text),
        };
    }
    if attr & ATTR_BYTE != 0 {
        // "<0xXX>"
        return text
            .get(3..5)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .map(|b| vec![b])
            .unwrap_or_default();
    }
    Vec::new()
}

/// llama.cpp's `llama_decode_text`: byte-level chars back to bytes; chars outside the alphabet
/// give llama.cpp's `[UNK_BYTE_0x..]` marker.
fn byte_level_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// The piece of one token for decoding: control and unknown tokens are empty unless `special`.
fn piece(tok: &Tokenizer, id: u32, special: bool) -> &[u8] {
    if !special && tok.attrs[id as usize] & (ATTR_UNKNOWN | ATTR_CONTROL) != 0 {
        return &[];
    }
    &tok.pieces[id as usize]
}

/// llama.cpp's `llama_detokenize(remove_special = false, unparse_special = special)`.
pub(crate) fn detokenize(
    tok: &Tokenizer,
    ids: &[u32],
    special: bool,
) -> Result<Vec<u8>, TokenizerError> {
    for &id in ids {
        tok.check_id(id)?;
    }
    let mut text: Vec<u8> = Vec::new();
    let mut remove_space = tok.add_space_prefix;
    for &id in ids {
        let mut p = piece(tok, id, special);
        // token_to_piece returns early for suppressed tokens, before lstrip
        if remove_space && !p.is_empty() && p[0] == b' ' {
            p = &p[1..];
        }
        text.extend_from_slice(p);
        remove_space = false;
    }
    if tok.clean_spaces {
        clean_spaces(&mut text);
    }
    Ok(text)
}

/// The three clean-up passes of llama.cpp's `detokenize`, in place, as written there.
fn clean_spaces(text: &mut Vec<u8>) {
    // first pass: " ?", " !", " .", " ,"
    let total1 = text.len();
    let mut total = usize::from(total1 > 0);
    for i in 1..total1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);

    // second pass: strip a single apostrophe between spaces
    let total2 = text.len();
    let mut total = usize::from(total2 > 0);
    let mut i = 1;
    while i < total2 {
        let x = text[i];
        if x == b'\'' && i + 1 < total2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);

    // third pass: apostrophe contractions " 's", " 'm", " 're", " 've"
    let total3 = text.len();
    let mut total = usize::from(total3 > 0);
    for i in 1..total3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < total3 {
            let x1 = text[i + 1];
            if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if i + 2 < total3 {
                let x2 = text[i + 2];
                if (x1 == b'r' || x1 == b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// Streams ids to text, returning only complete UTF-8: a character split across tokens (byte
/// tokens, byte-level pieces of an emoji) is held until its last byte arrives.
///
/// Pieces are concatenated as llama.cpp's `token_to_piece` gives them (what llama-server streams):
/// no leading-space removal and no `clean_spaces` pass, so the stream of a generation continues
/// the prompt's text exactly. Control tokens render as nothing unless
/// [`IncrementalDecoder::with_special`] is set.
#[derive(Debug)]
pub struct IncrementalDecoder {
    tok: Arc<Tokenizer>,
    pending: Vec<u8>,
    special: bool,
}

impl IncrementalDecoder {
    /// A decoder over `tokenizer`.
    pub fn new(tokenizer: Arc<Tokenizer>) -> IncrementalDecoder {
        IncrementalDecoder {
            tok: tokenizer,
            pending: Vec::new(),
            special: false,
        }
    }

    /// Renders control tokens' text too (e.g. `<|im_end|>`).
    pub fn with_special(mut self, special: bool) -> IncrementalDecoder {
        self.special = special;
        self
    }

    /// Adds one id; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.tok.check_id(id)?;
        let p = piece(&self.tok, id, self.special);
        self.pending.extend_from_slice(p);
        Ok(self.take_complete())
    }

    /// Adds several ids; returns the text that is now complete.
    pub fn push_all(&mut self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut s = String::new();
        for &id in ids {
            s.push_str(&self.push(id)?);
        }
        Ok(s)
    }

    /// Bytes held back waiting for the rest of a character.
    pub fn pending_bytes(&self) -> &[u8] {
        &self.pending
    }

    /// Flushes what is held; bytes that never became a character become U+FFFD.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut start = 0usize;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // valid_up_to bytes are UTF-8 by contract
                    out.push_str(&String::from_utf8_lossy(
                        &self.pending[start..start + valid],
                    ));
                    match e.error_len() {
                        // truly invalid bytes: replace them and go on
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            start += valid + bad;
                        }
                        // an incomplete character at the end: hold it
                        None => {
                            start += valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_spaces_passes() {
        let mut t = b"Hello , world ! It 's I 'm we 're they 'll ' x".to_vec();
        clean_spaces(&mut t);
        assert_eq!(
            String::from_utf8_lossy(&t),
            "Hello, world! It's I'm we're they 'll'x"
        );
    }
}
