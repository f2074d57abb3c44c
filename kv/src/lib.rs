//! `strata-kv`: the KV arena's pure logic.
//!
//! * [`layout`]: where every layer's K and V tensor lives in the one shared KV allocation
//!   (4 KiB-aligned tensors packed into chunks of at most 1 GiB), and a layout hash that the
//!   exporting and importing devices compare before they start.
//! * [`arena`]: paged blocks of cells, per-sequence block tables, block ownership (free,
//!   prefill, decode, cached prefix), hand-off between owners, and the prefix cache with LRU
//!   eviction. A pure state machine with no threads; the broker actor is built on it.
//!
//! The layout's `n_cells / block_size` blocks are the arena's blocks: block `b` holds cells
//! `b * block_size .. (b + 1) * block_size`, and the byte address of one cell's row of one
//! tensor is [`KvLayout::cell_addr`].

#![warn(missing_docs)]

pub mod arena;
pub mod layout;

pub use arena::{
    cell_of, chain_key, ArenaStats, BlockId, BlockInfo, Cancelled, CellCopy, Finished, KvArena, KvError,
    Owner, PrefixKey, Reserved, SeqId, SeqStart,
};
pub use layout::{
    CellAddr, KvDtype, KvLayout, KvShape, KvTensorKind, LayoutError, LayoutParams, TensorPlace,
    DEFAULT_ALIGNMENT, DEFAULT_BLOCK_SIZE, DEFAULT_CHUNK_LIMIT,
};
