//! `strata-rt compare-devices` with the CPU checked against itself: bit for bit with other SIMD
//! kernels, and measurably apart with `--nudge-norms` (the floor of the device bars); Vulkan's
//! exact mode through `--exact`; its argument errors.

mod common;

use std::process::{Command, Output};

use common::vulkan_index;

fn compare(args: &[&str]) -> Output {
    let model = common::default_model();
    Command::new(env!("CARGO_BIN_EXE_strata-rt"))
        .arg("compare-devices")
        .arg("-m")
        .arg(&model)
        .args(["-t", "2"])
        .args(args)
        .env("STRATA_LOG", "warn")
        .output()
        .expect("strata-rt runs")
}

/// The number N of "logits bit-identical at N" in the report line.
fn identical_positions(stdout: &str) -> usize {
    let rest = stdout.split("bit-identical at ").nth(1).unwrap_or_else(|| panic!("no report line in {stdout:?}"));
    rest.split(':').next().and_then(|n| n.trim().parse().ok()).unwrap_or_else(|| panic!("no count in {stdout:?}"))
}

#[test]
fn nudged_norms_move_the_cpu_logits_which_other_kernels_do_not() {
    let same = compare(&["--device", "cpu", "--device-simd", "scalar", "--prompt-tokens", "16", "--positions", "24"]);
    let same_out = String::from_utf8_lossy(&same.stdout);
    assert!(same.status.success(), "scalar kernels: {same_out} {}", String::from_utf8_lossy(&same.stderr));
    assert_eq!(identical_positions(&same_out), 24, "the scalar kernels compute the CPU's bits: {same_out}");

    // Bars that always pass: the run reports, and the figures are what is checked.
    let nudged = compare(&["--device", "cpu", "--nudge-norms", "--prompt-tokens", "16", "--positions", "24", "--max-kl", "1000", "--min-top1", "0"]);
    let out = String::from_utf8_lossy(&nudged.stdout);
    assert!(nudged.status.success(), "nudged: {out} {}", String::from_utf8_lossy(&nudged.stderr));
    assert!(out.contains("norms nudged one ulp"), "{out}");
    assert!(identical_positions(&out) < 12, "one ulp in every norm output must reach most logits within a few layers: {out}");
    let kl: f64 = out.split("mean KL ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no KL in {out}"));
    assert!(kl > 0.0 && kl < 0.1, "KL {kl} of a one-ulp perturbation: {out}");
}

/// `--exact` checks Vulkan's exact mode one token a step (the steps it covers) and says so; with
/// prompt-sized steps, which it does not cover, the run says that too.
#[test]
fn exact_compares_the_exact_mode_one_token_a_step() {
    let Some(i) = vulkan_index() else { return };
    let device = format!("vulkan:{i}");
    let exact = compare(&["--device", &device, "--exact", "--prompt-tokens", "12", "--positions", "8"]);
    let out = String::from_utf8_lossy(&exact.stdout);
    assert!(exact.status.success(), "exact: {out} {}", String::from_utf8_lossy(&exact.stderr));
    assert!(out.contains("(exact mode)") && out.contains("1 tokens per step"), "{out}");
    assert_eq!(identical_positions(&out), 8, "the exact mode computes the CPU's bits: {out}");

    let wide = compare(&["--device", &device, "--exact", "--ubatch", "4", "--prompt-tokens", "4", "--positions", "4", "--max-kl", "1000", "--min-top1", "0"]);
    let err = String::from_utf8_lossy(&wide.stderr);
    assert!(wide.status.success(), "{} {err}", String::from_utf8_lossy(&wide.stdout));
    assert!(err.contains("--ubatch 4 runs the prompt-sized kernels"), "{err}");
}

#[test]
fn compare_devices_refuses_what_it_cannot_measure() {
    let cpu_exact = compare(&["--device", "cpu", "--device-simd", "scalar", "--exact"]);
    assert!(!cpu_exact.status.success());
    assert!(String::from_utf8_lossy(&cpu_exact.stderr).contains("--exact is the Vulkan device's exact mode"), "{}", String::from_utf8_lossy(&cpu_exact.stderr));

    let vk = compare(&["--device", "vulkan:0", "--nudge-norms"]);
    assert!(!vk.status.success());
    assert!(String::from_utf8_lossy(&vk.stderr).contains("--nudge-norms perturbs the CPU device"), "{}", String::from_utf8_lossy(&vk.stderr));

    let bare_cpu = compare(&["--device", "cpu"]);
    assert!(!bare_cpu.status.success());
    assert!(String::from_utf8_lossy(&bare_cpu.stderr).contains("--device-simd or --nudge-norms"), "{}", String::from_utf8_lossy(&bare_cpu.stderr));

    let dir = std::env::temp_dir().join(format!("strata-compare-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let short = dir.join("short.txt");
    std::fs::write(&short, "Too short.").expect("write");
    let text = compare(&["--device", "cpu", "--nudge-norms", "--text", short.to_str().expect("utf-8 path")]);
    let err = String::from_utf8_lossy(&text.stderr);
    assert!(!text.status.success());
    assert!(err.contains("fewer than --prompt-tokens + --positions = 192"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);

    let zero = compare(&["--device", "cpu", "--nudge-norms", "--positions", "0"]);
    assert!(!zero.status.success(), "no positions to compare is an argument error");
}

/// `--reference-ubatch` compares Vulkan against itself: one token a step and four give the same
/// bits (decode's batch invariance, the check to run on any GPU), while a 56-token step runs the
/// prompt-sized kernels, whose other bits the check must catch; on the CPU it is refused.
#[test]
fn reference_ubatch_checks_decode_batch_invariance_bit_for_bit() {
    let Some(i) = vulkan_index() else { return };
    let device = format!("vulkan:{i}");
    let same = compare(&["--device", &device, "--reference-ubatch", "4", "--prompt-tokens", "12", "--positions", "12"]);
    let out = String::from_utf8_lossy(&same.stdout);
    assert!(same.status.success(), "one token a step against four: {out} {}", String::from_utf8_lossy(&same.stderr));
    assert!(out.contains("at 1 tokens per step vs itself at 4"), "{out}");
    assert_eq!(identical_positions(&out), 12, "{out}");

    let prompt_sized = compare(&["--device", &device, "--reference-ubatch", "64", "--prompt-tokens", "40", "--positions", "16"]);
    let out = String::from_utf8_lossy(&prompt_sized.stdout);
    assert!(!prompt_sized.status.success(), "the prompt-sized kernels' other bits must fail the check: {out}");
    assert!(identical_positions(&out) < 16 && out.contains("FAIL"), "{out}");
    assert!(String::from_utf8_lossy(&prompt_sized.stderr).contains("prompt-sized kernels"), "the run warns that 64 tokens a step take other kernels");

    let cpu = compare(&["--device", "cpu", "--device-simd", "scalar", "--reference-ubatch", "4"]);
    assert!(!cpu.status.success());
    assert!(String::from_utf8_lossy(&cpu.stderr).contains("--reference-ubatch compares a Vulkan device"), "{}", String::from_utf8_lossy(&cpu.stderr));
}
