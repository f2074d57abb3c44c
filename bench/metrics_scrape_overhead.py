#!/usr/bin/env python3
"""Does scraping /metrics slow decoding? Tokens/s of N streaming clients with and without a
scrape loop (python3 stdlib only).

Start a server first, e.g.

    target/release/strata-rt --config config/examples/dev.toml &
    python3 bench/metrics_scrape_overhead.py --url http://127.0.0.1:8080 --clients 8

Phases alternate (off, on, off, on, ...) so drift in the machine's load hits both alike; each
phase runs `--requests` streaming requests per client back to back and counts the completion
tokens the server reports (stream_options.include_usage). The scrape loop GETs /metrics every
`--interval` seconds and reports how long the scrapes took.
"""
import argparse
import json
import os
import statistics
import threading
import time
import urllib.request

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


MODEL = None


def served_model(url):
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
        return json.load(r)["data"][0]["id"]


def stream_one(url, max_tokens, timeout):
    """One streaming completion request (works with models without a chat template, e.g.
    synthetic ones); returns the completion tokens the server reported."""
    body = json.dumps({
        "model": MODEL, "stream": True, "stream_options": {"include_usage": True},
        "max_tokens": max_tokens, "temperature": 0, "prompt": PROMPT,
    }).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    tokens = 0
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage")
            if usage:
                tokens = usage.get("completion_tokens", 0)
    return tokens


def scrape_loop(url, interval, stop, latencies):
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
                r.read()
            latencies.append(time.perf_counter() - t0)
        except OSError as e:
            print(f"  scrape failed: {e}")
        stop.wait(max(0.0, interval - (time.perf_counter() - t0)))


def phase(args, scrape):
    totals = [0] * args.clients
    errors = []

    def client(i):
        for _ in range(args.requests):
            try:
                totals[i] += stream_one(args.url, args.max_tokens, args.timeout)
            except OSError as e:
                errors.append(str(e))

    stop = threading.Event()
    lat = []
    scraper = threading.Thread(target=scrape_loop, args=(args.url, args.interval, stop, lat)) if scrape else None
    if scraper:
        scraper.start()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    stop.set()
    if scraper:
        scraper.join()
    return sum(totals) / wall, lat, errors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=2, help="requests per client per phase")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--interval", type=float, default=1.0, help="scrape interval, seconds")
    ap.add_argument("--rounds", type=int, default=3, help="off/on pairs")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()

    print(f"{args.clients} streaming clients x {args.requests} requests of {args.max_tokens} tokens per phase; "
          f"scrape every {args.interval} s; load average before: {os.getloadavg()}")
    global MODEL
    MODEL = served_model(args.url)
    stream_one(args.url, 4, args.timeout)  # warm up
    off, on, all_lat = [], [], []
    for r in range(args.rounds):
        for scrape in (False, True):
            tps, lat, errors = phase(args, scrape)
            (on if scrape else off).append(tps)
            all_lat += lat
            extra = f", {len(lat)} scrapes, median {statistics.median(lat) * 1e3:.1f} ms" if lat else ""
            print(f"round {r + 1} scrape {'on ' if scrape else 'off'}: {tps:8.1f} tokens/s{extra}"
                  + (f", {len(errors)} errors: {errors[0]}" if errors else ""))
    m_off, m_on = statistics.mean(off), statistics.mean(on)
    print(f"\nwithout scraping: {m_off:.1f} tokens/s (phases {', '.join(f'{x:.1f}' for x in off)})")
    print(f"with a {args.interval} s scrape loop: {m_on:.1f} tokens/s (phases {', '.join(f'{x:.1f}' for x in on)})")
    print(f"difference: {100 * (m_on - m_off) / m_off:+.1f}%")
    if all_lat:
        all_lat.sort()
        print(f"scrape latency: median {statistics.median(all_lat) * 1e3:.1f} ms, max {all_lat[-1] * 1e3:.1f} ms over {len(all_lat)} scrapes")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
