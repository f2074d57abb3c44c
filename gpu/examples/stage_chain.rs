//! What a decode step's stage boundaries cost on a Vulkan device: the memory pattern of one
//! token of a model (its products' weight bytes, its RMSNorms as one-workgroup stages, its
//! attention and merge as small reads), run as one dispatch per stage with pipeline barriers (as
//! strata-rt records a decode step) and as one dispatch of resident workgroups with grid
//! barriers between stages, beside the same loads without any ordering and the bytes at the
//! device's measured read bandwidth.
//!
//! `cargo run --release -p strata-gpu --example stage_chain -- [DEVICE] [SHAPE] [WORKGROUPS,...]`
//! DEVICE: the Vulkan device index (0); SHAPE: `7b` (Qwen2.5-7B in Q4_K at context 512, the
//! default) or `small` (a few megabytes a stage, for lavapipe); WORKGROUPS: the resident
//! workgroup counts to try (default 132,264,396,528: one to four per SM of an H200).

use strata_gpu::vulkan::probe::{measure_stage_boundaries, Alternate, BarrierPoll, ProbeMode, ProbeStage};
use strata_gpu::vulkan::{measure_read_bandwidth, VulkanContext};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device: u32 = args.first().map(|a| a.parse()).transpose()?.unwrap_or(0);
    let shape = args.get(1).map_or("7b", String::as_str);
    let workgroups: Vec<u32> = match args.get(2) {
        Some(list) => list.split(',').map(str::parse).collect::<Result<_, _>>()?,
        None => vec![132, 264, 396, 528],
    };
    // Per layer: RMSNorm, QKV, attention, merge, O, RMSNorm, gate+up, quantization, down; then
    // the final norm and the logits product. Bytes of the 7B's Q4_K weights (4.5 bits a weight),
    // K/V of 512 positions.
    const MB: f64 = 1e6;
    let (layers, layer, head): (usize, Vec<ProbeStage>, u64) = match shape {
        "7b" => {
            let stream = |mb: f64| ProbeStage::Stream { bytes: (mb * MB) as u64 };
            let norm = ProbeStage::Single { bytes: 3584 * 8 };
            (28, vec![norm, stream(9.29), stream(1.05), stream(0.12), stream(7.23), norm, stream(76.4), stream(0.08), stream(38.2)], (306.0 * MB) as u64)
        }
        "small" => {
            let stream = |mb: f64| ProbeStage::Stream { bytes: (mb * MB) as u64 };
            let norm = ProbeStage::Single { bytes: 576 * 8 };
            (4, vec![norm, stream(0.5), stream(0.05), norm, stream(2.0), stream(1.0)], (4.0 * MB) as u64)
        }
        other => return Err(format!("unknown shape {other:?} (7b or small)").into()),
    };
    let mut pattern: Vec<ProbeStage> = (0..layers).flat_map(|_| layer.iter().copied()).collect();
    pattern.push(ProbeStage::Single { bytes: if shape == "7b" { 3584 * 8 } else { 576 * 8 } });
    pattern.push(ProbeStage::Stream { bytes: head });
    let bytes: u64 = pattern.iter().map(|s| match s {
        ProbeStage::Stream { bytes } | ProbeStage::Single { bytes } => *bytes,
    }).sum();
    let ctx = VulkanContext::new(device)?;
    let bandwidth = measure_read_bandwidth(&ctx)?;
    println!("device: {}; read bandwidth {:.1} GB/s", ctx.name(), bandwidth / 1e9);
    println!("pattern: {shape}, {} stages ({} boundaries), {:.1} MB; at the read bandwidth {:.1} us", pattern.len(), pattern.len() - 1, bytes as f64 / 1e6, bytes as f64 / bandwidth * 1e6);
    let mut modes = vec![ProbeMode::Dispatches, ProbeMode::ExecutionBarriers, ProbeMode::Events];
    for alternate in [Alternate::Same, Alternate::Copy, Alternate::BigShared] {
        modes.push(ProbeMode::DispatchesUnordered { alternate });
        modes.push(ProbeMode::Chained { preload: false, workgroups: 0, alternate });
        modes.push(ProbeMode::Chained { preload: true, workgroups: 0, alternate });
    }
    for &w in &workgroups {
        modes.push(ProbeMode::Unordered { workgroups: w });
        modes.push(ProbeMode::Chained { preload: true, workgroups: w, alternate: Alternate::Same });
        for poll in [BarrierPoll::AtomicAdd, BarrierPoll::VolatileLoad] {
            for preload in [false, true] {
                modes.push(ProbeMode::GridBarriers { workgroups: w, poll, preload });
            }
        }
    }
    let passes = if shape == "7b" { 10 } else { 3 };
    let results = measure_stage_boundaries(&ctx, &pattern, &modes, passes, 5)?;
    println!("| mode | us a pass | share of the read bandwidth | us a boundary over the bytes' time | give-ups |");
    println!("|---|---:|---:|---:|---:|");
    let ideal_us = bytes as f64 / bandwidth * 1e6;
    for r in &results {
        let mode = match r.mode {
            ProbeMode::Dispatches => "a dispatch a stage, pipeline barriers".to_string(),
            ProbeMode::GridBarriers { workgroups, poll, preload } => {
                let poll = match poll {
                    BarrierPoll::AtomicAdd => "atomic-add polls",
                    BarrierPoll::VolatileLoad => "volatile-load polls",
                };
                format!("{workgroups} resident workgroups, grid barriers, {poll}{}", if preload { ", next loads first" } else { "" })
            }
            ProbeMode::Unordered { workgroups } => format!("{workgroups} resident workgroups, no barriers"),
            ProbeMode::ExecutionBarriers => "a dispatch a stage, execution-only barriers".to_string(),
            ProbeMode::Events => "a dispatch a stage, each waiting for the stage before's event".to_string(),
            ProbeMode::DispatchesUnordered { alternate } => format!("a dispatch a stage, no barriers, no waits{}", alternation(alternate)),
            ProbeMode::Chained { preload, workgroups, alternate } => format!(
                "a dispatch a stage{}, no pipeline barriers, each waiting on the stage before's counter{}{}",
                if workgroups > 0 { format!(" of at most {workgroups} workgroups") } else { String::new() },
                if preload { ", first loads before waiting" } else { "" },
                alternation(alternate)
            ),
        };
        let valid = if r.gave_up > 0 { " (void)" } else { "" };
        println!("| {mode}{valid} | {:.1} | {:.0}% | {:.2} | {} |", r.pass_us, ideal_us / r.pass_us * 100.0, (r.pass_us - ideal_us) / (pattern.len() - 1) as f64, r.gave_up);
    }
    Ok(())
}

fn alternation(a: Alternate) -> &'static str {
    match a {
        Alternate::Same => "",
        Alternate::Copy => ", every other stage a copy of the pipeline",
        Alternate::BigShared => ", every other stage a pipeline with 16 KiB more shared memory",
    }
}
