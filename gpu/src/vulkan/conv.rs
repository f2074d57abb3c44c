//! Conversions between GGUF's weight formats and the layouts the Vulkan shaders read
//! (`shaders/dequant.glsl`): the quants of Q4_0, Q4_1 and Q8_0 blocks move to 16-byte-aligned
//! arrays so one 128-bit load fetches a block's quants, with the scales in a separate array;
//! Q6_K super-blocks lose their trailing f16 scale to a separate array (so the rest stays 16-byte
//! aligned); Q4_K super-blocks keep their size, d and dmin, but store each 32-element sub-block's
//! quants in 16 bytes of their own (Q4_0's order: elements 0..15 in the low nibbles, 16..31 in the
//! high ones; GGUF interleaves two sub-blocks in 32 bytes), so one 128-bit load fetches a
//! sub-block, and their six-bit scales and mins packed for a decode without branches
//! (`repack_q4_k`); F16/F32 rows are read as GGUF stores them. Types without a shader are widened
//! to F32 at upload.

use half::f16;
use strata_quant::GgmlType;

use super::kernels::WeightFormat;
use crate::DeviceError;

/// A weight as it is laid out in device memory: `main_bytes` at the tensor's address, then
/// `aux_bytes` (the scales of the repacked formats) at `aux_offset` from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuLayout {
    pub format: WeightFormat,
    pub main_bytes: u64,
    pub aux_offset: u64,
    pub aux_bytes: u64,
}

impl GpuLayout {
    /// Total bytes the weight occupies.
    pub fn total_bytes(&self) -> u64 {
        if self.aux_bytes == 0 { self.main_bytes } else { self.aux_offset + self.aux_bytes }
    }
}

/// The shader format a GGUF type is read with on the GPU.
pub fn format_of(ty: GgmlType) -> WeightFormat {
    match ty {
        GgmlType::F16 => WeightFormat::F16,
        GgmlType::Q4_0 => WeightFormat::Q4_0,
        GgmlType::Q4_1 => WeightFormat::Q4_1,
        GgmlType::Q8_0 => WeightFormat::Q8_0,
        GgmlType::Q4_K => WeightFormat::Q4_K,
        GgmlType::Q6_K => WeightFormat::Q6_K,
        _ => WeightFormat::F32,
    }
}

/// The device layout of a `rows` x `cols` weight of type `ty`.
pub fn layout_of(ty: GgmlType, rows: usize, cols: usize) -> GpuLayout {
    let format = format_of(ty);
    let (r, c) = (rows as u64, cols as u64);
    let blocks = r * (c / 32);
    let (main_bytes, aux_bytes) = match format {
        WeightFormat::F32 => (r * c * 4, 0),
        WeightFormat::F16 => (r * c * 2, 0),
        WeightFormat::Q4_0 => (blocks * 16, blocks * 2),
        WeightFormat::Q4_1 => (blocks * 16, blocks * 4),
        WeightFormat::Q8_0 => (blocks * 32, blocks * 2),
        WeightFormat::Q4_K => (r * (c / 256) * 144, 0),
        WeightFormat::Q6_K => (r * (c / 256) * 208, r * (c / 256) * 2),
    };
    GpuLayout { format, main_bytes, aux_offset: main_bytes.next_multiple_of(256), aux_bytes }
}

/// Writes `src` (GGUF bytes of a `rows` x `cols` weight of type `ty`) into `dst` in the layout of
/// [`layout_of`].
///
/// # Errors
/// Lengths that disagree with the type and shape, or a type that cannot be widened.
pub fn convert(ty: GgmlType, src: &[u8], rows: usize, cols: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
    let layout = layout_of(ty, rows, cols);
    if dst.len() as u64 != layout.total_bytes() {
        return Err(DeviceError::BadBatch(format!("conversion of a {rows}x{cols} {ty} weight into {} bytes (needs {})", dst.len(), layout.total_bytes())));
    }
    let expected = ty.row_bytes(cols as u64).map(|b| b * rows as u64);
    if expected != Some(src.len() as u64) {
        return Err(DeviceError::BadBatch(format!("a {rows}x{cols} {ty} weight of {} bytes", src.len())));
    }
    let (main, rest) = dst.split_at_mut(layout.main_bytes as usize);
    let skip = ((layout.aux_offset - layout.main_bytes) as usize).min(rest.len());
    let aux = &mut rest[skip..];
    match layout.format {
        WeightFormat::F16 if ty != GgmlType::F32 => main.copy_from_slice(src),
        WeightFormat::Q4_K => {
            for (b, d) in src.chunks_exact(144).zip(main.chunks_exact_mut(144)) {
                repack_q4_k(b, d);
            }
        }
        WeightFormat::Q6_K => {
            // ql, qh, scales (208 bytes), then d: the quants and scales stay 16-byte aligned.
            for (i, b) in src.chunks_exact(210).enumerate() {
                main[i * 208..(i + 1) * 208].copy_from_slice(&b[..208]);
                aux[i * 2..(i + 1) * 2].copy_from_slice(&b[208..210]);
            }
        }
        WeightFormat::F32 => {
            let mut vals = vec![0f32; rows * cols];
            strata_quant::dequantize(ty, src, &mut vals)?;
            for (d, v) in main.chunks_exact_mut(4).zip(&vals) {
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        WeightFormat::Q4_0 => split_blocks(src, 18, 2, 16, main, aux),
        WeightFormat::Q4_1 => split_blocks(src, 20, 4, 16, main, aux),
        WeightFormat::Q8_0 => split_blocks(src, 34, 2, 32, main, aux),
        _ => unreachable!("F16 is copied as it is"),
    }
    Ok(())
}

/// Splits blocks of `block` bytes (`head` bytes of scales, then `quants` bytes) into the quants
/// array and the scales array.
fn split_blocks(src: &[u8], block: usize, head: usize, quants: usize, main: &mut [u8], aux: &mut [u8]) {
    for (i, b) in src.chunks_exact(block).enumerate() {
        aux[i * head..(i + 1) * head].copy_from_slice(&b[..head]);
        main[i * quants..(i + 1) * quants].copy_from_slice(&b[head..head + quants]);
    }
}

/// One Q4_K super-block (144 bytes) into the device layout: d and dmin as they are; the eight
/// sub-blocks' 6-bit scales and mins in the 12 bytes after them without GGUF's branchy packing
/// (byte j: scale j | the min's low two bits << 6; bytes 8..11: the mins' high four bits, nibble
/// j for sub-block j; shaders/common.glsl's `q4k_scale_min`); then sub-block j's 32 quants at
/// bytes 16 + 16j .. 32 + 16j, element e in byte e % 16's low (e < 16) or high nibble. GGUF holds
/// sub-blocks 2k and 2k + 1 in the low and high nibbles of the same 32 bytes (element e in byte
/// e). No value changes, so neither does any sum over them.
fn repack_q4_k(src: &[u8], dst: &mut [u8]) {
    dst[..4].copy_from_slice(&src[..4]);
    let mut high = 0u32;
    for j in 0..8 {
        let (sc, m) = strata_quant::get_scale_min_k4(j, &src[4..16]);
        dst[4 + j] = sc | ((m & 3) << 6);
        high |= u32::from(m >> 2) << (4 * j);
    }
    dst[12..16].copy_from_slice(&high.to_le_bytes());
    for j in 0..8 {
        let pair = &src[16 + 32 * (j / 2)..48 + 32 * (j / 2)];
        let shift = 4 * (j % 2);
        for i in 0..16 {
            let lo = (pair[i] >> shift) & 15;
            let hi = (pair[i + 16] >> shift) & 15;
            dst[16 + 16 * j + i] = lo | (hi << 4);
        }
    }
}

/// f32 values as little-endian bytes (small weights are uploaded as f32).
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian f32 bytes back to values.
pub fn f32_from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Little-endian u32 bytes back to values.
pub fn u32_from_bytes(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// f16 bits of each value (round to nearest even).
pub fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| f16::from_f32(*x).to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_1_blocks_split_into_quants_and_scales() {
        // Two rows of one block each: d, m, then 16 quant bytes.
        let mut src = Vec::new();
        for r in 0..2u8 {
            src.extend_from_slice(&[1 + r, 2, 3, 4]);
            src.extend((0..16).map(|i| i + 16 * r));
        }
        let l = layout_of(GgmlType::Q4_1, 2, 32);
        let mut dst = vec![0u8; l.total_bytes() as usize];
        convert(GgmlType::Q4_1, &src, 2, 32, &mut dst).expect("convert");
        assert_eq!(&dst[..16], &(0..16).collect::<Vec<u8>>()[..]);
        assert_eq!(&dst[16..32], &(16..32).collect::<Vec<u8>>()[..]);
        assert_eq!(&dst[l.aux_offset as usize..l.aux_offset as usize + 8], &[1, 2, 3, 4, 2, 2, 3, 4]);
    }

    #[test]
    fn q4_k_sub_blocks_get_sixteen_bytes_each() {
        // One super-block: a header of 16 distinct bytes, then quant byte b = (hi << 4) | lo with
        // lo and hi set from b's position, so every element's nibble is known.
        let mut src: Vec<u8> = (0..16u32).map(|i| ((i * 73 + 29) % 256) as u8).collect();
        // (Distinct for elements e and e + 16 of a sub-block and for sub-blocks j and j ^ 1.)
        let nib = |j: usize, e: usize| ((3 * j + 5 * e + 7 * (e / 16)) % 16) as u8;
        for k in 0..4 {
            for b in 0..32 {
                src.push(nib(2 * k, b) | (nib(2 * k + 1, b) << 4));
            }
        }
        let l = layout_of(GgmlType::Q4_K, 1, 256);
        assert_eq!(l.total_bytes(), 144, "the same size as GGUF's");
        let mut dst = vec![0u8; 144];
        convert(GgmlType::Q4_K, &src, 1, 256, &mut dst).expect("convert");
        assert_eq!(&dst[..4], &src[..4], "d and dmin are kept");
        // Every sub-block's scale and min as the shaders decode them (common.glsl's
        // q4k_scale_min) equal GGUF's; the 12 scale bytes vary in their six low bits and in the two
        // high bits GGUF packs the second half's values into.
        let word = |k: usize| u32::from_le_bytes([dst[4 + 4 * k], dst[5 + 4 * k], dst[6 + 4 * k], dst[7 + 4 * k]]);
        let (w0, w1, w2) = (word(0), word(1), word(2));
        for j in 0..8u32 {
            let b = (if j < 4 { w0 } else { w1 } >> (8 * (j % 4))) & 0xFF;
            let decoded = (b & 63, (b >> 6) | (((w2 >> (4 * j)) & 15) << 2));
            let (sc, m) = strata_quant::get_scale_min_k4(j as usize, &src[4..16]);
            assert_eq!(decoded, (u32::from(sc), u32::from(m)), "sub-block {j}");
        }
        for j in 0..8 {
            for e in 0..32 {
                let byte = dst[16 + 16 * j + e % 16];
                let got = if e < 16 { byte & 15 } else { byte >> 4 };
                assert_eq!(got, nib(j, e), "sub-block {j} element {e}");
            }
        }
    }

    #[test]
    fn wrong_lengths_are_refused() {
        let l = layout_of(GgmlType::Q8_0, 1, 32);
        let mut dst = vec![0u8; l.total_bytes() as usize];
        assert!(convert(GgmlType::Q8_0, &[0u8; 33], 1, 32, &mut dst).is_err());
    }
}
