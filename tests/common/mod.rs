//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::PathBuf;

pub mod http;
pub mod server;

#[allow(unused_imports)]
pub use server::TestServer;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The default model, fetched by `bash scripts/fetch-model.sh` (`.ci/run` does it first).
/// `STRATA_TEST_MODEL` points elsewhere.
pub fn default_model() -> PathBuf {
    let path = std::env::var_os("STRATA_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf"));
    assert!(
        path.is_file(),
        "the default model is missing at {}: run `bash scripts/fetch-model.sh` first",
        path.display()
    );
    path
}

/// The golden fixture made by tests/fixtures/make_golden.py with llama.cpp.
pub fn golden() -> serde_json::Value {
    let path = root().join("tests/fixtures/golden_smollm2.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("golden fixture is valid JSON")
}

/// Integers of a JSON array.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("an array").iter().map(|x| x.as_u64().expect("an integer") as u32).collect()
}

/// The first usable Vulkan device (lavapipe in CI), or None where there is none and none is
/// required (`REQUIRE_VULKAN_DEVICE=1` makes its absence a failure).
pub fn vulkan_index() -> Option<u32> {
    let found = strata_gpu::vulkan::list_devices().unwrap_or_default().into_iter().find(|d| d.usable).map(|d| d.index);
    if found.is_none() {
        assert!(std::env::var("REQUIRE_VULKAN_DEVICE").map_or(true, |v| v != "1"), "REQUIRE_VULKAN_DEVICE=1 but no usable Vulkan device");
        eprintln!("no usable Vulkan device: skipped");
    }
    found
}
