//! Attention benchmark: the CPU device's decode attention for a batch of sequences over a paged
//! f16 KV cache (the shape of SmolLM2-135M: 30 layers, 3 KV heads of 64, GQA groups of 3; the
//! default 8 sequences of 320 positions hold 59 MB, more than the L3 cache, one sequence fits),
//! one thread, the best of PASSES (15) passes' wall time. It calls the kernels in the order
//! `strata-gpu`'s `attend_group` does (scores, softmax, value sums, finish), each call over
//! KV_PER_CALL of a cell's KV heads: 3 (the default) as the CPU device's items of a whole token,
//! 1 as its items of one KV head.
//!
//! `cargo run --release -p strata-quant --example attention_bench [SEQS] [LEN] [PASSES] [KV_PER_CALL]`
//! (`ORDER=sequential`: the order the interleaved products pair with; default ggml's decode order)

use half::f16;
use strata_quant::{AttnOrder, Kernels};

const LAYERS: usize = 30;
const KV_HEADS: usize = 3;
const GROUP: usize = 3;
const HD: usize = 64;
const BLOCK: usize = 16;
/// f16 elements per cell (every KV head's columns), as the arena lays rows out.
const ROW: usize = KV_HEADS * HD;

/// Rows `0..len` of `kv_heads` KV heads from column `col` through a block table.
fn fill<'a>(arena: &'a [f16], table: &[usize], col: usize, kv_heads: usize, len: usize, rows: &mut Vec<&'a [f16]>) {
    rows.clear();
    for p in 0..len {
        let cell = table[p / BLOCK] * BLOCK + p % BLOCK;
        rows.push(&arena[cell * ROW + col..cell * ROW + col + kv_heads * HD]);
    }
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let seqs = args.first().copied().unwrap_or(8);
    let len = args.get(1).copied().unwrap_or(320);
    // KV heads per call: 1 (an item per KV head) or all of a cell's (an item per token).
    let kv_per_item = args.get(3).copied().unwrap_or(KV_HEADS).clamp(1, KV_HEADS);
    assert!(KV_HEADS.is_multiple_of(kv_per_item), "KV heads per item must divide {KV_HEADS}");
    let blocks_per_seq = len.div_ceil(BLOCK);
    let n_blocks = seqs * LAYERS * blocks_per_seq;
    // One allocation, K then V; blocks dealt to (sequence, layer) in a scrambled order, as a
    // paged cache that has served many requests holds them.
    let mut seed = 12345u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let cells = n_blocks * BLOCK;
    let arena: Vec<f16> = (0..2 * cells * ROW).map(|i| f16::from_f32(((i * 7919) % 2001) as f32 / 1000.0 - 1.0)).collect();
    let (k_arena, v_arena) = arena.split_at(cells * ROW);
    let mut order: Vec<usize> = (0..n_blocks).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, next() % (i + 1));
    }
    let tables: Vec<&[usize]> = order.chunks(blocks_per_seq).collect();
    println!(
        "{seqs} sequences x {LAYERS} layers, {len} positions, KV {:.1} MB",
        (2 * cells * ROW * 2) as f64 / 1e6
    );
    let kern = Kernels::best();
    let heads = GROUP * kv_per_item;
    let q: Vec<f32> = (0..heads * HD).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect();
    // ORDER=sequential: the interleaved products' attention order (one value lane).
    let order_kind = if std::env::var("ORDER").is_ok_and(|o| o == "sequential") { AttnOrder::Sequential } else { AttnOrder::Decode };
    let lanes = order_kind.value_lanes();
    let mut scores = vec![0f32; heads * len];
    let mut acc = vec![0f32; heads * lanes * HD];
    let mut out = vec![0f32; heads * HD];
    let mut rows: Vec<&[f16]> = Vec::with_capacity(len);
    let mut checksum = 0f64;
    let mut best = f64::MAX;
    for _ in 0..args.get(2).copied().unwrap_or(15) {
        let start = std::time::Instant::now();
        for table in &tables {
            for kvh in (0..KV_HEADS).step_by(kv_per_item) {
                let col = kvh * HD;
                fill(k_arena, table, col, kv_per_item, len, &mut rows);
                kern.attn_dots_f16_rows(&rows, &q, HD, kv_per_item, order_kind, &mut scores, len);
                for s in scores.chunks_exact_mut(len) {
                    kern.softmax_f16(s, 0.125);
                }
                fill(v_arena, table, col, kv_per_item, len, &mut rows);
                kern.values_f16_rows(&mut acc, HD, kv_per_item, order_kind, &scores, len, &rows);
                for h in 0..heads {
                    kern.finish_values(&acc[h * lanes * HD..(h + 1) * lanes * HD], HD, order_kind, &mut out[h * HD..(h + 1) * HD]);
                }
                checksum += out.iter().step_by(HD).map(|&x| x as f64).sum::<f64>();
            }
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    // Reported per (sequence, layer, KV head) whatever the calls' grouping.
    let items = tables.len() * KV_HEADS;
    println!(
        "best pass {:.2} ms: {:.2} us per (sequence, layer, KV head), {:.1} GB/s of K and V (checksum {checksum:.3})",
        best * 1e3,
        best * 1e6 / items as f64,
        (2 * items * len * HD * 2) as f64 / best / 1e9
    );
}
