//! Shared by the metrics tests: reading the dashboards and alert rules in `dashboards/` and
//! pulling metric names out of PromQL.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `dashboards/`.
pub fn dashboards_dir() -> PathBuf {
    root().join("dashboards")
}

/// Every dashboard (`dashboards/*.json`), parsed, with its path.
pub fn dashboards() -> Vec<(PathBuf, Value)> {
    let dir = dashboards_dir();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    let mut out: Vec<(PathBuf, Value)> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
            (p, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "no dashboards in {}", dir.display());
    out
}

/// Every panel of a dashboard, rows' nested panels included.
pub fn panels(dash: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            if let Some(inner) = p.get("panels") {
                walk(inner, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

/// `(panel title, expression)` for every query target of every panel.
pub fn panel_exprs(dash: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(dash) {
        let title = p["title"].as_str().unwrap_or("?").to_string();
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push((title.clone(), e.to_string()));
            }
        }
    }
    out
}

/// The queries of the dashboard's query variables (`label_values(metric, label)` and PromQL).
pub fn variable_queries(dash: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let q = v["query"]["query"].as_str().or_else(|| v["query"].as_str()).or_else(|| v["definition"].as_str());
        if let Some(q) = q {
            out.push(q.to_string());
        }
    }
    out
}

/// `(alert name, expression)` for every rule of `dashboards/alerts.yml` (a small reader for the
/// shapes the file uses: `expr: ...` on one line or as a `|` block).
pub fn alert_exprs() -> Vec<(String, String)> {
    let path = dashboards_dir().join("alerts.yml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    parse_alerts(&text)
}

fn parse_alerts(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut name = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start();
        if let Some(n) = t.strip_prefix("- alert:").or_else(|| t.strip_prefix("alert:")) {
            name = n.trim().to_string();
        } else if let Some(e) = t.strip_prefix("expr:") {
            let e = e.trim();
            if e == "|" || e == ">" || e == "|-" || e == ">-" {
                let indent = line.len() - t.len();
                let mut body = Vec::new();
                while i + 1 < lines.len() {
                    let next = lines[i + 1];
                    let ind = next.len() - next.trim_start().len();
                    if !next.trim().is_empty() && ind <= indent {
                        break;
                    }
                    body.push(next.trim());
                    i += 1;
                }
                out.push((name.clone(), body.join(" ").trim().to_string()));
            } else {
                out.push((name.clone(), e.trim_matches('\'').to_string()));
            }
        }
        i += 1;
    }
    out
}

/// Names matching `strata_[a-z0-9_]+` in a PromQL expression.
pub fn metric_names(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(pos) = expr[i..].find("strata_") {
        let start = i + pos;
        let boundary = start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_' || b[start - 1] == b':');
        let mut end = start + "strata_".len();
        while end < b.len() && (b[end].is_ascii_lowercase() || b[end].is_ascii_digit() || b[end] == b'_') {
            end += 1;
        }
        if boundary {
            out.push(expr[start..end].to_string());
        }
        i = end;
    }
    out
}

/// The suffixes Prometheus gives a histogram's series.
pub const HISTOGRAM_SUFFIXES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// Replaces Grafana's variables with what a test query can use: intervals become `1m`, the
/// instance filter matches every instance.
pub fn substitute_grafana(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "1m")
        .replace("$__range", "1m")
        .replace("${instance}", ".+")
        .replace("$instance", ".+")
}

/// An alert expression without its final comparison against a number (`... > 0.9`), so that the
/// left side can be checked for series.
pub fn strip_comparison(expr: &str) -> String {
    let e = expr.trim();
    for op in [">=", "<=", "==", "!=", ">", "<"] {
        if let Some(pos) = e.rfind(op) {
            let rhs = e[pos + op.len()..].trim();
            if !rhs.is_empty() && rhs.parse::<f64>().is_ok() {
                return e[..pos].trim().to_string();
            }
        }
    }
    e.to_string()
}

/// Files under `dir` ending in `.rs`, recursively.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(metric_names("sum(rate(strata_a_total{x=\"strata_no\"}[1m])) / foo_strata_b"), vec!["strata_a_total", "strata_no"]);
        assert_eq!(strip_comparison("max(strata_x) > 0.9"), "max(strata_x)");
        assert_eq!(strip_comparison("up{job=\"a\"} == 0"), "up{job=\"a\"}");
        assert_eq!(strip_comparison("a / b"), "a / b");
        let a = parse_alerts("  - alert: A\n    expr: x > 1\n  - alert: B\n    expr: |\n      a\n        / b > 2\n    for: 5m\n");
        assert_eq!(a, vec![("A".into(), "x > 1".into()), ("B".into(), "a / b > 2".into())]);
    }
}
