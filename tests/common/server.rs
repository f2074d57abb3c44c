//! [`TestServer`]: the real `strata-rt` binary serving the default model on a loopback port.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http::{self, Response};

/// How long the server may take from start to `/health` 200.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long it may take to exit after SIGTERM before the helper kills it.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The binary under test.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_strata-rt"))
}

/// A running server, killed on drop (SIGTERM, then SIGKILL after [`STOP_TIMEOUT`]).
///
/// Each test starts its own: cargo-nextest runs every test in its own process anyway, and the
/// child gets `PR_SET_PDEATHSIG` tied to the thread that started it, so a server must not
/// outlive (or be shared beyond) the test thread that owns it.
pub struct TestServer {
    child: Option<Child>,
    addr: SocketAddr,
    dir: PathBuf,
    config: PathBuf,
    exit: Option<ExitStatus>,
    /// Keep `dir` on drop (a failed start that is retried in the same folder).
    keep_dir: bool,
}

/// The `[devices]` table of the test configuration. The CPU for every suite but the one whose test
/// binary is named `http_vulkan` (tests/http_vulkan.rs): it runs the same tests with prompts
/// prefilled on the CPU and every generated token decoded on `vulkan:0`, over the one host KV
/// arena. Without a usable Vulkan device that suite runs on the CPU (and fails under
/// `REQUIRE_VULKAN_DEVICE=1`, as in CI).
pub fn devices_toml() -> String {
    let exe = std::env::current_exe().ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned())).unwrap_or_default();
    if exe.starts_with("http_vulkan") {
        let found = strata_gpu::vulkan::list_devices().unwrap_or_default().into_iter().find(|d| d.usable);
        match found {
            Some(d) => return format!("prefill = \"cpu\"\ndecode = \"vulkan:{}\"\nprefill_min_tokens = 1\n", d.index),
            None => {
                assert!(std::env::var("REQUIRE_VULKAN_DEVICE").map_or(true, |v| v != "1"), "REQUIRE_VULKAN_DEVICE=1 but no usable Vulkan device");
                eprintln!("no usable Vulkan device: the Vulkan suite runs on the CPU");
            }
        }
    }
    "prefill = \"cpu\"\ndecode = \"cpu\"\n".to_string()
}

/// Whether this suite's server prefills on one device and decodes on another.
pub fn split_devices() -> bool {
    !devices_toml().contains("decode = \"cpu\"")
}

/// The test configuration: config/examples/dev.toml's shape, the default model, 2 threads, a
/// timing log in the server's temporary folder. `listen` comes from the environment. Requests
/// may take as long as a test call waits (`http::CALL_TIMEOUT`): on lavapipe on a slow 2-core
/// machine a queued request of 64 tokens has run past 120 s.
pub fn config_text(dir: &Path) -> String {
    let model = super::default_model();
    let devices = devices_toml();
    format!(
        r#"# Written by tests/common/server.rs.
[model]
path = {model:?}
threads = 2

[server]
max_queued_requests = 8
request_timeout_s = 300

[devices]
{devices}
[batching]
prefill_chunk = 2048
ubatch = 256
max_seqs = 4

[kv]
max_context = 2048

[log]
level = "info"
format = "text"
timing_log = {timing:?}
"#,
        model = model.display().to_string(),
        timing = dir.join("timing.jsonl").display().to_string(),
    )
}

fn temp_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("strata-e2e-{}-{}-{nanos}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

/// A port that was free a moment ago.
fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding 127.0.0.1:0");
    l.local_addr().expect("a bound address").port()
}

/// A `strata-rt` command with the test environment: every inherited `STRATA_*` variable removed
/// (the server refuses unknown ones, and `STRATA_TEST_*` are the tests' own), `env` added.
pub fn command(env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(binary());
    cmd.current_dir(super::root());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("STRATA_") {
            cmd.env_remove(&k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: prctl is async-signal-safe; the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

impl TestServer {
    /// A server with the test configuration.
    pub fn start() -> TestServer {
        Self::start_with(&[])
    }

    /// A server with the test configuration and `STRATA_<SECTION>__<KEY>` overrides.
    pub fn start_with(env: &[(&str, &str)]) -> TestServer {
        let dir = temp_dir();
        let config = dir.join("strata.toml");
        fs::write(&config, config_text(&dir)).expect("writing the test config");
        let mut last_err = String::new();
        // The port may be taken between free_port() and the server's bind: retry then.
        for _ in 0..5 {
            let port = free_port();
            let listen = format!("127.0.0.1:{port}");
            let stderr = fs::File::create(dir.join("stderr.log")).expect("creating stderr.log");
            let stdout = fs::File::create(dir.join("stdout.log")).expect("creating stdout.log");
            let mut all_env: Vec<(&str, &str)> = vec![("STRATA_SERVER__LISTEN", listen.as_str())];
            all_env.extend_from_slice(env);
            let child = command(&all_env)
                .arg("--config")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(stdout)
                .stderr(stderr)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", binary().display()));
            let mut server = TestServer { child: Some(child), addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)), dir: dir.clone(), config: config.clone(), exit: None, keep_dir: false };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(e) => {
                    last_err = e;
                    let bind_failed = server.stderr().contains("listening on") && server.stderr().to_lowercase().contains("address");
                    server.kill();
                    server.keep_dir = true;
                    if !bind_failed {
                        break;
                    }
                }
            }
        }
        let stderr = fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
        panic!("the server did not become ready: {last_err}\n--- its stderr ---\n{stderr}");
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.exit = Some(status);
                return Err(format!("the server exited with {status} before it was ready"));
            }
            if let Ok(r) = http::request(self.addr, "GET", "/health", &[], None, Duration::from_secs(2)) {
                if r.status == 200 {
                    return Ok(());
                }
                assert_eq!(r.status, 503, "/health before ready answers 503: {}", r.text());
                assert!(r.header("retry-after").is_some(), "/health 503 carries Retry-After");
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(format!("/health was not 200 within {START_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn config_path(&self) -> &Path {
        &self.config
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn get(&self, path: &str) -> Response {
        http::get(self.addr, path)
    }

    pub fn post(&self, path: &str, body: &Value) -> Response {
        http::post_json(self.addr, path, body)
    }

    pub fn post_raw(&self, path: &str, body: &[u8]) -> Response {
        http::post_raw(self.addr, path, body)
    }

    /// A successful non-streaming POST's JSON body; panics with the body otherwise.
    pub fn post_ok(&self, path: &str, body: &Value) -> Value {
        let r = self.post(path, body);
        assert_eq!(r.status, 200, "POST {path} {body}: {}", r.text());
        r.json()
    }

    /// A streaming POST's `data:` payloads, to the end.
    pub fn stream(&self, path: &str, body: &Value) -> Vec<String> {
        http::stream_all(self.addr, path, body)
    }

    /// `/health` (must be 200).
    pub fn health(&self) -> Value {
        let r = self.get("/health");
        assert_eq!(r.status, 200, "/health: {}", r.text());
        r.json()
    }

    /// Polls `/health` until `pred` holds; panics with the last answer after `timeout`.
    pub fn wait_health(&self, timeout: Duration, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let h = self.health();
            if pred(&h) {
                return h;
            }
            assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}; /health says {h}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until no request is running or waiting.
    pub fn wait_idle(&self) -> Value {
        self.wait_health(Duration::from_secs(30), "the server going idle", |h| h["requests_running"] == 0 && h["requests_waiting"] == 0)
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default()
    }

    /// The `timing` objects of the timing log (`log.timing_log`), in order.
    pub fn timing_log(&self) -> Vec<Value> {
        parse_timing(&fs::read_to_string(self.dir.join("timing.jsonl")).unwrap_or_default())
    }

    /// The `timing` objects the server wrote to stderr, in order.
    pub fn timing_stderr(&self) -> Vec<Value> {
        parse_timing(&self.stderr())
    }

    /// `strata-rt generate` with this server's configuration, greedy; its stdout.
    pub fn generate_cli(&self, prompt: &str, max_tokens: usize, chat: bool) -> String {
        let mut cmd = command(&[]);
        cmd.arg("generate").arg("--config").arg(&self.config).arg("--prompt").arg(prompt).arg("--temperature").arg("0").arg("--max-tokens").arg(max_tokens.to_string());
        if chat {
            cmd.arg("--chat");
        }
        let out = run_with_timeout(cmd, Duration::from_secs(120));
        assert!(out.status.success(), "strata-rt generate failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("generate writes UTF-8")
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        if let Some(c) = &self.child {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
        }
    }

    /// Waits for the server to exit; `None` if it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.exit {
            return Some(s);
        }
        let start = Instant::now();
        let child = self.child.as_mut()?;
        loop {
            if let Ok(Some(s)) = child.try_wait() {
                self.exit = Some(s);
                return Some(s);
            }
            if start.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if self.exit.is_none() {
            self.sigterm();
            if self.wait_exit(STOP_TIMEOUT).is_none() {
                if let Some(c) = self.child.as_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
        }
        self.child = None;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let stderr = self.stderr();
            let tail: Vec<&str> = stderr.lines().rev().take(60).collect();
            eprintln!("--- the server's stderr (last lines; all in {}) ---", self.dir.display());
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        } else if !self.keep_dir {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn parse_timing(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.starts_with("{\"timing\""))
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("a timing line is not JSON ({e}): {l}"))["timing"].clone())
        .collect()
}

/// Runs `cmd` to its end, killing it after `timeout`.
pub fn run_with_timeout(mut cmd: Command, timeout: Duration) -> std::process::Output {
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send(());
        out
    });
    if rx.recv_timeout(timeout).is_err() {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
        panic!("{cmd:?} ran past {timeout:?}");
    }
    waiter.join().expect("the waiter thread").expect("waiting for the command")
}
