//! A pull member with many releases on the lab: its records reach the hub in pieces bounded by size, and every release is delivered once across a restart of the operator.

mod common;

use common::{
    agent::{hub_cli, join},
    fixtures::{DEADLINE, chart, ready, tenancy, unique, wait_until},
    hub::Hub,
    lab::Lab,
    operator::Operator,
};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::ListParams};
use tenancy_hub::api::{crd::ControllerSpec, member_cluster::pull_namespace};

/// Releases in each namespace of the member.
const RELEASES: usize = 10;

/// Namespaces of the member: 20 (200 releases), or `TENANCY_HUB_PULL_NAMESPACES` (100 for the
/// 1,000 releases of BENCHMARKS.md, run by hand).
fn namespaces() -> usize {
    std::env::var("TENANCY_HUB_PULL_NAMESPACES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20)
}

/// `RELEASES` small releases in each of `namespaces` namespaces `<prefix>-<i>` of `member`.
fn many(prefix: &str, member: &str, namespaces: usize) -> ControllerSpec {
    ControllerSpec {
        tenancies: (0..namespaces)
            .map(|n| {
                tenancy(
                    &format!("{prefix}-{n}"),
                    &[member],
                    (0..RELEASES)
                        .map(|r| chart("deployment-example", &format!("r{r}"), &[]))
                        .collect(),
                )
            })
            .collect(),
        ..Default::default()
    }
}

/// The revision of every deployed release of the namespaces `<prefix>-…` of pull member `pull`,
/// by namespace/release.
fn revisions(lab: &Lab, pull: &str, prefix: &str) -> Vec<(String, i64)> {
    let out = lab
        .try_pull_kubectl(
            pull,
            &[
                "get",
                "secrets",
                "-A",
                "-l",
                "owner=helm,status=deployed",
                "-o",
                "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.labels.name} {.metadata.labels.version}{\"\\n\"}{end}",
            ],
        )
        .unwrap_or_default();
    out.lines()
        .filter(|l| l.starts_with(&format!("{prefix}-")))
        .filter_map(|l| {
            let (release, revision) = l.split_once(' ')?;
            Some((release.to_owned(), revision.parse().ok()?))
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 1, then --include-ignored"]
async fn two_hundred_releases_on_a_pull_member_are_reported_in_pieces_and_delivered_once_across_a_restart()
 {
    let args = ["--workers", "8", "--per-cluster", "8"];
    let mut hub = Hub::with_args("pull-many", &args).await;
    let dir = tempfile::tempdir().unwrap();
    let edge = unique("edge");
    let agent = join(&hub.lab, &edge, "pull-1", dir.path());
    let prefix = unique("many");
    let namespaces = namespaces();
    let started = std::time::Instant::now();
    hub.apply("many", many(&prefix, &edge, namespaces)).await;
    let total = namespaces * RELEASES;
    let within = DEADLINE * (namespaces as u32).div_ceil(20);
    wait_until("half the releases deployed", within, || async {
        (revisions(&hub.lab, "pull-1", &prefix).len() >= total / 2).then_some(())
    })
    .await;
    let first = hub.operator.take().unwrap();
    let (rss_before, peak_before, _) = common::operator::usage(first.pid());
    first.stop();
    hub.operator = Some(Operator::start_with(&hub.lab, &hub.namespace, &args));
    wait_until("every release ready after the restart", within, || async {
        let c = hub.api().get("many").await.ok()?;
        c.status.as_ref().filter(|s| ready(s)).map(|_| ())
    })
    .await;
    let converged = started.elapsed();
    let (rss_after, peak_after, _) = common::operator::usage(hub.operator.as_ref().unwrap().pid());
    let deployed = revisions(&hub.lab, "pull-1", &prefix);
    assert_eq!(deployed.len(), total, "{deployed:?}");
    let twice: Vec<_> = deployed
        .iter()
        .filter(|(_, revision)| *revision != 1)
        .collect();
    assert!(twice.is_empty(), "run more than once: {twice:?}");

    // The records came in one piece per namespace, each far under a message, named by the
    // manifest.
    let hub_ns = pull_namespace(&edge.parse().unwrap());
    let secrets = Api::<Secret>::namespaced(hub.client.clone(), &hub_ns);
    let pieces = secrets
        .list(&ListParams::default().labels("multitenancy.dev/pull-report=records-piece"))
        .await
        .unwrap()
        .items;
    let size = |s: &Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("report"))
            .map_or(0, |b| b.0.len())
    };
    assert!(pieces.len() >= namespaces, "{} pieces", pieces.len());
    let largest = pieces.iter().map(size).max().unwrap();
    assert!(largest < 64 * 1024, "a piece of {largest} bytes");
    let manifest = secrets.get("records-managed").await.unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&manifest.data.unwrap()["report"].0).unwrap();
    let named = manifest["pieces"].as_object().unwrap().len();
    assert!(named >= namespaces, "the manifest names {named} pieces");
    let all: usize = pieces.iter().map(size).sum();
    eprintln!(
        "{total} releases in {namespaces} namespaces, converged across a restart in {:.1} s: {} pieces of {all} bytes, the largest {largest}; a manifest of {named} pieces; operator RSS {rss_before} KiB (peak {peak_before}) before the restart, {rss_after} KiB (peak {peak_after}) after",
        converged.as_secs_f64(),
        pieces.len()
    );

    hub.delete_and_wait_gone_within("many", within).await;
    hub_cli(&hub.lab, &["cluster", "remove", &edge]);
    agent.stop();
}
