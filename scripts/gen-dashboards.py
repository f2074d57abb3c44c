#!/usr/bin/env python3
"""Writes the Grafana dashboards in dashboards/ (strata-overview.json, strata-engine.json).

The JSON files are committed; edit this script and run it again (python3 stdlib only):

    python3 scripts/gen-dashboards.py

Every panel queries Prometheus through the `${datasource}` template variable and filters on the
`$instance` variable. tests/metrics_registry.rs checks the metric names against the code's
registry, tests/metrics_prometheus.rs runs every expression against a real Prometheus.
"""
import json
import pathlib

OUT = pathlib.Path(__file__).resolve().parent.parent / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}
I = '{instance=~"$instance"}'
RI = "$__rate_interval"


def sel(extra=""):
    """A label selector with the instance filter and `extra` matchers."""
    return '{instance=~"$instance"' + (", " + extra if extra else "") + "}"


def quantiles(metric, by="", qs=(0.5, 0.95, 0.99)):
    """histogram_quantile targets for a _seconds histogram, plus the mean."""
    grp = "le" + (", " + by if by else "")
    legend_by = "".join(" {{%s}}" % b.strip() for b in by.split(",") if b.strip())
    t = [
        (f"histogram_quantile({q}, sum by ({grp}) (rate({metric}_bucket{I}[{RI}])))", f"p{int(q * 100)}{legend_by}")
        for q in qs
    ]
    if not by:
        t.append((f"sum(rate({metric}_sum{I}[{RI}])) / sum(rate({metric}_count{I}[{RI}]))", "mean"))
    return t


class Dash:
    def __init__(self, uid, title, first_id, description):
        self.uid, self.title, self.description = uid, title, description
        self.next_id = first_id
        self.panels = []
        self.x = 0
        self.y = 0
        self.row_h = 0

    def _id(self):
        i = self.next_id
        self.next_id += 1
        return i

    def row(self, title):
        self._newline()
        self.panels.append({"type": "row", "id": self._id(), "title": title, "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def _newline(self):
        if self.x:
            self.y += self.row_h
            self.x = 0
            self.row_h = 0

    def _place(self, w, h):
        if self.x + w > 24:
            self._newline()
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def panel(self, kind, title, targets, unit="short", w=8, h=8, desc="", stack=False, table=False, extra=None):
        p = {
            "type": kind,
            "id": self._id(),
            "title": title,
            "description": desc,
            "datasource": DS,
            "gridPos": self._place(w, h),
            "targets": [
                {"refId": chr(ord("A") + i), "datasource": DS, "expr": e, "legendFormat": lf,
                 **({"format": "table", "instant": True} if table else {"range": True})}
                for i, (e, lf) in enumerate(targets)
            ],
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {},
        }
        if kind == "timeseries":
            p["fieldConfig"]["defaults"]["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if stack else 0,
                                                      "stacking": {"mode": "normal" if stack else "none", "group": "A"}}
            p["options"] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                            "tooltip": {"mode": "multi", "sort": "desc"}}
        if kind == "stat":
            p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                            "colorMode": "value", "graphMode": "area", "textMode": "auto"}
        if table:
            p["transformations"] = [{"id": "labelsToFields", "options": {}},
                                    {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}}}]
        if extra:
            p.update(extra)
        self.panels.append(p)

    def text(self, title, content, w=24, h=6):
        self.panels.append({"type": "text", "id": self._id(), "title": title, "gridPos": self._place(w, h),
                            "options": {"mode": "markdown", "content": content}})

    def json(self):
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": ["strata-rt"],
            "timezone": "",
            "editable": True,
            "graphTooltip": 1,
            "refresh": "10s",
            "schemaVersion": 39,
            "version": 1,
            "time": {"from": "now-1h", "to": "now"},
            "links": [{"type": "dashboards", "tags": ["strata-rt"], "asDropdown": False, "title": "strata-rt", "includeVars": True, "keepTime": True}],
            "annotations": {"list": []},
            "templating": {"list": [
                {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
                 "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []},
                {"name": "instance", "label": "Instance", "type": "query", "datasource": DS,
                 "definition": "label_values(strata_build_info, instance)",
                 "query": {"query": "label_values(strata_build_info, instance)", "refId": "StandardVariableQuery"},
                 "includeAll": True, "allValue": ".+", "multi": True, "refresh": 2, "sort": 1, "hide": 0,
                 "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": []},
            ]},
            "panels": self.panels,
        }


def overview():
    d = Dash("strata-overview", "strata-rt / Overview", 1,
             "Traffic, latency percentiles, throughput and errors of strata-rt servers.")
    d.row("Traffic")
    d.panel("stat", "Requests running", [(f"sum(strata_requests_running{I})", "running")], w=6, h=4,
            desc="Admitted and generating; current to the scheduler's last step (the gateway signal).")
    d.panel("stat", "Requests waiting", [(f"sum(strata_requests_waiting{I})", "waiting")], w=6, h=4,
            desc="Queued for admission (the gateway signal).")
    d.panel("stat", "KV cache usage", [(f"max(strata_kv_cache_usage_ratio{I})", "usage")], unit="percentunit", w=6, h=4,
            desc="Blocks neither free nor evictable over all blocks (the gateway signal).")
    d.panel("stat", "Generated tokens / s", [(f"sum(rate(strata_generated_tokens_total{I}[{RI}]))", "tokens/s")], w=6, h=4)
    d.panel("timeseries", "Requests finished / s by reason", [(f"sum by (reason) (rate(strata_requests_finished_total{I}[{RI}]))", "{{reason}}")],
            unit="reqps", stack=True, desc="stop, length, cancelled (the client went away), error.")
    d.panel("timeseries", "Requests rejected / s by reason", [(f"sum by (reason) (rate(strata_requests_rejected_total{I}[{RI}]))", "{{reason}}")],
            unit="reqps", stack=True, desc="Refused before admission: queue_full (429), invalid (4xx), too_large (413), unavailable (503).")
    d.panel("timeseries", "Running and waiting", [(f"sum(strata_requests_running{I})", "running"), (f"sum(strata_requests_waiting{I})", "waiting")])
    d.row("Latency")
    d.panel("timeseries", "Time to first token", quantiles("strata_time_to_first_token_seconds"), unit="s",
            desc="Arrival at the scheduler to the first sampled token: queue plus prefill.")
    d.panel("timeseries", "Time per output token", quantiles("strata_time_per_output_token_seconds"), unit="s",
            desc="Mean decode time per token after the first, one sample per finished request.")
    d.panel("timeseries", "End-to-end latency", quantiles("strata_e2e_request_latency_seconds"), unit="s")
    d.panel("timeseries", "Queue time", quantiles("strata_request_queue_time_seconds"), unit="s", desc="Waiting for admission.")
    d.panel("timeseries", "Prefill time", quantiles("strata_request_prefill_time_seconds"), unit="s", desc="Admission to the end of prefill.")
    d.panel("timeseries", "Decode time", quantiles("strata_request_decode_time_seconds"), unit="s", desc="End of prefill to the last token.")
    d.row("Throughput")
    d.panel("timeseries", "Tokens / s", [(f"sum(rate(strata_generated_tokens_total{I}[{RI}]))", "generated"),
                                         (f"sum(rate(strata_prompt_tokens_total{I}[{RI}]))", "prompt"),
                                         (f"sum(rate(strata_prefix_cache_reused_tokens_total{I}[{RI}]))", "prompt, from the prefix cache"),
                                         (f"sum(rate(strata_prefix_cache_copied_tokens_total{I}[{RI}]))", "of those, copied from a full cached block")])
    d.panel("timeseries", "Prefix cache hit ratio", [(f"sum(rate(strata_prefix_cache_hits_total{I}[{RI}])) / sum(rate(strata_prefix_cache_queries_total{I}[{RI}]))", "hits / queries")],
            unit="percentunit", desc="Sequences that reused at least one cached block, over sequences started.")
    d.panel("timeseries", "Prefix cache queries / s", [(f"sum(rate(strata_prefix_cache_queries_total{I}[{RI}]))", "queries"),
                                                       (f"sum(rate(strata_prefix_cache_hits_total{I}[{RI}]))", "hits")])
    d.row("Errors")
    d.panel("timeseries", "HTTP errors / s by status", [(f"sum by (status) (rate(strata_http_errors_total{I}[{RI}]))", "{{status}}")], unit="reqps", w=12)
    errors = sel('reason="error"')
    d.panel("timeseries", "Error ratio", [(f"sum(rate(strata_requests_finished_total{errors}[{RI}])) / sum(rate(strata_requests_finished_total{I}[{RI}]))", "errors / finished")],
            unit="percentunit", w=12)
    return d


def engine():
    d = Dash("strata-engine", "strata-rt / Engine: KV arena, batching, devices, experts and I/O", 101,
             "The KV arena, batching, device steps, the process, and (when they arrive) the expert cache and I/O.")
    d.row("KV arena and batching")
    d.panel("timeseries", "KV blocks by owner", [(f"sum by (owner) (strata_kv_blocks{I})", "{{owner}}")], stack=True,
            desc="free, prefill, decode, cached_shared (prefix blocks in use), cached_idle (evictable); they sum to the total.")
    d.panel("timeseries", "KV cache usage", [(f"max by (instance) (strata_kv_cache_usage_ratio{I})", "{{instance}}")], unit="percentunit")
    d.panel("timeseries", "KV arena bytes", [(f"sum(strata_kv_arena_bytes{I})", "arena"),
                                             (f"sum(strata_kv_arena_bytes{I} * strata_kv_cache_usage_ratio{I})", "in use")], unit="bytes")
    d.panel("timeseries", "KV events / s", [(f"sum(rate(strata_kv_evictions_total{I}[{RI}]))", "evictions (blocks)"),
                                            (f"sum(rate(strata_kv_handoffs_total{I}[{RI}]))", "prefill to decode hand-offs"),
                                            (f"sum(rate(strata_prefix_cache_inserted_blocks_total{I}[{RI}]))", "blocks into the prefix cache")])
    d.panel("timeseries", "Batch size (sequences per step)", quantiles("strata_step_batch_size", qs=(0.5, 0.95)))
    d.panel("timeseries", "Tokens per step", quantiles("strata_step_tokens", qs=(0.5, 0.95)))
    d.panel("table", "KV cache configuration", [(f"strata_cache_config_info{I}", "")], w=12, h=5, table=True,
            extra={"fieldConfig": {"defaults": {}, "overrides": []}})
    d.panel("stat", "KV blocks total", [(f"sum(strata_kv_arena_blocks{I})", "blocks")], w=12, h=5)
    d.row("Devices")
    d.panel("timeseries", "Step duration p95 by device and phase", quantiles("strata_step_duration_seconds", by="device, phase", qs=(0.95,)), unit="s")
    d.panel("timeseries", "Steps / s by device and phase", [(f"sum by (device, phase) (rate(strata_step_duration_seconds_count{I}[{RI}]))", "{{device}} {{phase}}"),
                                                            (f"sum(rate(strata_greedy_run_tokens_total{I}[{RI}]))", "of them in greedy runs")],
            desc="Greedy runs: a lone greedy request's decode steps, each submitted before the host read the token before it (batching.greedy_run_tokens).")
    d.panel("timeseries", "Device busy fraction", [(f"sum by (device) (rate(strata_step_duration_seconds_sum{I}[{RI}]))", "{{device}}")], unit="percentunit",
            desc="Seconds spent in steps per second.")
    d.panel("table", "Build and devices", [(f"strata_build_info{I}", "")], w=24, h=5, table=True,
            extra={"fieldConfig": {"defaults": {}, "overrides": []}})
    d.row("Process")
    d.panel("timeseries", "Resident memory", [(f"strata_process_resident_memory_bytes{I}", "{{instance}}")], unit="bytes", w=12)
    d.panel("timeseries", "Open file descriptors", [(f"strata_process_open_fds{I}", "{{instance}}")], w=12)
    d.row("Experts and I/O")
    d.text("Experts and I/O", "\n".join([
        "This group fills in with the expert-cache issue. Its metrics are registered by the code that",
        "owns them (the expert cache, the prefill ring, the upload staging buffer, the io_uring reader",
        "pool) and are not exported before that code exists, so this row holds no queries yet.",
        "",
        "Planned panels: experts by tier (VRAM / RAM / file) and swaps per second; prefill ring slots",
        "total and in use, waits for a slot; upload staging bytes and uploads per second, time waiting",
        "for the staging buffer; reader pool reads, bytes and latency.",
    ]))
    return d


def main():
    for d in (overview(), engine()):
        path = OUT / f"{d.uid}.json"
        path.write_text(json.dumps(d.json(), indent=2) + "\n")
        print(f"wrote {path} ({len(d.panels)} panels)")


if __name__ == "__main__":
    main()
