//! Golden tests against llama.cpp (llama-cpp-python 0.3.36, vocab_only), fixtures written by
//! `tests/fixtures/make_token_fixtures.py`. The default model is read through `strata-io`; fetch
//! it with `bash scripts/fetch-model.sh`.

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strata_tokenizer::{
    vocab_spec_from_gguf, ChatMessage, ChatTemplate, IncrementalDecoder, Tokenizer, TokenizerError,
    VocabSpec,
};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
}

fn spec_of(path: &Path) -> VocabSpec {
    assert!(
        path.exists(),
        "{} is missing: run `bash scripts/fetch-model.sh` from the repository root to fetch the \
         default model (the tokenizer golden tests read its vocabulary)",
        path.display()
    );
    let file = strata_io::GgufFile::open(path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    vocab_spec_from_gguf(file.metadata()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn model_spec() -> VocabSpec {
    spec_of(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("models")
            .join(MODEL),
    )
}

fn read_json<T: for<'de> Deserialize<'de>>(name: &str) -> T {
    let p = fixtures().join(name);
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("parsing {}: {e}", p.display()))
}

#[derive(Deserialize)]
struct Case {
    text: String,
    add_special: bool,
    parse_special: bool,
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct Piece {
    id: u32,
    special: Vec<u8>,
    plain: Vec<u8>,
}

#[derive(Deserialize)]
struct VocabFacts {
    n_tokens: usize,
    bos: i64,
    eos: i64,
    add_bos: bool,
    add_eos: bool,
    eog_ids: Vec<u32>,
    control_ids: Vec<u32>,
    pieces_fnv1a64: String,
    pieces: Vec<Piece>,
}

#[derive(Deserialize)]
struct Detok {
    ids: Vec<u32>,
    c_plain: Vec<u8>,
    c_special: Vec<u8>,
}

#[derive(Deserialize)]
struct TokenFixture {
    vocab: VocabFacts,
    cases: Vec<Case>,
    detokenize: Vec<Detok>,
}

#[derive(Deserialize)]
struct PreFixture {
    variants: std::collections::BTreeMap<String, Vec<Case>>,
}

/// Compares all cases; returns (matched, total) and prints the first mismatches.
fn run_cases(label: &str, tok: &Tokenizer, cases: &[Case]) -> (usize, usize) {
    let mut matched = 0;
    let mut shown = 0;
    for c in cases {
        let got = tok.encode(&c.text, c.add_special, c.parse_special);
        match got {
            Ok(ids) if ids == c.ids => matched += 1,
            other => {
                if shown < 5 {
                    shown += 1;
                    eprintln!(
                        "[{label}] MISMATCH text={:?} add_special={} parse_special={}\n  llama.cpp: {:?}\n  ours:      {:?}",
                        c.text, c.add_special, c.parse_special, c.ids, other
                    );
                }
            }
        }
    }
    eprintln!(
        "[{label}] {matched}/{} encodings equal llama.cpp's",
        cases.len()
    );
    (matched, cases.len())
}

fn fnv1a64_pieces(tok: &Tokenizer) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for id in 0..tok.vocab_size() as u32 {
        let p = tok.token_bytes(id).unwrap_or_default();
        for b in (p.len() as u32).to_le_bytes().iter().chain(p.iter()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

fn check_vocab(label: &str, tok: &Tokenizer, v: &VocabFacts) {
    assert_eq!(tok.vocab_size(), v.n_tokens, "[{label}] vocab size");
    assert_eq!(
        tok.bos().map(i64::from).unwrap_or(-1),
        v.bos,
        "[{label}] bos"
    );
    assert_eq!(
        tok.eos().map(i64::from).unwrap_or(-1),
        v.eos,
        "[{label}] eos"
    );
    assert_eq!(tok.add_bos(), v.add_bos, "[{label}] add_bos");
    assert_eq!(tok.add_eos(), v.add_eos, "[{label}] add_eos");
    assert_eq!(tok.end_of_generation_ids(), v.eog_ids, "[{label}] EOG ids");
    let control: Vec<u32> = (0..tok.vocab_size() as u32)
        .filter(|&i| tok.is_control(i))
        .collect();
    assert_eq!(control, v.control_ids, "[{label}] control ids");
    for p in &v.pieces {
        assert_eq!(
            tok.token_bytes(p.id).as_deref(),
            Some(&p.special[..]),
            "[{label}] piece {}",
            p.id
        );
        let plain = tok.decode_bytes(&[p.id], false).expect("decodes");
        // decode applies SPM's leading-space removal, token_to_piece does not
        let stripped = p.plain.strip_prefix(b" ").unwrap_or(&p.plain);
        assert!(
            plain == p.plain || plain == stripped,
            "[{label}] plain piece {}: {:?} vs {:?}",
            p.id,
            plain,
            p.plain
        );
    }
    assert_eq!(
        fnv1a64_pieces(tok),
        v.pieces_fnv1a64,
        "[{label}] hash of all pieces"
    );
}

fn check_detok(label: &str, tok: &Tokenizer, cases: &[Detok]) {
    for d in cases {
        let plain = tok.decode_bytes(&d.ids, false).expect("decodes");
        assert_eq!(
            String::from_utf8_lossy(&plain),
            String::from_utf8_lossy(&d.c_plain),
            "[{label}] llama_detokenize(unparse_special=false) of {:?}",
            d.ids
        );
        let special = tok.decode_bytes(&d.ids, true).expect("decodes");
        assert_eq!(
            String::from_utf8_lossy(&special),
            String::from_utf8_lossy(&d.c_special),
            "[{label}] llama_detokenize(unparse_special=true) of {:?}",
            d.ids
        );
    }
}

fn check_incremental(tok: &Arc<Tokenizer>, cases: &[Case]) {
    for c in cases {
        let mut dec = IncrementalDecoder::new(tok.clone());
        let mut out = String::new();
        let mut bytes = Vec::new();
        for &id in &c.ids {
            out.push_str(&dec.push(id).expect("valid id"));
            // control and unknown tokens render as nothing
            if !tok.is_control(id) && Some(id) != tok.unk() {
                bytes.extend(tok.token_bytes(id).unwrap_or_default());
            }
        }
        out.push_str(&dec.finish());
        assert_eq!(
            out,
            String::from_utf8_lossy(&bytes),
            "incremental decode of {:?}",
            c.text
        );
    }
}

#[test]
fn smollm_matches_llama_cpp() {
    let spec = model_spec();
    assert_eq!(spec.model, "gpt2");
    assert_eq!(spec.pre.as_deref(), Some("smollm"));
    let tok = Arc::new(Tokenizer::from_spec(&spec).expect("builds"));
    let fx: TokenFixture = read_json("smollm_tokens.json");
    check_vocab("smollm", &tok, &fx.vocab);
    let (m, n) = run_cases("smollm", &tok, &fx.cases);
    check_detok("smollm", &tok, &fx.detokenize);
    check_incremental(&tok, &fx.cases);
    assert_eq!(
        m,
        n,
        "smollm: {} of {n} encodings differ from llama.cpp",
        n - m
    );
}

#[test]
fn other_bpe_pre_tokenizers_match_llama_cpp() {
    let base = model_spec();
    let fx: PreFixture = read_json("bpe_pre_tokens.json");
    assert!(!fx.variants.is_empty());
    let mut failed = Vec::new();
    let (mut tm, mut tn) = (0, 0);
    for (pre, cases) in &fx.variants {
        let mut spec = base.clone();
        spec.pre = Some(pre.clone());
        let tok = Tokenizer::from_spec(&spec).unwrap_or_else(|e| panic!("pre {pre}: {e}"));
        let (m, n) = run_cases(pre, &tok, cases);
        tm += m;
        tn += n;
        if m != n {
            failed.push(format!("{pre}: {}/{n} differ", n - m));
        }
    }
    eprintln!("[all pre-tokenizers] {tm}/{tn} encodings equal llama.cpp's");
    assert!(
        failed.is_empty(),
        "pre-tokenizers differing from llama.cpp: {failed:?}"
    );
}

#[test]
fn spm_matches_llama_cpp() {
    let spec = spec_of(&fixtures().join("spm_vocab.gguf"));
    assert_eq!(spec.model, "llama");
    let tok = Arc::new(Tokenizer::from_spec(&spec).expect("builds"));
    let fx: TokenFixture = read_json("spm_tokens.json");
    check_vocab("spm", &tok, &fx.vocab);
    let (m, n) = run_cases("spm", &tok, &fx.cases);
    check_detok("spm", &tok, &fx.detokenize);
    check_incremental(&tok, &fx.cases);
    assert_eq!(
        m,
        n,
        "spm: {} of {n} encodings differ from llama.cpp",
        n - m
    );
}

#[derive(Deserialize)]
struct Render {
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    prompt: String,
}

#[derive(Deserialize)]
struct ChatFixture {
    template: String,
    bos_token: String,
    eos_token: String,
    renders: Vec<Render>,
}

#[test]
fn chat_template_matches_jinja2() {
    let fx: ChatFixture = read_json("chat_template.json");
    let spec = model_spec();
    assert_eq!(spec.chat_template.as_deref(), Some(fx.template.as_str()));
    let tok = Tokenizer::from_spec(&spec).expect("builds");
    let from_file = tok
        .chat_template()
        .expect("compiles")
        .expect("model has a template");
    let direct = ChatTemplate::new(&fx.template, &fx.bos_token, &fx.eos_token).expect("compiles");
    for r in &fx.renders {
        for t in [&from_file, &direct] {
            let got = t
                .render(&r.messages, r.add_generation_prompt)
                .expect("renders");
            assert_eq!(got, r.prompt, "messages {:?}", r.messages);
        }
    }
}

#[test]
fn bad_ids_are_errors_naming_the_id() {
    let tok = Tokenizer::from_spec(&model_spec()).expect("builds");
    let bad = tok.vocab_size() as u32 + 5;
    match tok.decode(&[1, bad]) {
        Err(TokenizerError::InvalidTokenId { id, .. }) => assert_eq!(id, bad),
        other => panic!("expected InvalidTokenId, got {other:?}"),
    }
    assert!(tok.token_bytes(bad).is_none());
    assert!(!tok.is_control(bad) && !tok.is_end_of_generation(bad));
    let mut dec = IncrementalDecoder::new(Arc::new(tok));
    assert!(dec.push(bad).is_err());
}

#[test]
fn eog_of_default_model() {
    let tok = Tokenizer::from_spec(&model_spec()).expect("builds");
    let im_end = tok.token_id("<|im_end|>").expect("has <|im_end|>");
    let eot = tok.token_id("<|endoftext|>").expect("has <|endoftext|>");
    assert!(tok.is_end_of_generation(im_end) && tok.is_end_of_generation(eot));
    assert!(!tok.is_end_of_generation(tok.token_id("<|im_start|>").expect("has <|im_start|>")));
}

#[test]
fn unknown_pre_is_an_error() {
    let mut spec = model_spec();
    spec.pre = Some("no-such-tokenizer".into());
    let e = Tokenizer::from_spec(&spec).expect_err("must fail");
    assert!(e.to_string().contains("no-such-tokenizer"), "{e}");
}
