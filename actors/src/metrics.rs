//! The Prometheus recorder behind `/metrics`.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Installs the global recorder; `None` when one is already installed (tests start several
/// servers in one process).
pub fn install() -> Option<PrometheusHandle> {
    PrometheusBuilder::new().install_recorder().ok()
}
