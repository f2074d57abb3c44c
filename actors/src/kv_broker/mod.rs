//! The KV broker: the actor that owns the KV arena's bookkeeping (block tables, owners, the
//! prefix cache) for one arena.
//!
//! Devices never touch the tables themselves: they ask the broker for room, tell it which tokens
//! their cells now hold, and hand a sequence from the prefill owner to the decode owner, each with
//! one message and a oneshot reply. Messages carry batches: one reservation and one commit per step
//! for all its sequences. A sequence that is cancelled, fails or times out is ended with
//! `cache = false`, which gives every block back.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use strata_kv::{ArenaStats, CellCopy, KvArena, KvError, Owner, SeqId, SeqStart};
use tokio::sync::oneshot;

/// Room made for one sequence in one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Position of the first new token (the sequence's committed length).
    pub start_pos: usize,
    /// The sequence's block table after the reservation.
    pub table: Vec<u32>,
}

/// Why a broker call failed.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error(transparent)]
    Kv(#[from] KvError),
    #[error("the KV broker has stopped")]
    Gone,
}

type Reply<T> = oneshot::Sender<T>;

/// Copies cells between two blocks of the KV memory (what [`SeqStart::copy`] asks for). The
/// broker calls it before it answers the start, so no other command can touch either block
/// meanwhile.
pub type CellCopier = Box<dyn FnMut(CellCopy) -> Result<(), String> + Send>;

enum Command {
    Start { seq: SeqId, prompt: Vec<u32>, owner: Owner, reply: Reply<Result<SeqStart, KvError>> },
    Reserve { batch: Vec<(SeqId, usize)>, reply: Reply<Vec<Result<Reservation, KvError>>> },
    Commit { batch: Vec<(SeqId, Vec<u32>)>, reply: Reply<Result<(), KvError>> },
    HandOff { seq: SeqId, from: Owner, to: Owner, reply: Reply<Result<(), KvError>> },
    /// `cache`: the first this many tokens' full blocks become cached prefixes (0: nothing is
    /// cached, the sequence is cancelled).
    End { seq: SeqId, cache: usize, reply: Reply<Result<(), KvError>> },
    Stats { reply: Reply<ArenaStats> },
}

/// The broker's handle: every method is one message and waits for its reply. Call it from
/// device threads, not from async tasks (it blocks).
#[derive(Clone)]
pub struct KvBrokerHandle {
    tx: Sender<Command>,
    /// How long a call polls for its reply before it sleeps.
    poll: Duration,
}

/// The KV broker actor; [`KvBroker::start`] spawns it and hands back its handle.
pub struct KvBroker;

/// Commands waiting for the broker; callers block when it is full.
const MAILBOX: usize = 64;

impl KvBroker {
    /// Starts the broker thread with `arena` as its state. The thread ends when the last handle
    /// is dropped (its mailbox closes).
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(arena: KvArena) -> std::io::Result<KvBrokerHandle> {
        KvBroker::start_polling(arena, Duration::ZERO)
    }

    /// As [`KvBroker::start`], with both ends polling for up to `poll` before they sleep: the
    /// broker for its next command after each one, a caller for its reply. A GPU decoding a
    /// token every few milliseconds calls the broker twice per token, and a sleeping thread's
    /// wake-up (tens to hundreds of microseconds on a server CPU) would otherwise be paid four
    /// times per token. It costs a core while commands keep coming; a CPU device wants its cores
    /// for itself (poll zero).
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start_polling(arena: KvArena, poll: Duration) -> std::io::Result<KvBrokerHandle> {
        KvBroker::start_with(arena, poll, None)
    }

    /// As [`KvBroker::start_polling`]; with a `copier` for the KV memory, a prompt may also
    /// reuse the first cells of a full cached block by a copy (see [`KvArena::set_cell_copies`]).
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start_with(mut arena: KvArena, poll: Duration, copier: Option<CellCopier>) -> std::io::Result<KvBrokerHandle> {
        arena.set_cell_copies(copier.is_some());
        let (tx, rx) = crossbeam_channel::bounded(MAILBOX);
        std::thread::Builder::new().name("strata-kv-broker".into()).spawn(move || serve(arena, rx, poll, copier))?;
        Ok(KvBrokerHandle { tx, poll })
    }
}

/// Calls `try_once` until it gives an answer or `poll` has passed (then `None`: the caller
/// sleeps on its channel instead).
fn poll_for<T>(poll: Duration, mut try_once: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    while start.elapsed() < poll {
        if let Some(answer) = try_once() {
            return Some(answer);
        }
        std::hint::spin_loop();
    }
    None
}

/// The next command (`None`: every handle is gone): polled for up to `poll`, then waited for.
fn next_command(rx: &Receiver<Command>, poll: Duration) -> Option<Command> {
    let polled = poll_for(poll, || match rx.try_recv() {
        Ok(cmd) => Some(Some(cmd)),
        Err(crossbeam_channel::TryRecvError::Disconnected) => Some(None),
        Err(crossbeam_channel::TryRecvError::Empty) => None,
    });
    polled.unwrap_or_else(|| rx.recv().ok())
}

/// Starts a sequence and makes the copy its start asks for. A copy that fails turns copies off
/// for good (the memory behind the copier is not what the arena thinks) and starts the
/// sequence again without one: the request computes those tokens instead.
fn start_sequence(arena: &mut KvArena, copier: &mut Option<CellCopier>, seq: SeqId, prompt: &[u32], owner: Owner) -> Result<SeqStart, KvError> {
    let s = arena.start_sequence(seq, prompt, owner)?;
    let (Some(copy), Some(copy_cells)) = (s.copy, copier.as_mut()) else {
        return Ok(s);
    };
    match copy_cells(copy) {
        Ok(()) => Ok(s),
        Err(e) => {
            tracing::warn!(error = %e, ?copy, "KV cell copy failed; prefix-cache copies are off from now on");
            *copier = None;
            arena.set_cell_copies(false);
            arena.cancel(seq)?;
            arena.start_sequence(seq, prompt, owner)
        }
    }
}

fn serve(mut arena: KvArena, rx: Receiver<Command>, poll: Duration, mut copier: Option<CellCopier>) {
    while let Some(cmd) = next_command(&rx, poll) {
        match cmd {
            Command::Start { seq, prompt, owner, reply } => {
                let _ = reply.send(start_sequence(&mut arena, &mut copier, seq, &prompt, owner));
            }
            Command::Reserve { batch, reply } => {
                let out = batch
                    .into_iter()
                    .map(|(seq, n)| {
                        arena.reserve(seq, n)?;
                        let start_pos = arena.seq_len(seq).ok_or(KvError::UnknownSequence(seq))?;
                        let table = arena.block_table(seq).ok_or(KvError::UnknownSequence(seq))?.iter().map(|b| b.0).collect();
                        Ok(Reservation { start_pos, table })
                    })
                    .collect();
                let _ = reply.send(out);
            }
            Command::Commit { batch, reply } => {
                let r = batch.iter().try_for_each(|(seq, tokens)| arena.commit_tokens(*seq, tokens));
                let _ = reply.send(r);
            }
            Command::HandOff { seq, from, to, reply } => {
                let _ = reply.send(arena.hand_off(seq, from, to));
            }
            Command::End { seq, cache, reply } => {
                let r = if cache > 0 { arena.finish_caching_first(seq, cache).map(|_| ()) } else { arena.cancel(seq).map(|_| ()) };
                let _ = reply.send(r);
            }
            Command::Stats { reply } => {
                let _ = reply.send(arena.stats());
            }
        }
    }
}

impl KvBrokerHandle {
    fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, BrokerError> {
        let (tx, mut rx) = oneshot::channel();
        self.tx.send(make(tx)).map_err(|_| BrokerError::Gone)?;
        let polled = poll_for(self.poll, || match rx.try_recv() {
            Ok(v) => Some(Ok(v)),
            Err(oneshot::error::TryRecvError::Closed) => Some(Err(BrokerError::Gone)),
            Err(oneshot::error::TryRecvError::Empty) => None,
        });
        polled.unwrap_or_else(|| rx.blocking_recv().map_err(|_| BrokerError::Gone))
    }

    /// Starts `seq`, sharing the longest cached prefix of `prompt` (whole blocks, then a cached
    /// partial block taken over; never all of it).
    ///
    /// # Errors
    /// A sequence id in use, an owner that is not a running one, or a stopped broker.
    pub fn start(&self, seq: SeqId, prompt: &[u32], owner: Owner) -> Result<SeqStart, BrokerError> {
        Ok(self.call(|reply| Command::Start { seq, prompt: prompt.to_vec(), owner, reply })??)
    }

    /// Makes room for each `(sequence, new tokens)` of a step; each entry succeeds or fails on
    /// its own (a full arena fails only the sequences that need blocks).
    ///
    /// # Errors
    /// Only a stopped broker; per-sequence failures are in the result.
    pub fn reserve_batch(&self, batch: Vec<(SeqId, usize)>) -> Result<Vec<Result<Reservation, KvError>>, BrokerError> {
        self.call(|reply| Command::Reserve { batch, reply })
    }

    /// Records the tokens a step wrote into each sequence's reserved cells.
    ///
    /// # Errors
    /// The first sequence that was not reserved for its tokens, or a stopped broker.
    pub fn commit_batch(&self, batch: Vec<(SeqId, Vec<u32>)>) -> Result<(), BrokerError> {
        Ok(self.call(|reply| Command::Commit { batch, reply })??)
    }

    /// Moves all of `seq`'s own blocks from `from` to `to` (prefill → decode).
    ///
    /// # Errors
    /// An unknown sequence or a wrong current owner.
    pub fn hand_off(&self, seq: SeqId, from: Owner, to: Owner) -> Result<(), BrokerError> {
        Ok(self.call(|reply| Command::HandOff { seq, from, to, reply })??)
    }

    /// Ends `seq`: with `cache`, its full blocks join the prefix cache; without, every block goes
    /// back (cancelled, failed or timed-out requests).
    ///
    /// # Errors
    /// An unknown sequence.
    pub fn end(&self, seq: SeqId, cache: bool) -> Result<(), BrokerError> {
        self.end_caching_first(seq, if cache { usize::MAX } else { 0 })
    }

    /// Ends `seq`, caching the full blocks of its first `tokens` tokens only (0: cancel).
    ///
    /// # Errors
    /// An unknown sequence, or a stopped broker.
    pub fn end_caching_first(&self, seq: SeqId, tokens: usize) -> Result<(), BrokerError> {
        Ok(self.call(|reply| Command::End { seq, cache: tokens, reply })??)
    }

    /// The arena's counters.
    ///
    /// # Errors
    /// A stopped broker.
    pub fn stats(&self) -> Result<ArenaStats, BrokerError> {
        self.call(|reply| Command::Stats { reply })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_round_trips_through_the_broker_and_gives_every_block_back() {
        let h = KvBroker::start(KvArena::new(8, 4)).expect("broker");
        let start = h.start(1, &[1, 2, 3, 4, 5, 6], Owner::Prefill).expect("start");
        assert_eq!(start.reused_tokens, 0);
        let r = h.reserve_batch(vec![(1, 6)]).expect("broker alive");
        let res = r[0].as_ref().expect("room");
        assert_eq!((res.start_pos, res.table.len()), (0, 2));
        h.commit_batch(vec![(1, vec![1, 2, 3, 4, 5, 6])]).expect("commit");
        h.hand_off(1, Owner::Prefill, Owner::Decode).expect("hand-off");
        h.end(1, true).expect("finish");
        let st = h.stats().expect("stats");
        assert_eq!(st.cached_blocks, 2, "the full block is cached, the partial one kept as a tail");
        // A second request with the same prefix reuses the block and the tail's token 5 (the
        // tail's block taken over; two tokens are left to compute).
        let again = h.start(2, &[1, 2, 3, 4, 5, 6, 7], Owner::Prefill).expect("start");
        assert_eq!(again.reused_tokens, 5);
        h.end(2, false).expect("cancel");
        let st = h.stats().expect("stats");
        assert_eq!(st.free_blocks + st.cached_blocks, 8);
        assert_eq!(st.sequences, 0);
    }

    #[test]
    fn a_full_arena_fails_only_the_sequences_that_need_room() {
        let h = KvBroker::start(KvArena::new(2, 4)).expect("broker");
        h.start(1, &[1], Owner::Prefill).expect("start");
        h.start(2, &[2], Owner::Prefill).expect("start");
        let r = h.reserve_batch(vec![(1, 8), (2, 1)]).expect("broker alive");
        assert!(r[0].is_ok());
        assert!(matches!(r[1], Err(KvError::Full { .. })), "{:?}", r[1]);
    }

    #[test]
    fn the_broker_makes_each_copy_before_it_answers_and_turns_copies_off_when_one_fails() {
        use std::sync::{Arc, Mutex};
        let made: Arc<Mutex<Vec<CellCopy>>> = Arc::default();
        let log = made.clone();
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let failing = fail.clone();
        let copier: CellCopier = Box::new(move |c| {
            if failing.load(std::sync::atomic::Ordering::SeqCst) {
                return Err("device gone".into());
            }
            log.lock().expect("lock").push(c);
            Ok(())
        });
        let h = KvBroker::start_with(KvArena::new(8, 4), Duration::ZERO, Some(copier)).expect("broker");
        // Prompt of 6 tokens and 2 generated: two full blocks cached.
        h.start(1, &[1, 2, 3, 4, 5, 6], Owner::Prefill).expect("start");
        h.reserve_batch(vec![(1, 8)]).expect("broker alive")[0].as_ref().expect("room");
        h.commit_batch(vec![(1, vec![1, 2, 3, 4, 5, 6, 9, 9])]).expect("commit");
        h.end(1, true).expect("finish");
        let s = h.start(2, &[1, 2, 3, 4, 5, 6, 7], Owner::Prefill).expect("start");
        assert_eq!((s.reused_tokens, s.copied_tokens), (5, 1));
        assert_eq!(made.lock().expect("lock").as_slice(), &[s.copy.expect("a copy")], "made before the answer");
        // A failing copy: the sequence starts without it, and no copy is offered again.
        fail.store(true, std::sync::atomic::Ordering::SeqCst);
        let s = h.start(3, &[1, 2, 3, 4, 5, 6, 8], Owner::Prefill).expect("start");
        assert_eq!((s.reused_tokens, s.copy), (4, None));
        fail.store(false, std::sync::atomic::Ordering::SeqCst);
        let s = h.start(4, &[1, 2, 3, 4, 5, 6, 8], Owner::Prefill).expect("start");
        assert_eq!((s.reused_tokens, s.copy), (4, None));
        assert_eq!(made.lock().expect("lock").len(), 1);
        let st = h.stats().expect("stats");
        assert_eq!(st.sequences, 3);
    }
}
