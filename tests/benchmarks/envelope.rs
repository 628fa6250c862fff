//! The `envelope` scenario: the hub with N simulated pull members (`--envelope 100,500,1000`) against the real operator, hub API server and etcd; each count's figures (see `common::envelope`) with least-squares fits against N, and with `--envelope-replicas` the same members against replicas run as shards.

use serde_json::{Value, json};

use super::{
    Args, BENCH_ACCOUNT, bench_identity,
    common::{envelope::Envelope, lab::Lab},
    fitted, progress,
};

/// For each count of `a.envelope`, one run of the envelope, and one on shards when
/// `a.envelope_replicas` is given; fits of the per-member costs, the runs on shards beside.
pub(crate) async fn envelope(a: &Args) -> Value {
    let lab = Lab::get();
    let kubeconfig = bench_identity(&lab);
    let mut points = Vec::new();
    let mut sharded = Vec::new();
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
        if !a.envelope_replicas.is_empty() {
            sharded.extend(on_shards(&run, &lab, a).await);
        }
    }
    let mut out = fitted(
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
    );
    if !sharded.is_empty() {
        out["sharded"] = Value::Array(sharded);
    }
    out
}

/// The members of `run` again, against each count of `a.envelope_replicas` replicas with
/// `a.envelope_controllers` Controllers: one point per count, each replica's figures flattened
/// (`replica<i>_<figure>`), the operator's requests counted over every replica.
async fn on_shards(run: &Envelope, lab: &Lab, a: &Args) -> Vec<Value> {
    let (n, controllers) = (run.members, a.envelope_controllers);
    progress(&format!(
        "envelope: {n} simulated pull members on {:?} replicas as shards, {controllers} Controllers",
        a.envelope_replicas
    ));
    let found = run.sharded(lab, &a.envelope_replicas, controllers).await;
    progress(&format!("envelope: {n} on shards: joined: {}", found.join));
    for error in found.errors.iter().take(5) {
        progress(&format!("envelope: {n} on shards: {error}"));
    }
    let mut points = Vec::new();
    for on in &found.runs {
        let mut point = serde_json::Map::from_iter([
            ("members".to_owned(), json!(n)),
            ("controllers".to_owned(), json!(controllers)),
            (
                "controllers_ready".to_owned(),
                json!(on.controllers.iter().filter(|c| c.ready).count()),
            ),
            ("errors".to_owned(), json!(found.errors.len())),
        ]);
        for (i, replica) in on.replica.iter().enumerate() {
            let shards: Vec<String> = replica.shards.iter().map(u32::to_string).collect();
            point.insert(format!("replica{i}_shards"), json!(shards.join(",")));
            let figures = serde_json::to_value(replica).unwrap();
            for (figure, value) in figures.as_object().into_iter().flatten() {
                if figure != "shards" {
                    point.insert(format!("replica{i}_{figure}"), value.clone());
                }
            }
        }
        let figures = serde_json::to_value(on).unwrap();
        for (figure, value) in figures.as_object().into_iter().flatten() {
            if !value.is_array() {
                point.insert(figure.clone(), value.clone());
            }
        }
        progress(&format!(
            "envelope: {n} on {} replicas: {}",
            on.replicas,
            Value::Object(point.clone())
        ));
        points.push(Value::Object(point));
    }
    points
}
