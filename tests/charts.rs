//! End-to-end tests of chart changes rolling out: resolved versions, OCI digests and chart-home content.

mod common;

use std::path::Path;

use common::{
    fixtures::{DEADLINE, chart, message, ready, tenancy, unique, wait_until},
    hub::{Hub, allow_all},
    lab::Lab,
    repo::{ChartRepo, OciRegistry, example_chart},
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use tenancy_hub::api::crd::{Chart, ControllerSpec};

/// Charts are looked at again this often (seconds) in these tests.
const INTERVAL: &str = "2";

/// The chart version of each release in a namespace of member-1, as helm lists it.
fn chart_versions(hub: &Hub, namespace: &str) -> Vec<(String, String)> {
    chart_versions_in(hub, "member-1", namespace)
}

/// The chart version of each release in a namespace of `cluster`, as helm lists it.
fn chart_versions_in(hub: &Hub, cluster: &str, namespace: &str) -> Vec<(String, String)> {
    let listed = hub
        .lab
        .helm(cluster, &["list", "-n", namespace, "-o", "json"]);
    let list: Vec<serde_json::Value> = serde_json::from_str(&listed).unwrap();
    let mut out: Vec<(String, String)> = list
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["chart"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

fn versions(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(r, v)| (r.to_string(), format!("deployment-example-{v}")))
        .collect()
}

/// Copies a chart directory (one level of subdirectories, as the example chart has).
fn copy_chart(from: &Path, to: &Path) {
    for entry in walk(from) {
        let target = to.join(entry.strip_prefix(from).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &target).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Adds a label to the Deployment of a copy of the example chart, keeping its name and version.
fn label_deployment(chart: &Path, label: &str) {
    let template = chart.join("templates/deployment.yaml");
    let text = std::fs::read_to_string(&template).unwrap();
    let changed = text.replacen("  labels:\n", &format!("  labels:\n    {label}\n"), 1);
    assert_ne!(text, changed);
    std::fs::write(&template, changed).unwrap();
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn repository_charts_without_an_exact_version_follow_the_newest_match() {
    let hub = Hub::with_args("charts-repo", &["--chart-interval", INTERVAL]).await;
    let repo = ChartRepo::serve(&hub.lab, &["0.1.0", "0.2.0"]);
    repo.wait_ready().await;
    // A plain-http repository is used only under a prefix a policy lists.
    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[&repo.url]))
        .await;
    let ns = unique("charts-repo-tenant");
    let from_repo = |release: &str, version: Option<&str>| -> Chart {
        let mut c = chart("deployment-example", release, &[]);
        c.repo = Some(repo.url.clone());
        c.version = version.map(str::to_owned);
        c
    };
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![
                from_repo("newest", None),
                from_repo("ranged", Some(">=0.1.0 <1.0.0")),
                from_repo("pinned", Some("0.1.0")),
            ],
        )],
        ..Default::default()
    };
    hub.apply("follow", spec).await;
    let status = hub
        .status_until("follow", "the repository charts to be deployed", ready)
        .await;
    assert_eq!(
        message(&status, "member-1", "newest")
            .unwrap()
            .chart_version,
        "0.2.0"
    );
    hub.releases_become(
        "member-1",
        &ns,
        &[("newest", 1), ("pinned", 1), ("ranged", 1)],
    )
    .await;
    assert_eq!(
        chart_versions(&hub, &ns),
        versions(&[
            ("newest", "0.2.0"),
            ("pinned", "0.1.0"),
            ("ranged", "0.2.0")
        ])
    );

    repo.publish(&hub.lab, "0.3.0");
    hub.releases_become(
        "member-1",
        &ns,
        &[("newest", 2), ("pinned", 1), ("ranged", 2)],
    )
    .await;
    assert_eq!(
        chart_versions(&hub, &ns),
        versions(&[
            ("newest", "0.3.0"),
            ("pinned", "0.1.0"),
            ("ranged", "0.3.0")
        ])
    );

    repo.publish(&hub.lab, "1.0.0");
    hub.releases_become(
        "member-1",
        &ns,
        &[("newest", 3), ("pinned", 1), ("ranged", 2)],
    )
    .await;
    assert_eq!(
        chart_versions(&hub, &ns),
        versions(&[
            ("newest", "1.0.0"),
            ("pinned", "0.1.0"),
            ("ranged", "0.3.0")
        ]),
        "a version outside the range is not taken"
    );
    let status = hub
        .status_until("follow", "the status to show the newest version", |s| {
            ready(s) && message(s, "member-1", "newest").is_some_and(|m| m.chart_version == "1.0.0")
        })
        .await;
    assert_eq!(
        message(&status, "member-1", "ranged")
            .unwrap()
            .chart_version,
        "0.3.0"
    );
    hub.delete_and_wait_gone("follow").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_chart_home_chart_changed_under_the_same_version_is_upgraded() {
    let home = tempfile::tempdir().unwrap();
    copy_chart(&example_chart(), &home.path().join("changing"));
    copy_chart(&example_chart(), &home.path().join("steady"));
    let home_arg = home.path().to_str().unwrap();
    let hub = Hub::with_args(
        "charts-home",
        &["--chart-interval", INTERVAL, "--chart-home", home_arg],
    )
    .await;
    let ns = unique("charts-home-tenant");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![chart("changing", "web", &[]), chart("steady", "db", &[])],
        )],
        ..Default::default()
    };
    hub.apply("home", spec).await;
    hub.status_until("home", "the chart-home charts to be deployed", ready)
        .await;
    hub.releases_become("member-1", &ns, &[("db", 1), ("web", 1)])
        .await;

    label_deployment(&home.path().join("changing"), "edition: second");
    hub.releases_become("member-1", &ns, &[("db", 1), ("web", 2)])
        .await;
    let deployments: Api<Deployment> = Api::namespaced(hub.lab.client("member-1").await, &ns);
    let web = deployments.get("web").await.unwrap();
    assert_eq!(
        web.metadata
            .labels
            .unwrap()
            .get("edition")
            .map(String::as_str),
        Some("second"),
        "the changed template is live"
    );
    let db = deployments.get("db").await.unwrap();
    assert!(!db.metadata.labels.unwrap().contains_key("edition"));
    hub.delete_and_wait_gone("home").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn an_oci_chart_with_a_range_follows_new_versions_and_new_digests() {
    let lab = Lab::get();
    let registry = OciRegistry::serve(&lab);
    for version in ["0.1.0", "0.2.0"] {
        registry.push(&lab, &example_chart(), version).await;
    }
    // helm trusts the registry through the lab's CA, as a real hub trusts its registry's CA.
    let hub = Hub::with_env(
        "charts-oci",
        &["--chart-interval", INTERVAL],
        &[("SSL_CERT_FILE", registry.ca.as_str())],
    )
    .await;
    // A registry on loopback is used only under a prefix a policy lists.
    hub.policy(
        &hub.namespace,
        allow_all(&hub.namespace, &[&registry.prefix()]),
    )
    .await;
    let ns = unique("charts-oci-tenant");
    let mut c = chart(&registry.reference("deployment-example"), "web", &[]);
    c.version = Some(">=0.1.0 <1.0.0".into());
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &["member-1"], vec![c])],
        ..Default::default()
    };
    hub.apply("from-oci", spec).await;
    let status = hub
        .status_until("from-oci", "the OCI chart to be deployed", ready)
        .await;
    assert_eq!(
        message(&status, "member-1", "web").unwrap().chart_version,
        "0.2.0"
    );

    registry.push(&hub.lab, &example_chart(), "0.3.0").await;
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;
    assert_eq!(chart_versions(&hub, &ns), versions(&[("web", "0.3.0")]));

    // The same version pushed again with other content has another digest, and rolls out.
    let changed = tempfile::tempdir().unwrap();
    copy_chart(&example_chart(), changed.path());
    label_deployment(changed.path(), "edition: second");
    registry.push(&hub.lab, changed.path(), "0.3.0").await;
    hub.releases_become("member-1", &ns, &[("web", 3)]).await;
    let deployments: Api<Deployment> = Api::namespaced(hub.lab.client("member-1").await, &ns);
    let live = wait_until("the repushed chart to be live", DEADLINE, || async {
        let d = deployments.get("web").await.ok()?;
        d.metadata.labels?.get("edition").cloned()
    })
    .await;
    assert_eq!(live, "second");
    hub.delete_and_wait_gone("from-oci").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn thirty_releases_of_one_repository_chart_fetch_one_index_and_one_archive() {
    let hub = Hub::new("charts-cache").await;
    let repo = ChartRepo::serve(&hub.lab, &["0.1.0"]);
    repo.wait_ready().await;
    let indexes_before = repo.requests("/index.yaml");
    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[&repo.url]))
        .await;
    let clusters = ["member-1", "member-2", "member-3"];
    let namespaces: Vec<String> = (0..10)
        .map(|i| unique(&format!("charts-cache-{i}")))
        .collect();
    let spec = ControllerSpec {
        tenancies: namespaces
            .iter()
            .map(|ns| {
                let mut c = chart("deployment-example", "web", &[]);
                c.repo = Some(repo.url.clone());
                tenancy(ns, &clusters, vec![c])
            })
            .collect(),
        ..Default::default()
    };
    hub.apply("cached", spec).await;
    let status = hub
        .status_until("cached", "the 30 releases to be deployed", |s| {
            ready(s) && s.updated_tenancies.len() == 30
        })
        .await;
    for ns in &namespaces {
        for cluster in clusters {
            let entry = status
                .updated_tenancies
                .iter()
                .find(|t| t.cluster == cluster && &t.namespace == ns)
                .expect("an entry per cluster namespace");
            assert_eq!(entry.chart_messages[0].chart_version, "0.1.0");
        }
    }

    assert_eq!(
        repo.requests("/index.yaml") - indexes_before,
        1,
        "one index fetch for 30 releases"
    );
    assert_eq!(
        repo.requests("/deployment-example-0.1.0.tgz"),
        1,
        "one archive fetch for 30 releases"
    );
    let operator = hub.operator.as_ref().unwrap();
    let archive = std::fs::metadata(repo.path("deployment-example-0.1.0.tgz"))
        .unwrap()
        .len();
    let index = std::fs::metadata(repo.path("index.yaml")).unwrap().len();
    assert_eq!(
        operator.metric("tenancy_hub_chart_fetched_bytes_total{kind=\"index\"}"),
        index as f64
    );
    assert_eq!(
        operator.metric("tenancy_hub_chart_fetched_bytes_total{kind=\"archive\"}"),
        archive as f64
    );
    assert_eq!(operator.metric("tenancy_hub_chart_cache_misses_total"), 1.0);
    assert!(
        operator.metric("tenancy_hub_chart_cache_hits_total") >= 30.0,
        "every install came from the cache"
    );
    assert_eq!(
        operator.metric("tenancy_hub_chart_cache_bytes"),
        archive as f64
    );

    // Helm read the chart's name and version from the cached archive, as from the repository.
    assert_eq!(
        chart_versions_in(&hub, "member-2", &namespaces[0]),
        versions(&[("web", "0.1.0")])
    );
    let history = hub.lab.helm(
        "member-3",
        &["history", "web", "-n", &namespaces[9], "-o", "json"],
    );
    let history: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["chart"], "deployment-example-0.1.0");
    assert_eq!(history[0]["app_version"], "1.27");
    hub.delete_and_wait_gone("cached").await;
}
