//! End to end: the real server on the default model and a real Prometheus (Debian's
//! `prometheus` package) scraping it with the shipped `dashboards/prometheus.yml`; a few requests
//! (a cancelled one and a rejected one among them); then every PromQL expression of every
//! dashboard panel, dashboard variable and alert rule must return series. `promtool check config`
//! and `promtool check rules` must pass.
//!
//! Without Prometheus installed the test fails (never skips): `apt-get install -y prometheus`.

mod metrics_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use metrics_support as support;
use serde_json::{json, Value};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";
const MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// A child process killed (and reaped) on drop, and killed by the kernel if the test dies.
struct Proc {
    child: Child,
    what: &'static str,
    log: PathBuf,
}

impl Proc {
    fn spawn(mut cmd: Command, what: &'static str, log: PathBuf) -> Proc {
        let out = std::fs::File::create(&log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let err = out.try_clone().unwrap_or_else(|e| panic!("{e}"));
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl is async-signal-safe; it asks for SIGKILL when this test process dies.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Proc { child, what, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}):\n{}", self.what, self.log());
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes a folder when dropped (declared before the processes that write into it, so it is
/// dropped after them).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("logs kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn temp_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let d = std::env::temp_dir().join(format!("strata-metrics-test-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
    d
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
    l.local_addr().expect("local address").port()
}

/// A plain HTTP/1.0 exchange (the server closes the connection, so no chunked bodies).
fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&[u8]>, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let body = body.unwrap_or_default();
    let head = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    http(addr, "GET", path, None, Duration::from_secs(30)).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

fn post(addr: SocketAddr, path: &str, body: &[u8]) -> (u16, String) {
    http(addr, "POST", path, Some(body), Duration::from_secs(120)).unwrap_or_else(|e| panic!("POST http://{addr}{path}: {e}"))
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// Waits until `f` returns `Some`, failing with `what` after `timeout`.
fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs an instant query; `(resultType, result)`.
fn query(prom: SocketAddr, q: &str) -> Result<(String, Vec<Value>), String> {
    let (status, body) = http(prom, "GET", &format!("/api/v1/query?query={}", encode(q)), None, Duration::from_secs(30)).map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_str(&body).map_err(|e| format!("HTTP {status}, not JSON ({e}): {body}"))?;
    if v["status"] != "success" {
        return Err(format!("HTTP {status}: {} {}", v["errorType"], v["error"]));
    }
    let kind = v["data"]["resultType"].as_str().unwrap_or("?").to_string();
    let result = match &v["data"]["result"] {
        Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    };
    Ok((kind, result))
}

/// The value of the first series of an instant vector query.
fn value(prom: SocketAddr, q: &str) -> Option<f64> {
    let (_, r) = query(prom, q).ok()?;
    r.first()?["value"][1].as_str()?.parse().ok()
}

fn promtool(args: &[&str]) {
    let out = Command::new(PROMTOOL).args(args).output().unwrap_or_else(|e| panic!("running {PROMTOOL}: {e}"));
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shipped scrape config, pointed at `target` with a 1 s interval and the rules file by
/// absolute path. Each replacement must apply, so the test follows the shipped file.
fn prometheus_config(target: SocketAddr) -> String {
    let dir = support::dashboards_dir();
    let shipped = std::fs::read_to_string(dir.join("prometheus.yml")).expect("reading dashboards/prometheus.yml");
    let mut cfg = shipped.clone();
    let mut replace = |from: &str, to: &str| {
        assert!(cfg.contains(from), "dashboards/prometheus.yml no longer contains {from:?}: update this test");
        cfg = cfg.replace(from, to);
    };
    replace("127.0.0.1:8080", &target.to_string());
    replace("scrape_interval: 5s", "scrape_interval: 1s");
    replace("scrape_timeout: 4s", "scrape_timeout: 1s");
    replace("evaluation_interval: 15s", "evaluation_interval: 1s");
    replace("- alerts.yml", &format!("- {}", dir.join("alerts.yml").display()));
    cfg
}

/// A streaming chat request whose connection is dropped after the first generated chunk.
fn cancelled_stream(addr: SocketAddr, model: &str) {
    let body = json!({"model": model, "stream": true, "max_tokens": 400, "temperature": 0,
                      "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]})
    .to_string();
    let mut s = TcpStream::connect(addr).expect("connecting for the cancelled stream");
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("read timeout");
    let head = format!("POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
    s.write_all(head.as_bytes()).and_then(|_| s.write_all(body.as_bytes())).expect("sending the streaming request");
    let mut r = BufReader::new(s);
    let mut chunks = 0;
    let mut line = String::new();
    while chunks < 2 {
        line.clear();
        let n = r.read_line(&mut line).expect("reading the stream");
        assert!(n > 0, "the stream ended before its first chunks");
        if line.contains("data: {") {
            chunks += 1; // the role chunk, then the first content chunk
        }
    }
    drop(r); // the client goes away mid-stream
}

/// The name the server serves its model under (`/v1/models`).
fn served_model(addr: SocketAddr) -> String {
    let (status, body) = get(addr, "/v1/models");
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("/v1/models: {e}: {body}"));
    v["data"][0]["id"].as_str().unwrap_or_else(|| panic!("/v1/models: no id: {body}")).to_string()
}

fn model_path() -> PathBuf {
    let p = support::root().join(MODEL);
    assert!(p.exists(), "{} is missing: run `bash scripts/fetch-model.sh`", p.display());
    p
}

fn start_server(dir: &Path) -> (Proc, SocketAddr) {
    model_path();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("address");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_strata-rt"));
    cmd.current_dir(support::root()).arg("--config").arg("config/examples/dev.toml");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("STRATA_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("STRATA_SERVER__LISTEN", addr.to_string()).env("STRATA_LOG__FORMAT", "json");
    let mut server = Proc::spawn(cmd, "strata-rt", dir.join("server.log"));
    wait_for(Duration::from_secs(180), "the server to load the model", || {
        server.check_alive();
        match http(addr, "GET", "/health", None, Duration::from_secs(5)) {
            Ok((200, _)) => Some(()),
            _ => None,
        }
    });
    (server, addr)
}

fn start_prometheus(dir: &Path, target: SocketAddr) -> (Proc, SocketAddr) {
    let cfg_path = dir.join("prometheus.yml");
    std::fs::write(&cfg_path, prometheus_config(target)).expect("writing the Prometheus config");
    promtool(&["check", "config", &cfg_path.to_string_lossy()]);
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("address");
    let mut cmd = Command::new(PROMETHEUS);
    cmd.arg(format!("--config.file={}", cfg_path.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg(format!("--web.listen-address={addr}"))
        .arg("--log.level=warn");
    let mut prom = Proc::spawn(cmd, "prometheus", dir.join("prometheus.log"));
    wait_for(Duration::from_secs(60), "Prometheus to be ready", || {
        prom.check_alive();
        match http(addr, "GET", "/-/ready", None, Duration::from_secs(5)) {
            Ok((200, _)) => Some(()),
            _ => None,
        }
    });
    (prom, addr)
}

#[test]
fn every_dashboard_and_alert_expression_returns_series_from_a_real_prometheus() {
    assert!(
        Path::new(PROMETHEUS).exists() && Path::new(PROMTOOL).exists(),
        "{PROMETHEUS} and {PROMTOOL} are needed: `apt-get install -y prometheus` (Debian's package)"
    );
    let dashboards = support::dashboards_dir();
    promtool(&["check", "config", &dashboards.join("prometheus.yml").to_string_lossy()]);
    promtool(&["check", "rules", &dashboards.join("alerts.yml").to_string_lossy()]);

    let dir = temp_dir();
    let _cleanup = RemoveOnDrop(dir.clone());
    let (mut server, addr) = start_server(&dir);
    let (mut prom, prom_addr) = start_prometheus(&dir, addr);
    wait_for(Duration::from_secs(30), "the first scrape of strata-rt", || (value(prom_addr, "up{job=\"strata-rt\"}")? == 1.0).then_some(()));

    // Traffic: two identical prompts (the second reuses the first one's cached prefix), a
    // streaming request, a cancelled stream and a rejected request.
    let model = served_model(addr);
    let prompt = "The history of the lighthouse begins in antiquity, when fires were lit on hills to guide ships. ".repeat(3);
    let completion = json!({"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0}).to_string();
    for _ in 0..2 {
        let (status, body) = post(addr, "/v1/completions", completion.as_bytes());
        assert_eq!(status, 200, "{body}");
    }
    let chat = json!({"model": model, "stream": true, "max_tokens": 8, "messages": [{"role": "user", "content": "Say hi."}]}).to_string();
    let (status, body) = post(addr, "/v1/chat/completions", chat.as_bytes());
    assert_eq!(status, 200, "{body}");
    cancelled_stream(addr, &model);
    let (status, body) = post(addr, "/v1/chat/completions", b"{not json");
    assert_eq!(status, 400, "{body}");

    // The scheduler notices the dropped stream at its next step.
    wait_for(Duration::from_secs(60), "the cancelled request to be counted", || {
        let (_, text) = http(addr, "GET", "/metrics", None, Duration::from_secs(5)).ok()?;
        text.lines().any(|l| l.starts_with("strata_requests_finished_total{reason=\"cancelled\"} ") && !l.ends_with(" 0")).then_some(())
    });
    // The gateway gauges are back to idle without a scrape-time query.
    let (_, text) = get(addr, "/metrics");
    for idle in ["strata_requests_running 0", "strata_requests_waiting 0", "strata_kv_cache_usage_ratio 0"] {
        assert!(text.lines().any(|l| l == idle), "/metrics lacks `{idle}`:\n{text}");
    }
    // Several scrapes after the traffic, so rate() has two points in its window.
    let scrapes = |p: SocketAddr| value(p, "count_over_time(strata_build_info[1m])").unwrap_or(0.0);
    let before = scrapes(prom_addr);
    wait_for(Duration::from_secs(30), "four more scrapes", || (scrapes(prom_addr) >= before + 4.0).then_some(()));
    server.check_alive();
    prom.check_alive();

    // What happened is what the counters say.
    let at_least = |q: &str, min: f64| {
        let v = value(prom_addr, q).unwrap_or_else(|| panic!("{q}: no series"));
        assert!(v >= min, "{q} = {v}, expected at least {min}");
    };
    at_least("strata_requests_finished_total{reason=\"cancelled\"}", 1.0);
    at_least("sum(strata_requests_finished_total{reason=~\"stop|length\"})", 3.0);
    at_least("strata_requests_rejected_total{reason=\"invalid\"}", 1.0);
    at_least("strata_http_errors_total{status=\"400\"}", 1.0);
    at_least("strata_prefix_cache_hits_total", 1.0);
    at_least("strata_prefix_cache_reused_tokens_total", 16.0);
    // The repeated prompt ends inside a full block (its first run generated past it).
    at_least("strata_prefix_cache_copied_tokens_total", 1.0);
    at_least("strata_time_to_first_token_seconds_count", 4.0);
    at_least("strata_generated_tokens_total", 8.0);
    at_least("strata_kv_handoffs_total", 4.0);
    at_least("sum(strata_step_duration_seconds_count)", 4.0);
    at_least("strata_cache_config_info", 1.0);
    at_least("strata_process_resident_memory_bytes", 1e6);
    at_least("strata_process_open_fds", 3.0);
    let (_, info) = query(prom_addr, "strata_build_info").expect("strata_build_info");
    let labels = &info.first().expect("a strata_build_info series")["metric"];
    for l in ["version", "git_revision", "model", "prefill_device", "decode_device"] {
        assert!(labels[l].as_str().is_some_and(|v| !v.is_empty()), "strata_build_info lacks {l}: {labels}");
    }

    // Every expression of every dashboard panel, dashboard variable and alert rule.
    let mut exprs: Vec<(String, String)> = Vec::new();
    for (path, dash) in support::dashboards() {
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        for (title, e) in support::panel_exprs(&dash) {
            exprs.push((format!("{file} / {title}"), support::substitute_grafana(&e)));
        }
        for q in support::variable_queries(&dash) {
            // label_values(metric, label): the metric must have series.
            let q = q.trim();
            let e = match q.strip_prefix("label_values(").and_then(|r| r.strip_suffix(')')) {
                Some(args) => args.rsplit_once(',').map_or(args, |(m, _)| m).trim().to_string(),
                None => q.to_string(),
            };
            exprs.push((format!("{file} / variable"), support::substitute_grafana(&e)));
        }
    }
    let alerts = support::alert_exprs();
    assert!(!alerts.is_empty(), "no alert rules found");
    for (name, e) in alerts {
        exprs.push((format!("alerts.yml / {name}"), support::strip_comparison(&e)));
    }
    let mut failures = Vec::new();
    for (place, e) in &exprs {
        match query(prom_addr, e) {
            Ok((_, r)) if !r.is_empty() => {}
            Ok((kind, _)) => failures.push(format!("{place}: `{e}` returned no series ({kind})")),
            Err(err) => failures.push(format!("{place}: `{e}` failed: {err}")),
        }
    }
    assert!(failures.is_empty(), "{} of {} expressions failed:\n{}", failures.len(), exprs.len(), failures.join("\n"));
    eprintln!("{} dashboard, variable and alert expressions returned series", exprs.len());

    // The rules loaded and evaluate cleanly.
    let (_, body) = get(prom_addr, "/api/v1/rules");
    let rules: Value = serde_json::from_str(&body).expect("rules JSON");
    let all: Vec<&Value> = rules["data"]["groups"].as_array().into_iter().flatten().flat_map(|g| g["rules"].as_array().into_iter().flatten()).collect();
    assert!(!all.is_empty(), "Prometheus loaded no rules: {body}");
    for r in all {
        assert!(r["health"] == "ok" || r["health"] == "unknown", "rule {} is unhealthy: {}", r["name"], r["lastError"]);
    }

    // Requests carried their span: the JSON logs name the request id.
    let log = server.log();
    assert!(
        log.lines().any(|l| l.contains("\"target\":\"strata_actors::scheduler\"") && l.contains("\"span\":{\"request_id\":\"chatcmpl-")),
        "no scheduler log line carries its request's span (request_id):\n{log}"
    );
}
