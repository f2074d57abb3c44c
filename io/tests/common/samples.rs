//! Small valid GGUF files built with the writer, shared by the tests and the fuzz-seed example.

use strata_io::gguf::{GgmlType, GgufWriter, MetaArray, MetaValue, StrArray};

/// Deterministic pseudo-random bytes.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A writer holding a value of every metadata type and three tensors of different types.
pub fn every_type() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "llama").unwrap();
    w.add("t.u8", MetaValue::U8(200)).unwrap();
    w.add("t.i8", MetaValue::I8(-100)).unwrap();
    w.add("t.u16", MetaValue::U16(60000)).unwrap();
    w.add("t.i16", MetaValue::I16(-30000)).unwrap();
    w.add_u32("t.u32", 4_000_000_000).unwrap();
    w.add_i32("t.i32", -2_000_000_000).unwrap();
    w.add_f32("t.f32", 1.5).unwrap();
    w.add_bool("t.bool", true).unwrap();
    w.add_str("t.str", "héllo ✓").unwrap();
    w.add_u64("t.u64", u64::MAX).unwrap();
    w.add("t.i64", MetaValue::I64(i64::MIN)).unwrap();
    w.add("t.f64", MetaValue::F64(-2.25)).unwrap();
    w.add_str_array("t.arr.str", ["a", "", "ünï", "<s>"])
        .unwrap();
    w.add_f32_array("t.arr.f32", vec![0.5, -1.0, 3.25]).unwrap();
    w.add_i32_array("t.arr.i32", vec![1, -2, 3]).unwrap();
    w.add_u32_array("t.arr.u32", vec![7, 8]).unwrap();
    w.add_array("t.arr.u8", MetaArray::U8(vec![1, 2, 3]))
        .unwrap();
    w.add_array("t.arr.i8", MetaArray::I8(vec![-1, 2])).unwrap();
    w.add_array("t.arr.u16", MetaArray::U16(vec![1, 65535]))
        .unwrap();
    w.add_array("t.arr.i16", MetaArray::I16(vec![-1, 2]))
        .unwrap();
    w.add_array("t.arr.u64", MetaArray::U64(vec![1 << 40]))
        .unwrap();
    w.add_array("t.arr.i64", MetaArray::I64(vec![-(1 << 40), 5]))
        .unwrap();
    w.add_array("t.arr.f64", MetaArray::F64(vec![0.125]))
        .unwrap();
    w.add_array("t.arr.bool", MetaArray::Bool(vec![true, false, true]))
        .unwrap();
    w.add_array("t.arr.empty", MetaArray::I32(vec![])).unwrap();
    w.add_array(
        "t.arr.nested",
        MetaArray::Array(vec![
            MetaArray::I32(vec![1, 2]),
            MetaArray::Str(["x", "yz"].into_iter().collect::<StrArray>()),
        ]),
    )
    .unwrap();
    w.add_tensor("a.f32", &[3, 2], GgmlType::F32, pattern(24, 1))
        .unwrap();
    w.add_tensor("b.q4_1", &[32, 2], GgmlType::Q4_1, pattern(40, 2))
        .unwrap();
    w.add_tensor("c.q8_0", &[64], GgmlType::Q8_0, pattern(68, 3))
        .unwrap();
    w
}

/// A minimal file: one metadata key, one F32 tensor of 2 elements.
pub fn tiny() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "llama").unwrap();
    w.add_tensor("w", &[2], GgmlType::F32, pattern(8, 9))
        .unwrap();
    w
}

/// A file with a custom alignment, version 2, and a Q4_K tensor.
pub fn aligned_v2() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set_version(2).unwrap();
    w.add_u32("general.alignment", 64).unwrap();
    w.add_str("general.name", "v2").unwrap();
    w.add_tensor("k", &[256, 1], GgmlType::Q4_K, pattern(144, 4))
        .unwrap();
    w.add_tensor("h", &[5], GgmlType::F16, pattern(10, 5))
        .unwrap();
    w
}

/// A small llama-shaped file: hyperparameters, a tokenizer, a few tensors.
pub fn llama_like() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "llama").unwrap();
    w.add_u32("llama.block_count", 1).unwrap();
    w.add_u32("llama.context_length", 64).unwrap();
    w.add_u32("llama.embedding_length", 32).unwrap();
    w.add_u32("llama.feed_forward_length", 64).unwrap();
    w.add_u32("llama.attention.head_count", 2).unwrap();
    w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        .unwrap();
    w.add_str("tokenizer.ggml.model", "gpt2").unwrap();
    let tokens: Vec<String> = (0..8).map(|i| format!("tok{i}")).collect();
    w.add_str_array("tokenizer.ggml.tokens", &tokens).unwrap();
    w.add_i32_array("tokenizer.ggml.token_type", vec![1; 8])
        .unwrap();
    w.add_str_array("tokenizer.ggml.merges", ["t o", "to k"])
        .unwrap();
    w.add_u32("tokenizer.ggml.bos_token_id", 0).unwrap();
    w.add_tensor(
        "token_embd.weight",
        &[32, 8],
        GgmlType::Q8_0,
        pattern(8 * 34, 6),
    )
    .unwrap();
    w.add_tensor(
        "blk.0.attn_norm.weight",
        &[32],
        GgmlType::F32,
        pattern(128, 7),
    )
    .unwrap();
    w.add_tensor("output_norm.weight", &[32], GgmlType::F32, pattern(128, 8))
        .unwrap();
    w
}

/// A file with metadata only.
pub fn no_tensors() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_str("general.architecture", "llama").unwrap();
    w.add_str_array("tokenizer.ggml.tokens", ["a", "b"])
        .unwrap();
    w
}

/// Serializes a writer.
pub fn bytes(w: &GgufWriter) -> Vec<u8> {
    let mut v = Vec::new();
    w.write_to(&mut v).unwrap();
    v
}

/// All the samples, by name.
pub fn all() -> Vec<(&'static str, GgufWriter)> {
    vec![
        ("every_type", every_type()),
        ("tiny", tiny()),
        ("aligned_v2", aligned_v2()),
        ("llama_like", llama_like()),
        ("no_tensors", no_tensors()),
    ]
}
