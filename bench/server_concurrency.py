#!/usr/bin/env python3
"""Server speed under concurrency (issue 4's "Speed"), strata-rt and llama-server in one run.

Stdlib only. For each server (started here one after the other on a free loopback port, or given
with --url), with streaming /v1/completions and greedy sampling (temperature 0, top_k 1, seed 42):

1. Aggregate generated tokens/s: one stream alone, then 8 concurrent streams, each up to --gen
   tokens of a counting prompt (different per stream). Reported two ways: all generated tokens over
   the wall time from the first request to the last end ("aggregate"), and the decode rate while all
   streams are generating (token chunks between the last stream's first token and the first
   stream's end, over that window: "steady").
   Each measured --reps times (1 and 8 alternating); the median is reported, and the median of
   the ratios of each 8-stream run to the 1-stream run just before it (robust to drift).
2. Time to first token of a 512-token prompt (token ids, unique from its first token, so no prefix
   cache can serve it) on an idle server, and while 7 other streams decode; the ratio; and the 7
   streams' worst inter-token gap while that prompt is prefilled (any gap overlapping the time from
   sending the prompt to its first token), beside their median gap before it.

    python3 bench/server_concurrency.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --strata target/release/strata-rt --llama-server /path/to/llama-server -t 2 --out /tmp/conc.json

strata-rt runs config/examples/dev.toml with max_seqs 8 (STRATA_* overrides); llama-server runs
`-t T -np 8 -c 8*ctx`. Streams are counted per SSE chunk with text; the total per stream comes from
the final usage chunk where the server sends one.
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promptgen  # noqa: E402

SAMPLING = {"temperature": 0.0, "top_k": 1, "seed": 42}
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


# ---------------------------------------------------------------- HTTP and streams

def _conn(url, timeout=600):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)


def post_json(url, path, body, timeout=600):
    c = _conn(url, timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"POST {path}: HTTP {r.status}: {data[:300]!r}")
    return json.loads(data)


class Stream(threading.Thread):
    """One streaming completion; records the arrival time of every chunk that carries text."""

    def __init__(self, url, prompt, max_tokens):
        super().__init__(daemon=True)
        self.url, self.prompt, self.max_tokens = url, prompt, max_tokens
        self.sent = None
        self.times = []
        self.usage = None
        self.finish = None
        self.error = None
        self.cancelled = False
        self._conn = None
        self.first = threading.Event()

    def run(self):
        body = dict(SAMPLING, prompt=self.prompt, max_tokens=self.max_tokens, stream=True,
                    stream_options={"include_usage": True})
        try:
            c = self._conn = _conn(self.url)
            self.sent = time.perf_counter()
            c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
            while True:
                line = r.readline()
                if not line:
                    break
                now = time.perf_counter()
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                obj = json.loads(payload)
                if obj.get("usage"):
                    self.usage = obj["usage"]
                for ch in obj.get("choices") or []:
                    if ch.get("text"):
                        self.times.append(now)
                        self.first.set()
                    if ch.get("finish_reason"):
                        self.finish = ch["finish_reason"]
        except Exception as e:  # noqa: BLE001 - a cancelled stream ends with a socket error
            if not self.cancelled:
                self.error = f"{type(e).__name__}: {e}"
        finally:
            self.first.set()
            if self._conn:
                self._conn.close()

    def cancel(self):
        self.cancelled = True
        try:
            self._conn.sock.shutdown(socket.SHUT_RDWR)
        except Exception:  # noqa: BLE001
            pass

    def tokens(self):
        if self.usage and self.usage.get("completion_tokens"):
            return self.usage["completion_tokens"]
        return len(self.times)

    def gaps(self):
        return [(a, b) for a, b in zip(self.times, self.times[1:])]


def counting_prompt(i):
    return f"Count from {100 * i + 1} upwards, separated by commas: {100 * i + 1}, {100 * i + 2}, {100 * i + 3},"


# ---------------------------------------------------------------- the measurements

def throughput(url, n_streams, gen):
    streams = [Stream(url, counting_prompt(i), gen) for i in range(n_streams)]
    t0 = time.perf_counter()
    for s in streams:
        s.start()
    for s in streams:
        s.join()
    errors = [s.error for s in streams if s.error]
    if errors:
        raise RuntimeError(f"{n_streams}-stream run: {errors[0]}")
    end = max(s.times[-1] for s in streams if s.times)
    total = sum(s.tokens() for s in streams)
    # steady: every stream generating
    w0 = max(s.times[0] for s in streams)
    w1 = min(s.times[-1] for s in streams)
    in_window = sum(1 for s in streams for t in s.times[1:] if w0 < t <= w1)
    steady = in_window / (w1 - w0) if w1 > w0 else float("nan")
    return {"streams": n_streams, "generated_tokens": total, "wall_s": end - t0, "aggregate_tps": total / (end - t0),
            "steady_tps": steady, "per_stream_tokens": [s.tokens() for s in streams],
            "finish": [s.finish for s in streams]}


def prompt_512(url, index, tag, n=512):
    """512 token ids: a unique header line and synthetic source, cut at n tokens."""
    text = promptgen.source(40, 4242, index, tag)
    toks = post_json(url, "/tokenize", {"content": text})["tokens"]
    if len(toks) < n:
        raise RuntimeError(f"prompt {index}: only {len(toks)} tokens")
    return toks[:n]


def ttft_idle(url, prompt):
    s = Stream(url, prompt, 4)
    s.start()
    s.join()
    if s.error or not s.times:
        raise RuntimeError(f"idle TTFT request: {s.error or 'no token'}")
    return s.times[0] - s.sent


def ttft_loaded(url, prompt, n_bg, bg_gen, settle_tokens=8):
    bg = [Stream(url, counting_prompt(50 + i), bg_gen) for i in range(n_bg)]
    for s in bg:
        s.start()
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline and not all(len(s.times) >= settle_tokens or s.error for s in bg):
        time.sleep(0.01)
    errors = [s.error for s in bg if s.error]
    if errors:
        raise RuntimeError(f"background stream: {errors[0]}")
    if not all(len(s.times) >= settle_tokens for s in bg):
        raise RuntimeError("background streams did not start decoding within 120 s")
    p = Stream(url, prompt, 4)
    p.start()
    p.join()
    if p.error or not p.times:
        raise RuntimeError(f"loaded TTFT request: {p.error or 'no token'}")
    t_send, t_first = p.sent, p.times[0]
    time.sleep(0.05)
    still = [s for s in bg if s.is_alive() and s.times and s.times[-1] < t_first]
    for s in bg:
        s.cancel()
    for s in bg:
        s.join()
    worst, before = 0.0, []
    for s in bg:
        for a, b in s.gaps():
            if b > t_send and a < t_first:
                worst = max(worst, b - a)
            elif b <= t_send:
                before.append(b - a)
    # a stream with no token at all since the prompt was sent: its gap is still open
    for s in still:
        worst = max(worst, t_first - s.times[-1])
    finished_early = sum(1 for s in bg if s.times and s.times[-1] < t_send)
    return {"ttft_s": t_first - t_send, "worst_gap_s": worst,
            "median_gap_before_s": statistics.median(before) if before else float("nan"),
            "background_finished_before_prompt": finished_early}


def run_suite(url, gen, reps, tag):
    out = {}
    # warm-up: every slot once, and the long-prompt path
    throughput(url, 8, 16)
    ttft_idle(url, prompt_512(url, 999, tag))
    # throughput: alternate 1 and 8 streams, `reps` times each; the median of each
    ones, eights = [], []
    for _ in range(reps):
        ones.append(throughput(url, 1, gen))
        eights.append(throughput(url, 8, gen))
    med = lambda runs, key: statistics.median(r[key] for r in runs)
    out["one_stream_runs"], out["eight_stream_runs"] = ones, eights
    out["one_stream"] = {"aggregate_tps": med(ones, "aggregate_tps"), "steady_tps": med(ones, "steady_tps")}
    out["eight_streams"] = {"aggregate_tps": med(eights, "aggregate_tps"), "steady_tps": med(eights, "steady_tps")}
    out["scaling_aggregate"] = out["eight_streams"]["aggregate_tps"] / out["one_stream"]["aggregate_tps"]
    out["scaling_steady"] = out["eight_streams"]["steady_tps"] / out["one_stream"]["steady_tps"]
    # Each 8-stream run against the 1-stream run just before it: the machine's speed drifts over
    # minutes (the bandwidth-bound single stream and the compute-bound batch differently), and a
    # pair measured seconds apart shares its phase.
    out["scaling_paired"] = statistics.median(e["aggregate_tps"] / o["aggregate_tps"] for o, e in zip(ones, eights))
    out["scaling_paired_steady"] = statistics.median(e["steady_tps"] / o["steady_tps"] for o, e in zip(ones, eights))
    # TTFT: idle and loaded alternate, each prompt fresh
    idle, loaded = [], []
    for i in range(reps):
        idle.append(ttft_idle(url, prompt_512(url, 2 * i + 1, tag)))
        loaded.append(ttft_loaded(url, prompt_512(url, 2 * i + 2, tag), 7, 512))
    out["ttft_idle_s"] = idle
    out["ttft_loaded"] = loaded
    mi = statistics.median(idle)
    ml = statistics.median(r["ttft_s"] for r in loaded)
    out["ttft_idle_median_s"], out["ttft_loaded_median_s"], out["ttft_ratio"] = mi, ml, ml / mi
    out["worst_gap_s"] = max(r["worst_gap_s"] for r in loaded)
    out["median_gap_before_s"] = statistics.median(r["median_gap_before_s"] for r in loaded)
    return out


# ---------------------------------------------------------------- servers

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was healthy")
        try:
            c = _conn(url, 2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server not healthy in time")


def start_strata(binary, config, model, threads, ctx, log):
    port = free_port()
    env = dict(os.environ, STRATA_SERVER__LISTEN=f"127.0.0.1:{port}", STRATA_BATCHING__MAX_SEQS="8",
               STRATA_SERVER__MAX_QUEUED_REQUESTS="32", STRATA_KV__MAX_CONTEXT=str(ctx), STRATA_LOG__LEVEL="warn")
    if model:
        env["STRATA_MODEL__PATH"] = model
    if threads:
        env["STRATA_MODEL__THREADS"] = str(threads)
    cmd = [binary, "--config", config]
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, cwd=ROOT)
    return p, f"http://127.0.0.1:{port}", " ".join(f"{k}={env[k]}" for k in sorted(env) if k.startswith("STRATA_")) + " " + " ".join(cmd)


def start_llama(binary, model, threads, ctx, log):
    port = free_port()
    cmd = [binary, "-m", model, "-t", str(threads), "-tb", str(threads), "-np", "8", "-c", str(8 * ctx),
           "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
    p = subprocess.Popen(cmd, stdout=log, stderr=log)
    return p, f"http://127.0.0.1:{port}", " ".join(cmd)


def stop(p):
    p.terminate()
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def fmt_table(results):
    names = list(results)
    ms = lambda x: f"{1e3 * x:.0f}"
    rows = [
        ("1 stream, generated t/s (aggregate / steady)", lambda r: f"{r['one_stream']['aggregate_tps']:.1f} / {r['one_stream']['steady_tps']:.1f}"),
        ("8 streams, generated t/s (aggregate / steady)", lambda r: f"{r['eight_streams']['aggregate_tps']:.1f} / {r['eight_streams']['steady_tps']:.1f}"),
        ("8 vs 1 (aggregate / steady)", lambda r: f"{r['scaling_aggregate']:.2f}x / {r['scaling_steady']:.2f}x"),
        ("8 vs 1, median of adjacent pairs (aggregate / steady)", lambda r: f"{r['scaling_paired']:.2f}x / {r['scaling_paired_steady']:.2f}x"),
        ("TTFT 512-token prompt, idle (ms)", lambda r: ms(r["ttft_idle_median_s"])),
        ("TTFT 512-token prompt, 7 streams decoding (ms)", lambda r: ms(r["ttft_loaded_median_s"])),
        ("TTFT loaded vs idle", lambda r: f"{r['ttft_ratio']:.2f}x"),
        ("7 streams' worst inter-token gap during that prefill, worst of all reps (ms)", lambda r: ms(r["worst_gap_s"])),
        ("7 streams' median inter-token gap before it (ms)", lambda r: ms(r["median_gap_before_s"])),
    ]
    lines = ["| measure | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for label, f in rows:
        lines.append(f"| {label} | " + " | ".join(f(results[n]) for n in names) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", action="append", default=[], help="NAME=URL of an already running server (repeatable)")
    ap.add_argument("--strata", help="strata-rt binary to start")
    ap.add_argument("--config", default=os.path.join(ROOT, "config", "examples", "dev.toml"))
    ap.add_argument("--llama-server", help="llama-server binary to start (side by side)")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048, help="context per sequence")
    ap.add_argument("--gen", type=int, default=128, help="tokens per stream in the throughput test")
    ap.add_argument("-r", "--reps", type=int, default=3, help="repetitions of each measurement (medians are reported)")
    ap.add_argument("--tag", default=str(os.getpid()), help="makes this run's 512-token prompts unique")
    ap.add_argument("--out", help="write all results as JSON here")
    ap.add_argument("--server-log", default="/tmp/server_concurrency.log")
    a = ap.parse_args(argv)

    results, commands = {}, {}
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count(), "threads": a.threads}
    loads = {}
    with open(a.server_log, "ab") as log:
        targets = [(n, None, u) for n, _, u in (x.partition("=") for x in a.url)]
        if a.strata:
            targets.append(("strata-rt", "strata", None))
        if a.llama_server:
            targets.append(("llama-server", "llama", None))
        if not targets:
            ap.error("give --strata, --llama-server or --url NAME=URL")
        for name, kind, url in targets:
            proc = None
            if kind == "strata":
                proc, url, commands[name] = start_strata(a.strata, a.config, a.model, a.threads, a.ctx, log)
            elif kind == "llama":
                proc, url, commands[name] = start_llama(a.llama_server, a.model, a.threads, a.ctx, log)
            try:
                if proc:
                    wait_healthy(url, proc)
                l0 = os.getloadavg()[0]
                print(f"{name}: {url} (load {l0:.2f})", file=sys.stderr)
                results[name] = run_suite(url, a.gen, a.reps, a.tag)
                loads[name] = [round(l0, 2), round(os.getloadavg()[0], 2)]
            finally:
                if proc:
                    stop(proc)
    print(f"\n{meta['date']}; {meta['cpus']} CPUs; {a.threads} threads; load average (1 min) at start/end: "
          + ", ".join(f"{n} {v[0]}/{v[1]}" for n, v in loads.items()) + "\n")
    print(fmt_table(results))
    for n, c in commands.items():
        print(f"\n{n}: {c}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"meta": meta, "load": loads, "commands": commands, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
