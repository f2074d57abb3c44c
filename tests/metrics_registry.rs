//! The metrics registry against the dashboards and alert rules: every metric the code describes
//! appears in at least one dashboard panel, every metric a dashboard or alert uses is described by
//! the code (histogram `_bucket`/`_sum`/`_count` series map to their histogram), and every
//! `strata_*` name the code records is in the registry. No dead panels, no invisible metrics.

mod metrics_support;

use std::collections::{BTreeMap, BTreeSet, HashSet};

use metrics_support as support;
use strata_actors::metrics::{Kind, ALL};

fn registry() -> BTreeMap<&'static str, Kind> {
    ALL.iter().map(|m| (m.name, m.kind)).collect()
}

/// The registered metric an expression's series name belongs to, or `None`.
fn resolve(name: &str, reg: &BTreeMap<&'static str, Kind>) -> Option<&'static str> {
    if let Some((n, _)) = reg.get_key_value(name) {
        return Some(n);
    }
    for suffix in support::HISTOGRAM_SUFFIXES {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some((n, Kind::Histogram)) = reg.get_key_value(base) {
                return Some(n);
            }
        }
    }
    None
}

#[test]
fn every_registered_metric_is_on_a_dashboard_and_every_dashboard_metric_is_registered() {
    let reg = registry();
    let mut used: BTreeSet<&'static str> = BTreeSet::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut bare_histograms: Vec<String> = Vec::new();
    let mut check = |place: String, expr: &str, used: &mut BTreeSet<&'static str>| {
        for name in support::metric_names(expr) {
            match resolve(&name, &reg) {
                Some(m) => {
                    if reg[m] == Kind::Histogram && name == m {
                        bare_histograms.push(format!("{place}: {name} (use _bucket, _sum or _count)"));
                    }
                    used.insert(m);
                }
                None => unknown.push(format!("{place}: {name}")),
            }
        }
    };
    for (path, dash) in support::dashboards() {
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        for (title, expr) in support::panel_exprs(&dash) {
            check(format!("{file} / {title}"), &expr, &mut used);
        }
        let mut ignored = BTreeSet::new();
        for q in support::variable_queries(&dash) {
            check(format!("{file} / variable"), &q, &mut ignored);
        }
    }
    let mut ignored = BTreeSet::new();
    for (name, expr) in support::alert_exprs() {
        check(format!("alerts.yml / {name}"), &expr, &mut ignored);
    }
    assert!(unknown.is_empty(), "dashboards or alerts use metrics the code does not register (strata_actors::metrics::ALL):\n{}", unknown.join("\n"));
    assert!(bare_histograms.is_empty(), "histograms queried without a series suffix:\n{}", bare_histograms.join("\n"));
    let unused: Vec<&str> = reg.keys().copied().filter(|n| !used.contains(n)).collect();
    assert!(unused.is_empty(), "metrics the code registers but no dashboard panel shows: {unused:?}");
}

#[test]
fn every_metric_name_in_the_code_is_registered() {
    let reg = registry();
    let root = support::root();
    let mut missing = Vec::new();
    let mut files = support::rust_files(&root.join("actors/src"));
    files.extend(support::rust_files(&root.join("src")));
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        // String literals only: "strata_..." as the code passes them to the metrics macros.
        for (i, _) in text.match_indices("\"strata_") {
            let rest = &text[i + 1..];
            let end = rest.find('"').unwrap_or(rest.len());
            let name = &rest[..end];
            let well_formed = name.len() > "strata_".len() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if well_formed && !reg.contains_key(name) {
                missing.push(format!("{}: {name}", f.strip_prefix(&root).unwrap_or(&f).display()));
            }
        }
    }
    assert!(missing.is_empty(), "metric names used in the code but not in strata_actors::metrics::ALL:\n{}", missing.join("\n"));
}

#[test]
fn dashboards_are_well_formed() {
    let mut uids = HashSet::new();
    let mut ids = HashSet::new();
    for (path, dash) in support::dashboards() {
        let file = path.display().to_string();
        let uid = dash["uid"].as_str().unwrap_or_else(|| panic!("{file}: no uid"));
        assert!(!uid.is_empty() && uid.len() <= 40, "{file}: uid {uid:?} (Grafana allows 40 characters)");
        assert!(uids.insert(uid.to_string()), "{file}: uid {uid} is not unique");
        assert!(dash["title"].as_str().is_some_and(|t| !t.is_empty()), "{file}: no title");
        let vars = dash["templating"]["list"].as_array().unwrap_or_else(|| panic!("{file}: no templating"));
        assert!(
            vars.iter().any(|v| v["name"] == "datasource" && v["type"] == "datasource" && v["query"] == "prometheus"),
            "{file}: needs a `datasource` template variable of type datasource (query: prometheus)"
        );
        for p in support::panels(&dash) {
            let title = p["title"].as_str().unwrap_or("?");
            let id = p["id"].as_u64().unwrap_or_else(|| panic!("{file} / {title}: no numeric id"));
            assert!(ids.insert(id), "{file} / {title}: panel id {id} is not unique");
            assert!(p["gridPos"]["w"].as_u64().is_some_and(|w| w > 0 && w <= 24), "{file} / {title}: gridPos");
            let targets = p["targets"].as_array();
            if p["type"] == "row" || p["type"] == "text" {
                assert!(targets.is_none_or(|t| t.is_empty()), "{file} / {title}: a {} panel with queries", p["type"]);
                continue;
            }
            assert!(targets.is_some_and(|t| !t.is_empty()), "{file} / {title}: no queries");
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{file} / {title}: the panel must use the ${{datasource}} variable");
            let mut ref_ids = HashSet::new();
            for t in targets.into_iter().flatten() {
                assert_eq!(t["datasource"]["uid"], "${datasource}", "{file} / {title}: a target must use the ${{datasource}} variable");
                assert!(t["expr"].as_str().is_some_and(|e| !e.trim().is_empty()), "{file} / {title}: empty expression");
                assert!(ref_ids.insert(t["refId"].to_string()), "{file} / {title}: refIds must be unique");
            }
        }
    }
}

#[test]
fn the_alert_rules_cover_what_the_issue_asks() {
    let alerts = support::alert_exprs();
    let names: Vec<&str> = alerts.iter().map(|(n, _)| n.as_str()).collect();
    for want in ["StrataQueueSaturated", "StrataKvArenaNearFull", "StrataErrorRate"] {
        assert!(names.contains(&want), "alerts.yml lacks {want}: {names:?}");
    }
    // Staging stalls get a rule when the staging buffer's metrics exist.
    let reg = registry();
    let staging: Vec<&str> = reg.keys().copied().filter(|n| n.contains("staging")).collect();
    if !staging.is_empty() {
        let covered = alerts.iter().any(|(_, e)| staging.iter().any(|s| e.contains(s)));
        assert!(covered, "staging metrics {staging:?} exist: add a staging-stall alert to dashboards/alerts.yml");
    }
}
