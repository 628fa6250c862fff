//! Fixtures of the end-to-end tests: spec builders (seed example, upgrade wave), status lookups, deadline waits.

use std::{future::Future, time::Duration};

use kube::{Api, api::PostParams};
use tenancy_hub::api::crd::{
    Chart, ChartMessage, ControllerSpec, ControllerStatus, Setting, Tenancy, TenancyController,
    TenancyStatus,
};

use super::{hub::Hub, lab::Lab};

/// How long end-to-end tests wait for the operator to converge.
#[allow(dead_code)] // used by some test crates only
pub const DEADLINE: Duration = Duration::from_secs(120);

/// Polls `check` until it returns `Some`, or panics after `timeout` naming `what`.
#[allow(dead_code)] // used by some test crates only
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A name unique to this test run, for objects a test creates.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{}-{nanos:x}", std::process::id())
}

/// A tenancy of `charts` in `namespace` of `clusters`.
#[allow(dead_code)] // used by some test crates only
pub fn tenancy(namespace: &str, clusters: &[&str], charts: Vec<Chart>) -> Tenancy {
    Tenancy {
        namespace: namespace.into(),
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        charts,
        ..Default::default()
    }
}

/// A spec of one `deployment-example` release named `web` with `replicas` replicas in `namespace`
/// of `clusters`.
#[allow(dead_code)] // used by some test crates only
pub fn web(namespace: &str, clusters: &[&str], replicas: &str) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy(
            namespace,
            clusters,
            vec![chart(
                "deployment-example",
                "web",
                &[("replicaCount", replicas)],
            )],
        )],
        ..Default::default()
    }
}

/// A chart `name` installed as `release` with `settings`.
#[allow(dead_code)] // used by some test crates only
pub fn chart(name: &str, release: &str, settings: &[(&str, &str)]) -> Chart {
    Chart {
        chart_name: name.into(),
        release_name: Some(release.into()),
        settings: settings
            .iter()
            .map(|(k, v)| Setting {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// The message of `release` on `cluster` in a status.
#[allow(dead_code)] // used by some test crates only
pub fn message<'a>(
    status: &'a ControllerStatus,
    cluster: &str,
    release: &str,
) -> Option<&'a ChartMessage> {
    status
        .updated_tenancies
        .iter()
        .filter(|t| t.cluster == cluster)
        .flat_map(|t| &t.chart_messages)
        .find(|m| m.release_name == release)
}

/// Whether a status says Ready.
#[allow(dead_code)] // used by some test crates only
pub fn ready(status: &ControllerStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The entry of one cluster/namespace in a status.
#[allow(dead_code)] // used by some test crates only
pub fn entry<'a>(
    status: &'a ControllerStatus,
    cluster: &str,
    namespace: &str,
) -> Option<&'a TenancyStatus> {
    status
        .updated_tenancies
        .iter()
        .find(|t| t.cluster == cluster && t.namespace == namespace)
}

/// Name of the seed example, config/example-controller.yaml.
#[allow(dead_code)] // used by some test crates only
pub const SEED: &str = "example-controller";

/// The seed example, as written in config/example-controller.yaml.
#[allow(dead_code)] // used by some test crates only
pub fn seed_example() -> TenancyController {
    serde_yaml::from_str(include_str!("../../config/example-controller.yaml"))
        .expect("the seed example parses")
}

/// Creates the seed example through `api`, returning what the API server stored.
#[allow(dead_code)] // used by some test crates only
pub async fn create_seed(api: &Api<TenancyController>) -> TenancyController {
    api.create(&PostParams::default(), &seed_example())
        .await
        .expect("the API server accepts the seed example")
}

/// The releases of an upgrade wave: three `deployment-example` releases changed together.
#[allow(dead_code)] // used by some test crates only
pub const WAVE: [&str; 3] = ["a", "b", "c"];

/// A spec of the wave's releases with `replicas` replicas in `namespace` of `clusters`.
#[allow(dead_code)] // used by some test crates only
pub fn wave(namespace: &str, clusters: &[&str], replicas: &str) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy(
            namespace,
            clusters,
            WAVE.iter()
                .map(|r| chart("deployment-example", r, &[("replicaCount", replicas)]))
                .collect(),
        )],
        ..Default::default()
    }
}

/// The wave's releases, all at `revision`, as [`Hub::releases_become`] expects them.
#[allow(dead_code)] // used by some test crates only
pub fn wave_at(revision: i64) -> [(&'static str, i64); 3] {
    WAVE.map(|r| (r, revision))
}

/// Applies wave number `revision` (with as many replicas) as `name`, and waits until every one of
/// `clusters` runs its releases at that revision.
#[allow(dead_code)] // used by some test crates only
pub async fn roll_wave(hub: &Hub, name: &str, namespace: &str, clusters: &[&str], revision: i64) {
    hub.apply(name, wave(namespace, clusters, &revision.to_string()))
        .await;
    for cluster in clusters {
        hub.releases_become(cluster, namespace, &wave_at(revision))
            .await;
    }
}

/// A spec of one `deployment-example` release named `release` in each of `tenancies`, given as
/// (namespace, clusters).
#[allow(dead_code)] // used by some test crates only
pub fn spread<'a>(
    release: &str,
    tenancies: impl IntoIterator<Item = (String, Vec<&'a str>)>,
) -> ControllerSpec {
    ControllerSpec {
        tenancies: tenancies
            .into_iter()
            .map(|(namespace, clusters)| {
                tenancy(
                    &namespace,
                    &clusters,
                    vec![chart("deployment-example", release, &[])],
                )
            })
            .collect(),
        ..Default::default()
    }
}

/// Creates (or replaces) Secret `name` in `namespace` with `data`.
#[allow(dead_code)] // used by some test crates only
pub async fn put_secret(lab: &Lab, namespace: &str, name: &str, data: &[(&str, &str)]) {
    let api: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(lab.client("hub").await, namespace);
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| {
                    (
                        k.to_string(),
                        k8s_openapi::ByteString(v.as_bytes().to_vec()),
                    )
                })
                .collect(),
        ),
        ..Default::default()
    };
    let _ = api.delete(name, &Default::default()).await;
    wait_until("the Secret written", DEADLINE, || async {
        api.create(&PostParams::default(), &secret).await.ok()
    })
    .await;
}

/// The chart home of the real-world charts holding `chart`: the one the lab's env file names, or
/// the one `kind/real-chart.sh` fetches (cached) for a lab started before it held that chart.
#[allow(dead_code)] // used by some test crates only
pub fn real_chart_home(lab: &Lab, chart: &str) -> std::path::PathBuf {
    let env = std::fs::read_to_string(lab.dir.join("env")).unwrap_or_default();
    let named = env.lines().find_map(|l| {
        l.strip_prefix("export TENANCY_HUB_REAL_CHARTS=\"")
            .map(|d| std::path::PathBuf::from(d.trim_end_matches('"')))
    });
    if let Some(dir) = named.filter(|d| d.join(chart).join("Chart.yaml").is_file()) {
        return dir;
    }
    let out = std::process::Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kind/real-chart.sh"),
    )
    .output()
    .expect("kind/real-chart.sh runs");
    assert!(
        out.status.success(),
        "kind/real-chart.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().into()
}
