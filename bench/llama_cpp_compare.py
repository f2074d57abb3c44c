#!/usr/bin/env python3
"""Side by side with llama.cpp: the same model file, the same threads, the same machine, one run.

Runs `strata-rt bench` and then llama.cpp (through the PyPI package llama-cpp-python, which builds
llama.cpp from source) with the llama-bench protocol: pp<N> is one N-token prompt of random tokens
from an empty cache, tg<M> is M single-token decode steps from an empty cache. Prints one markdown
table with both engines' tokens/s and the ratio.

    pip install llama-cpp-python==0.3.36          # builds llama.cpp (several minutes)
    cargo build --release
    python3 bench/llama_cpp_compare.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf -t 2
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time


def bench_llama_cpp(model, threads, prompts, gens, reps):
    import llama_cpp

    n_ctx = max(prompts + gens) + 16
    llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                          n_threads_batch=threads, verbose=False, seed=0)
    vocab = llm.n_vocab()
    rnd = random.Random(42)
    toks = lambda n: [rnd.randrange(vocab) for _ in range(n)]
    llm.reset(); llm.eval(toks(8))  # warm-up
    rows = []
    for p in prompts:
        rates = []
        for _ in range(reps):
            llm.reset()
            t = toks(p)
            t0 = time.perf_counter(); llm.eval(t); dt = time.perf_counter() - t0
            rates.append(p / dt)
        rows.append((f"pp{p}", rates))
    for n in gens:
        rates = []
        for _ in range(reps):
            llm.reset()
            tok = toks(1)[0]
            t0 = time.perf_counter()
            for _ in range(n):
                llm.eval([tok])  # the same token each step: decode cost without sampling
            dt = time.perf_counter() - t0
            rates.append(n / dt)
        rows.append((f"tg{n}", rates))
    return rows, f"llama.cpp (llama-cpp-python {llama_cpp.__version__})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-p", "--prompt", default="512")
    ap.add_argument("-n", "--gen", default="128")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "strata-rt"))
    ap.add_argument("--json", help="write both engines' results here")
    a = ap.parse_args()
    prompts = [int(x) for x in a.prompt.split(",") if x]
    gens = [int(x) for x in a.gen.split(",") if x]

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [a.strata, "bench", "--model", a.model, "-p", a.prompt, "-n", a.gen, "-r", str(a.reps),
               "-t", str(a.threads), "--json", f.name]
        print("$", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True, stdout=sys.stderr)
        ours = json.load(open(f.name))
    ours_rows = {r["test"]: r["samples"] for r in ours["results"]}
    ours_share = {r["test"]: r.get("roofline_share") for r in ours["results"]}
    theirs, theirs_name = bench_llama_cpp(a.model, a.threads, prompts, gens, a.reps)

    print(f"\nmodel: {a.model}; threads: {a.threads}; reps: {a.reps}; {time.strftime('%Y-%m-%d %H:%M')}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    bw, mr = ours.get("read_bandwidth_bytes_per_s", 0), ours.get("matrix_rate_flops_per_s", 0)
    print(f"measured by strata-rt bench: memory read {bw / 1e9:.1f} GB/s, {ours.get('bytes_per_token', 0) / 1e6:.1f} MB per token; "
          f"matrix rate {mr / 1e9:.1f} GFLOP/s ({ours.get('matrix_type', '?')}, {ours.get('matrix_kernels', '?')})\n")
    print(f"| test | strata-rt t/s | {theirs_name} t/s | ratio | strata-rt roofline share | llama.cpp roofline share |")
    print("|---|---:|---:|---:|---:|---:|")
    out = []
    for test, rates in theirs:
        m_theirs = statistics.mean(rates)
        m_ours = statistics.mean(ours_rows[test])
        share = ours_share.get(test)
        # the same roofline for llama.cpp: its rate times our share per unit of rate
        s_ours = f"{100 * share:.0f}%" if share else "-"
        s_theirs = f"{100 * share * m_theirs / m_ours:.0f}%" if share else "-"
        print(f"| {test} | {m_ours:.1f} ± {statistics.stdev(ours_rows[test]) if len(ours_rows[test]) > 1 else 0:.1f} | "
              f"{m_theirs:.1f} ± {statistics.stdev(rates) if len(rates) > 1 else 0:.1f} | {m_ours / m_theirs:.2f}x | {s_ours} | {s_theirs} |")
        out.append({"test": test, "strata_rt": m_ours, "llama_cpp": m_theirs, "ratio": m_ours / m_theirs,
                    "strata_rt_samples": ours_rows[test], "llama_cpp_samples": rates, "strata_rt_roofline_share": share})
    if a.json:
        json.dump({"model": a.model, "threads": a.threads, "reps": a.reps, "loadavg_end": os.getloadavg(),
                   "strata_rt_bench": ours, "results": out}, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
