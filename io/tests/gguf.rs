//! GGUF reader and writer: round trips, the real default model, every error variant on hand-made
//! bad files, truncation at every length, and random mutations.

mod common;

use common::samples::{self, bytes, pattern};
use proptest::prelude::*;
use strata_io::gguf::{
    GgmlType, GgufError, GgufFile, GgufWriter, MetaArray, MetaValue, MAX_TENSOR_ELEMS,
};

// ---------------------------------------------------------------------------------------------
// A raw byte builder for hand-made (bad) files.

#[derive(Clone, Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::default()
            .b(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    fn b(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    fn u32(self, v: u32) -> Raw {
        self.b(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> Raw {
        self.b(&v.to_le_bytes())
    }
    fn s(self, s: &[u8]) -> Raw {
        self.u64(s.len() as u64).b(s)
    }
    fn kv_u32(self, k: &str, v: u32) -> Raw {
        self.s(k.as_bytes()).u32(4).u32(v)
    }
    fn kv_str(self, k: &str, v: &[u8]) -> Raw {
        self.s(k.as_bytes()).u32(8).s(v)
    }
    fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.s(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(ty).u64(offset)
    }
    fn pad(mut self, a: usize) -> Raw {
        while self.0.len() % a != 0 {
            self.0.push(0);
        }
        self
    }
    fn zeros(mut self, n: usize) -> Raw {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn parse(self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.0)
    }
}

/// Parses and returns the error, failing on success.
fn err(r: Raw) -> GgufError {
    match r.parse() {
        Ok(f) => panic!("expected an error, parsed {f:?}"),
        Err(e) => {
            // Every message must be printable and say something.
            assert!(e.to_string().len() > 10, "{e:?}");
            e
        }
    }
}

/// A valid file with one F32 tensor of `n` elements at relative offset 0.
fn one_tensor(ty: u32, dims: &[u64], data: usize) -> Raw {
    Raw::header(3, 1, 0)
        .tensor("t", dims, ty, 0)
        .pad(32)
        .zeros(data)
}

// ---------------------------------------------------------------------------------------------
// Round trips.

fn assert_round_trip(w: &GgufWriter) {
    let b = bytes(w);
    let f = GgufFile::from_bytes(b.clone()).unwrap();
    assert_eq!(f.metadata(), w.metadata());
    assert_eq!(f.alignment(), w.alignment());
    assert_eq!(f.file_bytes(), b.len() as u64);
    let infos = w.tensor_infos();
    assert_eq!(f.tensors().len(), infos.len());
    for (t, wi) in f.tensors().iter().zip(&infos) {
        assert_eq!(
            (&t.name, &t.dims, t.ty, t.bytes),
            (&wi.name, &wi.dims, wi.ty, wi.bytes)
        );
        assert_eq!(t.offset, f.data_offset() + wi.offset);
        assert_eq!(t.offset % f.alignment(), 0);
        assert_eq!(f.tensor(&t.name), Some(t));
    }
    assert_eq!(f.data_offset() % f.alignment(), 0);
}

#[test]
fn round_trip_all_samples() {
    for (name, w) in samples::all() {
        eprintln!("{name}");
        assert_round_trip(&w);
    }
}

#[test]
fn round_trip_values_and_data() {
    let w = samples::every_type();
    let f = GgufFile::from_bytes(bytes(&w)).unwrap();
    assert_eq!(f.version(), 3);
    let md = f.metadata();
    assert_eq!(md.str("general.architecture").unwrap(), "llama");
    assert_eq!(md.get("t.i64"), Some(&MetaValue::I64(i64::MIN)));
    assert_eq!(md.str("t.str").unwrap(), "héllo ✓");
    assert_eq!(md.str_array("t.arr.str").unwrap(), ["a", "", "ünï", "<s>"]);
    assert_eq!(md.f32_array("t.arr.f32").unwrap(), [0.5, -1.0, 3.25]);
    assert!(md.bool("t.bool").unwrap());
    let nested = md
        .get("t.arr.nested")
        .and_then(MetaValue::as_array)
        .unwrap();
    assert_eq!(nested.len(), 2);
    assert_eq!(nested.type_desc(), "ARRAY[ARRAY]");
    // Keys come back in file order.
    let keys: Vec<&str> = md.iter().map(|(k, _)| k).collect();
    assert_eq!(keys[0], "general.architecture");
    assert_eq!(keys.last(), Some(&"t.arr.nested"));
    assert_eq!(
        f.tensor_data(f.tensor("a.f32").unwrap()),
        &pattern(24, 1)[..]
    );
    assert_eq!(
        f.tensor_data(f.tensor("b.q4_1").unwrap()),
        &pattern(40, 2)[..]
    );
    assert_eq!(
        f.tensor_data(f.tensor("c.q8_0").unwrap()),
        &pattern(68, 3)[..]
    );
    let a = f.tensor("a.f32").unwrap();
    assert_eq!((a.elems(), a.rows()), (6, 2));
    assert!(f.tensor("missing").is_none());
}

#[test]
fn version_2_and_custom_alignment() {
    let f = GgufFile::from_bytes(bytes(&samples::aligned_v2())).unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.alignment(), 64);
    for t in f.tensors() {
        assert_eq!(t.offset % 64, 0);
    }
    assert_eq!(f.tensor("k").unwrap().ty, GgmlType::Q4_K);
}

#[test]
fn streaming_write_equals_buffered_write() {
    let w = samples::llama_like();
    let expected = bytes(&w);
    // Declare infos only, stream the data in odd-sized chunks.
    let mut s = GgufWriter::new();
    for (k, v) in w.metadata().iter() {
        s.add(k, v.clone()).unwrap();
    }
    let infos = w.tensor_infos();
    for t in &infos {
        s.add_tensor_info(&t.name, &t.dims, t.ty).unwrap();
    }
    let datas = [pattern(8 * 34, 6), pattern(128, 7), pattern(128, 8)];
    let path = tmp_path("stream.gguf");
    let n = s
        .write_to_path_with(&path, |i, info, st| {
            assert_eq!(info.name, infos[i].name);
            assert_eq!(st.current().map(|t| t.offset), Some(info.offset));
            for chunk in datas[i].chunks(7) {
                st.write_chunk(chunk)?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(n, expected.len() as u64);
    assert_eq!(std::fs::read(&path).unwrap(), expected);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    assert!(!std::path::Path::new(&tmp).exists());
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.tensors().len(), 3);
    assert_eq!(f.bytes(), &expected[..]);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn write_to_path_and_open() {
    let path = tmp_path("every.gguf");
    let w = samples::every_type();
    w.write_to_path(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.metadata(), w.metadata());
    std::fs::remove_file(&path).unwrap();
}

fn tmp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("strata-io-gguf-{}-{name}", std::process::id()))
}

// ---------------------------------------------------------------------------------------------
// The real default model.

#[test]
fn real_default_model_parses() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        eprintln!("skipping: {} is not there", path.display());
        return;
    }
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.file_bytes(), 98_362_432);
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(f.metadata().len(), 33);
    assert_eq!(f.alignment(), 32);
    let md = f.metadata();
    assert_eq!(md.str("general.architecture").unwrap(), "llama");
    assert_eq!(md.u32("llama.block_count").unwrap(), 30);
    assert_eq!(md.u64("llama.block_count").unwrap(), 30);
    assert_eq!(md.str_array("tokenizer.ggml.tokens").unwrap().len(), 49152);
    assert!(md.opt_u32("no.such.key").unwrap().is_none());
    let e = f.tensor("token_embd.weight").unwrap();
    assert_eq!(e.dims, [576, 49152]);
    assert_eq!(e.ty, GgmlType::Q8_0);
    assert_eq!(e.rows(), 49152);
    assert_eq!(e.bytes, 49152 * 576 / 32 * 34);
    assert!(f.tensors().iter().any(|t| t.ty == GgmlType::Q4_1));
    let mut end = 0;
    for t in f.tensors() {
        assert_eq!(f.tensor_data(t).len() as u64, t.bytes);
        assert!(t.offset >= f.data_offset());
        end = end.max(t.offset + t.bytes);
    }
    assert!(end <= f.file_bytes());
    for i in 0..30 {
        assert!(
            f.tensor(&format!("blk.{i}.attn_q.weight")).is_some(),
            "block {i}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Truncation and mutation: errors, never panics.

#[test]
fn every_prefix_is_an_error_or_the_same_file() {
    for (name, w) in samples::all() {
        let full = bytes(&w);
        let f = GgufFile::from_bytes(full.clone()).unwrap();
        let last_end = f
            .tensors()
            .iter()
            .map(|t| t.offset + t.bytes)
            .max()
            .unwrap_or(0);
        for len in 0..full.len() {
            match GgufFile::from_bytes(full[..len].to_vec()) {
                Err(_) => {}
                Ok(g) => {
                    // Only the trailing padding (or the padding of a tensor-less file) may go.
                    assert!(len as u64 >= last_end, "{name}: prefix {len} parsed");
                    assert_eq!(g.metadata(), f.metadata(), "{name}: prefix {len}");
                    assert_eq!(g.tensors(), f.tensors(), "{name}: prefix {len}");
                }
            }
        }
    }
}

#[test]
fn truncation_reports_truncated() {
    let full = bytes(&samples::tiny());
    for len in [0, 3, 4, 7, 8, 15, 23, 30, 40] {
        assert!(
            matches!(
                GgufFile::from_bytes(full[..len].to_vec()),
                Err(GgufError::Truncated { .. }
                    | GgufError::TooManyKvs { .. }
                    | GgufError::StringTooLong { .. }
                    | GgufError::TooManyTensors { .. })
            ),
            "prefix {len}"
        );
    }
    // Cut inside the data: the tensor runs past the end.
    let f = GgufFile::from_bytes(full.clone()).unwrap();
    let cut = f.tensors()[0].offset as usize + 4;
    assert!(matches!(
        GgufFile::from_bytes(full[..cut].to_vec()),
        Err(GgufError::TensorOutOfBounds { .. })
    ));
    assert!(matches!(
        GgufFile::from_bytes(Vec::new()),
        Err(GgufError::Truncated {
            what: "magic",
            offset: 0,
            needed: 4,
            file_len: 0
        })
    ));
}

fn check_invariants(f: &GgufFile) {
    for t in f.tensors() {
        assert_eq!(f.tensor_data(t).len() as u64, t.bytes);
    }
    let md = f.metadata();
    for (k, _) in md.iter() {
        let _ = (
            md.u32(k),
            md.u64(k),
            md.f32(k),
            md.bool(k),
            md.str(k),
            md.str_array(k),
        );
        let _ = (md.f32_array(k), md.i32_array(k), md.u32_array(k));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_mutations_never_panic(
        sample in 0usize..5,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..8),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let mut b = bytes(&samples::all()[sample].1);
        for (at, byte, kind) in edits {
            let i = at.index(b.len());
            match kind {
                0 => b[i] = byte,
                1 => b[i] ^= 1 << (byte % 8),
                2 => b.insert(i, byte),
                // Set a whole u64 length/count field to a large or boundary value.
                _ => {
                    let v: u64 = [u64::MAX, 1 << 40, u32::MAX as u64 + 1, byte as u64][byte as usize % 4];
                    for (j, x) in v.to_le_bytes().iter().enumerate() {
                        if let Some(slot) = b.get_mut(i + j) { *slot = *x; }
                    }
                }
            }
        }
        if do_cut {
            let n = cut.index(b.len() + 1);
            b.truncate(n);
        }
        if let Ok(f) = GgufFile::from_bytes(b) {
            check_invariants(&f);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One test per error variant, on a hand-made bad file.

#[test]
fn err_bad_magic() {
    let r = Raw::default().b(b"GGML").u32(3).u64(0).u64(0);
    assert!(matches!(err(r), GgufError::BadMagic { found } if &found == b"GGML"));
}

#[test]
fn err_version_1_and_others() {
    for v in [0, 1, 4, 77] {
        let e = err(Raw::header(v, 0, 0));
        assert!(
            matches!(e, GgufError::UnsupportedVersion { version } if version == v),
            "{e}"
        );
        if v == 1 {
            assert!(e.to_string().contains("obsolete"));
        }
    }
}

#[test]
fn err_big_endian() {
    let r = Raw::default()
        .b(b"GGUF")
        .b(&3u32.to_be_bytes())
        .b(&0u64.to_be_bytes())
        .b(&0u64.to_be_bytes());
    assert!(matches!(err(r), GgufError::BigEndian { swapped: 3 }));
}

#[test]
fn err_truncated() {
    let r = Raw::default().b(b"GGUF").u32(3).u32(0);
    assert!(matches!(
        err(r),
        GgufError::Truncated {
            what: "tensor count",
            offset: 8,
            needed: 8,
            file_len: 12
        }
    ));
    // A value cut short.
    let r = Raw::header(3, 0, 1).s(b"k").u32(10).b(&[1, 2, 3]);
    assert!(matches!(
        err(r),
        GgufError::Truncated {
            what: "U64 value",
            ..
        }
    ));
}

#[test]
fn err_too_many_kvs() {
    for n in [u64::MAX, u64::MAX / 13 + 1, 1 << 40, 2] {
        let r = Raw::header(3, 0, n).kv_u32("a", 1);
        assert!(
            matches!(err(r), GgufError::TooManyKvs { count, .. } if count == n),
            "{n}"
        );
    }
}

#[test]
fn err_too_many_tensors() {
    for n in [u64::MAX, u64::MAX / 32 + 1, 1 << 40, 2] {
        let r = Raw::header(3, n, 0)
            .tensor("t", &[1], 0, 0)
            .pad(32)
            .zeros(4);
        assert!(
            matches!(err(r), GgufError::TooManyTensors { count, .. } if count == n),
            "{n}"
        );
    }
}

#[test]
fn err_string_too_long() {
    // Key.
    let r = Raw::header(3, 0, 1).u64(u64::MAX).b(b"key").u32(4).u32(0);
    assert!(matches!(
        err(r),
        GgufError::StringTooLong {
            len: u64::MAX,
            offset: 24,
            ..
        }
    ));
    // Value.
    let r = Raw::header(3, 0, 1).s(b"k").u32(8).u64(1 << 60).b(b"abc");
    let e = err(r);
    assert!(
        matches!(&e, GgufError::StringTooLong { what, len, .. } if what.contains("`k`") && *len == 1 << 60),
        "{e}"
    );
    // String inside an array.
    let r = Raw::header(3, 0, 1)
        .s(b"arr")
        .u32(9)
        .u32(8)
        .u64(2)
        .s(b"ok")
        .u64(1000);
    let e = err(r);
    assert!(
        matches!(&e, GgufError::StringTooLong { what, .. } if what.contains("arr[1]")),
        "{e}"
    );
    // Tensor name.
    let r = Raw::header(3, 1, 0).u64(1 << 33).b(b"t").zeros(40);
    assert!(matches!(err(r), GgufError::StringTooLong { what, .. } if what == "tensor name"));
}

#[test]
fn err_array_too_long() {
    for (ty, n) in [
        (0u32, 1000u64),
        (4, u64::MAX / 4 + 1),
        (8, 1 << 40),
        (9, 100),
        (7, u64::MAX),
    ] {
        let r = Raw::header(3, 0, 1)
            .s(b"arr")
            .u32(9)
            .u32(ty)
            .u64(n)
            .zeros(64);
        let e = err(r);
        assert!(
            matches!(&e, GgufError::ArrayTooLong { key, len, .. } if key == "arr" && *len == n),
            "{e}"
        );
    }
}

#[test]
fn err_key_not_utf8() {
    let r = Raw::header(3, 0, 1).s(b"ke\xffy").u32(4).u32(0);
    assert!(matches!(err(r), GgufError::KeyNotUtf8 { offset: 32, .. }));
}

#[test]
fn err_value_not_utf8() {
    let r = Raw::header(3, 0, 1).kv_str("general.name", b"bad\xc3(");
    assert!(matches!(err(r), GgufError::ValueNotUtf8 { key, .. } if key == "general.name"));
    let r = Raw::header(3, 0, 1)
        .s(b"tokens")
        .u32(9)
        .u32(8)
        .u64(2)
        .s(b"ok")
        .s(b"\xff");
    assert!(matches!(err(r), GgufError::ValueNotUtf8 { key, .. } if key == "tokens[1]"));
}

#[test]
fn err_tensor_name_not_utf8() {
    let r = Raw::header(3, 1, 0)
        .s(b"\xfe\xff")
        .u32(1)
        .u64(1)
        .u32(0)
        .u64(0)
        .pad(32)
        .zeros(4);
    assert!(matches!(err(r), GgufError::TensorNameNotUtf8 { .. }));
}

#[test]
fn err_bad_value_type() {
    let r = Raw::header(3, 0, 1).s(b"k").u32(13).u32(0);
    assert!(
        matches!(err(r), GgufError::BadValueType { key, type_id: 13, offset: 33 } if key == "k")
    );
}

#[test]
fn err_bad_array_type() {
    let r = Raw::header(3, 0, 1).s(b"k").u32(9).u32(99).u64(0);
    assert!(matches!(err(r), GgufError::BadArrayType { key, type_id: 99, .. } if key == "k"));
}

#[test]
fn err_array_too_deep() {
    // An array of arrays is fine; an array of arrays of arrays is not.
    let ok = Raw::header(3, 0, 1)
        .s(b"k")
        .u32(9)
        .u32(9)
        .u64(1)
        .u32(4)
        .u64(1)
        .u32(5);
    let f = ok.parse().unwrap();
    assert_eq!(
        f.metadata().get("k"),
        Some(&MetaValue::Array(MetaArray::Array(vec![MetaArray::U32(
            vec![5]
        )])))
    );
    let r = Raw::header(3, 0, 1)
        .s(b"k")
        .u32(9)
        .u32(9)
        .u64(1)
        .u32(9)
        .u64(0);
    assert!(matches!(err(r), GgufError::ArrayTooDeep { key, .. } if key == "k"));
}

#[test]
fn err_bad_bool() {
    let r = Raw::header(3, 0, 1).s(b"b").u32(7).b(&[2]);
    assert!(matches!(err(r), GgufError::BadBool { key, value: 2, .. } if key == "b"));
    let r = Raw::header(3, 0, 1).s(b"b").u32(9).u32(7).u64(2).b(&[1, 9]);
    assert!(matches!(err(r), GgufError::BadBool { value: 9, .. }));
}

#[test]
fn err_duplicate_key() {
    let r = Raw::header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2);
    assert!(matches!(err(r), GgufError::DuplicateKey { key, offset: 43 } if key == "a.b"));
}

#[test]
fn err_duplicate_tensor() {
    let r = Raw::header(3, 2, 0)
        .tensor("t", &[1], 0, 0)
        .tensor("t", &[1], 0, 32)
        .pad(32)
        .zeros(64);
    assert!(matches!(err(r), GgufError::DuplicateTensor { name, .. } if name == "t"));
}

#[test]
fn err_alignment_type() {
    let r = Raw::header(3, 0, 1).s(b"general.alignment").u32(10).u64(32);
    assert!(matches!(err(r), GgufError::AlignmentType { found: "U64" }));
}

#[test]
fn err_bad_alignment() {
    for a in [0, 3, 48, u32::MAX] {
        let r = Raw::header(3, 0, 1).kv_u32("general.alignment", a);
        assert!(
            matches!(err(r), GgufError::BadAlignment { value } if value == a as u64),
            "{a}"
        );
    }
}

#[test]
fn err_bad_dim_count() {
    for n in [0u32, 5, u32::MAX] {
        let r = Raw::header(3, 1, 0).s(b"t").u32(n).zeros(64);
        assert!(
            matches!(err(r), GgufError::BadDimCount { tensor, n_dims } if tensor == "t" && n_dims == n as u64)
        );
    }
}

#[test]
fn err_zero_dim() {
    let e = err(one_tensor(0, &[4, 0, 2], 64));
    assert!(matches!(e, GgufError::ZeroDim { index: 1, .. }));
}

#[test]
fn err_too_many_elems() {
    // Overflowing product.
    let e = err(one_tensor(0, &[1 << 32, 1 << 32, 2], 64));
    assert!(matches!(e, GgufError::TooManyElems { .. }));
    let e = err(one_tensor(0, &[u64::MAX, u64::MAX], 64));
    assert!(matches!(e, GgufError::TooManyElems { .. }));
    // Above the sanity bound.
    let e = err(one_tensor(0, &[MAX_TENSOR_ELEMS, 2], 64));
    assert!(matches!(
        e,
        GgufError::TooManyElems {
            max: MAX_TENSOR_ELEMS,
            ..
        }
    ));
}

#[test]
fn err_unknown_tensor_type() {
    for id in [4u32, 5, 31, 40, u32::MAX] {
        let e = err(one_tensor(id, &[32], 256));
        assert!(
            matches!(&e, GgufError::UnknownTensorType { tensor, type_id } if tensor == "t" && *type_id == id),
            "{e}"
        );
    }
}

#[test]
fn err_row_not_block_multiple() {
    let e = err(one_tensor(GgmlType::Q4_1.id(), &[33, 2], 256));
    assert!(matches!(
        e,
        GgufError::RowNotBlockMultiple {
            row_len: 33,
            block: 32,
            ty: "Q4_1",
            ..
        }
    ));
}

#[test]
fn err_misaligned_tensor() {
    let r = Raw::header(3, 1, 0)
        .tensor("t", &[1], 0, 4)
        .pad(32)
        .zeros(64);
    assert!(matches!(
        err(r),
        GgufError::MisalignedTensor {
            offset: 4,
            alignment: 32,
            ..
        }
    ));
    // With a custom alignment.
    let r = Raw::header(3, 1, 1)
        .kv_u32("general.alignment", 64)
        .tensor("t", &[1], 0, 32)
        .pad(64)
        .zeros(128);
    assert!(matches!(
        err(r),
        GgufError::MisalignedTensor {
            offset: 32,
            alignment: 64,
            ..
        }
    ));
}

#[test]
fn err_tensor_out_of_bounds() {
    // Data past EOF.
    let e = err(one_tensor(0, &[16], 63));
    assert!(matches!(e, GgufError::TensorOutOfBounds { end, file_len, .. } if end == file_len + 1));
    // An offset near u64::MAX must not overflow.
    let r = Raw::header(3, 1, 0)
        .tensor("t", &[8], 0, u64::MAX - 31)
        .pad(32)
        .zeros(32);
    assert!(matches!(err(r), GgufError::TensorOutOfBounds { .. }));
}

#[test]
fn err_tensor_overlap() {
    let r = Raw::header(3, 2, 0)
        .tensor("a", &[16], 0, 0)
        .tensor("b", &[8], 0, 32)
        .pad(32)
        .zeros(128);
    let e = err(r);
    assert!(
        matches!(&e, GgufError::TensorOverlap { first, second, .. } if first == "a" && second == "b"),
        "{e}"
    );
    // Adjacent is fine.
    let r = Raw::header(3, 2, 0)
        .tensor("a", &[8], 0, 0)
        .tensor("b", &[8], 0, 32)
        .pad(32)
        .zeros(64);
    assert_eq!(r.parse().unwrap().tensors().len(), 2);
}

#[test]
fn err_open_io_and_file_wrapper() {
    let p = tmp_path("does-not-exist.gguf");
    let e = GgufFile::open(&p).unwrap_err();
    assert!(matches!(e.root(), GgufError::Io { .. }));
    assert!(e.to_string().contains("does-not-exist.gguf"), "{e}");
    // A bad file names its path too.
    let p = tmp_path("v1.gguf");
    std::fs::write(&p, Raw::header(1, 0, 0).0).unwrap();
    let e = GgufFile::open(&p).unwrap_err();
    assert!(matches!(&e, GgufError::File { path, .. } if path == &p));
    assert!(matches!(
        e.root(),
        GgufError::UnsupportedVersion { version: 1 }
    ));
    assert!(
        e.to_string().contains("v1.gguf") && e.to_string().contains("version 1"),
        "{e}"
    );
    // An empty file.
    std::fs::write(&p, b"").unwrap();
    let e = GgufFile::open(&p).unwrap_err();
    assert!(matches!(e.root(), GgufError::Truncated { .. }));
    std::fs::remove_file(&p).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Getters.

fn getter_file() -> GgufFile {
    let mut w = GgufWriter::new();
    w.add("u8", MetaValue::U8(7)).unwrap();
    w.add_i32("neg", -1).unwrap();
    w.add("big", MetaValue::U64(1 << 40)).unwrap();
    w.add("f64", MetaValue::F64(0.5)).unwrap();
    w.add_str("s", "x").unwrap();
    w.add_bool("b", false).unwrap();
    w.add_array("u8s", MetaArray::U8(vec![1, 2])).unwrap();
    w.add_array("u32s", MetaArray::U32(vec![1, 4_000_000_000]))
        .unwrap();
    w.add_array("i64s", MetaArray::I64(vec![-3])).unwrap();
    w.add_array("f64s", MetaArray::F64(vec![0.25])).unwrap();
    GgufFile::from_bytes(bytes(&w)).unwrap()
}

#[test]
fn getters_convert_when_the_value_fits() {
    let f = getter_file();
    let md = f.metadata();
    assert_eq!(md.u32("u8").unwrap(), 7);
    assert_eq!(md.u64("u8").unwrap(), 7);
    assert_eq!(md.u64("big").unwrap(), 1 << 40);
    assert_eq!(md.f32("f64").unwrap(), 0.5);
    assert_eq!(md.opt_f32("f64").unwrap(), Some(0.5));
    assert!(!md.bool("b").unwrap());
    assert_eq!(md.opt_bool("nope").unwrap(), None);
    assert_eq!(md.opt_str("s").unwrap(), Some("x"));
    assert_eq!(md.i32_array("u8s").unwrap(), [1, 2]);
    assert_eq!(md.u32_array("u32s").unwrap(), [1, 4_000_000_000]);
    assert_eq!(md.i32_array("i64s").unwrap(), [-3]);
    assert_eq!(md.f32_array("f64s").unwrap(), [0.25]);
    assert_eq!(md.opt_i32_array("nope").unwrap(), None);
    assert_eq!(md.opt_str_array("nope").unwrap(), None);
    assert_eq!(md.opt_u64("nope").unwrap(), None);
    assert_eq!(md.opt_u32_array("u8s").unwrap(), Some(vec![1, 2]));
}

#[test]
fn err_missing_key() {
    let f = getter_file();
    assert!(
        matches!(f.metadata().u32("nope"), Err(GgufError::MissingKey { key }) if key == "nope")
    );
    assert!(matches!(
        f.metadata().str_array("nope"),
        Err(GgufError::MissingKey { .. })
    ));
}

#[test]
fn err_wrong_type() {
    let f = getter_file();
    let md = f.metadata();
    let e = md.u32("s").unwrap_err();
    assert!(
        matches!(&e, GgufError::WrongType { key, expected: "U32", found: "STRING" } if key == "s")
    );
    assert!(
        e.to_string().contains("`s`") && e.to_string().contains("STRING"),
        "{e}"
    );
    assert!(matches!(
        md.str("u8"),
        Err(GgufError::WrongType { found: "U8", .. })
    ));
    assert!(matches!(md.f32("u8"), Err(GgufError::WrongType { .. })));
    assert!(matches!(md.bool("u8"), Err(GgufError::WrongType { .. })));
    assert!(matches!(
        md.str_array("u8s"),
        Err(GgufError::WrongType {
            found: "ARRAY[U8]",
            ..
        })
    ));
    assert!(matches!(
        md.i32_array("f64s"),
        Err(GgufError::WrongType {
            found: "ARRAY[F64]",
            ..
        })
    ));
    assert!(matches!(
        md.f32_array("s"),
        Err(GgufError::WrongType { .. })
    ));
    assert!(matches!(md.opt_u32("s"), Err(GgufError::WrongType { .. })));
}

#[test]
fn err_out_of_range() {
    let f = getter_file();
    let md = f.metadata();
    assert!(
        matches!(md.u32("neg"), Err(GgufError::OutOfRange { value, found: "I32", expected: "U32", index: None, .. }) if value == "-1")
    );
    assert!(matches!(md.u32("big"), Err(GgufError::OutOfRange { .. })));
    assert!(matches!(md.u64("neg"), Err(GgufError::OutOfRange { .. })));
    let e = md.i32_array("u32s").unwrap_err();
    assert!(matches!(e, GgufError::OutOfRange { index: Some(1), .. }));
    assert!(e.to_string().contains("element 1"), "{e}");
    assert!(matches!(
        md.u32_array("i64s"),
        Err(GgufError::OutOfRange { index: Some(0), .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Writer errors.

#[test]
fn err_data_size() {
    let mut w = GgufWriter::new();
    let e = w
        .add_tensor("t", &[4], GgmlType::F32, vec![0u8; 15])
        .unwrap_err();
    assert!(matches!(
        e,
        GgufError::DataSize {
            expected: 16,
            got: 15,
            ..
        }
    ));
    // Streaming: a chunk past the end, or too few bytes.
    w.add_tensor_info("t", &[4], GgmlType::F32).unwrap();
    let e = w
        .write_with(Vec::new(), |_, _, s| s.write_chunk(&[0; 17]))
        .unwrap_err();
    assert!(matches!(
        e,
        GgufError::DataSize {
            expected: 16,
            got: 17,
            ..
        }
    ));
    let e = w
        .write_with(Vec::new(), |_, _, s| s.write_chunk(&[0; 15]))
        .unwrap_err();
    assert!(matches!(
        e,
        GgufError::DataSize {
            expected: 16,
            got: 15,
            ..
        }
    ));
    let mut s = w.start(Vec::new()).unwrap();
    assert!(matches!(
        s.write_tensor_data(&[0; 8]),
        Err(GgufError::DataSize { .. })
    ));
}

#[test]
fn err_writer_state() {
    let mut w = GgufWriter::new();
    w.add_tensor_info("t", &[4], GgmlType::F32).unwrap();
    assert!(matches!(
        w.write_to(Vec::new()),
        Err(GgufError::WriterState(_))
    ));
    let s = w.start(Vec::new()).unwrap();
    assert!(matches!(s.finish(), Err(GgufError::WriterState(_))));
    let mut s = w.start(Vec::new()).unwrap();
    s.write_tensor_data(&[0; 16]).unwrap();
    assert!(matches!(
        s.write_chunk(&[1]),
        Err(GgufError::WriterState(_))
    ));
    let (out, n) = s.finish().unwrap();
    assert_eq!(out.len() as u64, n);
    // A failed path write leaves nothing behind.
    let p = tmp_path("failed.gguf");
    assert!(w.write_to_path(&p).is_err());
    assert!(!p.exists());
    let mut tmp = p.as_os_str().to_owned();
    tmp.push(".tmp");
    assert!(!std::path::Path::new(&tmp).exists());
}

#[test]
fn writer_validates_like_the_reader() {
    let mut w = GgufWriter::new();
    w.add_u32("k", 1).unwrap();
    assert!(matches!(
        w.add_u32("k", 2),
        Err(GgufError::DuplicateKey { .. })
    ));
    assert!(matches!(
        w.add_u32("general.alignment", 3),
        Err(GgufError::BadAlignment { value: 3 })
    ));
    assert!(matches!(
        w.add_u64("general.alignment", 64),
        Err(GgufError::AlignmentType { .. })
    ));
    assert!(matches!(
        w.add_array("deep", MetaArray::Array(vec![MetaArray::Array(vec![])])),
        Err(GgufError::ArrayTooDeep { .. })
    ));
    assert!(matches!(
        w.set_version(1),
        Err(GgufError::UnsupportedVersion { version: 1 })
    ));
    w.add_tensor_info("t", &[32], GgmlType::Q8_0).unwrap();
    assert!(matches!(
        w.add_tensor_info("t", &[32], GgmlType::Q8_0),
        Err(GgufError::DuplicateTensor { .. })
    ));
    assert!(matches!(
        w.add_tensor_info("u", &[], GgmlType::F32),
        Err(GgufError::BadDimCount { .. })
    ));
    assert!(matches!(
        w.add_tensor_info("u", &[1, 1, 1, 1, 1], GgmlType::F32),
        Err(GgufError::BadDimCount { .. })
    ));
    assert!(matches!(
        w.add_tensor_info("u", &[0], GgmlType::F32),
        Err(GgufError::ZeroDim { .. })
    ));
    assert!(matches!(
        w.add_tensor_info("u", &[16], GgmlType::Q8_0),
        Err(GgufError::RowNotBlockMultiple { .. })
    ));
    assert!(matches!(
        w.add_tensor_info("u", &[u64::MAX, 2], GgmlType::F32),
        Err(GgufError::TooManyElems { .. })
    ));
    // The failed adds left nothing behind.
    assert_eq!(w.tensor_infos().len(), 1);
    assert_eq!(w.metadata().len(), 1);
}
