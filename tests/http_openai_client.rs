//! End-to-end: the official `openai` Python client (PyPI) drives a streaming chat and a
//! non-streaming completion against the real server (tests/python/test_openai_client.py).
//!
//! The interpreter: `STRATA_TEST_PYTHON`, else `.venv/bin/python` in the repository. It must
//! import `openai`; when it cannot, the test fails and says how to install it:
//!     python3 -m venv .venv && .venv/bin/pip install -q openai==2.8.1

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::server::run_with_timeout;
use common::TestServer;
use serde_json::{json, Value};

const INSTALL: &str = "python3 -m venv .venv && .venv/bin/pip install -q openai==2.8.1";

fn python() -> PathBuf {
    let (py, from) = match std::env::var_os("STRATA_TEST_PYTHON") {
        Some(p) => (PathBuf::from(p), "STRATA_TEST_PYTHON"),
        None => (common::root().join(".venv/bin/python"), ".venv/bin/python"),
    };
    assert!(
        py.exists(),
        "no Python for the openai client test: {} ({from}) does not exist. Install it from the repository root with\n    {INSTALL}\nor set STRATA_TEST_PYTHON to an interpreter that has the `openai` package",
        py.display()
    );
    let mut cmd = Command::new(&py);
    cmd.args(["-c", "from openai import OpenAI; import importlib.metadata as m; print(m.version('openai'))"]);
    let out = run_with_timeout(cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{} ({from}) cannot import `openai`: {}\nInstall it from the repository root with\n    {INSTALL}\nor set STRATA_TEST_PYTHON to an interpreter that has it",
        py.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    py
}

#[test]
fn official_openai_python_client_streams_a_chat_and_completes_text() {
    let py = python();
    let s = TestServer::start();
    let mut cmd = Command::new(&py);
    cmd.arg(common::root().join("tests/python/test_openai_client.py")).arg(format!("{}/v1", s.url())).current_dir(common::root());
    // The client reads these; keep the environment from redirecting it.
    for k in ["OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
        cmd.env_remove(k);
    }
    cmd.env("NO_PROXY", "127.0.0.1,localhost");
    let out = run_with_timeout(cmd, Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the openai client script failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}", out.status);
    let got: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the script printed no JSON line:\n{stdout}\n{stderr}"));
    eprintln!("openai {} against {}", got["openai_version"], s.url());

    // What the client saw equals the server's raw HTTP answers to the same greedy requests.
    let chat = s.post_ok(
        "/v1/chat/completions",
        &json!({"messages": [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Name a primary color."}
        ], "temperature": 0, "max_tokens": 16}),
    );
    assert_eq!(got["chat_text"], chat["choices"][0]["message"]["content"], "the client's streamed chat vs the raw answer: {got}");
    assert_eq!(got["chat_usage"]["completion_tokens"], chat["usage"]["completion_tokens"], "{got}");
    assert_eq!(got["chat_usage"]["prompt_tokens"], chat["usage"]["prompt_tokens"], "{got}");
    let cmpl = s.post_ok("/v1/completions", &json!({"prompt": "The capital of France is", "temperature": 0, "max_tokens": 12}));
    assert_eq!(got["completion_text"], cmpl["choices"][0]["text"], "{got}");
    assert_eq!(got["completion_usage"]["completion_tokens"], cmpl["usage"]["completion_tokens"], "{got}");
    assert_eq!(got["unknown_model_error"]["code"], "model_not_found", "{got}");
}
