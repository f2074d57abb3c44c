//! The interleaved layout of the 32-block types (Q4_0, Q4_1, Q8_0) for
//! [`ProductOrder::Interleaved`](crate::ProductOrder::Interleaved).
//!
//! A row's blocks go in groups of eight. In a group, 32-bit lane `j` of every 32-byte vector
//! belongs to block `j`, so eight `vpdpbusd` leave each block's whole integer sum in its own lane
//! and one multiply and one FMA apply the eight blocks' scales at once (ggml's order needs an FMA
//! per block). A group takes exactly the bytes of its eight GGUF blocks, so a repacked row has
//! the GGUF row's size.
//!
//! The blocks after the last whole group go in pairs (a 576-wide row: two groups and a pair),
//! block `A` in lanes 0-3 and `B` in lanes 4-7, and a last odd block stays a GGUF block.
//!
//! Group layout, `hdr` = 16 bytes (32 for Q4_1):
//! - bytes `2j..2j+2`: block `j`'s scale `d` (f16); Q4_1: bytes `16+2j..`: its `m`;
//! - Q4_0 / Q4_1: byte `hdr + 32v + 4j + i` holds element `8v + i` of block `j` in its low
//!   nibble and element `8v + 4 + i` in its high nibble (`v < 4`, `i < 4`);
//! - Q8_0: byte `hdr + 32u + 4j + i` is element `4u + i` of block `j` (`u < 8`).
//!
//! Activations (Q8_0 / Q8_1 values) of a group: byte `32u + 4j + i` is element `4u + i` of
//! block `j`, so activation vector `2v` meets a nibble row's low nibbles of vector `v` and
//! `2v + 1` its high nibbles.
//!
//! Pair layout, `phdr` = 4 bytes (8 for Q4_1): `d_A`, `d_B` (f16; Q4_1: then `m_A`, `m_B`),
//! then for Q4_0 / Q4_1 the two blocks' 16 GGUF quant bytes one after the other (low nibbles:
//! elements 0-15, high: 16-31), for Q8_0 `A[0..16] B[0..16] A[16..32] B[16..32]`. A pair's
//! activations are laid out as Q8_0's quants.

use crate::GgmlType;

/// Blocks in a group: one per 32-bit lane of a 256-bit vector.
pub(crate) const GROUP_BLOCKS: usize = 8;

/// Whether `ty` has an interleaved layout.
pub(crate) fn interleavable(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0)
}

/// Bytes of a group's scales (and Q4_1's mins) before its quants.
pub(crate) fn group_header_bytes(ty: GgmlType) -> usize {
    if ty == GgmlType::Q4_1 {
        32
    } else {
        16
    }
}

/// Bytes of one GGUF block of `ty` and the offset of its quants.
fn block_layout(ty: GgmlType) -> (usize, usize) {
    match ty {
        GgmlType::Q4_1 => (20, 4),
        GgmlType::Q4_0 => (18, 2),
        _ => (34, 2),
    }
}

/// Element `e` (0..32) of a GGUF block of `ty`: the nibble (0..15) or the signed byte as u8.
fn element(ty: GgmlType, block: &[u8], e: usize) -> u8 {
    let (_, qoff) = block_layout(ty);
    match ty {
        GgmlType::Q8_0 => block[qoff + e],
        _ if e < 16 => block[qoff + e] & 0x0f,
        _ => block[qoff + e - 16] >> 4,
    }
}

/// Repacks one row of `k` elements of `ty` (GGUF blocks) into the interleaved layout, in place
/// of the same number of bytes.
///
/// The caller checked that `ty` is interleavable, `k` a whole number of blocks and both slices
/// exactly one row long.
pub(crate) fn repack_row(ty: GgmlType, k: usize, src: &[u8], dst: &mut [u8]) {
    let (bb, qoff) = block_layout(ty);
    let nb = k / 32;
    let (ng, pairs, _) = row_parts(nb);
    let hdr = group_header_bytes(ty);
    for g in 0..ng {
        let blocks = &src[g * GROUP_BLOCKS * bb..(g + 1) * GROUP_BLOCKS * bb];
        let out = &mut dst[g * GROUP_BLOCKS * bb..(g + 1) * GROUP_BLOCKS * bb];
        for j in 0..GROUP_BLOCKS {
            let blk = &blocks[j * bb..(j + 1) * bb];
            out[2 * j..2 * j + 2].copy_from_slice(&blk[0..2]);
            if ty == GgmlType::Q4_1 {
                out[16 + 2 * j..18 + 2 * j].copy_from_slice(&blk[2..4]);
            }
            if ty != GgmlType::Q8_0 {
                for i in 0..4 {
                    for v in 0..4 {
                        out[hdr + 32 * v + 4 * j + i] = element(ty, blk, 8 * v + i) | (element(ty, blk, 8 * v + 4 + i) << 4);
                    }
                }
            }
        }
        if ty == GgmlType::Q8_0 {
            // Q8_0's quants go where the activations' values go.
            group_values(|j| &blocks[j * bb + qoff..j * bb + qoff + 32], &mut out[hdr..hdr + 256]);
        }
    }
    let phdr = pair_header_bytes(ty);
    for p in 0..pairs {
        let b0 = ng * GROUP_BLOCKS + 2 * p;
        let (a, b) = (&src[b0 * bb..(b0 + 1) * bb], &src[(b0 + 1) * bb..(b0 + 2) * bb]);
        let out = &mut dst[b0 * bb..(b0 + 2) * bb];
        out[0..2].copy_from_slice(&a[0..2]);
        out[2..4].copy_from_slice(&b[0..2]);
        if ty == GgmlType::Q4_1 {
            out[4..6].copy_from_slice(&a[2..4]);
            out[6..8].copy_from_slice(&b[2..4]);
        }
        if ty == GgmlType::Q8_0 {
            pair_values(&a[qoff..qoff + 32], &b[qoff..qoff + 32], &mut out[phdr..phdr + 64]);
        } else {
            out[phdr..phdr + 16].copy_from_slice(&a[qoff..qoff + 16]);
            out[phdr + 16..phdr + 32].copy_from_slice(&b[qoff..qoff + 16]);
        }
    }
    let tail = (ng * GROUP_BLOCKS + 2 * pairs) * bb;
    dst[tail..nb * bb].copy_from_slice(&src[tail..nb * bb]);
}

/// Bytes of a pair's scales (and Q4_1's mins) before its quants.
pub(crate) fn pair_header_bytes(ty: GgmlType) -> usize {
    if ty == GgmlType::Q4_1 {
        8
    } else {
        4
    }
}

/// Groups, pairs and single blocks (0 or 1) of a row of `nb` blocks.
pub(crate) fn row_parts(nb: usize) -> (usize, usize, usize) {
    let ng = nb / GROUP_BLOCKS;
    let rest = nb - ng * GROUP_BLOCKS;
    (ng, rest / 2, rest % 2)
}

/// A group's 8-bit values (`vals(j)`: block `j`'s 32) into its 256 bytes: byte `32u + 4j + i`
/// is element `4u + i` of block `j`. Activations, and Q8_0's weight quants, are laid out so.
fn group_values<'a>(vals: impl Fn(usize) -> &'a [u8], out: &mut [u8]) {
    for j in 0..GROUP_BLOCKS {
        let v = vals(j);
        for u in 0..8 {
            out[32 * u + 4 * j..32 * u + 4 * j + 4].copy_from_slice(&v[4 * u..4 * u + 4]);
        }
    }
}

/// A pair's 8-bit values (blocks `a` and `b`, 32 each) into its 64 bytes:
/// `a[0..16] b[0..16] a[16..32] b[16..32]`.
fn pair_values(a: &[u8], b: &[u8], out: &mut [u8]) {
    out[0..16].copy_from_slice(&a[0..16]);
    out[16..32].copy_from_slice(&b[0..16]);
    out[32..48].copy_from_slice(&a[16..32]);
    out[48..64].copy_from_slice(&b[16..32]);
}

/// Writes one token's `k` activation values (`vals(b)`: block `b`'s 32 bytes) into `qs` in the
/// interleaved order: whole groups transposed by 32-bit lanes, pairs by halves, a last odd block
/// as it is.
pub(crate) fn interleave_activations<'a>(k: usize, vals: impl Fn(usize) -> &'a [u8], qs: &mut [u8]) {
    let nb = k / 32;
    let (ng, pairs, _) = row_parts(nb);
    for g in 0..ng {
        group_values(|j| vals(g * GROUP_BLOCKS + j), &mut qs[256 * g..256 * (g + 1)]);
    }
    for p in 0..pairs {
        let b0 = ng * GROUP_BLOCKS + 2 * p;
        pair_values(vals(b0), vals(b0 + 1), &mut qs[32 * b0..32 * (b0 + 2)]);
    }
    for b in ng * GROUP_BLOCKS + 2 * pairs..nb {
        qs[32 * b..32 * (b + 1)].copy_from_slice(vals(b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row whose every element and scale differs from every other, so any two positions that
    /// the layout could confuse give different bytes.
    fn distinct_row(ty: GgmlType, nb: usize) -> Vec<u8> {
        let (bb, qoff) = block_layout(ty);
        let mut row = vec![0u8; nb * bb];
        for b in 0..nb {
            let blk = &mut row[b * bb..(b + 1) * bb];
            blk[..qoff].iter_mut().enumerate().for_each(|(i, x)| *x = (b * 7 + i * 3 + 1) as u8);
            for (i, x) in blk[qoff..].iter_mut().enumerate() {
                *x = if ty == GgmlType::Q8_0 { (b * 37 + i * 5) as u8 } else { ((b + 3 * i) as u8 & 0x0f) | ((((b * 5 + 7 * i + 9) as u8) & 0x0f) << 4) };
            }
        }
        row
    }

    #[test]
    fn groups_hold_each_blocks_elements_in_their_lanes() {
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
            let nb = 19; // two groups, a pair and an odd block
            let (bb, _) = block_layout(ty);
            let src = distinct_row(ty, nb);
            let mut dst = vec![0u8; src.len()];
            repack_row(ty, nb * 32, &src, &mut dst);
            let hdr = group_header_bytes(ty);
            for g in 0..2 {
                let grp = &dst[g * 8 * bb..(g + 1) * 8 * bb];
                for j in 0..8 {
                    let blk = &src[(g * 8 + j) * bb..(g * 8 + j + 1) * bb];
                    assert_eq!(grp[2 * j..2 * j + 2], blk[0..2], "{ty} d of block {j}");
                    if ty == GgmlType::Q4_1 {
                        assert_eq!(grp[16 + 2 * j..18 + 2 * j], blk[2..4], "{ty} m of block {j}");
                    }
                    for e in 0..32 {
                        let got = match ty {
                            GgmlType::Q8_0 => grp[hdr + 32 * (e / 4) + 4 * j + e % 4],
                            _ => {
                                let byte = grp[hdr + 32 * (e / 8) + 4 * j + e % 4];
                                if e % 8 < 4 {
                                    byte & 0x0f
                                } else {
                                    byte >> 4
                                }
                            }
                        };
                        assert_eq!(got, element(ty, blk, e), "{ty} group {g} block {j} element {e}");
                    }
                }
            }
            // The pair (blocks 16 and 17): lanes 0-3 hold A's elements, 4-7 B's.
            let (pair, phdr) = (&dst[16 * bb..18 * bb], pair_header_bytes(ty));
            for (j, blk) in [&src[16 * bb..17 * bb], &src[17 * bb..18 * bb]].into_iter().enumerate() {
                assert_eq!(pair[2 * j..2 * j + 2], blk[0..2], "{ty} pair d of block {j}");
                if ty == GgmlType::Q4_1 {
                    assert_eq!(pair[4 + 2 * j..6 + 2 * j], blk[2..4], "{ty} pair m of block {j}");
                }
                for e in 0..32 {
                    let got = match ty {
                        GgmlType::Q8_0 => pair[phdr + 32 * (e / 16) + 16 * j + e % 16],
                        _ => {
                            let byte = pair[phdr + 16 * j + e % 16];
                            if e < 16 {
                                byte & 0x0f
                            } else {
                                byte >> 4
                            }
                        }
                    };
                    assert_eq!(got, element(ty, blk, e), "{ty} pair block {j} element {e}");
                }
            }
            assert_eq!(dst[18 * bb..], src[18 * bb..], "{ty}: the odd last block stays a GGUF block");
        }
    }

    #[test]
    fn activations_meet_their_weights_lane_for_lane() {
        let nb = 19;
        let vals: Vec<u8> = (0..nb * 32).map(|i| (i * 7 + i / 32) as u8).collect();
        let mut qs = vec![0u8; nb * 32];
        interleave_activations(nb * 32, |b| &vals[32 * b..32 * (b + 1)], &mut qs);
        for g in 0..2 {
            for j in 0..8 {
                for e in 0..32 {
                    assert_eq!(qs[256 * g + 32 * (e / 4) + 4 * j + e % 4], vals[(8 * g + j) * 32 + e]);
                }
            }
        }
        for (j, half) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let (at, from) = (512 + 32 * half + 16 * j, (16 + j) * 32 + 16 * half);
            assert_eq!(qs[at..at + 16], vals[from..from + 16], "pair block {j} half {half}");
        }
        assert_eq!(qs[576..], vals[576..]);
    }
}
