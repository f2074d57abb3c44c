#!/usr/bin/env python3
"""Where a recorded submission's time goes, from a workgroup timeline.

Usage: timeline_report.py PATH [--csv STAGES.csv]

PATH is what `STRATA_VULKAN_TIMELINE=PATH` wrote (shaders built with STRATA_SHADER_TIMELINE=1,
gpu/src/vulkan/timeline.rs): each workgroup's kernel, index, and device-clock start and end.
Workgroups sorted by start are cut into stages where the kernel changes (a step's dispatches
are separated by pipeline barriers, so one stage's workgroups all start after the one before
ended), and steps where an embedding stage begins. For each stage:
  gap    the first workgroup's start minus the previous stage's last end (the barrier and the
         launch, with no workgroup of either running);
  launch the last workgroup's start minus the first's (how long workgroups kept starting);
  drain  the last end minus the last start (after the last workgroup started);
  span   the last end minus the first start;
  ramp   from the first start until 90% of the stage's peak number of running workgroups run;
  tail   from the last moment that many run until the last end.
Per kernel (and the kernel before it), the means of these over its stages, and the step's totals.
"""
import struct
import sys
from collections import defaultdict


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    names = open(path + ".names").read().split("\n")
    recs = []
    for i in range(n):
        k, g, s0, s1, e0, e1, sm, _ = struct.unpack_from("<8I", data, 8 + 32 * i)
        recs.append((s0 | (s1 << 32), e0 | (e1 << 32), k, g, sm))
    return recs, names


def stages_of(recs):
    recs.sort()
    stages = []
    for s, e, k, g, sm in recs:
        if not stages or stages[-1]["kernel"] != k:
            stages.append({"kernel": k, "first": s, "last_start": s, "end": e, "n": 0, "busy": 0, "spans": [], "sms": []})
        st = stages[-1]
        st["last_start"] = s
        st["end"] = max(st["end"], e)
        st["n"] += 1
        st["busy"] += e - s
        st["spans"].append((s, e))
        st["sms"].append((sm, s, e))
    for st in stages:
        st["ramp"], st["tail"], st["peak"] = ramp_and_tail(st["spans"])
        del st["spans"]
    return stages


def by_sm(stages, names, n_steps_label):
    """For stages whose workgroups all run at once (one wave) on SMs of the `sm` builds: how the
    end of an SM's last workgroup follows the number of workgroups it ran."""
    rows = defaultdict(lambda: defaultdict(list))
    for st in stages:
        sms = st["sms"]
        if len(sms) < 100 or not any(sm for sm, _, _ in sms):
            continue
        if st["last_start"] - st["first"] > 1000:
            continue
        count = defaultdict(int)
        last = defaultdict(int)
        for sm, s, e in sms:
            count[sm] += 1
            last[sm] = max(last[sm], e)
        for sm in count:
            rows[names[st["kernel"]]][count[sm]].append((last[sm] - st["first"]) / 1e3)
    if not rows:
        return
    print()
    print("One-wave stages: an SM's last workgroup end (us after the stage's first start) by the workgroups it ran")
    print()
    print("| kernel | workgroups on an SM: SMs, mean end us |")
    print("|---|---|")
    for k, per in rows.items():
        cells = ", ".join(f"{c}: {len(v)}, {sum(v) / len(v):.2f}" for c, v in sorted(per.items()))
        print(f"| {k} | {cells} |")


def ramp_and_tail(spans):
    """The time from the stage's first start until 90% of its peak number of running
    workgroups first run at once, the time from the last moment they do until its end, and
    that peak."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    running, peak = 0, 0
    for _, d in events:
        running += d
        peak = max(peak, running)
    level = max(1, int(0.9 * peak))
    running, first_full, last_full = 0, None, None
    for t, d in events:
        before = running
        running += d
        if running >= level and first_full is None:
            first_full = t
        if before >= level and running < level:
            last_full = t
    start, end = events[0][0], events[-1][0]
    return (first_full or start) - start, end - (last_full or end), peak


def main():
    path = sys.argv[1]
    recs, names = load(path)
    if not recs:
        print("no workgroups recorded")
        return
    t0 = min(r[0] for r in recs)
    starts = sorted({r[0] for r in recs})
    steps_ns = sorted(b - a for a, b in zip(starts, starts[1:]) if b > a)
    print(f"{len(recs)} workgroups; smallest clock step seen {steps_ns[0] if steps_ns else 0} ns")
    stages = stages_of(recs)
    embed = [i for i, st in enumerate(stages) if names[st["kernel"]].startswith("Embed")]
    print(f"{len(stages)} stages, {len(embed)} steps (embedding stages)")
    prev_end = None
    for st in stages:
        st["gap"] = 0 if prev_end is None else st["first"] - prev_end
        prev_end = max(prev_end or 0, st["end"])
    # Whole steps only: from one embedding stage to the next, of the most common length (the
    # submission may end with the next step's first stages).
    bounds = list(zip(embed, embed[1:] + [len(stages)]))
    lengths = [b - a for a, b in bounds]
    whole = max(set(lengths), key=lengths.count) if lengths else 0
    bounds = [(a, b) for a, b in bounds if b - a == whole]
    per_kernel = defaultdict(lambda: defaultdict(float))
    totals = defaultdict(float)
    n_steps = 0
    for a, b in bounds:
        if b - a < 2:
            continue
        n_steps += 1
        step = stages[a:b]
        totals["step"] += step[-1]["end"] - step[0]["first"]
        for j, st in enumerate(step):
            # A kernel's stages told apart by the stage before (the output projection and down
            # may share a pipeline; so may the logits).
            k = names[st["kernel"]] + (" after " + names[step[j - 1]["kernel"]] if j else "")
            p = per_kernel[k]
            p["stages"] += 1
            p["wgs"] += st["n"]
            p["gap"] += st["gap"] if st is not step[0] else 0
            p["launch"] += st["last_start"] - st["first"]
            p["drain"] += st["end"] - st["last_start"]
            p["span"] += st["end"] - st["first"]
            p["busy"] += st["busy"]
            p["ramp"] += st["ramp"]
            p["tail"] += st["tail"]
            p["peak"] += st["peak"]
            totals["gap"] += st["gap"] if st is not step[0] else 0
            totals["ramp"] += st["ramp"]
            totals["tail"] += st["tail"]
            totals["span"] += st["end"] - st["first"]
            totals["stages"] += 1
    if not n_steps:
        print("no whole step recorded")
        return
    print(f"{n_steps} steps: {totals['step'] / n_steps / 1e3:.1f} us a step, {totals['stages'] / n_steps:.0f} stages; "
          f"gaps {totals['gap'] / n_steps / 1e3:.1f} us, spans {totals['span'] / n_steps / 1e3:.1f} us "
          f"(ramps {totals['ramp'] / n_steps / 1e3:.1f}, tails {totals['tail'] / n_steps / 1e3:.1f}) a step")
    print()
    print("| kernel | a step | workgroups | peak running | gap us | ramp us | tail us | launch us | drain us | span us | mean workgroup us | us a step (gap + span) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = sorted(per_kernel.items(), key=lambda kv: -(kv[1]["gap"] + kv[1]["span"]))
    for k, p in rows:
        c = p["stages"]
        print(f"| {k} | {c / n_steps:.0f} | {p['wgs'] / c:.0f} | {p['peak'] / c:.0f} | {p['gap'] / c / 1e3:.2f} | {p['ramp'] / c / 1e3:.2f} | {p['tail'] / c / 1e3:.2f} | {p['launch'] / c / 1e3:.2f} | "
              f"{p['drain'] / c / 1e3:.2f} | {p['span'] / c / 1e3:.2f} | {p['busy'] / p['wgs'] / 1e3:.2f} | "
              f"{(p['gap'] + p['span']) / n_steps / 1e3:.1f} |")
    by_sm(stages, names, n_steps)
    if "--csv" in sys.argv:
        out = sys.argv[sys.argv.index("--csv") + 1]
        with open(out, "w") as f:
            f.write("kernel,workgroups,first_ns,last_start_ns,end_ns,gap_ns,busy_ns\n")
            for st in stages:
                f.write(f"{names[st['kernel']]},{st['n']},{st['first'] - t0},{st['last_start'] - t0},{st['end'] - t0},{st['gap']},{st['busy']}\n")


if __name__ == "__main__":
    main()
