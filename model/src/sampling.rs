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
        let by_logit_desc = |a: &Candidate, b: &Candidate| b.logit.total_cmp(&a.logit);
        if p.top_k > 0 && p.top_k < logits.len() {
            // One pass keeping the best top_k seen so far: compact to top_k whenever 4·top_k
            // candidates have piled up, and skip anything below the current k-th best.
            let k = p.top_k;
            let mut floor = f32::NEG_INFINITY;
            for (i, &logit) in logits.iter().enumerate() {
                if logit.is_nan() || (logit <= floor && self.candidates.len() >= k) {
                    continue;
                }
                self.candidates.push(Candidate { token: i as u32, logit });
                if self.candidates.len() == 4 * k {
                    self.candidates.select_nth_unstable_by(k - 1, by_logit_desc);
                    self.candidates.truncate(k);
                    floor = self.candidates[k - 1].logit;
                }
            }
        } else {
            self.candidates.extend(
                logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &logit)| Candidate { token: i as u32, logit }),
            );
        }
        if self.candidates.is_empty() {
            return 0;
        }
        let c = &mut self.candidates;
        if p.top_k > 0 && p.top_k < c.len() {
            c.select_nth_unstable_by(p.top_k - 1, by_logit_desc);
            c.truncate(p.top_k);
        }
        c.sort_unstable_by(by_logit_desc);
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
