//! The server's end-to-end tests (tests/http_api.rs and tests/http_robustness.rs) again, with
//! Vulkan as the decode device (Mesa's lavapipe in CI): prompts are prefilled on the CPU and every
//! generated token is computed by Vulkan, both over the one KV arena in host memory that Vulkan
//! imports in place. tests/common/server.rs picks the devices from this test binary's name.

// Each included suite declares its own `mod common;`: two copies of the helpers, by design.
#![allow(clippy::duplicate_mod)]

#[path = "http_api.rs"]
mod http_api;
#[path = "http_robustness.rs"]
mod http_robustness;
