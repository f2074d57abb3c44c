//! A greedy run on the Vulkan device ([`ForwardPlan::decode_greedy`]) with two submissions in
//! flight, of one or several steps each, each later step reading its token where the step before
//! left its argmax, decodes exactly the tokens of the same steps run one at a time with the host
//! feeding each token; a run stopped early returns the tokens up to its stop and leaves the plan
//! ready for the next run; a step whose wait runs out of time fails without the plan freeing or
//! reusing what the device still runs.
//!
//! Skipped without a usable Vulkan device, unless `REQUIRE_VULKAN_DEVICE=1` (CI: lavapipe).

use std::sync::Arc;

use strata_gpu::vulkan::{fed_steps_submitted, ContextOptions, KvSource, VulkanContext, VulkanOptions, VulkanPlan};
use strata_gpu::{greedy_steps_one_by_one, ForwardPlan};
use strata_io::gguf::GgufFile;
use strata_kv::{KvDtype, KvLayout, KvShape, LayoutParams};
use strata_model::{ForwardGraph, HParams, ModelWeights};

fn vulkan_context() -> Option<Arc<VulkanContext>> {
    let required = std::env::var("REQUIRE_VULKAN_DEVICE").is_ok_and(|v| v == "1");
    let devices = match strata_gpu::vulkan::list_devices() {
        Ok(d) => d,
        Err(e) if required => panic!("REQUIRE_VULKAN_DEVICE=1 but the Vulkan devices cannot be listed: {e}"),
        Err(_) => Vec::new(),
    };
    let Some(d) = devices.iter().find(|d| d.usable) else {
        assert!(!required, "REQUIRE_VULKAN_DEVICE=1 but no usable Vulkan device: {devices:?}");
        eprintln!("no usable Vulkan device: skipped");
        return None;
    };
    Some(VulkanContext::with_options(d.index, ContextOptions::default()).expect("a listed Vulkan device opens"))
}

/// The default model's plan on `ctx` (a real model, whose greedy tokens change with what it is
/// fed: a random synthetic model settles on one token, under which a wrong feed would not show),
/// its block table, vocabulary and context.
fn default_model_plan(ctx: &Arc<VulkanContext>) -> (VulkanPlan, Vec<u32>, usize, usize) {
    let path = std::env::var_os("STRATA_TEST_MODEL").map(std::path::PathBuf::from).unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(path.is_file(), "the default model is missing at {}: run `bash scripts/fetch-model.sh` first", path.display());
    let file = GgufFile::open(&path).expect("the default model opens");
    let hp = HParams::from_metadata(file.metadata()).expect("hyperparameters");
    let weights = ModelWeights::from_gguf(&file, &hp).expect("weights");
    let graph = ForwardGraph::llama(&hp, &weights);
    let (block_size, max_context) = (16, 256);
    let mut params = LayoutParams::new(KvShape { n_layers: hp.n_layers as u32, n_kv_heads: hp.n_kv_heads as u32, head_dim: hp.head_dim as u32, dtype: KvDtype::F16 }, max_context as u64);
    params.block_size = block_size as u32;
    let layout = KvLayout::compute(&params).expect("layout");
    let opts = VulkanOptions { max_batch_tokens: 8, max_outputs: 8, block_size, max_context, max_seqs: 1 };
    let plan = VulkanPlan::compile(ctx, graph, &file, KvSource::Allocate(layout), opts).expect("the plan compiles");
    let table: Vec<u32> = (0..(max_context / block_size) as u32).collect();
    (plan, table, hp.vocab_size, max_context)
}

/// The tests of this file one at a time, also under `cargo test` (one process, several
/// threads): they count fed steps process-wide and set a variable the plan reads.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn greedy_submissions_of_one_or_several_steps_decode_the_one_by_one_tokens() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    std::env::remove_var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT");
    let Some(ctx) = vulkan_context() else { return };
    let (mut plan, table, vocab, max_context) = default_model_plan(&ctx);
    let (first, n) = (504u32, 16usize);

    let one_by_one = greedy_steps_one_by_one(&mut plan, first, 0, &table, n, vocab, &mut |_| true).expect("steps one by one");
    let distinct = one_by_one.iter().collect::<std::collections::HashSet<_>>().len();
    assert!(distinct >= 6, "too few distinct tokens ({distinct}) for a wrong feed to show");
    // One step a submission, several (a run of 16 is then 1 + 3 x 5, or 1 + 4 x 3 + 3 single
    // steps), and the most.
    for steps in [1, 3, 4, strata_gpu::vulkan::GREEDY_MAX_STEPS_PER_SUBMISSION] {
        plan.set_greedy_steps_per_submission(steps);
        let fed_before = fed_steps_submitted();
        let pipelined = plan.decode_greedy(first, 0, &table, n, vocab, &mut |_| true).expect("a greedy run");
        let fed = fed_steps_submitted() - fed_before;
        eprintln!("{steps} steps a submission: {n} tokens, {distinct} distinct; {fed} steps submitted before the host read their token");
        assert_eq!(fed, n as u64 - 1, "every step after the first reads its token on the device ({steps} a submission)");
        assert_eq!(pipelined, one_by_one, "greedy submissions of {steps} steps decode other tokens than one step at a time");

        // A run that reaches beyond its block table fails with a clear error, and the plan stays
        // usable (the runs after it).
        let err = plan.decode_greedy(first, (max_context - 4) as u32, &table, 8, vocab, &mut |_| true).expect_err("positions beyond the table");
        assert!(err.to_string().contains("beyond"), "{err}");

        // Stopped after 7 tokens (later steps are already in flight), then resumed from there.
        let mut seen = 0;
        let stopped = plan.decode_greedy(first, 0, &table, n, vocab, &mut |_| {
            seen += 1;
            seen < 7
        });
        assert_eq!(stopped.expect("a stopped run"), one_by_one[..7], "a stopped run returns the tokens up to its stop ({steps} a submission)");
        let resumed = plan.decode_greedy(one_by_one[6], 7, &table, n - 7, vocab, &mut |_| true).expect("the run resumed");
        assert_eq!(resumed, one_by_one[7..], "a run resumed after a stop decodes the rest ({steps} a submission)");
    }
}

/// With the opt-in fused epilogues (`STRATA_VULKAN_FUSE_SWIGLU_PRODUCT=1`) each step zeroes their
/// counters first; a fed step's token, in the argmax words after them, must survive that. (The
/// variable is read when a step is recorded.)
#[test]
fn greedy_submissions_keep_their_tokens_when_each_step_zeroes_the_epilogue_counters() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(ctx) = vulkan_context() else { return };
    std::env::set_var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT", "1");
    let (mut plan, table, vocab, _) = default_model_plan(&ctx);
    let (first, n) = (504u32, 12usize);
    let one_by_one = greedy_steps_one_by_one(&mut plan, first, 0, &table, n, vocab, &mut |_| true).expect("steps one by one");
    plan.set_greedy_steps_per_submission(4);
    let pipelined = plan.decode_greedy(first, 0, &table, n, vocab, &mut |_| true).expect("a greedy run");
    std::env::remove_var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT");
    assert_eq!(pipelined, one_by_one, "fed steps lose their token to the counters' zeroing");
}

/// Unsets a variable the plan reads when it records, also when the test fails.
struct UnsetOnDrop(&'static str);

impl Drop for UnsetOnDrop {
    fn drop(&mut self) {
        std::env::remove_var(self.0);
    }
}

/// Sets each variable for the rest of the test: unset when the guards drop, also when it fails.
fn set_for_the_test(vars: &[(&'static str, &str)]) -> Vec<UnsetOnDrop> {
    vars.iter()
        .map(|&(k, v)| {
            std::env::set_var(k, v);
            UnsetOnDrop(k)
        })
        .collect()
}

/// A stage whose bounded wait gives up fails the step with the error that names the settings
/// turning those waits off, never a hang and never tokens passed on as if nothing happened. So in
/// a pipelined greedy run (two submissions in flight, the give-up count checked after each), in
/// a second run of the same plan (the count it saw keeps up with the device's), and in a step run
/// alone. `fault` is `STRATA_VULKAN_WAIT_FAULT`'s value, the wait it makes give up each step,
/// `knobs` the settings that record such waits, `names` a setting the error must name, and
/// `recorded` counts the stages of that kind recorded.
fn a_wait_that_gives_up_fails_the_run(fault: &str, knobs: &[(&'static str, &str)], names: &str, recorded: fn() -> u64) {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    std::env::remove_var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT");
    let Some(ctx) = vulkan_context() else { return };
    let _unset = set_for_the_test(&[("STRATA_VULKAN_WAIT_FAULT", fault)]);
    let _unset_knobs = set_for_the_test(knobs);
    let (mut plan, table, vocab, _) = default_model_plan(&ctx);
    plan.set_greedy_steps_per_submission(3);
    let recorded_before = recorded();
    for run in 0..2 {
        let fed_before = fed_steps_submitted();
        let err = plan.decode_greedy(504, 0, &table, 8, vocab, &mut |_| true).expect_err("a greedy run whose waits give up");
        let message = err.to_string();
        assert!(message.contains("gave up") && message.contains(names), "{fault}, run {run}: {message}");
        assert!(fed_steps_submitted() > fed_before, "{fault}: run {run} was not pipelined");
    }
    assert!(recorded() > recorded_before, "{fault}: no such stage was recorded");
    let err = greedy_steps_one_by_one(&mut plan, 504, 0, &table, 2, vocab, &mut |_| true).expect_err("a step whose wait gives up");
    assert!(err.to_string().contains("gave up"), "{fault}: {err}");
}

/// Each one-token step's first tagged RMSNorm reads a row no stage writes.
#[test]
fn a_tagged_norm_that_gives_up_fails_the_pipelined_greedy_run() {
    a_wait_that_gives_up_fails_the_run("norm", &[], "STRATA_VULKAN_TAGGED_NORM=0", strata_gpu::vulkan::tagged_norms_recorded);
}

/// The same with the norm in the row's chunks (`STRATA_VULKAN_TAGGED_NORM_SCALE=1`): each
/// chunk's workgroup gives up.
#[test]
fn a_chunked_tagged_norm_that_gives_up_fails_the_pipelined_greedy_run() {
    a_wait_that_gives_up_fails_the_run("norm", &[("STRATA_VULKAN_TAGGED_NORM_SCALE", "1")], "STRATA_VULKAN_TAGGED_NORM=0", strata_gpu::vulkan::tagged_norm_scales_recorded);
}

/// Each step's first tagged attention merge waits for a tag no split kernel writes.
#[test]
fn a_tagged_merge_that_gives_up_fails_the_pipelined_greedy_run() {
    a_wait_that_gives_up_fails_the_run("merge", &[], "STRATA_VULKAN_TAGGED_MERGE=0", strata_gpu::vulkan::tagged_merges_recorded);
}

/// Each step's first persistent feed-forward dispatch (`STRATA_VULKAN_PERSISTENT_FFN=1`) waits at
/// its first grid barrier for one workgroup more than it has.
#[test]
fn a_grid_barrier_that_gives_up_fails_the_pipelined_greedy_run() {
    a_wait_that_gives_up_fails_the_run("grid", &[("STRATA_VULKAN_PERSISTENT_FFN", "1")], "STRATA_VULKAN_PERSISTENT_GROUPS", strata_gpu::vulkan::persistent_ffn_recorded);
}

/// Chained one-token steps (`STRATA_VULKAN_CHAIN=1`, recorded for steps run one at a time, not
/// for a pipelined run's submissions of several) whose first waiting stage waits for one
/// workgroup more than the stage before has: each such step fails, the plan's state intact.
#[test]
fn a_chained_wait_that_gives_up_fails_the_step() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    std::env::remove_var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT");
    let Some(ctx) = vulkan_context() else { return };
    let _unset = set_for_the_test(&[("STRATA_VULKAN_WAIT_FAULT", "chain"), ("STRATA_VULKAN_CHAIN", "1")]);
    let (mut plan, table, vocab, _) = default_model_plan(&ctx);
    let recorded_before = strata_gpu::vulkan::chained_stages_recorded();
    for step in 0..2 {
        let err = greedy_steps_one_by_one(&mut plan, 504, step, &table, 1, vocab, &mut |_| true).expect_err("a step whose wait gives up");
        let message = err.to_string();
        assert!(message.contains("gave up") && message.contains("unset STRATA_VULKAN_CHAIN"), "step {step}: {message}");
    }
    assert!(strata_gpu::vulkan::chained_stages_recorded() > recorded_before, "no chained stage was recorded");
}

/// A step whose wait runs out of time (`STRATA_VULKAN_WAIT_TIMEOUT_MS=0`: at once, while the
/// device still runs it) fails with an error naming the limit; the plan's next step first lets it
/// finish (its command buffer is the one submitted again) and returns the same logits as before;
/// and a plan dropped right after such an error frees its memory only once the device is done
/// with it. Before, a lavapipe prompt step longer than the 120-s limit freed the weights under
/// the running shaders: a segfault, which is this test's failure too.
#[test]
fn a_step_whose_wait_runs_out_of_time_fails_and_the_plan_frees_nothing_the_device_still_reads() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    std::env::remove_var("STRATA_VULKAN_FUSE_SWIGLU_PRODUCT");
    let Some(ctx) = vulkan_context() else { return };
    let (mut plan, table, _, _) = default_model_plan(&ctx);
    let tokens = [504u32, 33, 2001, 17, 9, 4242, 77, 1];
    let positions: Vec<u32> = (0..tokens.len() as u32).collect();
    let seq_of_token = vec![0u32; tokens.len()];
    let tables = [&table[..]];
    let output_rows: Vec<u32> = (0..tokens.len() as u32).collect();
    let step = strata_gpu::StepBatch { tokens: &tokens, positions: &positions, seq_of_token: &seq_of_token, block_tables: &tables, output_rows: &output_rows };
    let reference = plan.forward(&step).expect("a step").to_vec();
    let same_bits = |logits: &[f32]| logits.len() == reference.len() && logits.iter().zip(&reference).all(|(a, b)| a.to_bits() == b.to_bits());

    for round in 0..2 {
        let unset = set_for_the_test(&[("STRATA_VULKAN_WAIT_TIMEOUT_MS", "0")]);
        let err = plan.forward(&step).expect_err("a step that cannot finish in 0 ms");
        let message = err.to_string();
        assert!(message.contains("ran longer than") && message.contains("STRATA_VULKAN_WAIT_TIMEOUT_MS"), "round {round}: {message}");
        drop(unset);
        let again = plan.forward(&step).expect("the step after a timed-out one").to_vec();
        assert!(same_bits(&again), "round {round}: the step after a timed-out one returns other logits");
    }

    let unset = set_for_the_test(&[("STRATA_VULKAN_WAIT_TIMEOUT_MS", "0")]);
    assert!(plan.forward(&step).is_err(), "a step that cannot finish in 0 ms");
    drop(plan);
    drop(unset);
    // The memory the dropped plan freed is the new plan's to reuse.
    let (mut plan, _, _, _) = default_model_plan(&ctx);
    let fresh = plan.forward(&step).expect("a step of a new plan").to_vec();
    assert!(same_bits(&fresh), "a new plan returns other logits");
}
