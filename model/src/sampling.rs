//! Choosing the next token from logits: greedy, temperature, top-k, top-p, min-p, repetition
//! penalty, seeded.

/// How to choose tokens. The defaults are llama.cpp's.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 (or below) means greedy.
    pub temperature: f32,
    /// 0 means no top-k cut.
    pub top_k: usize,
    /// 1.0 means no nucleus cut.
    pub top_p: f32,
    /// 0.0 means no min-p cut.
    pub min_p: f32,
    /// 1.0 means no penalty.
    pub repetition_penalty: f32,
    /// How many recent tokens the repetition penalty looks at.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0x5eed,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, ..Default::default() }
    }

    /// Whether these parameters always pick the most likely token.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }

    /// Checks every value for sense (finite, in range).
    ///
    /// # Errors
    /// A message naming the parameter and the accepted range.
    pub fn validate(&self) -> Result<(), String> {
        let check = |name: &str, v: f32, lo: f32, hi: f32| {
            if v.is_finite() && v >= lo && v <= hi {
                Ok(())
            } else {
                Err(format!("{name} must be a number between {lo} and {hi}, got {v}"))
            }
        };
        check("temperature", self.temperature, 0.0, 100.0)?;
        check("top_p", self.top_p, 0.0, 1.0)?;
        check("min_p", self.min_p, 0.0, 1.0)?;
        check("repetition_penalty", self.repetition_penalty, 0.01, 100.0)?;
        Ok(())
    }
}

/// A small, fast, seedable generator (xoshiro256**), so a seed gives the same tokens everywhere.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator seeded by SplitMix64 from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng { s: [next(), next(), next(), next()] }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform float in `[0, 1)`.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// A token with its probability after all cuts.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Candidate {
    pub token: u32,
    pub logit: f32,
}

/// Picks tokens for one sequence.
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    candidates: Vec<Candidate>,
    /// The logits after the repetition penalty.
    penalized: Vec<f32>,
}

impl Sampler {
    /// A sampler with its own generator seeded from `params.seed`.
    pub fn new(params: SamplingParams) -> Self {
        let rng = Rng::new(params.seed);
        Sampler { params, rng, candidates: Vec::new(), penalized: Vec::new() }
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Whether [`Sampler::sample`] always returns the logits' [`argmax`] (greedy, no repetition
    /// penalty): a device can then pick the token itself.
    pub fn picks_argmax(&self) -> bool {
        self.params.is_greedy() && self.params.repetition_penalty == 1.0
    }

    /// Chooses the next token. `recent` is the sequence so far (prompt and generated), for the
    /// repetition penalty. NaN logits are never chosen.
    pub fn sample(&mut self, logits: &[f32], recent: &[u32]) -> u32 {
        let p = &self.params;
        let penalize = p.repetition_penalty != 1.0 && !recent.is_empty();
        if p.is_greedy() && !penalize {
            return argmax(logits);
        }
        // Repetition penalty on a copy of the logits (it touches a few dozen tokens).
        let logits: &[f32] = if penalize {
            self.penalized.clear();
            self.penalized.extend_from_slice(logits);
            let start = recent.len().saturating_sub(p.repeat_last_n);
            let mut seen: Vec<u32> = recent[start..].to_vec();
            seen.sort_unstable();
            seen.dedup();
            for &t in &seen {
                if let Some(l) = self.penalized.get_mut(t as usize) {
                    *l = if *l > 0.0 { *l / p.repetition_penalty } else { *l * p.repetition_penalty };
                }
            }
            &self.penalized
        } else {
            logits
        };
        if p.is_greedy() {
            return argmax(logits);
        }
        self.candidates.clear();
        if p.top_k > 0 && p.top_k < logits.len() {
            top_k_into(logits, p.top_k, &mut self.candidates);
        } else {
            self.candidates.extend(
                logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &logit)| Candidate { token: i as u32, logit }),
            );
            self.candidates.sort_unstable_by(best_first);
        }
        self.sample_sorted_candidates()
    }

    /// Chooses the next token from the logits' largest `top.len()` values, largest first (as
    /// [`top_k`] returns them, or a device computed them): the same token [`Sampler::sample`]
    /// picks from the whole row, for parameters whose top-k cut keeps at most `top.len()`
    /// candidates and no repetition penalty ([`Sampler::top_k_cut`]).
    pub fn sample_top(&mut self, top: &[Candidate]) -> u32 {
        let k = if self.params.top_k > 0 { self.params.top_k.min(top.len()) } else { top.len() };
        self.candidates.clear();
        self.candidates.extend_from_slice(&top[..k]);
        self.sample_sorted_candidates()
    }

    /// The number of candidates [`Sampler::sample`] keeps when that is a cut to the `top_k`
    /// largest logits with nothing before it (not greedy, no repetition penalty): the sampler
    /// then needs only those ([`Sampler::sample_top`]).
    pub fn top_k_cut(&self) -> Option<usize> {
        let p = &self.params;
        (!p.is_greedy() && p.top_k > 0 && p.repetition_penalty == 1.0).then_some(p.top_k)
    }

    /// The temperature, top-p and min-p of `self.candidates` (largest first) and the draw.
    fn sample_sorted_candidates(&mut self) -> u32 {
        let p = &self.params;
        if self.candidates.is_empty() {
            return 0;
        }
        let c = &mut self.candidates;
        // Softmax with temperature.
        let max = c[0].logit;
        let inv_t = 1.0 / p.temperature;
        let mut sum = 0.0f64;
        for cand in c.iter_mut() {
            let e = (((cand.logit - max) * inv_t) as f64).exp();
            cand.logit = e as f32;
            sum += e;
        }
        for cand in c.iter_mut() {
            cand.logit = (cand.logit as f64 / sum) as f32;
        }
        // Top-p: keep the smallest prefix whose mass reaches top_p.
        if p.top_p < 1.0 {
            let mut acc = 0.0f32;
            let mut keep = c.len();
            for (i, cand) in c.iter().enumerate() {
                acc += cand.logit;
                if acc >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
            c.truncate(keep.max(1));
        }
        // Min-p: drop tokens below min_p times the best probability.
        if p.min_p > 0.0 {
            let floor = c[0].logit * p.min_p;
            let keep = c.iter().take_while(|cand| cand.logit >= floor).count();
            c.truncate(keep.max(1));
        }
        let total: f32 = c.iter().map(|cand| cand.logit).sum();
        let mut r = self.rng.next_f32() * total;
        for cand in c.iter() {
            r -= cand.logit;
            if r < 0.0 {
                return cand.token;
            }
        }
        c[c.len() - 1].token
    }
}

/// The order of candidates: the larger logit first, of equal ones the smaller token.
fn best_first(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.token.cmp(&b.token))
}

/// The `k` largest logits with their tokens, largest first (of equal logits the smaller token;
/// NaNs never taken; fewer than `k` when the row has fewer other values).
pub fn top_k(logits: &[f32], k: usize) -> Vec<Candidate> {
    let mut out = Vec::new();
    top_k_into(logits, k, &mut out);
    out
}

/// [`top_k`] into `out` (cleared first).
fn top_k_into(logits: &[f32], k: usize, out: &mut Vec<Candidate>) {
    out.clear();
    let k = k.min(logits.len());
    if k == 0 {
        return;
    }
    // One pass keeping the best k seen so far: compact to k whenever 4k candidates have piled
    // up, and skip anything not above the current k-th best (a later equal logit has a larger
    // token, so it loses the tie).
    let mut floor = f32::NEG_INFINITY;
    for (i, &logit) in logits.iter().enumerate() {
        if logit.is_nan() || (out.len() >= k && logit.total_cmp(&floor).is_le()) {
            continue;
        }
        out.push(Candidate { token: i as u32, logit });
        if out.len() == 4 * k {
            out.select_nth_unstable_by(k - 1, best_first);
            out.truncate(k);
            floor = out[k - 1].logit;
        }
    }
    if out.len() > k {
        out.select_nth_unstable_by(k - 1, best_first);
        out.truncate(k);
    }
    out.sort_unstable_by(best_first);
}

/// The index of the largest logit (the first of ties); NaN never wins.
pub fn argmax(logits: &[f32]) -> u32 {
    // Two passes the compiler vectorizes (the largest value in sixteen lanes, then its first
    // position) instead of one compare-and-branch chain, paid once per generated token. The
    // lanes keep `v` only where `v > lane`, one `maxps` a vector, which skips NaNs as
    // `f32::max` does (a comparison with NaN is false) without its NaN fix-ups: 36 -> 6 us
    // over a cached 152k vocabulary (the H200 host's decode spent 124 us a token in the
    // `f32::max` form). With no value above -inf, token 0.
    let keep_larger = |lane: f32, v: f32| if v > lane { v } else { lane };
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut chunks = logits.chunks_exact(16);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = keep_larger(*l, v);
        }
    }
    let best_v = chunks.remainder().iter().fold(lanes.iter().copied().fold(f32::NEG_INFINITY, keep_larger), |m, &v| keep_larger(m, v));
    if best_v == f32::NEG_INFINITY {
        return 0;
    }
    logits.iter().position(|&v| v == best_v).unwrap_or(0) as u32
}

/// Log-softmax of `logits` into `out` (for logprobs and for comparing against golden outputs).
pub fn log_softmax(logits: &[f32], out: &mut Vec<f32>) {
    out.clear();
    let max = logits.iter().copied().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    out.extend(logits.iter().map(|&l| (l as f64 - lse) as f32));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_the_first_maximum_and_ignores_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, f32::NAN]), 1);
        assert_eq!(argmax(&[f32::NAN, -1.0]), 1);
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&[0.0, 5.0, 1.0], &[]), 1);
    }

    /// The vectorized argmax against a plain scan (first strictly greater value wins), over
    /// lengths around the lane count, ties, NaNs, infinities and signed zeros.
    #[test]
    fn argmax_equals_a_plain_scan() {
        fn scan(v: &[f32]) -> u32 {
            let (mut best, mut best_v) = (0usize, f32::NEG_INFINITY);
            for (i, &x) in v.iter().enumerate() {
                if x > best_v {
                    (best, best_v) = (i, x);
                }
            }
            best as u32
        }
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1.0, 1.0];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for len in [0usize, 1, 2, 15, 16, 17, 31, 32, 33, 100, 1000] {
            for _ in 0..200 {
                let v: Vec<f32> = (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        if state.is_multiple_of(5) { specials[(state >> 8) as usize % specials.len()] } else { ((state >> 11) % 7) as f32 - 3.0 }
                    })
                    .collect();
                assert_eq!(argmax(&v), scan(&v), "{v:?}");
            }
        }
    }

    #[test]
    fn same_seed_same_tokens_and_other_seed_differs() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1000) as f32 / 200.0).collect();
        let params = SamplingParams { temperature: 1.5, top_k: 0, top_p: 1.0, min_p: 0.0, ..Default::default() };
        let run = |seed| {
            let mut s = Sampler::new(SamplingParams { seed, ..params.clone() });
            (0..50).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn top_k_one_is_greedy_and_top_k_bounds_choices() {
        let logits = [1.0, 2.0, 3.0, 4.0, 5.0];
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, top_k: 2, top_p: 1.0, min_p: 0.0, ..Default::default() });
        for _ in 0..200 {
            let t = s.sample(&logits, &[]);
            assert!(t == 3 || t == 4, "token {t} outside top-2");
        }
        let mut g = Sampler::new(SamplingParams { temperature: 1.0, top_k: 1, ..Default::default() });
        assert_eq!(g.sample(&logits, &[]), 4);
    }

    #[test]
    fn the_one_pass_top_k_keeps_exactly_the_k_best() {
        let mut rng = Rng::new(3);
        let logits: Vec<f32> = (0..5000).map(|_| rng.next_f32() * 20.0 - 10.0).collect();
        let mut sorted: Vec<(usize, f32)> = logits.iter().copied().enumerate().collect();
        sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
        let best: std::collections::HashSet<u32> = sorted[..40].iter().map(|(i, _)| *i as u32).collect();
        let mut s = Sampler::new(SamplingParams { temperature: 5.0, top_k: 40, top_p: 1.0, min_p: 0.0, ..Default::default() });
        let mut seen = std::collections::HashSet::new();
        for _ in 0..4000 {
            let t = s.sample(&logits, &[]);
            assert!(best.contains(&t), "token {t} is not among the 40 best");
            seen.insert(t);
        }
        assert!(seen.len() > 30, "a hot temperature reaches most of the 40 ({} seen)", seen.len());
    }

    /// `top_k` against a full sort (larger logit first by `total_cmp`, of equal ones the smaller
    /// token, NaNs dropped), over lengths around the compaction's 4k, ties, NaNs, infinities and
    /// signed zeros.
    #[test]
    fn top_k_equals_a_full_sort() {
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1.0, 1.0];
        let mut rng = Rng::new(9);
        for len in [0usize, 1, 3, 7, 40, 159, 160, 161, 1000] {
            for k in [1usize, 2, 5, 40, 64] {
                for _ in 0..30 {
                    let v: Vec<f32> = (0..len)
                        .map(|_| {
                            let r = rng.next_u64();
                            if r.is_multiple_of(5) { specials[(r >> 8) as usize % specials.len()] } else { ((r >> 11) % 9) as f32 - 4.0 }
                        })
                        .collect();
                    let mut want: Vec<Candidate> = v.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &logit)| Candidate { token: i as u32, logit }).collect();
                    want.sort_by(best_first);
                    want.truncate(k);
                    let got = top_k(&v, k);
                    let bits = |c: &[Candidate]| c.iter().map(|c| (c.token, c.logit.to_bits())).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&want), "k {k} of {v:?}");
                }
            }
        }
    }

    /// Sampling from a row's top candidates (as a device returns them) picks what sampling the
    /// whole row picks, draw for draw, for every parameter set whose top-k cut they cover.
    #[test]
    fn sampling_the_top_candidates_equals_sampling_the_row() {
        let mut rng = Rng::new(21);
        for (i, (top_k, top_p, min_p, temperature)) in [(40, 0.95, 0.05, 0.8), (64, 1.0, 0.0, 1.5), (1, 1.0, 0.0, 1.0), (7, 0.5, 0.1, 0.3), (40, 1.0, 0.2, 2.0)].into_iter().enumerate() {
            let params = SamplingParams { temperature, top_k, top_p, min_p, seed: i as u64, ..Default::default() };
            let mut whole = Sampler::new(params.clone());
            let mut top = Sampler::new(params);
            assert_eq!(top.top_k_cut(), (top_k > 1).then_some(top_k));
            for _ in 0..200 {
                let logits: Vec<f32> = (0..3000).map(|_| (rng.next_f32() * 12.0).floor() - 6.0 + rng.next_f32() * 0.01).collect();
                let cands = super::top_k(&logits, 64);
                assert_eq!(whole.sample(&logits, &[1, 2]), top.sample_top(&cands));
            }
        }
        assert_eq!(Sampler::new(SamplingParams { repetition_penalty: 1.1, ..Default::default() }).top_k_cut(), None);
        assert_eq!(Sampler::new(SamplingParams { top_k: 0, ..Default::default() }).top_k_cut(), None);
        assert_eq!(Sampler::new(SamplingParams::greedy()).top_k_cut(), None);
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail() {
        // One dominant token: min-p 0.5 leaves only it.
        let logits = [10.0, 0.0, 0.0, 0.0];
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.5, ..Default::default() });
        for _ in 0..100 {
            assert_eq!(s.sample(&logits, &[]), 0);
        }
        let logits = [2.0, 2.0, -10.0, -10.0];
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, top_k: 0, top_p: 0.9, min_p: 0.0, ..Default::default() });
        for _ in 0..100 {
            assert!(s.sample(&logits, &[]) < 2);
        }
    }

    #[test]
    fn repetition_penalty_changes_the_greedy_choice() {
        let logits = [2.0, 1.9];
        let mut s = Sampler::new(SamplingParams { temperature: 0.0, repetition_penalty: 1.5, ..Default::default() });
        assert_eq!(s.sample(&logits, &[0]), 1);
        assert_eq!(s.sample(&logits, &[1]), 0);
    }

    #[test]
    fn validation_refuses_nan_and_out_of_range() {
        assert!(SamplingParams { temperature: f32::NAN, ..Default::default() }.validate().is_err());
        assert!(SamplingParams { top_p: 1.5, ..Default::default() }.validate().is_err());
        assert!(SamplingParams::default().validate().is_ok());
    }

    #[test]
    fn log_softmax_sums_to_one() {
        let mut out = Vec::new();
        log_softmax(&[1.0, 2.0, 3.0], &mut out);
        let total: f32 = out.iter().map(|l| l.exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
    }
}
