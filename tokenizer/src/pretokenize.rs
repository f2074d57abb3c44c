//! Pre-tokenization of GPT-2-style BPE vocabularies, as llama.cpp's `llama-vocab.cpp` and
//! `unicode.cpp` do it.
//!
//! llama.cpp picks a list of regular expressions by `tokenizer.ggml.pre` and applies them one
//! after another: each splits every fragment of the previous step into matches and the text
//! between matches (both kept). A few expressions have hand-written matchers in llama.cpp (GPT-2,
//! Llama 3, Qwen2, Qwen3.5); those are ported here line for line, quirks included (e.g. the Llama 3
//! matcher tests the flags of the *first* code point for the punctuation run). The other
//! expressions run on llama.cpp's "collapsed" text, where every non-ASCII code point is replaced
//! by a stand-in for its class (letter, number, punctuation, mark, symbol, other; whitespace maps
//! to `\x0B`) and `\p{..}` in the expression is rewritten to match the stand-in; we do the same
//! with `fancy-regex` (stand-ins are private-use code points rather than bytes).
//!
//! A plain `tokenizers` `Split` pre-tokenizer with the original regex does not give llama.cpp's
//! ids in general: its Unicode tables are a different version, `\s`/`\d` differ, and llama.cpp's
//! hand-written matchers are not exactly the regexes they claim to be.

use crate::unicode::{ascii_lower, flags, Flags};
use crate::TokenizerError;

/// One splitting step.
#[derive(Debug)]
enum Step {
    /// llama.cpp's `unicode_regex_split_custom_gpt2`.
    Gpt2,
    /// llama.cpp's `unicode_regex_split_custom_llama3` (numbers in runs of up to 3).
    Llama3,
    /// llama.cpp's `unicode_regex_split_custom_qwen2` (numbers one by one).
    Qwen2,
    /// llama.cpp's `unicode_regex_split_custom_qwen35` (letters absorb combining marks).
    Qwen35,
    /// A general regex; `collapsed` when it uses `\p{..}` classes.
    Regex {
        re: Box<fancy_regex::Regex>,
        collapsed: bool,
    },
}

/// Settings llama.cpp derives from `tokenizer.ggml.pre`.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    /// The name as given (or `default`).
    pub name: String,
    steps: Vec<Step>,
    /// A word that is a whole token is not merged (Llama 3 style).
    pub ignore_merges: bool,
    /// `clean_up_tokenization_spaces` for detokenization.
    pub clean_spaces: bool,
    /// llama.cpp's default for `add_bos` before the file's key overrides it.
    pub add_bos_default: bool,
    /// The pre-tokenizer disables the BOS token (ChatGLM).
    pub no_bos: bool,
}

const GPT2_RE: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_RE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const PORO_RE: &str = " ?[^(\\s|.,!?\u{2026}\u{3002}\u{FF0C}\u{3001}\u{964}\u{6D4}\u{60C})]+";
const GPT4O_RE: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN_RE: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The pre-tokenizer names this crate implements (those of llama.cpp whose expressions need no
/// matcher we have not ported). Anything else is an error, as it is for llama.cpp.
pub const SUPPORTED_PRE: &[&str] = &[
    "default",
    "gpt-2",
    "phi-2",
    "jina-es",
    "jina-de",
    "gigachat",
    "jina-v2-es",
    "jina-v2-de",
    "a.x-4.0",
    "mellum",
    "modern-bert",
    "exaone4",
    "mpt",
    "olmo",
    "jais",
    "trillion",
    "granite-docling",
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
    "dbrx",
    "smaug-bpe",
    "deepseek-llm",
    "deepseek-coder",
    "deepseek-v3",
    "falcon",
    "starcoder",
    "refact",
    "command-r",
    "smollm",
    "codeshell",
    "exaone",
    "minerva-7b",
    "mellum2",
    "qwen2",
    "deepseek-r1-qwen",
    "kormo",
    "f2llmv2",
    "megrez",
    "stablelm2",
    "qwen35",
    "poro-chat",
    "bloom",
    "gpt3-finnish",
    "viking",
    "chatglm-bpe",
    "glm4",
    "glm5",
    "tekken",
    "gpt-4o",
    "llama4",
    "kanana2",
    "talkie",
];

impl PreTokenizer {
    /// llama.cpp's choice of expressions and flags for `pre` (`None`/empty: `default`, as
    /// llama.cpp does, with a warning). Unknown names are an error naming them.
    pub fn for_name(pre: Option<&str>) -> Result<PreTokenizer, TokenizerError> {
        let name = match pre {
            None | Some("") => {
                tracing::warn!(
                    "GGUF has no tokenizer.ggml.pre; using llama.cpp's 'default' pre-tokenizer \
                     (generation quality may be degraded)"
                );
                "default"
            }
            Some(n) => n,
        };
        let mut ignore_merges = false;
        let mut clean_spaces = true;
        let mut add_bos_default = false;
        let mut no_bos = false;
        let exprs: Vec<&str> = match name {
            "default" => vec![
                r"[\p{P}\$\+<=>\^~\|]+",
                GPT2_RE,
                r"\p{N}+",
                "[0-9][0-9][0-9]",
            ],
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "exaone4" | "mpt" | "olmo"
            | "jais" | "trillion" | "granite-docling" => vec![GPT2_RE],
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => {
                ignore_merges = true;
                add_bos_default = true;
                vec![LLAMA3_RE]
            }
            "dbrx" | "smaug-bpe" => vec![LLAMA3_RE],
            "chatglm-bpe" => {
                no_bos = true;
                vec![LLAMA3_RE]
            }
            "glm4" | "glm5" => {
                no_bos = true;
                ignore_merges = true;
                vec![LLAMA3_RE]
            }
            "deepseek-llm" => {
                clean_spaces = false;
                vec![
                    "[\r\n]",
                    "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+",
                    "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+",
                    "\\s+$",
                    "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
                    r"\p{N}+",
                ]
            }
            "deepseek-coder" => {
                clean_spaces = false;
                vec![
                    "[\r\n]",
                    r"\s?\p{L}+",
                    r"\s?\p{P}+",
                    "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
                    r"\p{N}",
                ]
            }
            "deepseek-v3" => {
                clean_spaces = false;
                vec![
                    r"\p{N}{1,3}",
                    "[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+",
                    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
                ]
            }
            "falcon" => vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2_RE, "[0-9][0-9][0-9]"],
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
                vec![r"\p{N}", GPT2_RE]
            }
            "command-r" | "smollm" => {
                clean_spaces = false;
                vec![r"\p{N}", GPT2_RE]
            }
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" => {
                clean_spaces = false;
                vec![QWEN2_RE]
            }
            "megrez" | "stablelm2" => vec![QWEN2_RE],
            "qwen35" => {
                clean_spaces = false;
                vec![QWEN35_RE]
            }
            "poro-chat" => {
                clean_spaces = false;
                vec![PORO_RE]
            }
            "bloom" | "gpt3-finnish" => vec![PORO_RE],
            "viking" => {
                clean_spaces = false;
                vec![PORO_RE, r"\p{N}"]
            }
            "tekken" => {
                clean_spaces = false;
                ignore_merges = true;
                add_bos_default = true;
                vec![TEKKEN_RE]
            }
            "gpt-4o" | "llama4" | "kanana2" | "talkie" => {
                clean_spaces = false;
                vec![GPT4O_RE]
            }
            other => return Err(TokenizerError::UnknownPreTokenizer(other.to_string())),
        };
        let steps = exprs
            .into_iter()
            .map(Step::for_expr)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PreTokenizer {
            name: name.to_string(),
            steps,
            ignore_merges,
            clean_spaces,
            add_bos_default,
            no_bos,
        })
    }

    /// Splits `text` into words (code point ranges), as llama.cpp's `unicode_regex_split`.
    pub fn split<'t>(&self, text: &'t str) -> Result<Vec<&'t str>, TokenizerError> {
        let cpts: Vec<char> = text.chars().collect();
        // byte offset of each code point (and of the end)
        let mut byte_at: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        byte_at.push(text.len());
        let mut offsets: Vec<usize> = vec![cpts.len()];
        let mut collapsed: Option<Vec<char>> = None;
        let mut wide: Option<Vec<char>> = None;
        for step in &self.steps {
            offsets = match step {
                Step::Gpt2 => split_custom(&cpts, &offsets, Custom::Gpt2),
                Step::Llama3 => split_custom(&cpts, &offsets, Custom::Llama3),
                Step::Qwen2 => split_custom(&cpts, &offsets, Custom::Qwen2),
                Step::Qwen35 => split_custom(&cpts, &offsets, Custom::Qwen35),
                Step::Regex {
                    re,
                    collapsed: true,
                } => {
                    let t = collapsed.get_or_insert_with(|| collapse(&cpts));
                    split_regex(re, t, &offsets)?
                }
                Step::Regex {
                    re,
                    collapsed: false,
                } => {
                    let t = wide.get_or_insert_with(|| widen(&cpts));
                    split_regex(re, t, &offsets)?
                }
            };
        }
        let mut words = Vec::with_capacity(offsets.len());
        let mut start = 0usize;
        for len in offsets {
            if len > 0 {
                words.push(&text[byte_at[start]..byte_at[start + len]]);
            }
            start += len;
        }
        Ok(words)
    }
}

impl Step {
    fn for_expr(expr: &str) -> Result<Step, TokenizerError> {
        // llama.cpp matches these exact strings to its hand-written matchers
        match expr {
            GPT2_RE => return Ok(Step::Gpt2),
            LLAMA3_RE => return Ok(Step::Llama3),
            QWEN2_RE => return Ok(Step::Qwen2),
            QWEN35_RE => return Ok(Step::Qwen35),
            _ => {}
        }
        let collapsed = CATEGORIES.iter().any(|(p, _, _)| expr.contains(p));
        let pattern = if collapsed {
            collapse_regex(expr)?
        } else {
            expr.to_string()
        };
        let re = fancy_regex::Regex::new(&pattern).map_err(|e| TokenizerError::Regex {
            pattern: expr.to_string(),
            message: e.to_string(),
        })?;
        Ok(Step::Regex {
            re: Box::new(re),
            collapsed,
        })
    }
}

/// `\p{..}` classes llama.cpp knows: (name, stand-in code point, ASCII members as a class body).
const CATEGORIES: &[(&str, char, &str)] = &[
    (r"\p{N}", '\u{F0D1}', "0-9"),
    (r"\p{L}", '\u{F0D2}', "A-Za-z"),
    (r"\p{P}", '\u{F0D3}', r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
    (r"\p{M}", '\u{F0D4}', ""),
    (r"\p{S}", '\u{F0D5}', r"\$\+<->\^`\|~"),
    (r"\p{Lu}", '\u{F0D2}', "A-Za-z"),
    (r"\p{Ll}", '\u{F0D2}', "A-Za-z"),
    (r"\p{Lt}", '\u{F0D2}', "A-Za-z"),
    (r"\p{Lm}", '\u{F0D2}', "A-Za-z"),
    (r"\p{Lo}", '\u{F0D2}', "A-Za-z"),
];
const OTHER_STANDIN: char = '\u{F0D0}';

/// llama.cpp's collapsed text: ASCII stays, other code points become their class' stand-in.
fn collapse(cpts: &[char]) -> Vec<char> {
    cpts.iter()
        .map(|&c| {
            if (c as u32) < 128 {
                return c;
            }
            let f = flags(c as u32);
            if f.is_whitespace() {
                return '\x0B';
            }
            match f.category() {
                Flags::NUMBER => '\u{F0D1}',
                Flags::LETTER => '\u{F0D2}',
                Flags::PUNCTUATION => '\u{F0D3}',
                Flags::ACCENT_MARK => '\u{F0D4}',
                Flags::SYMBOL => '\u{F0D5}',
                _ => OTHER_STANDIN,
            }
        })
        .collect()
}

/// llama.cpp's text for expressions without classes: non-ASCII whitespace becomes `\x0B`.
fn widen(cpts: &[char]) -> Vec<char> {
    cpts.iter()
        .map(|&c| {
            if (c as u32) > 0x7F && flags(c as u32).is_whitespace() {
                '\x0B'
            } else {
                c
            }
        })
        .collect()
}

/// Rewrites `\p{..}` to match the stand-ins (llama.cpp's collapsed regex), and `\d` to ASCII
/// digits as ECMAScript has it.
fn collapse_regex(expr: &str) -> Result<String, TokenizerError> {
    if !expr.is_ascii() {
        return Err(TokenizerError::Regex {
            pattern: expr.to_string(),
            message: "unicode classes and non-ASCII characters in one expression".into(),
        });
    }
    let b = expr.as_bytes();
    let mut out = String::with_capacity(expr.len() * 2);
    let mut inside = false;
    let mut i = 0usize;
    while i < b.len() {
        let c = b[i];
        if c == b'[' && (i == 0 || b[i - 1] != b'\\') {
            out.push('[');
            inside = true;
            i += 1;
            continue;
        }
        if inside && c == b']' && b[i - 1] != b'\\' {
            out.push(']');
            inside = false;
            i += 1;
            continue;
        }
        if c == b'\\' && i + 3 < b.len() && b[i + 1] == b'p' && b[i + 2] == b'{' {
            if let Some(close) = expr[i + 3..].find('}').map(|p| p + i + 3) {
                let pat = &expr[i..=close];
                if let Some((_, standin, ascii)) = CATEGORIES.iter().find(|(p, _, _)| *p == pat) {
                    if !inside {
                        out.push('[');
                    }
                    out.push_str(&format!("\\x{{{:X}}}", *standin as u32));
                    out.push_str(ascii);
                    if !inside {
                        out.push(']');
                    }
                    i = close + 1;
                    continue;
                }
            }
        }
        if c == b'\\' && i + 1 < b.len() && b[i + 1] == b'd' {
            out.push_str(if inside { "0-9" } else { "[0-9]" });
            i += 2;
            continue;
        }
        if c == b'\\' && i + 1 < b.len() {
            // keep escapes whole so `\[` is not taken as a class start
            out.push('\\');
            out.push(b[i + 1] as char);
            i += 2;
            continue;
        }
        out.push(c as char);
        i += 1;
    }
    Ok(out)
}

fn split_regex(
    re: &fancy_regex::Regex,
    text: &[char],
    offsets: &[usize],
) -> Result<Vec<usize>, TokenizerError> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0usize;
    let mut s = String::new();
    let mut char_at_byte: Vec<usize> = Vec::new();
    for &len in offsets {
        let frag = &text[start..start + len];
        start += len;
        s.clear();
        char_at_byte.clear();
        for (ci, &c) in frag.iter().enumerate() {
            for _ in 0..c.len_utf8() {
                char_at_byte.push(ci);
            }
            s.push(c);
        }
        char_at_byte.push(frag.len());
        let mut prev = 0usize;
        for m in re.find_iter(&s) {
            let m = m.map_err(|e| TokenizerError::Regex {
                pattern: re.as_str().to_string(),
                message: e.to_string(),
            })?;
            let (ms, me) = (char_at_byte[m.start()], char_at_byte[m.end()]);
            if ms > prev {
                out.push(ms - prev);
            }
            if me > ms {
                out.push(me - ms);
            }
            prev = me;
        }
        if prev < frag.len() {
            out.push(frag.len() - prev);
        }
    }
    Ok(out)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Custom {
    Gpt2,
    Llama3,
    Qwen2,
    Qwen35,
}

const OUT_OF_RANGE: u32 = 0xFFFF_FFFF;

/// Port of llama.cpp's hand-written matchers (`unicode_regex_split_custom_*`).
fn split_custom(cpts: &[char], offsets: &[usize], kind: Custom) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0usize;
    for &len in offsets {
        let ini = start;
        let end = start + len;
        start = end;
        let get_cpt = |pos: usize| -> u32 {
            if ini <= pos && pos < end {
                cpts[pos] as u32
            } else {
                OUT_OF_RANGE
            }
        };
        let get_flags = |pos: usize| -> Flags {
            if ini <= pos && pos < end {
                flags(cpts[pos] as u32)
            } else {
                Flags::NONE
            }
        };
        let mut prev_end = ini;
        let mut add = |e: usize, out: &mut Vec<usize>| -> usize {
            let l = e - prev_end;
            if l > 0 {
                out.push(l);
            }
            prev_end = e;
            l
        };
        let mut pos = ini;
        while pos < end {
            let cpt = get_cpt(pos);
            let fl = get_flags(pos);
            let lower = |c: u32| {
                if kind == Custom::Gpt2 {
                    c
                } else {
                    ascii_lower(c)
                }
            };

            // 's|'t|'re|'ve|'m|'ll|'d (case-insensitive except for GPT-2)
            if cpt == '\'' as u32 && pos + 1 < end {
                let n1 = lower(get_cpt(pos + 1));
                if [b's', b't', b'm', b'd'].iter().any(|&c| n1 == c as u32) {
                    pos += add(pos + 2, &mut out);
                    continue;
                }
                if pos + 2 < end {
                    let n2 = lower(get_cpt(pos + 2));
                    if ((n1 == 'r' as u32 || n1 == 'v' as u32) && n2 == 'e' as u32)
                        || (n1 == 'l' as u32 && n2 == 'l' as u32)
                    {
                        pos += add(pos + 3, &mut out);
                        continue;
                    }
                }
            }

            if kind == Custom::Gpt2 {
                let mut f2 = if cpt == ' ' as u32 {
                    get_flags(pos + 1)
                } else {
                    fl
                };
                // <space>?\p{L}+
                if f2.is_letter() {
                    pos += (cpt == ' ' as u32) as usize;
                    while f2.is_letter() {
                        pos += 1;
                        f2 = get_flags(pos);
                    }
                    add(pos, &mut out);
                    continue;
                }
                // <space>?\p{N}+
                if f2.is_number() {
                    pos += (cpt == ' ' as u32) as usize;
                    while f2.is_number() {
                        pos += 1;
                        f2 = get_flags(pos);
                    }
                    add(pos, &mut out);
                    continue;
                }
                // <space>?[^\s\p{L}\p{N}]+
                if !(f2.is_whitespace() || f2.is_letter() || f2.is_number()) && f2.any() {
                    pos += (cpt == ' ' as u32) as usize;
                    while !(f2.is_whitespace() || f2.is_letter() || f2.is_number()) && f2.any() {
                        pos += 1;
                        f2 = get_flags(pos);
                    }
                    add(pos, &mut out);
                    continue;
                }
                let mut nws = 0usize;
                while get_flags(pos + nws).is_whitespace() {
                    nws += 1;
                }
                // \s+(?!\S)
                if nws > 1 && get_cpt(pos + nws) != OUT_OF_RANGE {
                    pos += nws - 1;
                    add(pos, &mut out);
                    continue;
                }
                // \s+
                if nws > 0 {
                    pos += nws;
                    add(pos, &mut out);
                    continue;
                }
                pos += 1;
                add(pos, &mut out);
                continue;
            }

            let is_letterish =
                |f: Flags| f.is_letter() || (kind == Custom::Qwen35 && f.is_accent_mark());
            // [^\r\n\p{L}\p{N}]?\p{L}+   (Qwen3.5: [\p{L}\p{M}]+)
            if !(cpt == '\r' as u32 || cpt == '\n' as u32 || fl.is_number())
                && (is_letterish(fl) || is_letterish(get_flags(pos + 1)))
            {
                pos += 1;
                while is_letterish(get_flags(pos)) {
                    pos += 1;
                }
                add(pos, &mut out);
                continue;
            }
            // \p{N}{1,3} (Llama 3) or \p{N} (Qwen)
            if fl.is_number() {
                if kind == Custom::Llama3 {
                    let mut n_ini = pos;
                    while get_flags(pos).is_number() {
                        pos += 1;
                        if pos - n_ini >= 3 {
                            add(pos, &mut out);
                            n_ini = pos;
                        }
                    }
                } else {
                    pos += 1;
                }
                add(pos, &mut out);
                continue;
            }
            // <space>?[^\s\p{L}\p{N}]+[\r\n]*  (llama.cpp tests the first code point's flags)
            let mut f2 = if cpt == ' ' as u32 {
                get_flags(pos + 1)
            } else {
                fl
            };
            let punct = |f: Flags| {
                !(f.is_whitespace()
                    || f.is_letter()
                    || f.is_number()
                    || (kind == Custom::Qwen35 && f.is_accent_mark()))
            };
            if punct(f2) && fl.any() {
                pos += (cpt == ' ' as u32) as usize;
                while punct(f2) && f2.any() {
                    pos += 1;
                    f2 = get_flags(pos);
                }
                let mut c2 = get_cpt(pos);
                while c2 == '\r' as u32 || c2 == '\n' as u32 {
                    pos += 1;
                    c2 = get_cpt(pos);
                }
                add(pos, &mut out);
                continue;
            }
            let mut nws = 0usize;
            let mut last_rn = 0usize;
            while get_flags(pos + nws).is_whitespace() {
                let c2 = get_cpt(pos + nws);
                if c2 == '\r' as u32 || c2 == '\n' as u32 {
                    last_rn = pos + nws + 1;
                }
                nws += 1;
            }
            // \s*[\r\n]+
            if last_rn > 0 {
                pos = last_rn;
                add(pos, &mut out);
                continue;
            }
            // \s+(?!\S)
            if nws > 1 && get_cpt(pos + nws) != OUT_OF_RANGE {
                pos += nws - 1;
                add(pos, &mut out);
                continue;
            }
            // \s+
            if nws > 0 {
                pos += nws;
                add(pos, &mut out);
                continue;
            }
            pos += 1;
            add(pos, &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: &str, text: &str) -> Vec<String> {
        PreTokenizer::for_name(Some(pre))
            .and_then(|p| p.split(text))
            .map(|w| w.into_iter().map(str::to_string).collect())
            .unwrap_or_default()
    }

    #[test]
    fn gpt2_words() {
        assert_eq!(
            words("gpt-2", "Hello world's  end"),
            ["Hello", " world", "'s", " ", " end"]
        );
        assert_eq!(words("smollm", "abc123 x"), ["abc", "1", "2", "3", " x"]);
    }

    #[test]
    fn llama3_numbers_and_newlines() {
        assert_eq!(
            words("llama-bpe", "12345\n\n x"),
            ["123", "45", "\n\n", " x"]
        );
    }

    #[test]
    fn all_supported_names_build() {
        for name in SUPPORTED_PRE {
            if let Err(e) = PreTokenizer::for_name(Some(name)) {
                panic!("{name}: {e}");
            }
        }
        assert!(matches!(
            PreTokenizer::for_name(Some("no-such-pre")),
            Err(TokenizerError::UnknownPreTokenizer(n)) if n == "no-such-pre"
        ));
    }
}
