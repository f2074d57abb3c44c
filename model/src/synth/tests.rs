use std::path::PathBuf;

use strata_io::gguf::GgufFile;
use strata_quant::{dequantize, GgmlType};

use super::*;
use crate::{Architecture, HParams, ModelWeights};

/// A per-test scratch directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("strata-synth-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating a temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn opts(shape: &str, ty: GgmlType, seed: u64, threads: usize) -> SynthOptions {
    SynthOptions {
        shape: shape_by_name(shape).expect("known shape"),
        ty,
        seed,
        threads,
    }
}

fn write(dir: &TempDir, file: &str, o: &SynthOptions) -> (PathBuf, SynthReport, u64) {
    let path = dir.0.join(file);
    let mut last = (0, 0);
    let report = write_synthetic_model(&path, o, &mut |done, total| {
        assert!(done >= last.0 && done <= total);
        last = (done, total);
    })
    .expect("writing a synthetic model");
    assert_eq!(last.0, last.1, "progress ends at the total");
    (path, report, last.1)
}

/// Opens a file and checks it the way the loader does; returns the file and hyperparameters.
fn load(path: &Path) -> (GgufFile, HParams, ModelWeights) {
    let f = GgufFile::open(path).expect("parsing the GGUF");
    let hp = HParams::from_metadata(f.metadata()).expect("hyperparameters");
    let w = ModelWeights::from_gguf(&f, &hp).expect("weights");
    (f, hp, w)
}

fn std_of(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
fn synth_tiny_loads_and_is_deterministic() {
    let dir = TempDir::new("tiny");
    let o1 = opts("tiny", GgmlType::Q4_K, 7, 1);
    let (p1, r1, total) = write(&dir, "a.gguf", &o1);
    let (p2, r2, _) = write(
        &dir,
        "b.gguf",
        &SynthOptions {
            threads: 2,
            ..o1.clone()
        },
    );
    let (p3, _, _) = write(
        &dir,
        "c.gguf",
        &SynthOptions {
            seed: 8,
            ..o1.clone()
        },
    );
    let (b1, b2, b3) = (
        std::fs::read(&p1).unwrap(),
        std::fs::read(&p2).unwrap(),
        std::fs::read(&p3).unwrap(),
    );
    assert_eq!(b1, b2, "thread count changed the bytes");
    assert_eq!(b1.len(), b3.len());
    assert_ne!(b1, b3, "seed did not change the bytes");
    assert_eq!(r1.bytes, b1.len() as u64);
    assert_eq!(total, r1.bytes);
    assert_eq!(expected_file_size(&o1).unwrap(), r1.bytes);
    assert_eq!((r1.threads, r2.threads), (1, 2));
    assert!(!p1.with_extension("gguf.tmp").exists());

    let (f, hp, w) = load(&p1);
    let s = &o1.shape;
    assert_eq!(hp.arch, Architecture::Llama);
    assert_eq!(
        (hp.n_layers, hp.n_embd, hp.n_ff),
        (s.n_layers, s.n_embd, s.n_ff)
    );
    assert_eq!(
        (hp.n_heads, hp.n_kv_heads, hp.head_dim),
        (s.n_heads, s.n_kv_heads, s.head_dim)
    );
    assert_eq!(
        (hp.vocab_size, hp.trained_context),
        (s.vocab_size, s.context_length)
    );
    assert_eq!((hp.rope_base, hp.rms_eps), (s.rope_base, s.rms_eps));
    assert!(!w.tied_embeddings);
    assert_eq!(f.tensors().len(), r1.tensors);
    assert_eq!(r1.tensors, 2 + 9 * s.n_layers + 1);
    // Rows of 64 and 128 are no whole Q4_K blocks: every matrix fell back to Q8_0, and said so.
    assert_eq!(r1.fallbacks.len(), 2 + 7 * s.n_layers);
    assert!(w
        .all()
        .iter()
        .filter(|t| t.rows > 1)
        .all(|t| t.ty == GgmlType::Q8_0));
    assert!(
        r1.fallback_summary()
            .iter()
            .any(|l| l.contains("Q8_0 instead of Q4_K")),
        "{:?}",
        r1.fallback_summary()
    );

    let m = f.metadata();
    assert_eq!(m.str("general.name").unwrap(), "synthetic tiny Q4_K seed 7");
    assert_eq!(m.str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(m.str("tokenizer.ggml.pre").unwrap(), "smollm");
    assert_eq!(m.u32("general.quantization_version").unwrap(), 2);
    let tokens = m.str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 512);
    let eos = m.u32("tokenizer.ggml.eos_token_id").unwrap() as usize;
    assert_eq!(tokens[eos], "<|im_end|>");
    assert!(!m.bool("tokenizer.ggml.add_bos_token").unwrap());
    assert!(m
        .str("tokenizer.chat_template")
        .unwrap()
        .contains("<|im_start|>"));

    // The values have the documented statistics.
    let embd = f.tensor("token_embd.weight").unwrap();
    let mut v = vec![0f32; embd.elems() as usize];
    dequantize(embd.ty, f.tensor_data(embd), &mut v).unwrap();
    let (mean, std) = std_of(&v);
    assert!(
        mean.abs() < 0.002 && (std - 0.02).abs() < 0.002,
        "token_embd mean {mean} std {std}"
    );
    let norm = f.tensor("blk.1.ffn_norm.weight").unwrap();
    let mut v = vec![0f32; norm.elems() as usize];
    dequantize(norm.ty, f.tensor_data(norm), &mut v).unwrap();
    assert!(v.iter().all(|&x| (0.9..1.1).contains(&x)), "{v:?}");
}

#[test]
fn synth_qwen_archs_load_without_fallback() {
    let dir = TempDir::new("qwen");
    for (shape, ty) in [
        ("tiny-qwen2", GgmlType::Q4_K),
        ("tiny-qwen3", GgmlType::Q6_K),
        ("tiny-qwen3", GgmlType::Q4_0),
    ] {
        let o = opts(shape, ty, 1, 2);
        let (p, r, _) = write(&dir, &format!("{shape}-{ty}.gguf"), &o);
        assert!(r.fallbacks.is_empty(), "{:?}", r.fallbacks);
        let (f, hp, w) = load(&p);
        assert_eq!(hp.arch, o.shape.arch);
        assert_eq!(w.tied_embeddings, o.shape.tied_embeddings);
        let l = &w.layers[1];
        assert_eq!(l.bq.is_some(), hp.arch == Architecture::Qwen2);
        assert_eq!(l.q_norm.is_some(), hp.arch == Architecture::Qwen3);
        assert_eq!(l.wq.ty, ty);
        assert_eq!(f.metadata().str("tokenizer.ggml.pre").unwrap(), "qwen2");
        if ty == GgmlType::Q6_K {
            // token_embd spans several jobs here: 3 threads must still give the same bytes.
            assert!(f.tensor("token_embd.weight").unwrap().elems() >= 2 * JOB_ELEMS as u64);
            let (p3, _, _) = write(&dir, "threads3.gguf", &SynthOptions { threads: 3, ..o.clone() });
            assert!(std::fs::read(&p).unwrap() == std::fs::read(&p3).unwrap(), "3 threads changed the bytes");
        }
        // Dequantized weights stay close to the generated distribution.
        let t = f.tensor("blk.0.ffn_up.weight").unwrap();
        let mut v = vec![0f32; t.elems() as usize];
        dequantize(t.ty, f.tensor_data(t), &mut v).unwrap();
        let (mean, std) = std_of(&v);
        assert!(
            mean.abs() < 0.002 && (std - 0.02).abs() < 0.003,
            "{shape} {ty}: mean {mean} std {std}"
        );
    }
}

#[test]
fn synth_every_shape_is_consistent() {
    assert!(shape_names().len() >= 7);
    assert!(shape_by_name("nope").is_none());
    assert_eq!(
        shape_by_name("Qwen2.5-7B").map(|s| s.name),
        Some("qwen2.5-7b".to_string())
    );
    for &name in shape_names() {
        let o = opts(name, GgmlType::Q4_K, 42, 1);
        let s = &o.shape;
        s.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        let p = plan(&o).unwrap_or_else(|e| panic!("{name}: {e}"));
        let hp =
            HParams::from_metadata(p.writer.metadata()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            (hp.arch, hp.n_layers, hp.n_embd, hp.n_ff),
            (s.arch, s.n_layers, s.n_embd, s.n_ff),
            "{name}"
        );
        assert_eq!(
            (hp.n_heads, hp.n_kv_heads, hp.head_dim, hp.vocab_size),
            (s.n_heads, s.n_kv_heads, s.head_dim, s.vocab_size),
            "{name}"
        );
        assert_eq!(
            p.writer
                .metadata()
                .str_array("tokenizer.ggml.tokens")
                .unwrap()
                .len(),
            s.vocab_size,
            "{name}"
        );
        assert_eq!(p.parameters, s.parameter_count(), "{name}");
        assert_eq!(
            p.tensors.iter().any(|t| t.name == "output.weight"),
            !s.tied_embeddings,
            "{name}"
        );
        assert!(p.file_bytes > p.header_bytes + p.parameters / 2, "{name}");
    }
    // Real models' sizes.
    let params = |n: &str| shape_by_name(n).unwrap().parameter_count() as f64 / 1e9;
    assert!(
        (params("smollm2-135m") - 0.1345).abs() < 0.002,
        "{}",
        params("smollm2-135m")
    );
    assert!(
        (params("qwen2.5-0.5b") - 0.494).abs() < 0.002,
        "{}",
        params("qwen2.5-0.5b")
    );
    assert!(
        (params("qwen2.5-7b") - 7.616).abs() < 0.01,
        "{}",
        params("qwen2.5-7b")
    );
    assert!(
        (params("qwen3-8b") - 8.19).abs() < 0.01,
        "{}",
        params("qwen3-8b")
    );
    assert!(
        (params("llama3-8b") - 8.03).abs() < 0.01,
        "{}",
        params("llama3-8b")
    );
    let q7 = expected_file_size(&opts("qwen2.5-7b", GgmlType::Q4_K, 42, 1)).unwrap();
    assert!(
        (4_000_000_000..5_000_000_000).contains(&q7),
        "qwen2.5-7b Q4_K: {q7} bytes"
    );
    // qwen2.5-0.5b rows of 896 are no whole Q4_K blocks: those tensors are Q8_0.
    let p = plan(&opts("qwen2.5-0.5b", GgmlType::Q4_K, 42, 1)).unwrap();
    let down = p
        .tensors
        .iter()
        .find(|t| t.name == "blk.0.ffn_down.weight")
        .unwrap();
    let up = p
        .tensors
        .iter()
        .find(|t| t.name == "blk.0.ffn_up.weight")
        .unwrap();
    assert_eq!((down.ty, up.ty), (GgmlType::Q4_K, GgmlType::Q8_0));
}

#[test]
fn synth_refuses_bad_options() {
    let o = opts("tiny", GgmlType::Q2_K, 1, 1);
    assert!(matches!(
        plan(&o),
        Err(SynthError::UnsupportedType(GgmlType::Q2_K))
    ));
    let mut o = opts("tiny", GgmlType::Q8_0, 1, 1);
    o.shape.n_kv_heads = 3;
    let e = plan(&o).unwrap_err();
    assert!(
        matches!(e, SynthError::BadShape { .. }) && e.to_string().contains("n_kv_heads"),
        "{e}"
    );
    o.shape.n_kv_heads = 2;
    o.shape.vocab_size = 100;
    assert!(matches!(plan(&o), Err(SynthError::BadShape { .. })));
    // A directory that does not exist: the error names the file.
    let o = opts("tiny", GgmlType::Q8_0, 1, 1);
    let bad = Path::new("/nonexistent-dir-strata/x.gguf");
    let e = write_synthetic_model(bad, &o, &mut |_, _| {}).unwrap_err();
    assert!(
        matches!(e, SynthError::Write(_)) && e.to_string().contains("nonexistent-dir-strata"),
        "{e}"
    );
}
