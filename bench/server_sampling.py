#!/usr/bin/env python3
"""Decode speed through the HTTP server by sampling mode: greedy requests (the device's argmax,
one token read back a row) against sampled ones (every logit read back for the sampler).

Stdlib only. Starts strata-rt (config/examples/dev.toml with STRATA_* overrides, e.g.
STRATA_DEVICES__PREFILL / __DECODE and STRATA_MODEL__PATH set by the caller) and measures, for
each mode, REPS times alternating: one stream alone and N concurrent streams, each a prompt of
--prompt-tokens token ids and --gen generated tokens (streamed /v1/completions). Decode t/s per
stream is (chunks - 1) over the time from its first chunk to its last; the aggregate is every
stream's chunks over the window in which all of them were generating.

    STRATA_DEVICES__DECODE=vulkan:0 python3 bench/server_sampling.py \\
        --strata target/release/strata-rt --model /tmp/m/qwen2.5-7b-Q4_K.gguf --out /tmp/s.txt
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_concurrency as sc  # noqa: E402

MODES = {
    "greedy": {"temperature": 0.0, "seed": 42},
    "sampled": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 42},
}


def run_streams(url, mode, n, prompt_tokens, gen, rep):
    sc.SAMPLING = MODES[mode]
    streams = []
    for i in range(n):
        # Token ids unique to the stream and the rep, so no prefix cache serves them.
        prompt = [(1000 + 7919 * (k + 1) + 104729 * (i + 1) + 15485863 * rep) % 30000 + 100 for k in range(prompt_tokens)]
        streams.append(sc.Stream(url, prompt, gen))
    for s in streams:
        s.start()
    for s in streams:
        s.join()
    for s in streams:
        if s.error:
            raise RuntimeError(f"{mode}: {s.error}")
    per_stream = [(len(s.times) - 1) / (s.times[-1] - s.times[0]) for s in streams if len(s.times) > 1]
    start = max(s.times[0] for s in streams)
    end = min(s.times[-1] for s in streams)
    in_window = sum(sum(1 for t in s.times if start <= t <= end) for s in streams)
    # (Chunks less one a stream: the intervals between them.)
    aggregate = (in_window - n) / (end - start) if end > start else float("nan")
    chunks = sum(len(s.times) for s in streams)
    return statistics.median(per_stream), aggregate, chunks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", required=True, help="strata-rt binary")
    ap.add_argument("--config", default=os.path.join(sc.ROOT, "config", "examples", "dev.toml"))
    ap.add_argument("--model", help="GGUF file (default: the config's)")
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--streams", type=int, default=8, help="concurrent streams of the second measurement")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--out", help="append the table here")
    ap.add_argument("--server-log", default="/tmp/server_sampling.log")
    a = ap.parse_args(argv)
    with open(a.server_log, "w") as log:
        proc, url, cmdline = sc.start_strata(a.strata, a.config, a.model, a.threads, a.ctx, log)
        try:
            sc.wait_healthy(url, proc, timeout=600)
            run_streams(url, "greedy", 1, a.prompt_tokens, 8, 999)  # warm-up
            results = {(m, n): [] for m in MODES for n in (1, a.streams)}
            for rep in range(a.reps):
                for n in (1, a.streams):
                    for m in MODES:
                        results[(m, n)].append(run_streams(url, m, n, a.prompt_tokens, a.gen, rep))
        finally:
            sc.stop(proc)
    lines = [f"server: {cmdline}", f"prompt {a.prompt_tokens} token ids, {a.gen} generated a stream, {a.reps} reps (median)",
             "| streams | mode | decode t/s a stream | aggregate t/s | reps (a stream) |", "|---:|---|---:|---:|---|"]
    for (m, n), rs in results.items():
        lines.append(f"| {n} | {m} | {statistics.median(r[0] for r in rs):.1f} | {statistics.median(r[1] for r in rs):.1f} | "
                     + " / ".join(f"{r[0]:.1f}" for r in rs) + " |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
