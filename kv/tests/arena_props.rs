//! Property tests of the block manager over random sequences of operations: start (with prefix
//! reuse), reserve, commit, hand-off, finish, cancel, evict. After every step:
//!
//! * the arena's own invariants hold (`check_invariants`);
//! * no block is in two owners' hands: an owned block is in exactly one table, a block in
//!   several tables is a cached prefix and its reference count equals the number of tables;
//! * no block leaks: free + prefill + decode + cached == total;
//! * no running sequence is corrupted: a simulated device memory, written through the block
//!   tables at every commit, still holds every running sequence's tokens at every position,
//!   including the positions served from reused prefix blocks;
//! * prefix reuse is exact while nothing was evicted, and never more than what was cached;
//!   with cell copies on, the harness makes every copy the arena asks for in its memory, so the
//!   memory check also covers the copied cells;
//! * a failed reserve changes nothing.
//!
//! At the end every request is ended (finished or cancelled): all blocks are free or cached;
//! after evicting all cached blocks, all are free.

use std::collections::HashMap;

use proptest::prelude::*;
use strata_kv::{BlockId, KvArena, KvError, Owner};

#[derive(Clone, Debug)]
enum Op {
    /// Start a request: prompt = family's base stream[..len], diverging at `diverge` if given.
    Start {
        family: u32,
        len: usize,
        diverge: Option<usize>,
        prefill: bool,
    },
    Reserve {
        slot: usize,
        n: usize,
    },
    Commit {
        slot: usize,
        n: usize,
    },
    HandOff {
        slot: usize,
    },
    Finish {
        slot: usize,
    },
    Cancel {
        slot: usize,
    },
    Evict {
        n: usize,
    },
    EvictAll,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u32..3, 0usize..40, proptest::option::weighted(0.3, 0usize..40), any::<bool>())
            .prop_map(|(family, len, diverge, prefill)| Op::Start { family, len, diverge, prefill }),
        6 => (0usize..8, 0usize..24).prop_map(|(slot, n)| Op::Reserve { slot, n }),
        6 => (0usize..8, 1usize..24).prop_map(|(slot, n)| Op::Commit { slot, n }),
        2 => (0usize..8).prop_map(|slot| Op::HandOff { slot }),
        3 => (0usize..8).prop_map(|slot| Op::Finish { slot }),
        2 => (0usize..8).prop_map(|slot| Op::Cancel { slot }),
        1 => (0usize..6).prop_map(|n| Op::Evict { n }),
        1 => Just(Op::EvictAll),
    ]
}

/// The test's view of one running request.
struct Req {
    id: u64,
    prompt_len: usize,
    /// Prompt followed by the tokens it will "generate".
    stream: Vec<u32>,
    owner: Owner,
}

fn family_token(family: u32, pos: usize) -> u32 {
    family * 100_000 + pos as u32
}

struct Harness {
    arena: KvArena,
    bs: usize,
    /// Simulated device memory: cell -> (position, token) last written there.
    mem: Vec<Option<(usize, u32)>>,
    running: Vec<Req>,
    next_id: u64,
    /// Committed full-block prefixes of finished requests (what the cache has ever held).
    finished_prefixes: Vec<Vec<u32>>,
    /// Every committed token of finished requests (what their tails may hold).
    finished_tokens: Vec<Vec<u32>>,
}

impl Harness {
    fn new(n_blocks: u32, bs: u32, cell_copies: bool) -> Self {
        let mut arena = KvArena::new(n_blocks, bs);
        arena.set_cell_copies(cell_copies);
        Harness {
            arena,
            bs: bs as usize,
            mem: vec![None; n_blocks as usize * bs as usize],
            running: Vec::new(),
            next_id: 1,
            finished_prefixes: Vec::new(),
            finished_tokens: Vec::new(),
        }
    }

    fn pick(&self, slot: usize) -> Option<usize> {
        if self.running.is_empty() {
            None
        } else {
            Some(slot % self.running.len())
        }
    }

    /// Longest reuse the cache could offer if nothing had been evicted.
    fn best_possible_reuse(&self, prompt: &[u32]) -> usize {
        let cap = prompt.len().saturating_sub(1) / self.bs * self.bs;
        self.finished_prefixes
            .iter()
            .map(|f| {
                let common = f.iter().zip(prompt).take_while(|(a, b)| a == b).count();
                (common / self.bs * self.bs).min(cap)
            })
            .max()
            .unwrap_or(0)
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Start {
                family,
                len,
                diverge,
                prefill,
            } => {
                let id = self.next_id;
                self.next_id += 1;
                let total = len + 30;
                let stream: Vec<u32> = (0..total)
                    .map(|p| match diverge {
                        Some(d) if p >= d => 9_000_000 + (id as u32) * 1000 + p as u32,
                        _ => family_token(family, p),
                    })
                    .collect();
                let prompt = &stream[..len];
                let owner = if prefill {
                    Owner::Prefill
                } else {
                    Owner::Decode
                };
                let expected_max = self.best_possible_reuse(prompt);
                let lookup = self.arena.lookup_prefix(prompt);
                let s = self.arena.start_sequence(id, prompt, owner).unwrap();
                prop_assert_eq!(s.reused_tokens, lookup);
                prop_assert_eq!(s.reused_blocks * self.bs + s.tail_tokens + s.copied_tokens, s.reused_tokens);
                prop_assert!(s.tail_tokens < self.bs && s.copied_tokens < self.bs);
                prop_assert!(s.tail_tokens == 0 || s.copied_tokens == 0);
                prop_assert_eq!(s.copy.map_or(0, |c| c.cells), s.copied_tokens);
                if let Some(c) = s.copy {
                    let table = self.arena.block_table(id).unwrap();
                    prop_assert_eq!(table.last(), Some(&c.to));
                    prop_assert_eq!(table.len(), s.reused_blocks + 1);
                    prop_assert_eq!(self.arena.block_owner(c.from), Some(Owner::CachedPrefix));
                    prop_assert!(!table.contains(&c.from));
                    for i in 0..c.cells {
                        self.mem[c.to.0 as usize * self.bs + i] = self.mem[c.from.0 as usize * self.bs + i];
                    }
                }
                prop_assert!(s.reused_tokens < len.max(1), "reused the whole prompt");
                // Whole blocks: exactly what the cache was given while nothing was evicted.
                prop_assert!(s.reused_blocks * self.bs <= expected_max);
                if self.arena.stats().evictions == 0 {
                    prop_assert_eq!(s.reused_blocks * self.bs, expected_max, "missed a cached prefix");
                }
                // A tail's or a copy's tokens: a finished request held this whole reused prefix.
                if s.tail_tokens + s.copied_tokens > 0 {
                    prop_assert!(s.reused_tokens + 2 <= len, "a tail or copy left fewer than two tokens");
                    let held = self.finished_tokens.iter().any(|f| f.iter().zip(prompt).take_while(|(a, b)| a == b).count() >= s.reused_tokens);
                    prop_assert!(held, "reused {} tokens no finished request held", s.reused_tokens);
                }
                prop_assert_eq!(self.arena.seq_len(id), Some(s.reused_tokens));
                prop_assert_eq!(self.arena.reused_tokens(id), Some(s.reused_tokens));
                prop_assert_eq!(
                    self.arena.start_sequence(id, prompt, owner),
                    Err(KvError::SequenceExists(id))
                );
                self.running.push(Req {
                    id,
                    prompt_len: len,
                    stream,
                    owner,
                });
            }
            Op::Reserve { slot, n } => {
                let Some(i) = self.pick(slot) else {
                    return Ok(());
                };
                let id = self.running[i].id;
                let before = self.arena.clone();
                let needed = self.arena.blocks_needed(id, n).unwrap();
                let len = self.arena.seq_len(id).unwrap();
                match self.arena.reserve(id, n) {
                    Ok(r) => {
                        prop_assert_eq!(r.new_blocks, needed);
                        prop_assert!(self.arena.seq_capacity(id).unwrap() >= len + n);
                        prop_assert_eq!(
                            self.arena.stats().evictions - before.stats().evictions,
                            r.evicted as u64
                        );
                    }
                    Err(KvError::Full {
                        needed: nd,
                        free,
                        evictable,
                        ..
                    }) => {
                        prop_assert_eq!(nd, needed);
                        prop_assert!(needed > free + evictable);
                        prop_assert_eq!(free, before.stats().free_blocks);
                        prop_assert!(self.arena == before, "failed reserve changed state");
                    }
                    Err(KvError::ExceedsCapacity {
                        needed_total,
                        total,
                        ..
                    }) => {
                        prop_assert!(needed_total > total as usize);
                        prop_assert!(self.arena == before, "failed reserve changed state");
                    }
                    Err(e) => prop_assert!(false, "unexpected {e}"),
                }
            }
            Op::Commit { slot, n } => {
                let Some(i) = self.pick(slot) else {
                    return Ok(());
                };
                let id = self.running[i].id;
                let len = self.arena.seq_len(id).unwrap();
                let cap = self.arena.seq_capacity(id).unwrap();
                let req = &self.running[i];
                let k = n.min(cap - len).min(req.stream.len() - len);
                if cap - len < n {
                    // over-commit is refused and changes nothing
                    let before = self.arena.clone();
                    let over = &req.stream[len..(len + n).min(req.stream.len())];
                    if over.len() > cap - len {
                        let e = self.arena.commit_tokens(id, over);
                        prop_assert!(
                            matches!(e, Err(KvError::NotReserved { .. })),
                            "over-commit accepted"
                        );
                        prop_assert!(self.arena == before);
                    }
                }
                let tokens = req.stream[len..len + k].to_vec();
                // Write the cells first, as a device would; every target cell must belong to a
                // block this sequence owns (never a shared, read-only one).
                for (j, &t) in tokens.iter().enumerate() {
                    let pos = len + j;
                    let cell = self.arena.cell_of(id, pos).unwrap();
                    let b = BlockId((cell / self.bs as u64) as u32);
                    let info = self.arena.block_info(b).unwrap();
                    prop_assert_eq!(&info.sequences, &vec![id], "writing a block not ours only");
                    prop_assert!(matches!(info.owner, Owner::Prefill | Owner::Decode));
                    self.mem[cell as usize] = Some((pos, t));
                }
                self.arena.commit_tokens(id, &tokens).unwrap();
                prop_assert_eq!(self.arena.seq_len(id), Some(len + k));
            }
            Op::HandOff { slot } => {
                let Some(i) = self.pick(slot) else {
                    return Ok(());
                };
                let r = &mut self.running[i];
                let wrong = if r.owner == Owner::Prefill {
                    Owner::Decode
                } else {
                    Owner::Prefill
                };
                let before = self.arena.stats();
                prop_assert!(self.arena.hand_off(r.id, wrong, Owner::Decode).is_err());
                if r.owner == Owner::Prefill {
                    self.arena
                        .hand_off(r.id, Owner::Prefill, Owner::Decode)
                        .unwrap();
                    r.owner = Owner::Decode;
                    let after = self.arena.stats();
                    prop_assert_eq!(
                        before.prefill_blocks + before.decode_blocks,
                        after.prefill_blocks + after.decode_blocks
                    );
                }
                prop_assert_eq!(self.arena.seq_owner(r.id), Some(r.owner));
            }
            Op::Finish { slot } => {
                let Some(i) = self.pick(slot) else {
                    return Ok(());
                };
                let r = self.running.swap_remove(i);
                let toks = self.arena.seq_tokens(r.id).unwrap().to_vec();
                let table_len = self.arena.block_table(r.id).unwrap().len();
                let f = self.arena.finish(r.id).unwrap();
                let full = toks.len() / self.bs;
                prop_assert_eq!(
                    f.cached_blocks + f.duplicate_blocks + f.released_shared,
                    full
                );
                prop_assert!(f.tail_blocks <= usize::from(toks.len() % self.bs != 0));
                prop_assert_eq!(f.freed_blocks + f.tail_blocks, table_len - full);
                self.finished_prefixes.push(toks[..full * self.bs].to_vec());
                self.finished_tokens.push(toks);
                prop_assert_eq!(self.arena.finish(r.id), Err(KvError::UnknownSequence(r.id)));
            }
            Op::Cancel { slot } => {
                let Some(i) = self.pick(slot) else {
                    return Ok(());
                };
                let r = self.running.swap_remove(i);
                let table_len = self.arena.block_table(r.id).unwrap().len();
                let c = self.arena.cancel(r.id).unwrap();
                prop_assert_eq!(c.freed_blocks + c.released_shared, table_len);
                prop_assert!(self.arena.cancel(r.id).is_err());
            }
            Op::Evict { n } => {
                let idle = self.arena.stats().evictable_blocks;
                prop_assert_eq!(self.arena.evict(n), n.min(idle));
            }
            Op::EvictAll => {
                let idle = self.arena.stats().evictable_blocks;
                prop_assert_eq!(self.arena.evict_all_cached(), idle);
                prop_assert_eq!(
                    self.arena.stats().cached_blocks,
                    self.arena.stats().cached_in_use
                );
            }
        }
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let a = &self.arena;
        if let Err(e) = a.check_invariants() {
            prop_assert!(false, "invariant broken: {}", e);
        }
        let st = a.stats();
        let total = st.total_blocks as usize;
        prop_assert_eq!(
            st.free_blocks + st.prefill_blocks + st.decode_blocks + st.cached_blocks,
            total,
            "blocks leaked"
        );
        prop_assert_eq!(st.sequences, self.running.len());
        // Count table references from the outside.
        let mut refs: HashMap<BlockId, Vec<u64>> = HashMap::new();
        for r in &self.running {
            let table = a.block_table(r.id).unwrap();
            for &b in table {
                refs.entry(b).or_default().push(r.id);
            }
            // Data integrity: every committed position still reads back its token.
            let len = a.seq_len(r.id).unwrap();
            prop_assert!(len <= r.stream.len());
            for pos in 0..len {
                let cell = a.cell_of(r.id, pos).unwrap() as usize;
                prop_assert_eq!(
                    self.mem[cell],
                    Some((pos, r.stream[pos])),
                    "sequence {} corrupted at position {}",
                    r.id,
                    pos
                );
            }
            prop_assert!(a.reused_tokens(r.id).unwrap() < r.prompt_len.max(1));
        }
        for (b, seqs) in &refs {
            let info = a.block_info(*b).unwrap();
            match info.owner {
                Owner::Prefill | Owner::Decode => {
                    prop_assert_eq!(seqs.len(), 1, "owned block {:?} in {:?}", b, seqs);
                    let r = self.running.iter().find(|r| r.id == seqs[0]).unwrap();
                    prop_assert_eq!(info.owner, r.owner);
                }
                Owner::CachedPrefix => {
                    prop_assert_eq!(a.refcount(*b), Some(seqs.len()), "refcount of {:?}", b);
                    let mut x = info.sequences.clone();
                    x.sort_unstable();
                    let mut y = seqs.clone();
                    y.sort_unstable();
                    prop_assert_eq!(x, y);
                }
                Owner::Free => prop_assert!(false, "free block {:?} in a table", b),
            }
        }
        // Blocks in no table are free or idle cached.
        let mut idle = 0;
        for i in 0..total as u32 {
            let b = BlockId(i);
            if !refs.contains_key(&b) {
                match a.block_owner(b).unwrap() {
                    Owner::Free => {}
                    Owner::CachedPrefix => {
                        idle += 1;
                        prop_assert_eq!(a.refcount(b), Some(0));
                    }
                    o => prop_assert!(false, "{:?} owned by {:?} but in no table", b, o),
                }
            }
        }
        prop_assert_eq!(idle, st.evictable_blocks);
        Ok(())
    }
}

fn run_ops(
    n_blocks: u32,
    bs: u32,
    cell_copies: bool,
    ops: &[Op],
    finish_at_end: &[bool],
) -> Result<(), TestCaseError> {
    let mut h = Harness::new(n_blocks, bs, cell_copies);
    let start = h.arena.clone();
    h.check()?;
    for op in ops {
        h.apply(op)?;
        h.check()?;
    }
    // End every request, finishing or cancelling.
    let mut k = 0;
    while !h.running.is_empty() {
        let fin = finish_at_end.get(k).copied().unwrap_or(true);
        k += 1;
        h.apply(&if fin {
            Op::Finish { slot: 0 }
        } else {
            Op::Cancel { slot: 0 }
        })?;
        h.check()?;
    }
    let st = h.arena.stats();
    prop_assert_eq!(st.prefill_blocks + st.decode_blocks + st.cached_in_use, 0);
    prop_assert_eq!(st.free_blocks + st.cached_blocks, n_blocks as usize);
    for i in 0..n_blocks {
        let o = h.arena.block_owner(BlockId(i)).unwrap();
        prop_assert!(matches!(o, Owner::Free | Owner::CachedPrefix));
    }
    let idle = st.evictable_blocks;
    prop_assert_eq!(h.arena.evict_all_cached(), idle);
    h.check()?;
    let st = h.arena.stats();
    prop_assert_eq!(st.free_blocks, n_blocks as usize);
    prop_assert_eq!(st.cached_blocks, 0);
    prop_assert_eq!(st.sequences, 0);
    // Back to the starting state, apart from the counters and the free list's order.
    prop_assert_eq!(h.arena.available_blocks(), start.available_blocks());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Tight arenas: many Full errors and evictions.
    #[test]
    fn small_arena_random_ops(
        n_blocks in 1u32..12,
        bs in prop_oneof![Just(1u32), Just(2), Just(3), Just(4)],
        copies in any::<bool>(),
        ops in proptest::collection::vec(op_strategy(), 1..120),
        fin in proptest::collection::vec(any::<bool>(), 0..16),
    ) {
        run_ops(n_blocks, bs, copies, &ops, &fin)?;
    }

    /// Roomy arenas: long runs without eviction, so prefix reuse is checked exactly.
    #[test]
    fn large_arena_random_ops(
        n_blocks in 24u32..80,
        bs in prop_oneof![Just(2u32), Just(4), Just(16)],
        copies in any::<bool>(),
        ops in proptest::collection::vec(op_strategy(), 1..200),
        fin in proptest::collection::vec(any::<bool>(), 0..16),
    ) {
        run_ops(n_blocks, bs, copies, &ops, &fin)?;
    }
}

/// A prompt whose prefix is cached computes only the rest, and the reuse is reported.
#[test]
fn second_request_reuses_the_first_ones_prompt() {
    let mut a = KvArena::new(64, 16);
    let system: Vec<u32> = (0..100).collect();
    a.start_sequence(1, &system, Owner::Prefill).unwrap();
    a.reserve(1, 100).unwrap();
    a.commit_tokens(1, &system).unwrap();
    a.hand_off(1, Owner::Prefill, Owner::Decode).unwrap();
    a.reserve(1, 1).unwrap();
    a.commit_tokens(1, &[7]).unwrap();
    a.finish(1).unwrap();
    assert_eq!(a.stats().cached_blocks, 7); // 101 tokens: 6 full blocks and a tail of 5

    // The system prompt's 100 tokens: 6 blocks and 4 of the tail's tokens.
    let mut prompt = system.clone();
    prompt.extend([500, 501, 502]);
    let s = a.start_sequence(2, &prompt, Owner::Prefill).unwrap();
    assert_eq!((s.reused_tokens, s.reused_blocks, s.tail_tokens), (100, 6, 4));
    a.reserve(2, prompt.len() - 100).unwrap();
    a.commit_tokens(2, &prompt[100..]).unwrap();
    assert_eq!(a.block_table(2).unwrap().len(), 7);
    let st = a.stats();
    assert_eq!(
        (st.prefix_hits, st.reused_tokens, st.cached_in_use),
        (1, 100, 6)
    );
    a.check_invariants().unwrap();
}
