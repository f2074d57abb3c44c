//! The CPU device against llama.cpp on the real default model (golden fixture made by
//! tests/fixtures/make_golden.py): KL divergence and top-1 agreement of teacher-forced logits,
//! greedy continuations, and prompt token ids.

mod common;

use std::sync::Arc;

use strata_actors::{Engine, EngineOptions, Flow, LoadedModel};
use strata_model::sampling::{log_softmax, SamplingParams};
use strata_quant::ProductOrder;

/// A CPU engine in ggml's product order (the library's default: llama.cpp's bits).
fn engine(threads: usize) -> Engine {
    engine_in(threads, ProductOrder::Ggml)
}

fn engine_in(threads: usize, cpu_products: ProductOrder) -> Engine {
    let model = Arc::new(LoadedModel::load(&common::default_model()).expect("the default model loads"));
    let opts = EngineOptions { threads, max_context: 512, n_cells: 1024, block_size: 16, ubatch: 64, max_outputs: 64, simd: None, cpu_products, ..Default::default() };
    Engine::new_cpu(model, opts).expect("the CPU engine starts")
}

/// KL(reference || ours) over the reference's top-k tokens plus one bucket for the rest: a lower
/// bound of the full KL that sees every token the reference finds likely.
fn kl_top_k(ref_ids: &[u32], ref_lp: &[f64], ours_lp: &[f32]) -> f64 {
    let mut kl = 0.0;
    let (mut ref_mass, mut our_mass) = (0.0f64, 0.0f64);
    for (&id, &lp) in ref_ids.iter().zip(ref_lp) {
        let ours = ours_lp[id as usize] as f64;
        kl += lp.exp() * (lp - ours);
        ref_mass += lp.exp();
        our_mass += ours.exp();
    }
    let (rt, ot) = ((1.0 - ref_mass).max(1e-12), (1.0 - our_mass).max(1e-12));
    kl + rt * (rt / ot).ln()
}

/// Mean KL (llama.cpp || ours) and top-1 agreement of `engine`'s teacher-forced logits over the
/// fixture's prompts.
fn against_llama_cpp(engine: &mut Engine) -> (f64, f64) {
    let golden = common::golden();
    let vocab = engine.model().hparams.vocab_size;
    let (mut kl_sum, mut n, mut agree) = (0.0f64, 0usize, 0usize);
    let mut lp = Vec::new();
    for p in golden["prompts"].as_array().unwrap() {
        // As the fixture was made: the prompt in one step, then one greedy token per step.
        let (prompt, greedy) = (common::ids(&p["ids"]), common::ids(&p["greedy"]));
        let positions = p["positions"].as_array().unwrap();
        assert_eq!(positions.len(), prompt.len() + greedy.len() - 1);
        let logits = engine.teacher_forced_logits_decoding(&prompt, &greedy).expect("forward pass");
        let (mut p_kl, mut p_agree) = (0.0, 0);
        for (i, pos) in positions.iter().enumerate() {
            let ref_ids = common::ids(&pos["ids"]);
            let ref_lp: Vec<f64> = pos["logprobs"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
            log_softmax(&logits[i * vocab..(i + 1) * vocab], &mut lp);
            p_kl += kl_top_k(&ref_ids, &ref_lp, &lp);
            let ours = strata_model::sampling::argmax(&lp);
            if ours == ref_ids[0] {
                p_agree += 1;
            } else {
                eprintln!("  position {i}: llama.cpp top-1 {} ({:.4}) vs its next {} ({:.4}); ours {ours} ({:.4}), ours for theirs {:.4}", ref_ids[0], ref_lp[0], ref_ids[1], ref_lp[1], lp[ours as usize], lp[ref_ids[0] as usize]);
            }
        }
        eprintln!("{:>10}: {} positions, mean KL {:.5} nats, top-1 {}/{}", p["name"].as_str().unwrap(), positions.len(), p_kl / positions.len() as f64, p_agree, positions.len());
        kl_sum += p_kl;
        agree += p_agree;
        n += positions.len();
    }
    let mean_kl = kl_sum / n as f64;
    let top1 = agree as f64 / n as f64;
    eprintln!("overall: {n} positions, mean KL {mean_kl:.5} nats, top-1 agreement {:.2}%", top1 * 100.0);
    (mean_kl, top1)
}

#[test]
fn teacher_forced_logits_match_llama_cpp() {
    let (mean_kl, top1) = against_llama_cpp(&mut engine(2));
    assert!(mean_kl <= 0.01, "mean KL {mean_kl} nats exceeds 0.01");
    assert!(top1 >= 0.98, "top-1 agreement {top1} below 98%");
    // The CPU device computes llama.cpp's CPU arithmetic bit for bit on this model (its x86
    // quantizer, dot-product lanes, RMSNorm, RoPE, softmax, expf and both attention summation
    // orders): measured 100% top-1 and a KL that is only the fixture's 5-decimal rounding. A KL
    // above this bound means some op no longer matches ggml's; the first session's
    // near-but-not-exact kernels scored 96.4% top-1 and 0.0024 nats.
    assert!(mean_kl < 1e-4, "mean KL {mean_kl} nats: no longer bit-exact with llama.cpp");
}

/// The interleaved product order (`devices.cpu_products = "interleaved"`) sums the same terms
/// in another order: not llama.cpp's bits, and on this small model that alone moves the logits
/// measurably. Measured: mean KL 0.00247 nats, top-1 97.2% (14 of 500 positions, all near-ties
/// in llama.cpp's own distribution); ggml's kernel with only its final 8-lane sum reordered
/// scores the same (0.00245, 97.2%), so this is the floor of any other summation order, not a
/// defect of this one. The bounds catch a real error (a dropped block or a wrong scale moves
/// the KL by orders of magnitude). On a CPU without AVX-512 VNNI the order is ggml's.
#[test]
fn interleaved_products_stay_near_llama_cpp() {
    let mut engine = engine_in(2, ProductOrder::Interleaved);
    let (mean_kl, top1) = against_llama_cpp(&mut engine);
    assert!(mean_kl <= 0.005, "mean KL {mean_kl} nats exceeds 0.005");
    assert!(top1 >= 0.96, "top-1 agreement {top1} below 96%");
    if strata_quant::Kernels::best().with_order(ProductOrder::Interleaved).interleaves(strata_quant::GgmlType::Q4_1) {
        let p = &common::golden()["prompts"][0];
        let (prompt, greedy) = (common::ids(&p["ids"]), common::ids(&p["greedy"]));
        let ours = engine.teacher_forced_logits_decoding(&prompt, &greedy).expect("forward pass");
        let ggml = engine_in(2, ProductOrder::Ggml).teacher_forced_logits_decoding(&prompt, &greedy).expect("forward pass");
        assert!(ours.iter().zip(&ggml).any(|(a, b)| a.to_bits() != b.to_bits()), "the interleaved order gave ggml's logits bit for bit: is it in use?");
    }
}

#[test]
fn greedy_continuations_match_llama_cpp() {
    let golden = common::golden();
    let mut engine = engine(2);
    let mut matched = Vec::new();
    for p in golden["prompts"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        let prompt = common::ids(&p["ids"]);
        let want = common::ids(&p["greedy"]);
        let out = engine.generate(&prompt, want.len(), &SamplingParams::greedy(), |_| Flow::Continue).expect("generation");
        let tok = &engine.model().tokenizer;
        // llama.cpp's loop did not stop at end-of-generation tokens; ours does, so compare up to it.
        let cut = want.iter().position(|&t| tok.is_end_of_generation(t)).map_or(want.len(), |i| i + 1);
        let same = out.tokens == want[..cut];
        eprintln!("{name:>10}: {}", if same { "identical".to_string() } else { format!("differs: ours {:?} vs llama.cpp {:?}", out.tokens, &want[..cut]) });
        if same {
            matched.push(name.to_string());
        }
    }
    // The bar is 4 prompts; since the CPU device computes llama.cpp's bits, all 9 match.
    assert_eq!(matched.len(), golden["prompts"].as_array().unwrap().len(), "only {matched:?} matched llama.cpp's first 32 greedy tokens");
}

#[test]
fn prompt_token_ids_match_llama_cpp() {
    let golden = common::golden();
    let model = LoadedModel::load(&common::default_model()).expect("the default model loads");
    for p in golden["prompts"].as_array().unwrap() {
        let ids = model.tokenizer.encode(p["text"].as_str().unwrap(), false, true).expect("encodes");
        assert_eq!(ids, common::ids(&p["ids"]), "prompt {}", p["name"]);
    }
}

#[test]
fn results_do_not_depend_on_thread_count_or_batching() {
    let golden = common::golden();
    let p = &golden["prompts"][1];
    let prompt = common::ids(&p["ids"]);
    for order in [ProductOrder::Ggml, ProductOrder::Interleaved] {
        let run = |threads: usize| {
            let mut e = engine_in(threads, order);
            e.generate(&prompt, 12, &SamplingParams::greedy(), |_| Flow::Continue).expect("generation").tokens
        };
        assert_eq!(run(1), run(2), "{order:?}");
    }
}

/// Every SIMD level computes the scalar level's logits bit for bit on the default model (the
/// 32-block products, the quantizer and the float ops all follow one arithmetic), so results do
/// not depend on the machine's instruction set.
#[test]
fn simd_levels_compute_the_scalar_levels_bits() {
    use strata_quant::SimdLevel;
    let golden = common::golden();
    let model = Arc::new(LoadedModel::load(&common::default_model()).expect("the default model loads"));
    let logits = |level| {
        let opts = EngineOptions { threads: 2, max_context: 512, n_cells: 1024, block_size: 16, ubatch: 64, max_outputs: 64, simd: Some(level), ..Default::default() };
        let mut e = Engine::new_cpu(model.clone(), opts).expect("engine");
        golden["prompts"].as_array().unwrap().iter().map(|p| {
            e.teacher_forced_logits_decoding(&common::ids(&p["ids"]), &common::ids(&p["greedy"])).expect("forward")
        }).collect::<Vec<_>>()
    };
    let bits = |v: &[Vec<f32>]| v.iter().flatten().map(|x| x.to_bits()).collect::<Vec<_>>();
    let reference = bits(&logits(SimdLevel::Scalar));
    for level in [SimdLevel::Avx2, SimdLevel::Avx512Vnni].into_iter().filter(|l| l.is_available()) {
        let other = bits(&logits(level));
        let differing = reference.iter().zip(&other).filter(|(a, b)| a != b).count();
        assert_eq!(differing, 0, "{level:?}: {differing} of {} logits differ from the scalar level's", reference.len());
    }
}
