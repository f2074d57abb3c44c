//! A fixed pool of compute threads that spin between jobs.
//!
//! A decode step of a small model is ~150 parallel ops of tens of microseconds each; waking
//! sleeping threads for each (futex round trips, as a general-purpose pool does) costs as much as
//! the work. Here the calling thread publishes a job and takes part as thread 0 while the workers,
//! spinning on an epoch counter, pick it up within a few hundred nanoseconds. Workers that find
//! nothing to do for [`SPIN_BEFORE_SLEEP`] park on a condition variable, so an idle server does
//! not burn its cores.

use std::cell::UnsafeCell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it sleeps.
pub const SPIN_BEFORE_SLEEP: Duration = Duration::from_millis(2);

/// The job: called as `job(thread_index, n_threads)` on every thread.
type Job = dyn Fn(usize, usize) + Sync;

struct Shared {
    /// Incremented once per job; workers run a job when they see it change.
    epoch: AtomicU64,
    /// The current job. Written by the caller only while no worker runs one (`pending == 0`),
    /// read by workers after they observe the epoch that published it.
    job: UnsafeCell<Option<*const Job>>,
    /// Workers still running the current job.
    pending: AtomicUsize,
    /// Workers asleep on `wake`.
    sleeping: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is only written while no worker reads it (see the field's documentation) and the
// pointee is `Sync`; every other field is a synchronization primitive.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw job pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// A pool of `n_threads - 1` workers plus the calling thread.
pub struct SpinPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    n_threads: usize,
}

impl SpinPool {
    /// Starts `n_threads - 1` worker threads (none for one thread).
    ///
    /// # Errors
    /// A thread could not be spawned.
    pub fn new(n_threads: usize, name: &str) -> std::io::Result<SpinPool> {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            pending: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut workers = Vec::with_capacity(n_threads - 1);
        for index in 1..n_threads {
            let shared = shared.clone();
            let handle = std::thread::Builder::new().name(format!("{name}-{index}")).spawn(move || worker(&shared, index, n_threads))?;
            workers.push(handle);
        }
        Ok(SpinPool { shared, workers, n_threads })
    }

    /// Threads taking part in each job, the caller included.
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Runs `job(i, n)` for every `i` in `0..n` (the caller runs `i = 0`) and returns when all
    /// have finished. A panic in any of them is resumed here, after every thread has finished
    /// with `job`.
    pub fn run(&self, job: &(dyn Fn(usize, usize) + Sync)) {
        if self.n_threads == 1 {
            job(0, 1);
            return;
        }
        let s = &*self.shared;
        // SAFETY: the previous `run` returned only after `pending` reached 0, so no worker reads
        // `job` now; the pointer is erased to 'static but is only used until this call returns,
        // which waits for every worker below.
        unsafe {
            let ptr: *const Job = std::mem::transmute::<*const (dyn Fn(usize, usize) + Sync + '_), *const Job>(job as *const _);
            *s.job.get() = Some(ptr);
        }
        s.pending.store(self.n_threads - 1, Ordering::SeqCst);
        s.epoch.fetch_add(1, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
            s.wake.notify_all();
        }
        let mine = panic::catch_unwind(AssertUnwindSafe(|| job(0, self.n_threads)));
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            spins = spins.saturating_add(1);
            backoff(spins);
        }
        if let Err(p) = mine {
            panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("a CPU compute thread panicked");
        }
    }
}

/// Hands out `0..len` in shrinking chunks to whichever thread asks next (guided scheduling):
/// a thread the OS preempts, or a share that runs long, leaves the rest to the others, while
/// the shared counter moves only O(threads x log len) times per job, not once per item (each
/// move is a cache-line transfer between cores; once per item measured ~4% of batched decode).
#[repr(align(128))]
pub struct WorkQueue {
    next: AtomicUsize,
    len: usize,
    n_threads: usize,
    guided: bool,
}

impl WorkQueue {
    /// A queue of items `0..len` shared by `n_threads` threads.
    pub fn new(len: usize, n_threads: usize) -> WorkQueue {
        WorkQueue { next: AtomicUsize::new(0), len, n_threads: n_threads.max(1), guided: true }
    }

    /// A queue that hands out one item per claim: for a few long items of unequal cost, taken
    /// in the order given (longest first balances best).
    pub fn one_at_a_time(len: usize) -> WorkQueue {
        WorkQueue { next: AtomicUsize::new(0), len, n_threads: 1, guided: false }
    }

    /// The next chunk of items: half the remaining work's fair share per thread, at least one
    /// item; `None` once all are handed out.
    pub fn claim(&self) -> Option<std::ops::Range<usize>> {
        let mut start = self.next.load(Ordering::Relaxed);
        loop {
            if start >= self.len {
                return None;
            }
            let take = if self.guided { ((self.len - start) / (2 * self.n_threads)).max(1) } else { 1 };
            match self.next.compare_exchange_weak(start, start + take, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(start..start + take),
                Err(now) => start = now,
            }
        }
    }
}

fn worker(s: &Shared, index: usize, n_threads: usize) {
    let mut seen = 0u64;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Relaxed) {
                return;
            }
            let e = s.epoch.load(Ordering::Acquire);
            if e != seen {
                seen = e;
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && start.elapsed() > SPIN_BEFORE_SLEEP {
                let guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
                s.sleeping.fetch_add(1, Ordering::SeqCst);
                // Re-check under the lock: a job published after our last look is seen here, and
                // one published later finds `sleeping > 0` and notifies.
                let guard = s
                    .wake
                    .wait_while(guard, |_| s.epoch.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst))
                    .unwrap_or_else(|p| p.into_inner());
                s.sleeping.fetch_sub(1, Ordering::SeqCst);
                drop(guard);
            } else {
                backoff(spins);
            }
        }
        // SAFETY: the epoch we observed was published after `job` was written, and the caller
        // keeps the job alive until `pending` drops to 0, which happens only after we finish.
        let job = unsafe { *s.job.get() };
        if let Some(job) = job {
            // SAFETY: see above: the pointee outlives this call.
            let f = unsafe { &*job };
            if panic::catch_unwind(AssertUnwindSafe(|| f(index, n_threads))).is_err() {
                s.panicked.store(true, Ordering::SeqCst);
            }
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

/// Spins briefly, then yields: on an oversubscribed machine the thread we wait for may need
/// this core.
fn backoff(spins: u32) {
    if spins < 256 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_work_queue_hands_out_every_item_exactly_once() {
        for (len, threads) in [(0usize, 2usize), (1, 2), (7, 3), (768, 2), (1000, 8)] {
            let pool = SpinPool::new(threads, "test").expect("pool");
            let queue = if len % 2 == 0 { WorkQueue::new(len, threads) } else { WorkQueue::one_at_a_time(len) };
            let seen: Vec<AtomicUsize> = (0..len).map(|_| AtomicUsize::new(0)).collect();
            let claims = AtomicUsize::new(0);
            pool.run(&|_, _| {
                while let Some(r) = queue.claim() {
                    assert!(!r.is_empty() && r.end <= len);
                    claims.fetch_add(1, Ordering::Relaxed);
                    for i in r {
                        seen[i].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "len {len}, threads {threads}");
            // Guided chunks: far fewer claims than items on long queues.
            if len >= 768 && len % 2 == 0 {
                assert!(claims.load(Ordering::Relaxed) < len / 8, "{} claims for {len} items", claims.load(Ordering::Relaxed));
            }
        }
    }

    #[test]
    fn every_thread_runs_every_job_once() {
        let pool = SpinPool::new(3, "test").expect("pool");
        let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for _ in 0..1000 {
            pool.run(&|i, n| {
                assert_eq!(n, 3);
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
        }
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 1000);
        }
    }

    #[test]
    fn jobs_after_the_workers_slept_still_run() {
        let pool = SpinPool::new(2, "test").expect("pool");
        std::thread::sleep(SPIN_BEFORE_SLEEP * 3);
        let count = AtomicUsize::new(0);
        pool.run(&|_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_panicking_worker_is_reported_to_the_caller_and_the_pool_survives() {
        let pool = SpinPool::new(2, "test").expect("pool");
        let r = panic::catch_unwind(AssertUnwindSafe(|| pool.run(&|i, _| assert!(i != 1, "boom"))));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(&|_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }
}
