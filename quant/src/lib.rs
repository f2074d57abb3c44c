//! GGML quantized block formats: dequantization, reference quantization, and the CPU kernels
//! of the forward pass (quantized matrix products and f16/f32 dots), chosen once at run time
//! from the CPU's instruction set (scalar, AVX2, AVX-512 VNNI).
//!
//! Block layouts are exactly GGML's. Weight types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K,
//! Q5_K, Q6_K; activation types: Q8_0, Q8_1, Q8_K (and F32 for float weights).
//!
//! ```
//! use strata_quant::{Kernels, GgmlType, quantize, activation_row_bytes};
//! let k = 64;
//! let w: Vec<f32> = (0..2 * k).map(|i| (i as f32 * 0.37).sin()).collect();
//! let mut wq = vec![0u8; 2 * GgmlType::Q4_1.row_bytes(k as u64).unwrap() as usize];
//! quantize(GgmlType::Q4_1, &w, &mut wq).unwrap();
//! let kern = Kernels::best();
//! let x: Vec<f32> = (0..k).map(|i| (i as f32 * 0.11).cos()).collect();
//! let mut xq = vec![0u8; activation_row_bytes(GgmlType::Q4_1, k)];
//! kern.quantize_activations(GgmlType::Q4_1, &x, &mut xq).unwrap();
//! let mut out = [0f32; 2];
//! kern.matmul(GgmlType::Q4_1, &wq, k, 0..2, &xq, 1, &mut out).unwrap();
//! ```

#[macro_use]
mod pack;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod ggml_float;
mod interleave;
mod kernels;
mod reference;
mod scalar;
pub mod types;

pub use ggml_float::AttnOrder;
pub use kernels::{activation_row_bytes, ActivationPacker, Kernels, PackedActivations, ProductOrder, SimdLevel};
pub use reference::{dequantize, get_scale_min_k4, quantize};
pub use types::GgmlType;

/// Errors of this crate's entry points.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The operation does not support this tensor type.
    #[error("tensor type {ty} is not supported by {op}")]
    Unsupported {
        /// The type asked for.
        ty: GgmlType,
        /// The operation refusing it.
        op: &'static str,
    },
    /// An element count that is not a whole number of blocks.
    #[error("{elems} elements of {ty} are not a whole number of {block}-element blocks")]
    NotBlockMultiple {
        /// The type.
        ty: GgmlType,
        /// The element count given.
        elems: usize,
        /// The block size it must be a multiple of.
        block: usize,
    },
    /// A buffer of the wrong length.
    #[error("{what}: expected {expected}, got {got}")]
    Length {
        /// Which buffer.
        what: &'static str,
        /// The length required.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// A row range beyond the weights given.
    #[error("rows {start}..{end} out of range: the weights hold {available} rows")]
    RowsOutOfRange {
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// Whole rows in the weights.
        available: usize,
    },
}
