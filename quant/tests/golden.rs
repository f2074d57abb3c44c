//! Golden tests against the `gguf` Python package (fixtures written by
//! `tests/fixtures/make_fixtures.py`): our dequantize equals gguf's bit for bit, and our
//! quantize writes gguf's bytes for every type gguf can quantize.

use std::path::PathBuf;
use strata_quant::{dequantize, quantize, GgmlType};

fn fixture(name: &str) -> Option<Vec<u8>> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    std::fs::read(p).ok()
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

const ALL: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

#[test]
fn dequantize_matches_gguf_bitwise() {
    for ty in ALL {
        let q = fixture(&format!("{}.bin", ty.name())).unwrap_or_else(|| panic!("missing fixture for {ty}"));
        let want = floats(&fixture(&format!("{}.deq.f32", ty.name())).unwrap());
        let mut got = vec![0f32; want.len()];
        dequantize(ty, &q, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{ty} element {i}: {g} vs gguf {w}");
        }
    }
}

#[test]
fn quantize_matches_gguf_bytes() {
    let mut checked = 0;
    for ty in ALL {
        let Some(src) = fixture(&format!("{}.src.f32", ty.name())) else { continue };
        let src = floats(&src);
        let want = fixture(&format!("{}.bin", ty.name())).unwrap();
        let mut got = vec![0u8; want.len()];
        quantize(ty, &src, &mut got).unwrap();
        let bb = ty.block_bytes();
        for (b, (g, w)) in got.chunks(bb).zip(want.chunks(bb)).enumerate() {
            assert_eq!(g, w, "{ty} block {b} differs from gguf's quantizer");
        }
        checked += 1;
    }
    assert_eq!(checked, 6);
}

#[test]
fn k_quant_round_trip_error_is_small() {
    // gguf has no K-quant quantizer; check ours reconstructs within the format's precision.
    let n = 4096;
    let x: Vec<f32> = (0..n).map(|i| ((i as f32 * 0.731).sin() * 3.0 + (i as f32 * 0.07).cos()) * 0.05).collect();
    let rms = (x.iter().map(|v| v * v).sum::<f32>() / n as f32).sqrt();
    for (ty, max_rel_rms) in [(GgmlType::Q4_K, 0.08), (GgmlType::Q5_K, 0.04), (GgmlType::Q6_K, 0.02), (GgmlType::Q8_K, 0.01)] {
        let mut q = vec![0u8; ty.row_bytes(n as u64).unwrap() as usize];
        quantize(ty, &x, &mut q).unwrap();
        let mut y = vec![0f32; n];
        dequantize(ty, &q, &mut y).unwrap();
        let err = (x.iter().zip(&y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / n as f32).sqrt();
        assert!(err < max_rel_rms * rms, "{ty}: rms error {err} vs signal rms {rms}");
    }
    // All-zero input quantizes to all-zero blocks.
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K] {
        let mut q = vec![1u8; ty.block_bytes()];
        quantize(ty, &[0.0; 256], &mut q).unwrap();
        let mut y = vec![1f32; 256];
        dequantize(ty, &q, &mut y).unwrap();
        assert!(y.iter().all(|v| *v == 0.0), "{ty}");
    }
}
