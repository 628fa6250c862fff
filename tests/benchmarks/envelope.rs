//! The `envelope` scenario: the hub with N simulated pull members (`--envelope 100,500,1000`) against the real operator, hub API server and etcd; each count's figures (see `common::envelope`) with least-squares fits against N.

use serde_json::{Value, json};

use super::{
    Args, BENCH_ACCOUNT, bench_identity,
    common::{envelope::Envelope, lab::Lab},
    fitted, progress,
};

/// For each count of `a.envelope`, one run of the envelope; fits of the per-member costs.
pub(crate) async fn envelope(a: &Args) -> Value {
    let lab = Lab::get();
    let kubeconfig = bench_identity(&lab);
    let mut points = Vec::new();
    for &n in &a.envelope {
        progress(&format!("envelope: {n} simulated pull members"));
        let run = Envelope {
            members: n,
            sample: n.min(100),
            quiet: std::time::Duration::from_secs(a.quiet_seconds),
            operator_args: vec![
                "--kubeconfig".into(),
                kubeconfig.to_string_lossy().into_owned(),
            ],
            operator_flow: Some(BENCH_ACCOUNT.into()),
        };
        let found = run.run(&lab).await;
        let mut point = serde_json::Map::from_iter([
            ("members".to_owned(), json!(n)),
            ("errors".to_owned(), json!(found.errors.len())),
            ("answered".to_owned(), json!(found.answered)),
        ]);
        for (figure, value) in found.figures.as_object().into_iter().flatten() {
            match value.as_object() {
                // A phase's figures: one key each, prefixed with the phase.
                Some(nested) => point.extend(
                    nested
                        .iter()
                        .map(|(k, v)| (format!("{figure}_{k}"), v.clone())),
                ),
                None => {
                    point.insert(figure.clone(), value.clone());
                }
            }
        }
        for error in found.errors.iter().take(5) {
            progress(&format!("envelope: {n}: {error}"));
        }
        progress(&format!("envelope: {n}: {}", Value::Object(point.clone())));
        points.push(Value::Object(point));
    }
    fitted(
        points,
        "members",
        &[
            "operator_rss_mib",
            "status_bytes",
            "converge_seconds",
            "converge_operator_cpu_seconds_per_member",
            "converge_operator_requests_per_member",
            "quiet_operator_requests_per_member",
            "quiet_member_requests_per_member",
            "hub_watch_streams_per_member",
            "sample_change_published_p90_seconds",
            "resync_seconds",
        ],
        1000.0,
    )
}
