//! A counter-based generator of normal-ish numbers: every value is a pure function of
//! (seed, tensor, row, column), so any split of the work gives the same bytes.

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finalizer: a bijective 64-bit mix with good avalanche.
#[inline(always)]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key of one row of one tensor.
#[inline]
pub(crate) fn row_key(seed: u64, tensor: usize, row: u64) -> u64 {
    let s = mix64(seed ^ 0x5851_f42d_4c95_7f2d);
    let t = mix64((tensor as u64).wrapping_add(1).wrapping_mul(GOLDEN) ^ s);
    mix64(t.wrapping_add(row.wrapping_mul(0xd605_bbb5_8c8a_bbfd)))
}

/// Standard deviation of the sum of four uniform 16-bit integers: `65536 * sqrt(4 / 12)`.
const SUM4_STD: f32 = 37_837.23;
/// Mean of that sum: `4 * 65535 / 2`.
const SUM4_MEAN: f32 = 131_070.0;

/// Fills `out` with `mean + std * z`, `z` approximately standard normal (Irwin–Hall with four
/// 16-bit uniforms from one hashed counter: bounded by ±3.46, variance exactly 1).
#[inline]
pub(crate) fn fill_normal(key: u64, mean: f32, std: f32, out: &mut [f32]) {
    let scale = std / SUM4_STD;
    let offset = mean - SUM4_MEAN * scale;
    for (i, o) in out.iter_mut().enumerate() {
        let b = mix64(key.wrapping_add((i as u64).wrapping_mul(GOLDEN)));
        let s = (b & 0xffff) + ((b >> 16) & 0xffff) + ((b >> 32) & 0xffff) + (b >> 48);
        *o = s as f32 * scale + offset;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synth_rng_moments() {
        let mut v = vec![0f32; 1 << 16];
        fill_normal(row_key(1, 2, 3), 0.5, 2.0, &mut v);
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!((mean - 0.5).abs() < 0.05, "mean {mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.05, "std {}", var.sqrt());
        assert_ne!(row_key(1, 2, 3), row_key(1, 2, 4));
        assert_ne!(row_key(1, 2, 3), row_key(1, 3, 3));
        assert_ne!(row_key(1, 2, 3), row_key(2, 2, 3));
    }
}
