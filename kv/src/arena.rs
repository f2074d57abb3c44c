//! Paged KV blocks: block tables, ownership and the prefix cache, as a pure state machine.
//!
//! The arena's cells are grouped into blocks of `block_size` cells. Every running sequence has a
//! *block table*; position `p` of the sequence lives in cell
//! `table[p / block_size] * block_size + p % block_size` (see [`cell_of`]). Tables grow on demand
//! ([`KvArena::reserve`]), so no sequence reserves its whole context up front.
//!
//! # Block states and owners
//!
//! Every block is in exactly one state:
//!
//! * **Free** ([`Owner::Free`]): on the free list.
//! * **Owned** by exactly one running sequence, whose owner is [`Owner::Prefill`] or
//!   [`Owner::Decode`]; the sequence writes its cells. Ownership is per sequence: a
//!   [`KvArena::hand_off`] moves all of a sequence's own blocks at once.
//! * **Cached prefix** ([`Owner::CachedPrefix`]): a full block of a finished sequence, keyed by
//!   the hash chain of all token ids up to and including it. It is read-only from then on. It is
//!   either *idle* (no running sequence uses it: evictable, in least-recently-used order) or
//!   *pinned* by one or more running sequences that reuse it (its reference count is exactly the
//!   number of block tables that contain it).
//!
//! * **Cached tail** (also [`Owner::CachedPrefix`], always idle): the partial last block of a
//!   finished sequence, kept under the chain key of the blocks before it. It is never shared: the
//!   first sequence whose prompt repeats some of its tokens takes it over as its own block.
//!
//! A sequence's table is `[shared cached-prefix blocks..., own blocks...]`. Only whole, full
//! blocks are ever shared, and a sequence never writes below its reused length, so shared
//! blocks need no copy-on-write; a taken-over tail is owned, and the sequence writes its cells
//! from its reused length on (the stale cells after it are never read before being written).
//!
//! # Prefix reuse
//!
//! [`KvArena::start_sequence`] looks up the longest run of cached blocks matching the prompt,
//! block by block, then a cached tail continuing that run, but never covers the whole prompt: at
//! least one prompt token is always left to compute, since its logits are needed (two after a
//! tail: see `match_tail`). Reuse is in whole shared blocks plus, from a tail, the tokens the
//! prompt repeats, so a repeated prompt reuses all but its last two tokens.
//!
//! When the arena may copy cells ([`KvArena::set_cell_copies`]: the broker holds a copier for
//! the KV memory), a prompt that ends inside a *full* cached block (a repeated prompt whose last
//! block also holds the earlier run's generated tokens) is served the same way: the block's
//! cells the prompt repeats are copied into a new own block ([`SeqStart::copy`]), since a shared
//! block can never be written and a cached one never handed over (that would cut its chain for
//! the prompts after it). The caller performs the copy before anything else touches the arena.
//!
//! Block keys are SHA-256 chains (`key_i = H(key_{i-1}, tokens of block i)`), like vLLM's prefix
//! caching; the cached block also keeps its token ids, which are compared on lookup. When a
//! sequence finishes, its full own blocks enter the cache (a block whose key is already cached
//! is freed instead, and the existing one is refreshed) and its partial last block becomes a
//! cached tail (freed if an equal tail is kept already).
//! Idle cached blocks are released in reverse table order, so the tail of a chain is evicted
//! before its head. A cancelled (or failed, or timed-out) sequence caches nothing: its cells may
//! be half-written.
//!
//! # Capacity
//!
//! [`KvArena::reserve`] is atomic: it either allocates every block it needs (taking free blocks
//! first, then evicting idle cached prefixes, least recently used first) or changes nothing and
//! returns [`KvError::Full`] (wait and retry) or [`KvError::ExceedsCapacity`] (the sequence
//! can never fit: refuse). Blocks of running sequences, own or shared, are never taken.

use std::collections::{BTreeMap, HashMap};

use sha2::{Digest, Sha256};

use crate::layout::KvLayout;

/// Identifies a sequence (a request's token stream).
pub type SeqId = u64;

/// The key of a cached prefix block: SHA-256 over the chain of token ids up to and including it.
pub type PrefixKey = [u8; 32];

/// Index of a block in the arena; cells `id * block_size .. (id + 1) * block_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

impl BlockId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Who owns a block (or, for [`Owner::Prefill`] / [`Owner::Decode`], a running sequence).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// Not in use.
    Free,
    /// Owned by a sequence that the prefill worker is writing.
    Prefill,
    /// Owned by a sequence that the decode worker is writing.
    Decode,
    /// A read-only block of the prefix cache (idle or shared by running sequences).
    CachedPrefix,
}

impl Owner {
    fn is_running(self) -> bool {
        matches!(self, Owner::Prefill | Owner::Decode)
    }
}

/// Errors of the block manager. Each names the sequence and the numbers involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// Not enough free or evictable blocks right now; nothing was changed. Retry later.
    #[error(
        "KV arena full: sequence {seq} needs {needed} more blocks of {block_size} cells, but only \
         {free} are free and {evictable} cached-prefix blocks are evictable ({total} blocks in \
         all, the rest held by running sequences); nothing was allocated"
    )]
    Full {
        /// The sequence that asked.
        seq: SeqId,
        /// Blocks it needs beyond its current table.
        needed: usize,
        /// Free blocks.
        free: usize,
        /// Idle cached-prefix blocks that could be evicted.
        evictable: usize,
        /// Blocks in the arena.
        total: u32,
        /// Cells per block.
        block_size: u32,
    },
    /// The sequence would need more blocks than the whole arena has: it can never run.
    #[error(
        "sequence {seq} would need {needed_total} blocks of {block_size} cells for {tokens} tokens, \
         more than the whole KV arena's {total} blocks; the request can never fit"
    )]
    ExceedsCapacity {
        /// The sequence.
        seq: SeqId,
        /// Table length it would need.
        needed_total: usize,
        /// Tokens it would hold.
        tokens: usize,
        /// Blocks in the arena.
        total: u32,
        /// Cells per block.
        block_size: u32,
    },
    /// No running sequence has this id.
    #[error("unknown sequence {0}")]
    UnknownSequence(SeqId),
    /// A running sequence already has this id.
    #[error("sequence {0} already exists")]
    SequenceExists(SeqId),
    /// A running sequence must be owned by `Prefill` or `Decode`.
    #[error("invalid owner {owner:?} for running sequence {seq}: must be Prefill or Decode")]
    InvalidOwner {
        /// The sequence.
        seq: SeqId,
        /// The owner asked for.
        owner: Owner,
    },
    /// A hand-off named the wrong current owner.
    #[error("hand-off of sequence {seq} from {expected:?} refused: it is owned by {actual:?}")]
    WrongOwner {
        /// The sequence.
        seq: SeqId,
        /// The owner the caller claimed.
        expected: Owner,
        /// The actual owner.
        actual: Owner,
    },
    /// Tokens committed past the reserved cells.
    #[error(
        "sequence {seq}: committing {requested} tokens at length {len} exceeds its {capacity} \
         reserved cells; reserve first"
    )]
    NotReserved {
        /// The sequence.
        seq: SeqId,
        /// Its length before the commit.
        len: usize,
        /// Tokens in the commit.
        requested: usize,
        /// Cells its table holds.
        capacity: usize,
    },
}

/// What [`KvArena::start_sequence`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqStart {
    /// Prompt tokens taken from the prefix cache (less than the prompt length): the shared
    /// blocks' plus `tail_tokens`; the sequence's length starts here.
    pub reused_tokens: usize,
    /// Cached blocks now shared by the sequence.
    pub reused_blocks: usize,
    /// Tokens reused from a cached tail the sequence took over as its own block (0 if none;
    /// less than the block size).
    pub tail_tokens: usize,
    /// Tokens reused by copying cells of a full cached block into a new own block (0 if none;
    /// less than the block size; never with `tail_tokens`).
    pub copied_tokens: usize,
    /// The copy the caller must make before the sequence's cells are used (with `copied_tokens`).
    pub copy: Option<CellCopy>,
}

/// Cells to copy from one block to another (both hold `cells` cells from their first one on):
/// the rows of every layer's K and V tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellCopy {
    /// A cached block (read-only while the copy runs).
    pub from: BlockId,
    /// A block the sequence owns; nothing reads it before the copy is made.
    pub to: BlockId,
    /// Cells copied from the start of the block.
    pub cells: usize,
}

/// What [`KvArena::reserve`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reserved {
    /// Blocks appended to the table.
    pub new_blocks: usize,
    /// Idle cached-prefix blocks evicted to make room.
    pub evicted: usize,
}

/// What [`KvArena::finish`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Finished {
    /// Own full blocks that entered the prefix cache.
    pub cached_blocks: usize,
    /// Own full blocks freed because an equal prefix was already cached.
    pub duplicate_blocks: usize,
    /// Own blocks freed (reserved blocks never written, and a partial last block equal to a
    /// cached tail already kept).
    pub freed_blocks: usize,
    /// The partial last block kept as a cached tail (0 or 1).
    pub tail_blocks: usize,
    /// Shared prefix blocks released (their reference count dropped by one).
    pub released_shared: usize,
}

/// What [`KvArena::cancel`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Cancelled {
    /// Own blocks freed.
    pub freed_blocks: usize,
    /// Shared prefix blocks released.
    pub released_shared: usize,
}

/// Counters and gauges of the arena (all in blocks unless named otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ArenaStats {
    /// Blocks in the arena.
    pub total_blocks: u32,
    /// Cells per block.
    pub block_size: u32,
    /// Free blocks.
    pub free_blocks: usize,
    /// Blocks owned by sequences in prefill.
    pub prefill_blocks: usize,
    /// Blocks owned by sequences in decode.
    pub decode_blocks: usize,
    /// Cached-prefix blocks, idle or shared.
    pub cached_blocks: usize,
    /// Cached-prefix blocks shared by at least one running sequence (not evictable).
    pub cached_in_use: usize,
    /// Idle cached-prefix blocks (evictable).
    pub evictable_blocks: usize,
    /// Running sequences.
    pub sequences: usize,
    /// Cached-prefix blocks evicted so far.
    pub evictions: u64,
    /// Blocks that entered the prefix cache so far.
    pub cache_inserts: u64,
    /// Sequences started so far.
    pub prefix_lookups: u64,
    /// Sequences started that reused at least one block.
    pub prefix_hits: u64,
    /// Prompt tokens reused so far.
    pub reused_tokens: u64,
    /// Of those, tokens reused by a cell copy ([`SeqStart::copy`]).
    pub copied_tokens: u64,
}

/// Everything the arena knows about one block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// Its owner.
    pub owner: Owner,
    /// The running sequences whose tables hold it: one for an owned block, any number (the
    /// reference count) for a cached prefix block, none for a free one.
    pub sequences: Vec<SeqId>,
    /// Position held by its first cell (`None` when free).
    pub first_pos: Option<usize>,
    /// Cells holding committed tokens.
    pub n_tokens: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct CachedBlock {
    key: PrefixKey,
    /// Chain key of the block before it (`None` at depth 0).
    parent: Option<PrefixKey>,
    /// Index of the block in the chain (positions `depth * block_size ..`).
    depth: usize,
    tokens: Box<[u32]>,
    /// Running sequences sharing it; the reference count is its length.
    sharers: Vec<SeqId>,
    /// Some(tick) exactly when idle (no sharers): its key in the LRU map.
    lru_tick: Option<u64>,
}

/// A finished sequence's partial last block (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
struct TailBlock {
    /// Chain key of the blocks before it (`None` at depth 0): its key in `KvArena::tails`.
    parent: Option<PrefixKey>,
    /// Index of the block in its sequence's table.
    depth: usize,
    /// Its committed tokens: at least one, fewer than a block.
    tokens: Box<[u32]>,
    /// Its key in the LRU map (tails are always idle).
    lru_tick: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum BlockState {
    Free,
    Owned { seq: SeqId },
    Cached(CachedBlock),
    Tail(TailBlock),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Seq {
    owner: Owner,
    table: Vec<BlockId>,
    /// Leading table entries that are shared cached-prefix blocks.
    n_shared: usize,
    /// Committed token ids, positions `0..len`.
    tokens: Vec<u32>,
    reused_tokens: usize,
}

impl Seq {
    fn own_blocks(&self) -> usize {
        self.table.len() - self.n_shared
    }
}

/// How a prompt reuses part of the block after its shared ones: (block, tokens).
#[derive(Clone, Copy, Debug)]
enum Partial {
    /// Take over a cached tail.
    Tail(BlockId, usize),
    /// Copy the first cells of a full cached block.
    Copy(BlockId, usize),
}

impl Partial {
    fn tokens(self) -> usize {
        match self {
            Partial::Tail(_, m) | Partial::Copy(_, m) => m,
        }
    }
}

/// Of `candidates` (block, its tokens), the one whose tokens `rest` repeats furthest, as (block,
/// tokens), leaving at least two tokens of `rest` to compute; `None` if none repeats any.
fn best_repeat<'a>(rest: &[u32], candidates: impl Iterator<Item = (BlockId, &'a [u32])>) -> Option<(BlockId, usize)> {
    let limit = rest.len().saturating_sub(2);
    let mut best: Option<(BlockId, usize)> = None;
    for (b, tokens) in candidates {
        let m = tokens.iter().zip(rest).take_while(|(a, b)| a == b).count().min(limit);
        if m > 0 && best.is_none_or(|(_, bm)| m > bm) {
            best = Some((b, m));
        }
    }
    best
}

/// Cell of position `pos` through a block table: `table[pos / block_size] * block_size +
/// pos % block_size`, or `None` if the table is too short.
pub fn cell_of(table: &[BlockId], block_size: u32, pos: usize) -> Option<u64> {
    let bs = block_size as usize;
    let b = table.get(pos / bs)?;
    Some(u64::from(b.0) * u64::from(block_size) + (pos % bs) as u64)
}

const PREFIX_KEY_TAG: &[u8] = b"strata-kv-prefix-v1";

/// Key of a block holding `tokens` whose predecessor in the chain has key `parent`.
pub fn chain_key(parent: Option<&PrefixKey>, tokens: &[u32]) -> PrefixKey {
    let mut h = Sha256::new();
    h.update(PREFIX_KEY_TAG);
    match parent {
        None => h.update([0u8]),
        Some(p) => {
            h.update([1u8]);
            h.update(p);
        }
    }
    let mut buf = Vec::with_capacity(tokens.len() * 4);
    for t in tokens {
        buf.extend_from_slice(&t.to_le_bytes());
    }
    h.update(&buf);
    h.finalize().into()
}

/// The pure block manager of the KV arena. No threads, no I/O; the broker actor wraps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvArena {
    block_size: u32,
    blocks: Vec<BlockState>,
    /// Free blocks, a stack.
    free: Vec<BlockId>,
    /// Idle cached blocks by release tick: first = least recently used.
    lru: BTreeMap<u64, BlockId>,
    prefix: HashMap<PrefixKey, BlockId>,
    /// Cached full blocks by the chain key of the blocks before them (what a copy looks up).
    children: HashMap<Option<PrefixKey>, Vec<BlockId>>,
    /// Cached tails by the chain key of the blocks before them.
    tails: HashMap<Option<PrefixKey>, Vec<BlockId>>,
    seqs: HashMap<SeqId, Seq>,
    /// Whether a prompt may reuse part of a full cached block by a cell copy.
    cell_copies: bool,
    tick: u64,
    n_prefill: usize,
    n_decode: usize,
    n_cached: usize,
    evictions: u64,
    cache_inserts: u64,
    prefix_lookups: u64,
    prefix_hits: u64,
    reused_tokens: u64,
    copied_tokens: u64,
}

impl KvArena {
    /// An arena of `n_blocks` free blocks of `block_size` cells.
    ///
    /// # Panics
    /// If `block_size` is 0.
    pub fn new(n_blocks: u32, block_size: u32) -> Self {
        assert!(block_size > 0, "block_size must be positive");
        KvArena {
            block_size,
            blocks: vec![BlockState::Free; n_blocks as usize],
            // Reversed so that pop() hands out low ids first.
            free: (0..n_blocks).rev().map(BlockId).collect(),
            lru: BTreeMap::new(),
            prefix: HashMap::new(),
            children: HashMap::new(),
            tails: HashMap::new(),
            seqs: HashMap::new(),
            cell_copies: false,
            tick: 0,
            n_prefill: 0,
            n_decode: 0,
            n_cached: 0,
            evictions: 0,
            cache_inserts: 0,
            prefix_lookups: 0,
            prefix_hits: 0,
            reused_tokens: 0,
            copied_tokens: 0,
        }
    }

    /// An arena with the layout's number of blocks and block size.
    pub fn from_layout(layout: &KvLayout) -> Self {
        Self::new(layout.n_blocks(), layout.params.block_size)
    }

    /// Lets [`Self::start_sequence`] reuse the first cells of a full cached block by a copy
    /// (see the module docs); the caller must then make every [`SeqStart::copy`] it returns.
    pub fn set_cell_copies(&mut self, on: bool) {
        self.cell_copies = on;
    }

    /// Cells per block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Blocks in the arena.
    pub fn total_blocks(&self) -> u32 {
        self.blocks.len() as u32
    }

    /// Blocks a new allocation could get now: free plus evictable.
    pub fn available_blocks(&self) -> usize {
        self.free.len() + self.lru.len()
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn bs(&self) -> usize {
        self.block_size as usize
    }

    fn owner_counter(&mut self, owner: Owner) -> &mut usize {
        match owner {
            Owner::Prefill => &mut self.n_prefill,
            Owner::Decode => &mut self.n_decode,
            _ => unreachable!("only running owners have counters"),
        }
    }

    /// Cached blocks matching the prompt, in whole blocks, leaving at least one token, and the
    /// chain key of the last one.
    fn match_prefix(&self, prompt: &[u32]) -> (Vec<BlockId>, Option<PrefixKey>) {
        let bs = self.bs();
        let max_blocks = prompt.len().saturating_sub(1) / bs;
        let mut out = Vec::new();
        let mut parent: Option<PrefixKey> = None;
        for i in 0..max_blocks {
            let toks = &prompt[i * bs..(i + 1) * bs];
            let key = chain_key(parent.as_ref(), toks);
            let Some(&b) = self.prefix.get(&key) else {
                break;
            };
            match &self.blocks[b.index()] {
                BlockState::Cached(c) if c.depth == i && &*c.tokens == toks => out.push(b),
                _ => break,
            }
            parent = Some(key);
        }
        (out, parent)
    }

    /// The cached tail that continues `prompt` after its first `k` blocks (chain key `parent`):
    /// the one repeating most of the prompt's next tokens, as (block, tokens), leaving at least
    /// two prompt tokens to compute: a step with one token of a sequence sums its attention in
    /// another order than a step with several (ggml's), so the prompt's last tokens are then
    /// computed as a fresh prefill computes them.
    fn match_tail(&self, parent: Option<PrefixKey>, k: usize, prompt: &[u32]) -> Option<(BlockId, usize)> {
        let candidates = self.tails.get(&parent)?.iter().filter_map(|&b| match &self.blocks[b.index()] {
            BlockState::Tail(t) if t.depth == k => Some((b, &*t.tokens)),
            _ => None,
        });
        best_repeat(prompt.get(k * self.bs()..)?, candidates)
    }

    /// The full cached block after the prompt's first `k` blocks (chain key `parent`) whose
    /// first cells the prompt repeats furthest, as (block, tokens), leaving at least two prompt
    /// tokens to compute (as `match_tail`). Only with cell copies on.
    fn match_copy(&self, parent: Option<PrefixKey>, k: usize, prompt: &[u32]) -> Option<(BlockId, usize)> {
        if !self.cell_copies {
            return None;
        }
        let candidates = self.children.get(&parent)?.iter().filter_map(|&b| match &self.blocks[b.index()] {
            BlockState::Cached(c) if c.depth == k => Some((b, &*c.tokens)),
            _ => None,
        });
        best_repeat(prompt.get(k * self.bs()..)?, candidates)
    }

    /// How the prompt's tokens after its shared blocks (`shared`, chain key `parent`) are
    /// reused: from a tail, or by a copy when that reuses more and a block is there for it
    /// (free, or idle and neither the source nor one of `shared`, which the start pins).
    fn match_partial(&self, parent: Option<PrefixKey>, shared: &[BlockId], prompt: &[u32]) -> Option<Partial> {
        let k = shared.len();
        let tail = self.match_tail(parent, k, prompt).map(|(b, m)| Partial::Tail(b, m));
        let copy = self.match_copy(parent, k, prompt).filter(|&(from, _)| {
            !self.free.is_empty() || self.lru.values().any(|&b| b != from && !shared.contains(&b))
        });
        let copy = copy.map(|(b, m)| Partial::Copy(b, m));
        match (tail, copy) {
            (Some(t), Some(c)) if c.tokens() > t.tokens() => Some(c),
            (t, c) => t.or(c),
        }
    }

    /// Prompt tokens [`Self::start_sequence`] would reuse now (no state change).
    pub fn lookup_prefix(&self, prompt: &[u32]) -> usize {
        let (shared, parent) = self.match_prefix(prompt);
        let partial = self.match_partial(parent, &shared, prompt).map_or(0, |p| p.tokens());
        shared.len() * self.bs() + partial
    }

    /// A block for a copy's destination: a free one, else the least recently used idle cached
    /// block other than the copy's source (evicted). `None` when there is none. Call after
    /// pinning the shared blocks.
    fn take_block_except(&mut self, source: BlockId) -> Option<BlockId> {
        if let Some(b) = self.free.pop() {
            return Some(b);
        }
        let (&tick, &b) = self.lru.iter().find(|(_, &b)| b != source)?;
        self.lru.remove(&tick);
        self.evict_block(b);
        Some(b)
    }

    /// Takes cached tail `b` out of the cache (its tails entry and its LRU entry).
    fn take_tail(&mut self, b: BlockId) {
        debug_assert!(matches!(self.blocks[b.index()], BlockState::Tail(_)), "only tails are taken");
        if let Some(tick) = self.uncache(b) {
            self.lru.remove(&tick);
        }
    }

    /// Takes idle cached block `b` (a prefix block or a tail) out of the prefix or tails map; it
    /// is left Free but on no list, and its LRU tick (if it had one) is returned for the caller
    /// to drop.
    fn uncache(&mut self, b: BlockId) -> Option<u64> {
        let state = std::mem::replace(&mut self.blocks[b.index()], BlockState::Free);
        let tick = match state {
            BlockState::Cached(c) => {
                debug_assert!(c.sharers.is_empty());
                self.prefix.remove(&c.key);
                if let Some(v) = self.children.get_mut(&c.parent) {
                    v.retain(|&x| x != b);
                    if v.is_empty() {
                        self.children.remove(&c.parent);
                    }
                }
                c.lru_tick
            }
            BlockState::Tail(t) => {
                if let Some(v) = self.tails.get_mut(&t.parent) {
                    v.retain(|&x| x != b);
                    if v.is_empty() {
                        self.tails.remove(&t.parent);
                    }
                }
                Some(t.lru_tick)
            }
            _ => unreachable!("only cached blocks leave the cache"),
        };
        self.n_cached -= 1;
        tick
    }

    /// Start sequence `seq` owned by `owner` (`Prefill` or `Decode`): share the longest cached
    /// prefix of `prompt` (whole blocks), take over the cached tail that continues it furthest
    /// (never reaching the prompt's last token), and set the sequence's length to the reused
    /// tokens. Allocates nothing else: call [`Self::reserve`] for the rest.
    pub fn start_sequence(
        &mut self,
        seq: SeqId,
        prompt: &[u32],
        owner: Owner,
    ) -> Result<SeqStart, KvError> {
        if !owner.is_running() {
            return Err(KvError::InvalidOwner { seq, owner });
        }
        if self.seqs.contains_key(&seq) {
            return Err(KvError::SequenceExists(seq));
        }
        let (shared, parent) = self.match_prefix(prompt);
        let partial = self.match_partial(parent, &shared, prompt);
        for &b in &shared {
            let BlockState::Cached(c) = &mut self.blocks[b.index()] else {
                unreachable!("matched blocks are cached")
            };
            c.sharers.push(seq);
            if let Some(t) = c.lru_tick.take() {
                self.lru.remove(&t);
            }
        }
        let n_shared = shared.len();
        let mut table = shared;
        let (mut tail_tokens, mut copied_tokens, mut copy) = (0, 0, None);
        match partial {
            Some(Partial::Tail(b, m)) => {
                self.take_tail(b);
                self.blocks[b.index()] = BlockState::Owned { seq };
                *self.owner_counter(owner) += 1;
                table.push(b);
                tail_tokens = m;
            }
            Some(Partial::Copy(from, m)) => {
                // The source stays cached, and the shared blocks are pinned by now: a block
                // other than those is there (`match_partial` checked).
                let to = self.take_block_except(from).expect("room for the copy checked");
                self.blocks[to.index()] = BlockState::Owned { seq };
                *self.owner_counter(owner) += 1;
                table.push(to);
                self.touch(from);
                copied_tokens = m;
                copy = Some(CellCopy { from, to, cells: m });
            }
            None => {}
        }
        let reused = n_shared * self.bs() + tail_tokens + copied_tokens;
        self.prefix_lookups += 1;
        if reused > 0 {
            self.prefix_hits += 1;
            self.reused_tokens += reused as u64;
            self.copied_tokens += copied_tokens as u64;
        }
        let start = SeqStart {
            reused_tokens: reused,
            reused_blocks: n_shared,
            tail_tokens,
            copied_tokens,
            copy,
        };
        self.seqs.insert(
            seq,
            Seq {
                owner,
                n_shared,
                table,
                tokens: prompt[..reused].to_vec(),
                reused_tokens: reused,
            },
        );
        Ok(start)
    }

    /// Blocks [`Self::reserve`] would append for `n_new_tokens` more tokens.
    pub fn blocks_needed(&self, seq: SeqId, n_new_tokens: usize) -> Result<usize, KvError> {
        let s = self.seqs.get(&seq).ok_or(KvError::UnknownSequence(seq))?;
        let want = (s.tokens.len() + n_new_tokens).div_ceil(self.bs());
        Ok(want.saturating_sub(s.table.len()))
    }

    /// Grow `seq`'s table to hold its length plus `n_new_tokens` tokens (not cumulative: two
    /// reserves without a commit between them ask for the same room). Takes free blocks first,
    /// then evicts idle cached prefixes, least recently used first. Atomic: on error nothing
    /// changes.
    pub fn reserve(&mut self, seq: SeqId, n_new_tokens: usize) -> Result<Reserved, KvError> {
        let needed = self.blocks_needed(seq, n_new_tokens)?;
        if needed == 0 {
            return Ok(Reserved::default());
        }
        let s = &self.seqs[&seq];
        let needed_total = s.table.len() + needed;
        if needed_total > self.blocks.len() {
            return Err(KvError::ExceedsCapacity {
                seq,
                needed_total,
                tokens: s.tokens.len() + n_new_tokens,
                total: self.total_blocks(),
                block_size: self.block_size,
            });
        }
        if needed > self.available_blocks() {
            return Err(KvError::Full {
                seq,
                needed,
                free: self.free.len(),
                evictable: self.lru.len(),
                total: self.total_blocks(),
                block_size: self.block_size,
            });
        }
        let owner = s.owner;
        let mut got = Vec::with_capacity(needed);
        let mut evicted = 0;
        for _ in 0..needed {
            let b = match self.free.pop() {
                Some(b) => b,
                None => {
                    let (_, b) = self.lru.pop_first().expect("availability checked above");
                    self.evict_block(b);
                    evicted += 1;
                    b
                }
            };
            self.blocks[b.index()] = BlockState::Owned { seq };
            got.push(b);
        }
        *self.owner_counter(owner) += needed;
        self.seqs.get_mut(&seq).expect("checked").table.extend(got);
        Ok(Reserved {
            new_blocks: needed,
            evicted,
        })
    }

    /// Turn an idle cached block (already removed from the LRU map) into a free one, not on the
    /// free list.
    /// Drops idle cached block `b` (a prefix block or a tail, already out of the LRU map) from
    /// the cache; it is left Free but not on the free list.
    fn evict_block(&mut self, b: BlockId) {
        self.uncache(b);
        self.evictions += 1;
    }

    /// Record that the cells at positions `len .. len + tokens.len()` now hold `tokens` (their
    /// token ids are the prefix-cache keys). The cells must have been reserved.
    pub fn commit_tokens(&mut self, seq: SeqId, tokens: &[u32]) -> Result<(), KvError> {
        let bs = self.bs();
        let s = self
            .seqs
            .get_mut(&seq)
            .ok_or(KvError::UnknownSequence(seq))?;
        let capacity = s.table.len() * bs;
        if s.tokens.len() + tokens.len() > capacity {
            return Err(KvError::NotReserved {
                seq,
                len: s.tokens.len(),
                requested: tokens.len(),
                capacity,
            });
        }
        s.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// The block table of `seq`.
    pub fn block_table(&self, seq: SeqId) -> Option<&[BlockId]> {
        self.seqs.get(&seq).map(|s| s.table.as_slice())
    }

    /// Committed tokens (positions) of `seq`.
    pub fn seq_len(&self, seq: SeqId) -> Option<usize> {
        self.seqs.get(&seq).map(|s| s.tokens.len())
    }

    /// Committed token ids of `seq`.
    pub fn seq_tokens(&self, seq: SeqId) -> Option<&[u32]> {
        self.seqs.get(&seq).map(|s| s.tokens.as_slice())
    }

    /// Cells reserved for `seq` (table length times block size).
    pub fn seq_capacity(&self, seq: SeqId) -> Option<usize> {
        self.seqs.get(&seq).map(|s| s.table.len() * self.bs())
    }

    /// Current owner of `seq`.
    pub fn seq_owner(&self, seq: SeqId) -> Option<Owner> {
        self.seqs.get(&seq).map(|s| s.owner)
    }

    /// Prompt tokens `seq` reused from the prefix cache.
    pub fn reused_tokens(&self, seq: SeqId) -> Option<usize> {
        self.seqs.get(&seq).map(|s| s.reused_tokens)
    }

    /// Ids of the running sequences, in no particular order.
    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    /// Cell holding position `pos` of `seq`, if reserved.
    pub fn cell_of(&self, seq: SeqId, pos: usize) -> Option<u64> {
        cell_of(self.block_table(seq)?, self.block_size, pos)
    }

    /// Move `seq` (all its own blocks) from owner `from` to owner `to`. Refused if `from` is not
    /// its current owner or `to` is not `Prefill` or `Decode`.
    pub fn hand_off(&mut self, seq: SeqId, from: Owner, to: Owner) -> Result<(), KvError> {
        if !to.is_running() {
            return Err(KvError::InvalidOwner { seq, owner: to });
        }
        let s = self
            .seqs
            .get_mut(&seq)
            .ok_or(KvError::UnknownSequence(seq))?;
        if s.owner != from {
            return Err(KvError::WrongOwner {
                seq,
                expected: from,
                actual: s.owner,
            });
        }
        if from == to {
            return Ok(());
        }
        s.owner = to;
        let n = s.own_blocks();
        *self.owner_counter(from) -= n;
        *self.owner_counter(to) += n;
        Ok(())
    }

    fn free_block(&mut self, b: BlockId) {
        self.blocks[b.index()] = BlockState::Free;
        self.free.push(b);
    }

    /// Drop `seq`'s reference to shared cached block `b`; an unreferenced block becomes idle.
    fn release_shared(&mut self, b: BlockId, seq: SeqId) {
        let tick = self.next_tick();
        let BlockState::Cached(c) = &mut self.blocks[b.index()] else {
            unreachable!("shared blocks are cached")
        };
        let i = c
            .sharers
            .iter()
            .position(|&s| s == seq)
            .expect("sharer recorded");
        c.sharers.swap_remove(i);
        if c.sharers.is_empty() {
            c.lru_tick = Some(tick);
            self.lru.insert(tick, b);
        }
    }

    /// Mark an idle cached block as just used.
    fn touch(&mut self, b: BlockId) {
        let tick = self.next_tick();
        if let BlockState::Cached(c) = &mut self.blocks[b.index()] {
            if let Some(old) = c.lru_tick {
                self.lru.remove(&old);
                c.lru_tick = Some(tick);
                self.lru.insert(tick, b);
            }
        }
    }

    /// End `seq` normally: its full own blocks become cached prefixes (keyed by the chain of all
    /// its tokens up to each), its partial last block a cached tail, its unwritten reserved
    /// blocks are freed, and its shared prefix blocks are released.
    pub fn finish(&mut self, seq: SeqId) -> Result<Finished, KvError> {
        self.finish_caching_first(seq, usize::MAX)
    }

    /// As [`KvArena::finish`], but only blocks holding nothing beyond the first `cache_tokens`
    /// tokens become cached prefixes; the rest are freed. With prefill and decode on different
    /// devices, the cells of generated tokens were written by the decode device, whose rounding
    /// differs from the prefill device's: caching only the prompt keeps a later prompt that
    /// reuses them exactly as if it had been prefilled afresh.
    pub fn finish_caching_first(&mut self, seq: SeqId, cache_tokens: usize) -> Result<Finished, KvError> {
        let s = self
            .seqs
            .remove(&seq)
            .ok_or(KvError::UnknownSequence(seq))?;
        *self.owner_counter(s.owner) -= s.own_blocks();
        let bs = self.bs();
        let cached_len = s.tokens.len().min(cache_tokens);
        let full = cached_len / bs;
        let mut keys: Vec<PrefixKey> = Vec::with_capacity(full);
        for i in 0..full {
            let k = chain_key(keys.last(), &s.tokens[i * bs..(i + 1) * bs]);
            keys.push(k);
        }
        let mut out = Finished::default();
        // Reverse order: the chain's tail gets the oldest tick and is evicted first.
        for i in (0..s.table.len()).rev() {
            let b = s.table[i];
            if i < s.n_shared {
                self.release_shared(b, seq);
                out.released_shared += 1;
            } else if i < full {
                let key = keys[i];
                if let Some(&existing) = self.prefix.get(&key) {
                    self.free_block(b);
                    self.touch(existing);
                    out.duplicate_blocks += 1;
                } else {
                    let tick = self.next_tick();
                    self.blocks[b.index()] = BlockState::Cached(CachedBlock {
                        key,
                        parent: i.checked_sub(1).map(|p| keys[p]),
                        depth: i,
                        tokens: s.tokens[i * bs..(i + 1) * bs].into(),
                        sharers: Vec::new(),
                        lru_tick: Some(tick),
                    });
                    self.lru.insert(tick, b);
                    self.prefix.insert(key, b);
                    self.children.entry(i.checked_sub(1).map(|p| keys[p])).or_default().push(b);
                    self.n_cached += 1;
                    self.cache_inserts += 1;
                    out.cached_blocks += 1;
                }
            } else if i == full && cached_len > full * bs {
                let parent = keys.last().copied();
                let tokens = &s.tokens[full * bs..cached_len];
                let kept = self.tails.get(&parent).is_some_and(|v| {
                    v.iter().any(|&t| matches!(&self.blocks[t.index()], BlockState::Tail(x) if *x.tokens == *tokens))
                });
                if kept {
                    self.free_block(b);
                    out.freed_blocks += 1;
                } else {
                    let tick = self.next_tick();
                    self.blocks[b.index()] = BlockState::Tail(TailBlock { parent, depth: i, tokens: tokens.into(), lru_tick: tick });
                    self.lru.insert(tick, b);
                    self.tails.entry(parent).or_default().push(b);
                    self.n_cached += 1;
                    out.tail_blocks += 1;
                }
            } else {
                self.free_block(b);
                out.freed_blocks += 1;
            }
        }
        Ok(out)
    }

    /// End `seq` abnormally (cancelled, failed, timed out): every own block is freed, nothing is
    /// cached, shared prefix blocks are released.
    pub fn cancel(&mut self, seq: SeqId) -> Result<Cancelled, KvError> {
        let s = self
            .seqs
            .remove(&seq)
            .ok_or(KvError::UnknownSequence(seq))?;
        *self.owner_counter(s.owner) -= s.own_blocks();
        let mut out = Cancelled::default();
        for i in (0..s.table.len()).rev() {
            let b = s.table[i];
            if i < s.n_shared {
                self.release_shared(b, seq);
                out.released_shared += 1;
            } else {
                self.free_block(b);
                out.freed_blocks += 1;
            }
        }
        Ok(out)
    }

    /// Evict up to `max_blocks` idle cached-prefix blocks, least recently used first. Returns how
    /// many were evicted.
    pub fn evict(&mut self, max_blocks: usize) -> usize {
        let mut n = 0;
        while n < max_blocks {
            let Some((_, b)) = self.lru.pop_first() else {
                break;
            };
            self.evict_block(b);
            self.free.push(b);
            n += 1;
        }
        n
    }

    /// Evict every idle cached-prefix block. Returns how many were evicted.
    pub fn evict_all_cached(&mut self) -> usize {
        self.evict(usize::MAX)
    }

    /// Owner of block `b` (`None` if out of range).
    pub fn block_owner(&self, b: BlockId) -> Option<Owner> {
        Some(match self.blocks.get(b.index())? {
            BlockState::Free => Owner::Free,
            BlockState::Owned { seq } => self.seqs[seq].owner,
            BlockState::Cached(_) | BlockState::Tail(_) => Owner::CachedPrefix,
        })
    }

    /// Owner, sequences, positions and filled cells of block `b` (`None` if out of range).
    pub fn block_info(&self, b: BlockId) -> Option<BlockInfo> {
        let bs = self.bs();
        Some(match self.blocks.get(b.index())? {
            BlockState::Free => BlockInfo {
                owner: Owner::Free,
                sequences: Vec::new(),
                first_pos: None,
                n_tokens: 0,
            },
            BlockState::Owned { seq } => {
                let s = &self.seqs[seq];
                let i = s
                    .table
                    .iter()
                    .position(|&x| x == b)
                    .expect("owned block in table");
                BlockInfo {
                    owner: s.owner,
                    sequences: vec![*seq],
                    first_pos: Some(i * bs),
                    n_tokens: s.tokens.len().saturating_sub(i * bs).min(bs),
                }
            }
            BlockState::Cached(c) => BlockInfo {
                owner: Owner::CachedPrefix,
                sequences: c.sharers.clone(),
                first_pos: Some(c.depth * bs),
                n_tokens: bs,
            },
            BlockState::Tail(t) => BlockInfo {
                owner: Owner::CachedPrefix,
                sequences: Vec::new(),
                first_pos: Some(t.depth * bs),
                n_tokens: t.tokens.len(),
            },
        })
    }

    /// Reference count of a cached-prefix block (running sequences sharing it); `None` if `b`
    /// is not a cached-prefix block.
    pub fn refcount(&self, b: BlockId) -> Option<usize> {
        match self.blocks.get(b.index())? {
            BlockState::Cached(c) => Some(c.sharers.len()),
            BlockState::Tail(_) => Some(0),
            _ => None,
        }
    }

    /// Gauges and counters.
    pub fn stats(&self) -> ArenaStats {
        ArenaStats {
            total_blocks: self.total_blocks(),
            block_size: self.block_size,
            free_blocks: self.free.len(),
            prefill_blocks: self.n_prefill,
            decode_blocks: self.n_decode,
            cached_blocks: self.n_cached,
            cached_in_use: self.n_cached - self.lru.len(),
            evictable_blocks: self.lru.len(),
            sequences: self.seqs.len(),
            evictions: self.evictions,
            cache_inserts: self.cache_inserts,
            prefix_lookups: self.prefix_lookups,
            prefix_hits: self.prefix_hits,
            reused_tokens: self.reused_tokens,
            copied_tokens: self.copied_tokens,
        }
    }

    /// Check every internal invariant (O(blocks + table entries)); for tests and debug builds.
    /// Every block is in exactly one state; free list, LRU map and prefix map agree with the
    /// states; every owned block is in exactly its sequence's table, once; every cached block's
    /// reference count equals the number of tables holding it; counters match.
    pub fn check_invariants(&self) -> Result<(), String> {
        let bs = self.bs();
        let n = self.blocks.len();
        let mut on_free = vec![false; n];
        for &b in &self.free {
            let i = b.index();
            if i >= n || on_free[i] {
                return Err(format!("free list holds {b:?} twice or out of range"));
            }
            on_free[i] = true;
            if self.blocks[i] != BlockState::Free {
                return Err(format!("{b:?} on the free list but not free"));
            }
        }
        // Table references per block.
        let mut refs: Vec<Vec<SeqId>> = vec![Vec::new(); n];
        let (mut n_prefill, mut n_decode) = (0, 0);
        for (&id, s) in &self.seqs {
            if !s.owner.is_running() {
                return Err(format!("sequence {id} has owner {:?}", s.owner));
            }
            if s.n_shared > s.table.len() {
                return Err(format!("sequence {id}: n_shared beyond table"));
            }
            if s.tokens.len() > s.table.len() * bs {
                return Err(format!("sequence {id}: more tokens than reserved cells"));
            }
            if s.tokens.len() < s.reused_tokens || s.reused_tokens < s.n_shared * bs || s.reused_tokens >= (s.n_shared + 1) * bs {
                return Err(format!("sequence {id}: reused {} tokens with {} shared blocks and {} tokens", s.reused_tokens, s.n_shared, s.tokens.len()));
            }
            for (i, &b) in s.table.iter().enumerate() {
                if b.index() >= n {
                    return Err(format!("sequence {id}: {b:?} out of range"));
                }
                refs[b.index()].push(id);
                match &self.blocks[b.index()] {
                    BlockState::Cached(c) if i < s.n_shared => {
                        if c.depth != i || *c.tokens != s.tokens[i * bs..(i + 1) * bs] {
                            return Err(format!("sequence {id}: shared {b:?} holds other tokens"));
                        }
                    }
                    BlockState::Owned { seq } if i >= s.n_shared && *seq == id => {}
                    other => {
                        return Err(format!(
                            "sequence {id}: table entry {i} {b:?} in state {other:?}"
                        ))
                    }
                }
            }
            match s.owner {
                Owner::Prefill => n_prefill += s.own_blocks(),
                _ => n_decode += s.own_blocks(),
            }
        }
        let (mut n_free, mut n_cached, mut n_idle, mut n_tails) = (0, 0, 0, 0);
        for (i, st) in self.blocks.iter().enumerate() {
            let b = BlockId(i as u32);
            match st {
                BlockState::Free => {
                    n_free += 1;
                    if !on_free[i] || !refs[i].is_empty() {
                        return Err(format!("free {b:?} not on free list or in a table"));
                    }
                }
                BlockState::Owned { seq } => {
                    if refs[i] != [*seq] {
                        return Err(format!("owned {b:?} of {seq} is in tables {:?}", refs[i]));
                    }
                }
                BlockState::Tail(t) => {
                    n_tails += 1;
                    if t.tokens.is_empty() || t.tokens.len() >= bs {
                        return Err(format!("tail {b:?} holds {} tokens", t.tokens.len()));
                    }
                    if !refs[i].is_empty() {
                        return Err(format!("tail {b:?} is in tables {:?}", refs[i]));
                    }
                    if !self.tails.get(&t.parent).is_some_and(|v| v.contains(&b)) {
                        return Err(format!("tail {b:?} not in the tails map under its parent"));
                    }
                    if self.lru.get(&t.lru_tick) != Some(&b) {
                        return Err(format!("tail {b:?}: LRU entry missing"));
                    }
                    n_idle += 1;
                }
                BlockState::Cached(c) => {
                    n_cached += 1;
                    if c.tokens.len() != bs {
                        return Err(format!("cached {b:?} is not a full block"));
                    }
                    if self.prefix.get(&c.key) != Some(&b) {
                        return Err(format!("cached {b:?} not in prefix map under its key"));
                    }
                    if c.parent.is_none() != (c.depth == 0) || c.key != chain_key(c.parent.as_ref(), &c.tokens) {
                        return Err(format!("cached {b:?}: its key is not the chain of its parent and tokens"));
                    }
                    if !self.children.get(&c.parent).is_some_and(|v| v.contains(&b)) {
                        return Err(format!("cached {b:?} not in the children map under its parent"));
                    }
                    let mut a = c.sharers.clone();
                    a.sort_unstable();
                    let mut r = refs[i].clone();
                    r.sort_unstable();
                    if a != r {
                        return Err(format!(
                            "cached {b:?}: sharers {a:?} but in tables {r:?} (refcount wrong)"
                        ));
                    }
                    match (c.sharers.is_empty(), c.lru_tick) {
                        (true, Some(t)) if self.lru.get(&t) == Some(&b) => n_idle += 1,
                        (false, None) => {}
                        _ => return Err(format!("cached {b:?}: LRU entry disagrees with use")),
                    }
                }
            }
        }
        if n_free != self.free.len() {
            return Err(format!(
                "{n_free} free blocks, free list {}",
                self.free.len()
            ));
        }
        if n_idle != self.lru.len() {
            return Err(format!(
                "{n_idle} idle cached blocks, LRU map {}",
                self.lru.len()
            ));
        }
        if n_cached != self.prefix.len() || n_cached + n_tails != self.n_cached {
            return Err(format!(
                "{n_cached} cached blocks and {n_tails} tails, prefix map {}, counter {}",
                self.prefix.len(),
                self.n_cached
            ));
        }
        if self.children.values().map(Vec::len).sum::<usize>() != n_cached || self.children.values().any(Vec::is_empty) {
            return Err(format!("children map lists {} blocks, {n_cached} cached", self.children.values().map(Vec::len).sum::<usize>()));
        }
        if self.tails.values().map(Vec::len).sum::<usize>() != n_tails || self.tails.values().any(Vec::is_empty) {
            return Err(format!("tails map lists {} blocks, {n_tails} tails", self.tails.values().map(Vec::len).sum::<usize>()));
        }
        let n_cached = n_cached + n_tails;
        if n_prefill != self.n_prefill || n_decode != self.n_decode {
            return Err(format!(
                "owner counters prefill {} decode {} but tables say {n_prefill} {n_decode}",
                self.n_prefill, self.n_decode
            ));
        }
        if n_free + n_cached + n_prefill + n_decode != n {
            return Err("blocks leaked: states do not add up to the total".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(n: usize, base: u32) -> Vec<u32> {
        (0..n as u32).map(|i| base + i).collect()
    }

    #[test]
    fn cell_of_goes_through_table() {
        let t = [BlockId(5), BlockId(2)];
        assert_eq!(cell_of(&t, 16, 0), Some(80));
        assert_eq!(cell_of(&t, 16, 17), Some(33));
        assert_eq!(cell_of(&t, 16, 32), None);
    }

    #[test]
    fn finishing_with_a_cache_limit_caches_only_the_blocks_inside_it() {
        // Block size 4: 10 tokens fill 2 blocks and part of a third.
        let mut a = KvArena::new(16, 4);
        let p = toks(10, 100);
        a.start_sequence(1, &p, Owner::Prefill).unwrap();
        a.reserve(1, 10).unwrap();
        a.commit_tokens(1, &p).unwrap();
        // The first 6 tokens (a prompt, say): only block 0 lies wholly inside them; block 1's
        // two of them are kept as a tail; block 2 is freed.
        let f = a.finish_caching_first(1, 6).unwrap();
        assert_eq!((f.cached_blocks, f.tail_blocks, f.freed_blocks), (1, 1, 1));
        assert_eq!(a.lookup_prefix(&p), 6);
        assert_eq!(a.lookup_prefix(&p[..7]), 5);
        assert_eq!(a.lookup_prefix(&p[..6]), 4, "two tokens left after a tail");
        a.check_invariants().unwrap();
    }

    #[test]
    fn reuse_blocks_and_a_tail_but_never_the_whole_prompt() {
        let mut a = KvArena::new(16, 4);
        let p = toks(11, 100);
        assert_eq!(
            a.start_sequence(1, &p, Owner::Prefill)
                .unwrap()
                .reused_tokens,
            0
        );
        a.reserve(1, 11).unwrap();
        a.commit_tokens(1, &p).unwrap();
        let f = a.finish(1).unwrap();
        assert_eq!((f.cached_blocks, f.tail_blocks, f.freed_blocks), (2, 1, 0));
        a.check_invariants().unwrap();

        // Same prompt: 9 of 11 tokens reused, the tail's block taken over.
        assert_eq!(a.lookup_prefix(&p), 9);
        let s = a.start_sequence(2, &p, Owner::Prefill).unwrap();
        assert_eq!(
            s,
            SeqStart {
                reused_tokens: 9,
                reused_blocks: 2,
                tail_tokens: 1,
                copied_tokens: 0,
                copy: None,
            }
        );
        assert_eq!(a.seq_len(2), Some(9));
        assert_eq!(a.block_table(2).unwrap().len(), 3);
        assert_eq!(a.stats().prefill_blocks, 1, "the tail is the sequence's own block");
        // Taken: the same prompt again gets the whole blocks only.
        assert_eq!(a.lookup_prefix(&p), 8);
        // Exactly 8 tokens: only the first block (one token must be computed).
        let s = a.start_sequence(3, &p[..8], Owner::Decode).unwrap();
        assert_eq!(s.reused_tokens, 4);
        let b0 = a.block_table(2).unwrap()[0];
        assert_eq!(a.refcount(b0), Some(2));
        assert_eq!(a.stats().cached_in_use, 2);
        a.check_invariants().unwrap();
        a.cancel(2).unwrap();
        a.cancel(3).unwrap();
        assert_eq!(a.refcount(b0), Some(0));
        assert_eq!(a.stats().evictable_blocks, 2);
        assert_eq!(a.evict_all_cached(), 2);
        assert_eq!(a.stats().free_blocks, 16);
        a.check_invariants().unwrap();
    }

    #[test]
    fn a_prompt_ending_inside_a_full_cached_block_copies_its_cells() {
        // Prompt of 7 tokens, 5 generated: blocks [0..4) and [4..8) cached, [8..12) cached too.
        let mut a = KvArena::new(4, 4);
        a.set_cell_copies(true);
        let run = toks(12, 100);
        let p = &run[..7];
        a.start_sequence(1, p, Owner::Prefill).unwrap();
        a.reserve(1, 12).unwrap();
        a.commit_tokens(1, &run).unwrap();
        let f = a.finish(1).unwrap();
        assert_eq!((f.cached_blocks, f.tail_blocks), (3, 0));
        let source = BlockId(1);
        assert_eq!(a.block_info(source).unwrap().first_pos, Some(4));

        // The same prompt: block 0 shared, 1 of block 1's cells copied (two tokens left).
        assert_eq!(a.lookup_prefix(p), 5);
        let s = a.start_sequence(2, p, Owner::Prefill).unwrap();
        let to = a.block_table(2).unwrap()[1];
        assert_eq!(s, SeqStart { reused_tokens: 5, reused_blocks: 1, tail_tokens: 0, copied_tokens: 1, copy: Some(CellCopy { from: source, to, cells: 1 }) });
        // The only free block went to the copy; the source stays cached.
        assert_eq!(to, BlockId(3));
        assert_eq!(a.block_owner(source), Some(Owner::CachedPrefix));
        assert_eq!(a.seq_len(2), Some(5));
        assert_eq!(a.stats().prefill_blocks, 1);
        assert_eq!((a.stats().reused_tokens, a.stats().copied_tokens), (5, 1));
        a.check_invariants().unwrap();

        // Another one: no free block, so the least recently used idle block other than the
        // source is evicted (block 2, the chain's end), and block 1 is copied again.
        let s = a.start_sequence(3, p, Owner::Prefill).unwrap();
        assert_eq!(s.copy, Some(CellCopy { from: source, to: BlockId(2), cells: 1 }));
        assert_eq!(a.stats().evictions, 1);
        a.check_invariants().unwrap();
        // A third finds no block at all: the shared block only.
        let s = a.start_sequence(4, p, Owner::Prefill).unwrap();
        assert_eq!((s.reused_tokens, s.copy), (4, None));
        a.check_invariants().unwrap();

        // Without copies the arena never offers one.
        let mut b = KvArena::new(4, 4);
        b.start_sequence(1, p, Owner::Prefill).unwrap();
        b.reserve(1, 12).unwrap();
        b.commit_tokens(1, &run).unwrap();
        b.finish(1).unwrap();
        assert_eq!(b.lookup_prefix(p), 4);
        assert_eq!(b.start_sequence(2, p, Owner::Prefill).unwrap().copy, None);
    }

    #[test]
    fn full_is_atomic_and_evicts_lru_first() {
        let mut a = KvArena::new(4, 2);
        a.start_sequence(1, &[1, 2, 3, 4, 5], Owner::Prefill)
            .unwrap();
        a.reserve(1, 5).unwrap();
        a.commit_tokens(1, &[1, 2, 3, 4, 5]).unwrap();
        a.finish(1).unwrap(); // blocks [1,2] and [3,4] cached, [5] a tail, 1 free
        a.start_sequence(2, &[9; 9], Owner::Prefill).unwrap();
        let e = a.reserve(2, 9).unwrap_err();
        assert!(
            matches!(
                e,
                KvError::ExceedsCapacity {
                    needed_total: 5,
                    ..
                }
            ),
            "{e}"
        );
        a.cancel(2).unwrap();
        a.start_sequence(3, &[9; 7], Owner::Prefill).unwrap();
        // 3 blocks: the free one, then the least recently used: the tail [5], then [3,4].
        a.reserve(3, 6).unwrap();
        assert_eq!(a.stats().evictions, 2);
        assert_eq!(a.lookup_prefix(&[1, 2, 3, 4, 5]), 2);
        a.start_sequence(4, &[7; 7], Owner::Prefill).unwrap();
        let snapshot = a.clone();
        // needs 4 blocks: 0 free + 1 evictable
        let e = a.reserve(4, 7).unwrap_err();
        assert_eq!(
            e,
            KvError::Full {
                seq: 4,
                needed: 4,
                free: 0,
                evictable: 1,
                total: 4,
                block_size: 2
            }
        );
        assert!(e.to_string().contains("needs 4 more blocks"));
        assert_eq!(a, snapshot);
        a.check_invariants().unwrap();
    }

    #[test]
    fn hand_off_moves_ownership() {
        let mut a = KvArena::new(8, 4);
        a.start_sequence(1, &[1; 9], Owner::Prefill).unwrap();
        a.reserve(1, 9).unwrap();
        assert_eq!(a.stats().prefill_blocks, 3);
        assert_eq!(
            a.hand_off(1, Owner::Decode, Owner::Prefill),
            Err(KvError::WrongOwner {
                seq: 1,
                expected: Owner::Decode,
                actual: Owner::Prefill
            })
        );
        a.hand_off(1, Owner::Prefill, Owner::Decode).unwrap();
        let st = a.stats();
        assert_eq!((st.prefill_blocks, st.decode_blocks), (0, 3));
        let b = a.block_table(1).unwrap()[1];
        assert_eq!(a.block_owner(b), Some(Owner::Decode));
        assert!(a.hand_off(1, Owner::Decode, Owner::Free).is_err());
        a.check_invariants().unwrap();
    }

    #[test]
    fn duplicate_prefixes_are_not_cached_twice() {
        let mut a = KvArena::new(8, 2);
        for id in [1, 2] {
            a.start_sequence(id, &[5, 6, 7], Owner::Prefill).unwrap();
            a.reserve(id, 3).unwrap();
            a.commit_tokens(id, &[5, 6, 7]).unwrap();
        }
        a.finish(1).unwrap();
        let f = a.finish(2).unwrap();
        assert_eq!(f.duplicate_blocks, 1);
        assert_eq!((f.tail_blocks, f.freed_blocks), (0, 1), "an equal tail is kept already");
        assert_eq!(a.stats().cached_blocks, 2);
        assert_eq!(a.stats().free_blocks, 6);
        a.check_invariants().unwrap();
    }

    #[test]
    fn tails_are_taken_over_by_the_prompt_that_repeats_most_of_them() {
        let mut a = KvArena::new(16, 4);
        let run = |a: &mut KvArena, id: SeqId, toks: &[u32]| {
            let start = a.start_sequence(id, toks, Owner::Prefill).unwrap();
            a.reserve(id, toks.len() - start.reused_tokens).unwrap();
            a.commit_tokens(id, &toks[start.reused_tokens..]).unwrap();
            a.finish(id).unwrap();
            a.check_invariants().unwrap();
            start
        };
        // Two tails after the same block [1,2,3,4]: [5,6,7] and [5,8] (running together, so
        // the second could not take the first's tail).
        for (id, toks) in [(1, &[1, 2, 3, 4, 5, 6, 7][..]), (2, &[1, 2, 3, 4, 5, 8][..])] {
            a.start_sequence(id, toks, Owner::Prefill).unwrap();
            a.reserve(id, toks.len()).unwrap();
            a.commit_tokens(id, toks).unwrap();
        }
        a.finish(1).unwrap();
        assert_eq!(a.finish(2).unwrap().duplicate_blocks, 1);
        a.check_invariants().unwrap();
        assert_eq!(a.stats().cached_blocks, 3);
        // [.., 5, 6, 9]: the first tail repeats 2 tokens, the second 1.
        let s = a.start_sequence(3, &[1, 2, 3, 4, 5, 6, 9, 9], Owner::Decode).unwrap();
        assert_eq!((s.reused_blocks, s.tail_tokens, s.reused_tokens), (1, 2, 6));
        let taken = a.block_table(3).unwrap()[1];
        assert_eq!(a.block_owner(taken), Some(Owner::Decode));
        // The other tail is still there for a prompt continuing with 8.
        assert_eq!(a.lookup_prefix(&[1, 2, 3, 4, 5, 8, 0, 0]), 6);
        assert_eq!(a.lookup_prefix(&[1, 2, 3, 4, 5, 6, 9, 9]), 5);
        // A tail at depth 0; two tokens are left to compute; a prompt that diverges at its
        // first token reuses nothing.
        run(&mut a, 4, &[40, 41]);
        assert_eq!(a.lookup_prefix(&[40, 41, 42, 43]), 2);
        assert_eq!(a.lookup_prefix(&[40, 41, 42]), 1);
        assert_eq!(a.lookup_prefix(&[40, 41]), 0);
        assert_eq!(a.lookup_prefix(&[41, 41, 42, 43]), 0);
        a.cancel(3).unwrap();
        a.check_invariants().unwrap();
        let idle = a.stats().evictable_blocks;
        assert_eq!(a.evict_all_cached(), idle);
        assert_eq!(a.stats().free_blocks, 16);
        a.check_invariants().unwrap();
    }
}
