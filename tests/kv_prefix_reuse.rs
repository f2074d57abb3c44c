//! Prefix reuse through the KV arena on the real default model: a prompt that shares a long prefix
//! with an earlier one reuses those cells (reported count > 0) and yields exactly the greedy tokens
//! it yields without reuse; afterwards the arena holds nothing but cached prefixes.

mod common;

use std::sync::Arc;

use strata_actors::{Engine, EngineOptions, Flow, LoadedModel};
use strata_model::sampling::SamplingParams;

fn engine(model: &Arc<LoadedModel>) -> Engine {
    let opts = EngineOptions { threads: 2, max_context: 1024, n_cells: 2048, block_size: 16, ubatch: 256, max_outputs: 64, simd: None, ..Default::default() };
    Engine::new_cpu(model.clone(), opts).expect("the CPU engine starts")
}

fn greedy(e: &mut Engine, prompt: &[u32], n: usize) -> (Vec<u32>, usize) {
    let out = e.generate(prompt, n, &SamplingParams::greedy(), |_| Flow::Continue).expect("generation");
    (out.tokens, out.reused_tokens)
}

#[test]
fn a_shared_prefix_is_reused_and_changes_nothing() {
    let model = Arc::new(LoadedModel::load(&common::default_model()).expect("the default model loads"));
    let tok = &model.tokenizer;
    let system = "<|im_start|>system\nYou are a careful assistant who answers questions about programming, \
                  history and science in short, precise sentences. Always explain your reasoning step by step, \
                  and give one concrete example.<|im_end|>\n";
    let first = tok.encode(&format!("{system}<|im_start|>user\nWhat is a hash map?<|im_end|>\n<|im_start|>assistant\n"), false, true).expect("encode");
    let second = tok.encode(&format!("{system}<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n"), false, true).expect("encode");
    let shared = first.iter().zip(&second).take_while(|(a, b)| a == b).count();
    assert!(shared >= 32, "the prompts share only {shared} tokens");

    // Without reuse: a fresh engine per prompt.
    let (alone, reused) = greedy(&mut engine(&model), &second, 24);
    assert_eq!(reused, 0);

    // With reuse: the first request leaves its full blocks cached.
    let mut e = engine(&model);
    let (_, reused_first) = greedy(&mut e, &first, 8);
    assert_eq!(reused_first, 0);
    let (with_reuse, reused) = greedy(&mut e, &second, 24);
    assert!(reused > 0, "no prompt tokens were reused");
    // Whole blocks of the shared prefix, and a cached tail's tokens where the first request's
    // last block continues it.
    assert!(reused >= shared / 16 * 16 && reused <= shared, "reused {reused} of a {shared}-token shared prefix");
    assert_eq!(with_reuse, alone, "reusing {reused} cached tokens changed the greedy output");

    let st = e.kv().stats().expect("broker alive");
    assert_eq!(st.sequences, 0);
    assert_eq!(st.free_blocks + st.cached_blocks, st.total_blocks as usize, "every block is free or a cached prefix");
}

#[test]
fn a_prompt_longer_than_a_step_is_prefilled_in_chunks_with_the_same_result() {
    let model = Arc::new(LoadedModel::load(&common::default_model()).expect("the default model loads"));
    let text = "fn add(a: i32, b: i32) -> i32 { a + b }\n".repeat(30);
    let prompt = model.tokenizer.encode(&text, false, true).expect("encode");
    assert!(prompt.len() > 300);
    let opts = |ubatch| EngineOptions { threads: 2, max_context: 1024, n_cells: 1024, block_size: 16, ubatch, max_outputs: 64, simd: None, ..Default::default() };
    let run = |ubatch| {
        let mut e = Engine::new_cpu(model.clone(), opts(ubatch)).expect("engine");
        greedy(&mut e, &prompt, 12).0
    };
    assert_eq!(run(64), run(512));
}

#[test]
fn a_repeated_prompt_reuses_a_full_blocks_cells_by_a_copy_and_continues_the_same() {
    let model = Arc::new(LoadedModel::load(&common::default_model()).expect("the default model loads"));
    let prompt = model.tokenizer.encode("Count from 101 upwards, separated by commas: 101, 102, 103,", false, true).expect("encode");
    // The prompt ends inside its last block, and the run's generated tokens fill that block: no
    // tail is left there, only a full cached block that the prompt repeats the start of.
    assert!(prompt.len() % 16 >= 3, "{} tokens end too near a block boundary", prompt.len());
    let (alone, reused) = greedy(&mut engine(&model), &prompt, 24);
    assert_eq!(reused, 0);

    let mut e = engine(&model);
    let (first, _) = greedy(&mut e, &prompt, 24);
    assert_eq!(first, alone);
    let (again, reused) = greedy(&mut e, &prompt, 24);
    // Whole blocks shared, the rest copied from the full block, two tokens computed.
    assert_eq!(reused, prompt.len() - 2, "a {}-token prompt", prompt.len());
    assert_eq!(again, alone, "the copied cells changed the greedy output");
    let st = e.kv().stats().expect("broker alive");
    assert_eq!(st.sequences, 0);
    assert_eq!(st.free_blocks + st.cached_blocks, st.total_blocks as usize, "every block is free or a cached prefix");
}
