//! Files and I/O: GGUF, the reader pool, the memory guard.

pub mod gguf;

pub use gguf::{GgufError, GgufFile, GgufWriter, MetaValue, Metadata, TensorInfo};
