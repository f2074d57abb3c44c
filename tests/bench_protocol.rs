//! The fresh-prompt benchmark protocol's rules (bench/fresh_prompt.py), run through Python's
//! `unittest`: a missing or duplicated timing record, or a fresh prompt with reused KV tokens,
//! fails the run naming the request; the prompt generator is deterministic. No server needed.

use std::process::Command;

#[test]
fn bench_protocol_unit_tests_pass() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "bench/tests", "-v"])
        .current_dir(root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("running python3 (needed by the bench protocol tests)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "bench/tests failed:\n{text}");
    assert!(text.contains("OK"), "unexpected unittest output:\n{text}");
}
