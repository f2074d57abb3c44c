//! Opens and closes Vulkan contexts in a loop, as a test binary does, and reports when the
//! driver stops handing out instances (on the H200's NVIDIA driver the fifteenth-odd test of
//! one process failed `vkCreateInstance` with ERROR_INCOMPATIBLE_DRIVER) and how many file
//! descriptors the process holds as it goes.
//!
//! `cargo run --release -p strata-gpu --example context_churn -- [ROUNDS]`

use strata_gpu::vulkan::{list_devices, VulkanContext};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn main() -> std::process::ExitCode {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    println!("start: {} open file descriptors", open_fds());
    for round in 1..=rounds {
        let devices = match list_devices() {
            Ok(d) => d,
            Err(e) => {
                println!("round {round}: listing failed: {e} ({} open file descriptors)", open_fds());
                return std::process::ExitCode::FAILURE;
            }
        };
        let Some(device) = devices.iter().find(|d| d.usable) else {
            println!("round {round}: no usable device ({devices:?})");
            return std::process::ExitCode::FAILURE;
        };
        match VulkanContext::new(device.index) {
            Ok(ctx) => drop(ctx),
            Err(e) => {
                println!("round {round}: opening failed: {e} ({} open file descriptors)", open_fds());
                return std::process::ExitCode::FAILURE;
            }
        }
        if round % 10 == 0 || round < 4 {
            println!("round {round}: ok, {} open file descriptors", open_fds());
        }
    }
    println!("{rounds} rounds: every listing and context worked");
    std::process::ExitCode::SUCCESS
}
