//! Layout tests: alignment and chunk limits over many shapes, a pinned golden hash, hash
//! equality for independent computations and inequality whenever any input differs.

use proptest::prelude::*;
use strata_kv::{
    KvDtype, KvLayout, KvShape, KvTensorKind, LayoutError, LayoutParams, DEFAULT_CHUNK_LIMIT,
};

fn smollm2() -> LayoutParams {
    // SmolLM2-135M: 30 layers, 3 KV heads, head_dim 64; 8192 cells.
    LayoutParams::new(
        KvShape {
            n_layers: 30,
            n_kv_heads: 3,
            head_dim: 64,
            dtype: KvDtype::F16,
        },
        8192,
    )
}

/// The hash is SHA-256 over a fixed little-endian encoding, so it is the same on every machine
/// and every run. If this value changes, the layout rules changed: bump the encoding tag.
/// The value was also reproduced independently (Python `hashlib` + `struct`, from the encoding
/// documented on `KvLayout::canonical_encoding`).
#[test]
fn golden_hash_is_pinned() {
    let l = KvLayout::compute(&smollm2()).unwrap();
    assert_eq!(
        l.hash_hex(),
        "905a38ae80292261eea80bdf5c5b058044145ced9a93c2f7970586843799425e"
    );
}

#[test]
fn independent_computations_agree() {
    let a = KvLayout::compute(&smollm2()).unwrap();
    let mut p = smollm2();
    p.n_cells = 4096;
    p.n_cells *= 2; // reach the same params by another path
    let b = KvLayout::compute(&p).unwrap();
    assert_eq!(a.hash, b.hash);
    assert_eq!(a, b);
    a.check_same(&b).unwrap();
}

#[test]
fn mismatch_error_prints_both_layouts() {
    let a = KvLayout::compute(&smollm2()).unwrap();
    let mut p = smollm2();
    p.n_cells = 4096;
    p.shape.dtype = KvDtype::Int8;
    let b = KvLayout::compute(&p).unwrap();
    let e = a.check_same(&b).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, LayoutError::Mismatch { .. }));
    assert!(
        msg.contains("n_cells=8192") && msg.contains("n_cells=4096"),
        "{msg}"
    );
    assert!(
        msg.contains("dtype=f16") && msg.contains("dtype=int8"),
        "{msg}"
    );
    assert!(
        msg.contains(&a.hash_hex()) && msg.contains(&b.hash_hex()),
        "{msg}"
    );
    assert!(
        msg.contains("n_cells (8192 vs 4096)") && msg.contains("dtype (f16 vs int8)"),
        "{msg}"
    );
    assert!(!msg.contains("head_dim ("), "{msg}");
    // Also detected when only placements were tampered with.
    let mut c = a.clone();
    c.tensors[3].offset_bytes += 4096;
    assert!(a.check_same(&c).is_err());
}

#[test]
fn small_chunk_limit_forces_many_chunks() {
    let mut p = smollm2();
    p.n_cells = 32; // 384 B rows -> 12 KiB tensors
    p.chunk_limit_bytes = 3 * 12 * 1024; // three tensors per chunk
    let l = KvLayout::compute(&p).unwrap();
    assert_eq!(l.chunks.len(), 20);
    assert!(l.chunks.iter().all(|&c| c == 3 * 12 * 1024));
    let t = l.place(1, KvTensorKind::V).unwrap(); // 4th tensor: chunk 1, offset 0
    assert_eq!((t.chunk, t.offset_bytes), (1, 0));
}

#[test]
fn int8_has_scale_tensors() {
    let mut p = smollm2();
    p.shape.dtype = KvDtype::Int8;
    let l = KvLayout::compute(&p).unwrap();
    assert_eq!(l.tensors.len(), 120);
    let k = l.place(2, KvTensorKind::K).unwrap();
    assert_eq!(k.row_stride_bytes, 3 * 64);
    let s = l.place(2, KvTensorKind::VScale).unwrap();
    assert_eq!(s.row_stride_bytes, 3 * 4);
    assert_eq!(s.bytes, 8192 * 12);
    assert_eq!(s.layer, 2);
    assert_eq!(s.kind, KvTensorKind::VScale);
}

#[test]
fn tensor_larger_than_chunk_limit_is_an_error() {
    let p = LayoutParams::new(
        KvShape {
            n_layers: 2,
            n_kv_heads: 8,
            head_dim: 128,
            dtype: KvDtype::F16,
        },
        1 << 20, // 2 KiB rows -> 2 GiB per tensor
    );
    let e = KvLayout::compute(&p).unwrap_err();
    match &e {
        LayoutError::TensorTooLarge {
            max_cells, bytes, ..
        } => {
            assert_eq!(*max_cells, DEFAULT_CHUNK_LIMIT / 2048);
            assert_eq!(*bytes, 2 << 30);
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("at most 524288 cells fit"), "{e}");
}

#[test]
fn invalid_params_are_rejected() {
    type Mutation = Box<dyn Fn(&mut LayoutParams)>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("zero layers", Box::new(|p| p.shape.n_layers = 0)),
        ("zero heads", Box::new(|p| p.shape.n_kv_heads = 0)),
        ("zero head_dim", Box::new(|p| p.shape.head_dim = 0)),
        ("zero cells", Box::new(|p| p.n_cells = 0)),
        ("zero block", Box::new(|p| p.block_size = 0)),
        ("cells not blocks", Box::new(|p| p.n_cells = 8193)),
        ("alignment", Box::new(|p| p.alignment = 3000)),
        ("limit", Box::new(|p| p.chunk_limit_bytes = 4096 * 3 + 1)),
        ("limit zero", Box::new(|p| p.chunk_limit_bytes = 0)),
    ];
    for (name, f) in cases {
        let mut p = smollm2();
        f(&mut p);
        let e = KvLayout::compute(&p).unwrap_err();
        assert!(
            matches!(e, LayoutError::InvalidParams { .. }),
            "{name}: {e:?}"
        );
        assert!(e.to_string().contains("n_layers="), "{name}: {e}");
    }
}

fn params_strategy() -> impl Strategy<Value = LayoutParams> {
    (
        1u32..48,
        1u32..16,
        prop_oneof![
            Just(32u32),
            Just(64),
            Just(80),
            Just(96),
            Just(128),
            1u32..300
        ],
        prop_oneof![Just(KvDtype::F16), Just(KvDtype::Int8)],
        1u64..512,
        prop_oneof![Just(16u32), 1u32..64],
        0u32..14,
        1u64..64,
    )
        .prop_map(|(l, h, d, dtype, blocks, bs, align_log, limit_mul)| {
            let alignment = 1u64 << align_log;
            LayoutParams {
                shape: KvShape {
                    n_layers: l,
                    n_kv_heads: h,
                    head_dim: d,
                    dtype,
                },
                n_cells: blocks * u64::from(bs),
                block_size: bs,
                alignment,
                // Limits from tiny (one alignment unit) to a few MiB, so many chunks occur.
                chunk_limit_bytes: alignment * limit_mul * if align_log < 8 { 4096 } else { 16 },
            }
        })
}

fn check_layout(p: &LayoutParams, l: &KvLayout) -> Result<(), TestCaseError> {
    let s = &p.shape;
    let per_layer = if s.dtype == KvDtype::Int8 { 4 } else { 2 };
    prop_assert_eq!(l.tensors.len(), s.n_layers as usize * per_layer);
    prop_assert!(!l.chunks.is_empty());
    for &c in &l.chunks {
        prop_assert!(c > 0 && c <= p.chunk_limit_bytes && c % p.alignment == 0);
    }
    let mut prev: Option<&strata_kv::TensorPlace> = None;
    for (i, t) in l.tensors.iter().enumerate() {
        prop_assert_eq!(t.layer as usize, i / per_layer);
        let row = match t.kind {
            KvTensorKind::K | KvTensorKind::V => {
                u64::from(s.n_kv_heads) * u64::from(s.head_dim) * s.dtype.elem_bytes()
            }
            _ => u64::from(s.n_kv_heads) * 4,
        };
        prop_assert_eq!(t.row_stride_bytes, row);
        prop_assert_eq!(t.bytes, row * p.n_cells);
        prop_assert_eq!(t.offset_bytes % p.alignment, 0);
        prop_assert!((t.chunk as usize) < l.chunks.len());
        prop_assert!(t.offset_bytes + t.bytes <= l.chunks[t.chunk as usize]);
        prop_assert_eq!(l.place(t.layer, t.kind), Some(t));
        match prev {
            None => prop_assert_eq!((t.chunk, t.offset_bytes), (0, 0)),
            Some(q) => {
                let q_end = q.offset_bytes + q.bytes;
                if t.chunk == q.chunk {
                    // packed right after the previous tensor, on the next aligned boundary
                    prop_assert_eq!(t.offset_bytes, q_end.div_ceil(p.alignment) * p.alignment);
                } else {
                    // greedy: a new chunk only when the tensor did not fit in the previous one
                    prop_assert_eq!(t.chunk, q.chunk + 1);
                    prop_assert_eq!(t.offset_bytes, 0);
                    prop_assert!(
                        q_end.div_ceil(p.alignment) * p.alignment + t.bytes > p.chunk_limit_bytes
                    );
                    prop_assert_eq!(
                        l.chunks[q.chunk as usize],
                        q_end.div_ceil(p.alignment) * p.alignment
                    );
                }
            }
        }
        prev = Some(t);
    }
    let last = prev.unwrap();
    prop_assert_eq!(last.chunk as usize, l.chunks.len() - 1);
    prop_assert_eq!(
        *l.chunks.last().unwrap(),
        (last.offset_bytes + last.bytes).div_ceil(p.alignment) * p.alignment
    );
    // cell addresses stay inside their tensor
    let a = l
        .cell_addr(s.n_layers - 1, KvTensorKind::V, p.n_cells - 1)
        .unwrap();
    let v = l.place(s.n_layers - 1, KvTensorKind::V).unwrap();
    prop_assert_eq!(a.offset_bytes + a.len_bytes, v.offset_bytes + v.bytes);
    prop_assert!(l.cell_addr(0, KvTensorKind::K, p.n_cells).is_none());
    Ok(())
}

/// Change exactly one input to another valid value.
fn mutate(p: &LayoutParams, field: usize, delta: u32) -> LayoutParams {
    let mut q = *p;
    let d = delta.max(1);
    match field {
        0 => q.shape.n_layers += d,
        1 => q.shape.n_kv_heads += d,
        2 => q.shape.head_dim += d,
        3 => {
            q.shape.dtype = match p.shape.dtype {
                KvDtype::F16 => KvDtype::Int8,
                KvDtype::Int8 => KvDtype::F16,
            }
        }
        4 => q.n_cells += u64::from(d) * u64::from(p.block_size),
        5 => {
            // keep n_cells a multiple: scale both
            q.block_size *= 2;
            q.n_cells *= 2;
        }
        6 => {
            q.alignment *= 2;
            q.chunk_limit_bytes *= 2;
        }
        _ => q.chunk_limit_bytes += p.alignment * u64::from(d),
    }
    q
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn layouts_hold_alignment_and_chunk_limits(p in params_strategy()) {
        match KvLayout::compute(&p) {
            Ok(l) => {
                check_layout(&p, &l)?;
                // a second, independent computation is identical
                let l2 = KvLayout::compute(&p.clone()).unwrap();
                prop_assert_eq!(l.hash, l2.hash);
                prop_assert!(l.check_same(&l2).is_ok());
            }
            Err(LayoutError::TensorTooLarge { bytes, chunk_limit_bytes, max_cells, .. }) => {
                prop_assert!(bytes > chunk_limit_bytes);
                prop_assert_eq!(max_cells % u64::from(p.block_size), 0);
                prop_assert!(max_cells < p.n_cells);
                if max_cells > 0 {
                    let mut q = p;
                    q.n_cells = max_cells;
                    let l = KvLayout::compute(&q);
                    prop_assert!(l.is_ok(), "max_cells {} does not fit: {:?}", max_cells, l);
                    check_layout(&q, &l.unwrap())?;
                }
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn hash_differs_whenever_any_input_differs(
        p in params_strategy(), field in 0usize..8, delta in 1u32..5
    ) {
        let q = mutate(&p, field, delta);
        prop_assume!(q != p);
        if let (Ok(a), Ok(b)) = (KvLayout::compute(&p), KvLayout::compute(&q)) {
            prop_assert_ne!(a.hash, b.hash);
            let e = a.check_same(&b).unwrap_err().to_string();
            prop_assert!(e.contains(&p.to_string()) && e.contains(&q.to_string()), "{}", e);
        }
    }
}

/// With int8 and head_dim < 4 the scale rows are wider than the K/V rows: the suggested cell
/// count must fit the widest tensor (found by the property test above).
#[test]
fn max_cells_accounts_for_wide_scale_rows() {
    let p = LayoutParams {
        shape: KvShape {
            n_layers: 1,
            n_kv_heads: 12,
            head_dim: 1,
            dtype: KvDtype::Int8,
        },
        n_cells: 10944,
        block_size: 36,
        alignment: 256,
        chunk_limit_bytes: 4096,
    };
    let Err(LayoutError::TensorTooLarge { max_cells, .. }) = KvLayout::compute(&p) else {
        panic!("expected TensorTooLarge")
    };
    assert_eq!(max_cells, 72); // 4096 / 48-byte scale rows = 85 -> 72 in whole blocks
    let mut q = p;
    q.n_cells = max_cells;
    KvLayout::compute(&q).unwrap();
}
