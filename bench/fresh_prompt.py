#!/usr/bin/env python3
"""The fresh-prompt server benchmark (stdlib only: urllib, threading, json).

Against a running strata-rt server and its engine timing log (`log.timing_log`, one JSON line per
completed request):

1. a small warm-up conversation;
2. fresh prompts of 140, 280, 140 and 280 synthetic functions (times --scale), each followed by one
   follow-up request in the same conversation (the assistant's answer and a new user turn appended,
   so the follow-up's prefix is reusable);
3. greedy sampling (temperature 0, top_k 1, seed 42), at most 128 generated tokens, chat endpoint,
   one request at a time.

Rules, checked after the run from the timing log (a violation fails the run and names the request):
- every request has exactly one completed timing record (matched by the response `id`, which is the
  record's `request_id`); a missing or duplicated record fails; records of cancelled requests never
  count as completed;
- every fresh prompt has zero reused KV tokens (each starts with a unique header line).

It records prompt tokens, reused tokens, prefill tokens/s, decode tokens/s, wall time and stop reason
per request into a JSON file. `compare` prints two such files (control, candidate) side by side.

    # the server (the default model's trained context is 8192 tokens):
    STRATA_KV__MAX_CONTEXT=8192 STRATA_SERVER__REQUEST_TIMEOUT_S=3600 STRATA_LOG__TIMING_LOG=/tmp/timing.jsonl \\
        target/release/strata-rt --config config/examples/dev.toml
    python3 bench/fresh_prompt.py check-tokens --url http://127.0.0.1:8080 --scale 0.5
    python3 bench/fresh_prompt.py run --url http://127.0.0.1:8080 --timing-log /tmp/timing.jsonl \\
        --scale 0.5 --out /tmp/fresh-candidate.json
    python3 bench/fresh_prompt.py compare /tmp/fresh-control.json /tmp/fresh-candidate.json
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promptgen  # noqa: E402

FRESH_FUNCTIONS = [140, 280, 140, 280]
WARMUP_FUNCTIONS = 5
SAMPLING = {"temperature": 0.0, "top_k": 1, "seed": 42}
MAX_TOKENS = 128


class ProtocolError(Exception):
    """The run broke a rule of the protocol; the message names the request."""


# ---------------------------------------------------------------- the rules (pure, unit-tested)

def parse_timing_lines(lines):
    """The `timing` objects in `lines` (a timing log, or a stderr capture with other lines mixed
    in). Lines without a `{"timing":` object are skipped."""
    out = []
    for line in lines:
        at = line.find('{"timing"')
        if at < 0:
            continue
        try:
            obj = json.loads(line[at:])
        except ValueError:
            continue
        t = obj.get("timing") if isinstance(obj, dict) else None
        if isinstance(t, dict) and "request_id" in t:
            out.append(t)
    return out


def match_records(requests, records):
    """Pairs each request with its one completed timing record.

    `requests`: dicts with `label`, `id` and `fresh` (bool). `records`: timing objects. Returns the
    requests with a `timing` key added, or raises ProtocolError naming every request that has no
    completed record, more than one, or (when fresh) reused prompt tokens.
    """
    by_id = {}
    for r in records:
        if r.get("stop_reason") == "cancelled":
            continue  # a cancelled request never counts as completed
        by_id.setdefault(r["request_id"], []).append(r)
    errors, out = [], []
    for q in requests:
        found = by_id.get(q["id"], [])
        name = f"request {q['label']} (id {q['id']})"
        if not found:
            errors.append(f"{name}: no completed timing record in the log")
            continue
        if len(found) > 1:
            errors.append(f"{name}: {len(found)} timing records in the log, expected exactly one")
            continue
        t = found[0]
        if q.get("fresh") and t.get("reused_tokens", 0) != 0:
            errors.append(f"{name}: fresh prompt reused {t['reused_tokens']} KV tokens of {t.get('prompt_tokens')}, expected 0")
            continue
        out.append(dict(q, timing=t))
    if errors:
        raise ProtocolError("; ".join(errors))
    return out


def summarize(q):
    """The figures kept per request."""
    t = q["timing"]
    return {
        "label": q["label"], "kind": q["kind"], "functions": q.get("functions"), "id": q["id"],
        "prompt_tokens": t["prompt_tokens"], "reused_tokens": t["reused_tokens"],
        "prefill_ms": t["prefill_ms"], "prefill_tokens_per_s": t["prefill_tokens_per_s"],
        "generated_tokens": t["generated_tokens"], "decode_ms": t["decode_ms"],
        "decode_tokens_per_s": t["decode_tokens_per_s"], "wall_ms": t["wall_ms"],
        "queue_ms": t.get("queue_ms"), "client_wall_ms": q.get("client_wall_ms"),
        "stop_reason": t["stop_reason"], "prefill_device": t.get("prefill_device"),
        "decode_device": t.get("decode_device"),
    }


# ---------------------------------------------------------------- HTTP

def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"POST {url}: HTTP {e.code}: {e.read()[:500]!r}") from None


def count_tokens(url, text):
    return len(post(url.rstrip("/") + "/tokenize", {"content": text})["tokens"])


def chat(url, messages, max_tokens):
    body = dict(SAMPLING, messages=messages, max_tokens=max_tokens, stream=False)
    t0 = time.perf_counter()
    resp = post(url.rstrip("/") + "/v1/chat/completions", body)
    wall = (time.perf_counter() - t0) * 1e3
    if "id" not in resp or not resp.get("choices"):
        raise RuntimeError(f"unexpected response: {json.dumps(resp)[:500]}")
    return resp["id"], resp["choices"][0]["message"]["content"] or "", wall


# ---------------------------------------------------------------- the run

def plan(scale, seed, tag):
    """(label, n_functions, index) of the warm-up and the fresh prompts."""
    out = [("warmup", WARMUP_FUNCTIONS, 0)]
    for i, n in enumerate(FRESH_FUNCTIONS, 1):
        out.append((f"fresh-{i}", max(1, round(n * scale)), i))
    return out


def token_counts(url, scale, seed, tag):
    rows = []
    for label, n, idx in plan(scale, seed, tag):
        msgs = promptgen.chat_messages(n, seed, idx, tag)
        rows.append({"label": label, "functions": n, "tokens": count_tokens(url, "\n".join(m["content"] for m in msgs))})
    return rows


def run(url, log_path, scale, seed, tag, max_tokens, max_context):
    counts = token_counts(url, scale, seed, tag)
    for c in counts:
        need = c["tokens"] + 2 * max_tokens + 64  # the follow-up: + answer + new turn + template
        if need > max_context:
            raise SystemExit(f"{c['label']}: {c['functions']} functions are {c['tokens']} tokens; its follow-up needs about "
                             f"{need} > --max-context {max_context}: lower --scale")
    start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    requests = []
    for (label, n, idx), c in zip(plan(scale, seed, tag), counts):
        msgs = promptgen.chat_messages(n, seed, idx, tag)
        rid, answer, wall = chat(url, msgs, max_tokens)
        requests.append({"label": label, "kind": "warmup" if label == "warmup" else "fresh", "fresh": True,
                         "functions": n, "tokenize_count": c["tokens"], "id": rid, "client_wall_ms": wall})
        print(f"{label}: {n} functions, id {rid}, {wall:.0f} ms", file=sys.stderr)
        fid, _, fwall = chat(url, promptgen.follow_up(msgs, answer), max_tokens)
        requests.append({"label": label + "/follow-up", "kind": "warmup" if label == "warmup" else "follow-up",
                         "fresh": False, "functions": n, "id": fid, "client_wall_ms": fwall})
        print(f"{label}/follow-up: id {fid}, {fwall:.0f} ms", file=sys.stderr)
    time.sleep(0.2)  # the record is written before the response ends; a margin for slow file systems
    with open(log_path, "r", errors="replace") as f:
        f.seek(start)
        records = parse_timing_lines(f.read().splitlines())
    matched = match_records(requests, records)
    return counts, [summarize(q) for q in matched]


def machine():
    load = os.getloadavg()
    return {"host": os.uname().nodename, "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in load],
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def print_table(results):
    print("| request | prompt tokens | reused | prefill t/s | generated | decode t/s | wall ms | stop |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        print(f"| {r['label']} | {r['prompt_tokens']} | {r['reused_tokens']} | {r['prefill_tokens_per_s']:.1f} | "
              f"{r['generated_tokens']} | {r['decode_tokens_per_s']:.1f} | {r['wall_ms']:.0f} | {r['stop_reason']} |")


def compare(control, candidate):
    c = {r["label"]: r for r in control["results"]}
    print(f"control: {control.get('name', '?')} ({control['machine']['date']}, load {control['machine']['loadavg']}); "
          f"candidate: {candidate.get('name', '?')} ({candidate['machine']['date']}, load {candidate['machine']['loadavg']})\n")
    print("| request | prompt tokens | prefill t/s control | candidate | ratio | decode t/s control | candidate | ratio | wall ms control | candidate | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratio = lambda a, b: f"{b / a:.2f}x" if a else "-"
    for r in candidate["results"]:
        o = c.get(r["label"])
        if o is None or r["kind"] == "warmup":
            continue
        print(f"| {r['label']} | {r['prompt_tokens']} | {o['prefill_tokens_per_s']:.1f} | {r['prefill_tokens_per_s']:.1f} | "
              f"{ratio(o['prefill_tokens_per_s'], r['prefill_tokens_per_s'])} | {o['decode_tokens_per_s']:.1f} | "
              f"{r['decode_tokens_per_s']:.1f} | {ratio(o['decode_tokens_per_s'], r['decode_tokens_per_s'])} | "
              f"{o['wall_ms']:.0f} | {r['wall_ms']:.0f} | {ratio(o['wall_ms'], r['wall_ms'])} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seed", type=int, default=42, help="prompt generator seed (not the sampling seed, always 42)")
    common.add_argument("--tag", default="", help="extra text in every header line (re-running against a server whose cache holds an earlier run)")
    common.add_argument("--scale", type=float, default=1.0, help="multiplies the function counts 140/280 (see BENCHMARKS.md)")
    g = sub.add_parser("gen", parents=[common], help="print one prompt (the source file)")
    g.add_argument("--functions", type=int, default=140)
    g.add_argument("--index", type=int, default=1)
    t = sub.add_parser("check-tokens", parents=[common], help="token counts of the run's prompts via the server's /tokenize")
    t.add_argument("--url", required=True)
    r = sub.add_parser("run", parents=[common], help="run the protocol against a server")
    r.add_argument("--url", required=True)
    r.add_argument("--timing-log", required=True, help="the server's log.timing_log file")
    r.add_argument("--out", required=True, help="write the results (JSON) here")
    r.add_argument("--name", default="strata-rt", help="a name for this run in compare's header")
    r.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    r.add_argument("--max-context", type=int, default=8192, help="the server's context (refuses to start if a conversation cannot fit)")
    c = sub.add_parser("compare", help="print two runs side by side")
    c.add_argument("control")
    c.add_argument("candidate")
    a = ap.parse_args(argv)

    if a.cmd == "gen":
        sys.stdout.write(promptgen.source(a.functions, a.seed, a.index, a.tag))
    elif a.cmd == "check-tokens":
        for row in token_counts(a.url, a.scale, a.seed, a.tag):
            print(f"{row['label']}: {row['functions']} functions, {row['tokens']} tokens (system + user text, without the template)")
    elif a.cmd == "run":
        m0 = machine()
        try:
            counts, results = run(a.url, a.timing_log, a.scale, a.seed, a.tag, a.max_tokens, a.max_context)
        except ProtocolError as e:
            print(f"protocol violated: {e}", file=sys.stderr)
            return 1
        doc = {"name": a.name, "url": a.url, "machine": m0, "loadavg_end": machine()["loadavg"], "seed": a.seed,
               "tag": a.tag, "scale": a.scale, "sampling": SAMPLING, "max_tokens": a.max_tokens,
               "token_counts": counts, "results": results}
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"{a.name}, {m0['date']}, load {m0['loadavg']} -> {doc['loadavg_end']}\n")
        print_table(results)
    elif a.cmd == "compare":
        compare(json.load(open(a.control)), json.load(open(a.candidate)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
