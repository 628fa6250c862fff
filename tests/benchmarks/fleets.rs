//! The `fleets` scenario: what values that differ per cluster cost. In process, the planner's
//! time for 100 clusters × 10 charts with references, `valuesFrom` and overrides against the same
//! spec written out literally; on the lab, the hub's requests for the `valuesFrom` objects as the
//! number of Controllers reading one Secret grows.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};
use tenancy_hub::{
    api::{
        crd::{
            Chart, ChartOverride, ClusterSelector, ControllerSpec, Setting, Tenancy, ValuesKind,
            ValuesReference,
        },
        key::ClusterName,
        policy::{TenancyPolicySpec, ValuesRule},
    },
    plan::{GitFileLookup, OwnerId, ValuesLookup, ValuesSource, fleet::Fleet},
    policy::{Admission, NamedPolicy},
};

use super::{
    Args,
    common::{
        fixtures::{chart, tenancy, unique, wait_until},
        hub::{Hub, all_gone, allow_all},
        lab::Lab,
    },
    median, progress,
    size::plan_times,
};

/// Clusters of the in-process fleet.
const CLUSTERS: usize = 100;

/// Charts of its one tenancy, each delivered to every cluster.
const CHARTS: usize = 10;

/// Plans timed per spec (the median is reported).
const RUNS: usize = 15;

/// The regions the clusters are spread over, by label.
const REGIONS: [&str; 4] = ["east", "west", "north", "south"];

/// The hub namespace of the in-process plans.
const HUB_NAMESPACE: &str = "bench";

/// Cluster `i`'s name.
fn cluster(i: usize) -> ClusterName {
    format!("c-{i:03}").parse().unwrap()
}

/// One tenancy on every cluster labelled `fleet: bench`, of `CHARTS` charts: with `references`,
/// values naming the cluster's labels and variables, the tenancy and the Controller, settings
/// naming them too, a Secret and a per-region ConfigMap read through `valuesFrom`, and two
/// overrides by region; without, values and settings of the same shape written out literally.
fn fleet_spec(references: bool) -> ControllerSpec {
    let charts = (0..CHARTS)
        .map(|c| {
            if references {
                Chart {
                    chart_name: "deployment-example".into(),
                    release_name: Some(format!("r{c}")),
                    values: Some(json!({
                        "replicaCount": "${cluster.variables.replicas}",
                        "ingress": {"host": format!("r{c}.${{cluster.variables.domain}}")},
                        "podLabels": {
                            "region": "${cluster.labels.region}",
                            "cluster": "${cluster.name}",
                            "owner": "${controller.namespace}.${controller.name}",
                        },
                        "tier": "${cluster.variables.tier:=standard}",
                        "image": {"tag": "1.2.3"},
                    })),
                    settings: vec![Setting {
                        key: "env.NAMESPACE".into(),
                        value: "${tenancy.namespace}".into(),
                    }],
                    values_from: vec![
                        ValuesReference {
                            kind: ValuesKind::Secret,
                            name: "credentials".into(),
                            ..Default::default()
                        },
                        ValuesReference {
                            kind: ValuesKind::ConfigMap,
                            name: "region-${cluster.labels.region}".into(),
                            ..Default::default()
                        },
                    ],
                    overrides: vec![
                        ChartOverride {
                            cluster_selector: ClusterSelector {
                                match_labels: BTreeMap::from([("region".into(), "east".into())]),
                            },
                            values: Some(json!({"replicaCount": 3, "resources": {"cpu": "1"}})),
                            ..Default::default()
                        },
                        ChartOverride {
                            cluster_selector: ClusterSelector {
                                match_labels: BTreeMap::from([("region".into(), "west".into())]),
                            },
                            settings: vec![Setting {
                                key: "env.ZONE".into(),
                                value: "${cluster.labels.region}-a".into(),
                            }],
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }
            } else {
                Chart {
                    chart_name: "deployment-example".into(),
                    release_name: Some(format!("r{c}")),
                    values: Some(json!({
                        "replicaCount": 2,
                        "ingress": {"host": format!("r{c}.c.example.com")},
                        "podLabels": {"region": "east", "cluster": "c-000", "owner": "bench.fleets"},
                        "tier": "standard",
                        "image": {"tag": "1.2.3"},
                    })),
                    settings: vec![Setting {
                        key: "env.NAMESPACE".into(),
                        value: "fleet".into(),
                    }],
                    ..Default::default()
                }
            }
        })
        .collect();
    ControllerSpec {
        tenancies: vec![Tenancy {
            namespace: "fleet".into(),
            cluster_selector: Some(ClusterSelector {
                match_labels: BTreeMap::from([("fleet".into(), "bench".into())]),
            }),
            charts,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The hub objects the spec with references reads: the Secret `credentials` and a ConfigMap
/// per region, each a small values document.
fn hub_object(source: &ValuesSource) -> ValuesLookup {
    let document = match (source.kind, source.name.as_str()) {
        (ValuesKind::Secret, "credentials") => {
            "provider:\n  token: s3cr3t-token-value\n  user: deployer\n".to_owned()
        }
        (ValuesKind::ConfigMap, name) if name.starts_with("region-") => format!(
            "endpoint: https://{}.api.example.com\nzones: [a, b, c]\n",
            &name["region-".len()..]
        ),
        _ => return ValuesLookup::Missing,
    };
    ValuesLookup::Found {
        data: BTreeMap::from([("values.yaml".to_owned(), document)]),
        labels: BTreeMap::new(),
    }
}

/// Median plan time of `spec` over the fleet, in milliseconds, and whether the plan had no
/// problems (each release rendered).
fn plan_ms(spec: &ControllerSpec) -> (f64, bool) {
    let owner = OwnerId {
        namespace: HUB_NAMESPACE.into(),
        name: "fleets".into(),
    };
    let clusters: BTreeMap<ClusterName, BTreeMap<String, String>> = (0..CLUSTERS)
        .map(|i| {
            let labels = BTreeMap::from([
                ("fleet".to_owned(), "bench".to_owned()),
                ("region".to_owned(), REGIONS[i % REGIONS.len()].to_owned()),
            ]);
            (cluster(i), labels)
        })
        .collect();
    let variables: BTreeMap<ClusterName, BTreeMap<String, Value>> = (0..CLUSTERS)
        .map(|i| {
            let vars = BTreeMap::from([
                ("replicas".to_owned(), json!(1 + i % 3)),
                ("domain".to_owned(), json!(format!("c{i:03}.example.com"))),
            ]);
            (cluster(i), vars)
        })
        .collect();
    // Permissive, with a policy letting the hub namespace read any Secret or ConfigMap of its own.
    let admission = Admission {
        policies: vec![NamedPolicy::new(
            "bench",
            TenancyPolicySpec {
                hub_namespaces: vec![HUB_NAMESPACE.into()],
                values_from: vec![ValuesRule::default()],
                ..Default::default()
            },
        )],
        ..Admission::permissive()
    };
    let fleet = Fleet {
        variables: &variables,
        lookup: &hub_object,
        git_files: &|_| GitFileLookup::Unreadable("no Git values files in this benchmark".into()),
    };
    let mut clean = true;
    let times = plan_times(&owner, spec, &clusters, &admission, &fleet, RUNS, |p| {
        clean &= format!("{p:?}").contains("problems: []");
    });
    (median(&times), clean)
}

/// The in-process figures: plan time per release and per cluster, with references and without.
fn render_cost() -> Value {
    let releases = (CLUSTERS * CHARTS) as f64;
    let mut out = serde_json::Map::new();
    let mut per_release = BTreeMap::new();
    for (label, references) in [("plain", false), ("references", true)] {
        progress(&format!(
            "fleets: planning {CLUSTERS} clusters × {CHARTS} charts, {label}"
        ));
        let (ms, clean) = plan_ms(&fleet_spec(references));
        per_release.insert(label, ms * 1000.0 / releases);
        out.insert(format!("{label}_plan_ms"), json!(ms));
        out.insert(
            format!("{label}_us_per_release"),
            json!(ms * 1000.0 / releases),
        );
        out.insert(
            format!("{label}_us_per_cluster"),
            json!(ms * 1000.0 / CLUSTERS as f64),
        );
        out.insert(format!("{label}_without_problems"), json!(clean));
    }
    out.insert(
        "rendering_us_per_release".into(),
        json!(per_release["references"] - per_release["plain"]),
    );
    Value::Object(out)
}

/// The hub API server's request counters and open watches for Secrets and ConfigMaps, from
/// its `/metrics`: (resource, verb) → count.
fn hub_requests(lab: &Lab) -> BTreeMap<(String, String), f64> {
    let text = lab.kubectl("hub", &["get", "--raw", "/metrics"]);
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let (family, rest) = match line.split_once('{') {
            Some(split) => split,
            None => continue,
        };
        if family != "apiserver_request_total" && family != "apiserver_longrunning_requests" {
            continue;
        }
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let resource = label("resource");
        if resource != "secrets" && resource != "configmaps" {
            continue;
        }
        let verb = if family == "apiserver_longrunning_requests" {
            "open WATCH".to_owned()
        } else {
            label("verb")
        };
        *out.entry((resource, verb)).or_default() += value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// `after` − `before` for one (resource, verb).
fn delta(
    before: &BTreeMap<(String, String), f64>,
    after: &BTreeMap<(String, String), f64>,
    resource: &str,
    verb: &str,
) -> f64 {
    let key = (resource.to_owned(), verb.to_owned());
    after.get(&key).copied().unwrap_or(0.0) - before.get(&key).copied().unwrap_or(0.0)
}

/// The operator's count of finished reconciles.
fn reconciles(hub: &Hub) -> f64 {
    hub.operator
        .as_ref()
        .unwrap()
        .metric("tenancy_hub_reconciles_total")
}

/// Waits until the hub's Secret and ConfigMap counters stop moving (2 s unchanged), so what a
/// phase set off is counted in it; returns them.
async fn settled(lab: &Lab) -> BTreeMap<(String, String), f64> {
    let mut last = hub_requests(lab);
    let mut still_since = Instant::now();
    wait_until(
        "the hub's Secret and ConfigMap requests to settle",
        Duration::from_secs(120),
        || {
            let now = hub_requests(lab);
            if now != last {
                last = now.clone();
                still_since = Instant::now();
            }
            let done = still_since.elapsed() >= Duration::from_secs(2);
            async move { done.then_some(now) }
        },
    )
    .await
}

/// The Secret every Controller reads, with `token` in its values document.
fn shared_secret(token: &str) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some("shared".into());
    s.data = Some(BTreeMap::from([(
        "values.yaml".to_owned(),
        ByteString(format!("token: {token}\n").into()),
    )]));
    s
}

/// One point of the hub side: a fresh operator, N Controllers reading one Secret. Counts the
/// hub's Secret and ConfigMap requests while the operator starts, while the N Controllers are
/// planned, and after the Secret changes once.
async fn hub_side(n: usize) -> Value {
    let lab = Lab::get();
    let before_start = settled(&lab).await;
    let hub = Hub::new("fleets").await;
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.values_from = vec![ValuesRule {
        kind: Some(ValuesKind::Secret),
        names: vec!["shared".into()],
        ..Default::default()
    }];
    hub.policy(&hub.namespace, policy).await;
    let secrets: Api<Secret> = Api::namespaced(hub.client.clone(), &hub.namespace);
    let apply = PatchParams::apply("tenancy-hub-bench").force();
    secrets
        .patch("shared", &apply, &Patch::Apply(&shared_secret("one")))
        .await
        .unwrap();
    let started = settled(&lab).await;

    // N Controllers, each one release on the hub reading the Secret; suspended, so planning
    // (and so the read) happens but no helm call.
    let read = ValuesReference {
        kind: ValuesKind::Secret,
        name: "shared".into(),
        ..Default::default()
    };
    let run = unique("fv");
    let reconciled_before = reconciles(&hub);
    let created = Instant::now();
    for i in 0..n {
        let mut c = chart("deployment-example", "web", &[]);
        c.values_from = vec![read.clone()];
        let spec = ControllerSpec {
            tenancies: vec![tenancy(&format!("{run}-{i}"), &[], vec![c])],
            suspend: true,
            ..Default::default()
        };
        hub.apply(&format!("reader-{i}"), spec).await;
    }
    let api = hub.api();
    wait_until(
        "every reader's status",
        Duration::from_secs(600),
        || async {
            let list = api.list(&Default::default()).await.ok()?;
            let done = list
                .items
                .iter()
                .filter(|c| {
                    c.status
                        .as_ref()
                        .is_some_and(|s| s.observed_generation == Some(1))
                })
                .count();
            (done == n).then_some(())
        },
    )
    .await;
    let planned_s = created.elapsed().as_secs_f64();
    let planned = settled(&lab).await;

    // One change of the Secret: every reader is planned again.
    let reconciled = reconciles(&hub);
    secrets
        .patch("shared", &apply, &Patch::Apply(&shared_secret("two")))
        .await
        .unwrap();
    wait_until(
        "every reader planned again after the change",
        Duration::from_secs(600),
        || async { (reconciles(&hub) - reconciled >= n as f64).then_some(()) },
    )
    .await;
    let changed = settled(&lab).await;
    let point = json!({
        "controllers": n,
        "operator_start_secret_lists": delta(&before_start, &started, "secrets", "LIST"),
        "operator_start_configmap_lists": delta(&before_start, &started, "configmaps", "LIST"),
        "open_secret_watches_added": delta(&before_start, &started, "secrets", "open WATCH"),
        "open_configmap_watches_added": delta(&before_start, &started, "configmaps", "open WATCH"),
        "readers_planned_s": planned_s,
        "reconciles_while_planning": reconciled - reconciled_before,
        "secret_lists_while_planning": delta(&started, &planned, "secrets", "LIST"),
        "secret_gets_while_planning": delta(&started, &planned, "secrets", "GET"),
        "secret_lists_after_change": delta(&planned, &changed, "secrets", "LIST"),
        "secret_gets_after_change": delta(&planned, &changed, "secrets", "GET"),
        "open_secret_watches_added_at_end": delta(&before_start, &changed, "secrets", "open WATCH"),
    });
    for i in 0..n {
        let _ = api
            .delete(&format!("reader-{i}"), &Default::default())
            .await;
    }
    all_gone(&api, Duration::from_secs(600)).await;
    point
}

/// The scenario: render cost in process, then the hub's requests for `a.fleet_readers`
/// Controllers reading one Secret, one point each.
pub async fn fleets(a: &Args) -> Value {
    let render = render_cost();
    let mut points = Vec::new();
    for &n in &a.fleet_readers {
        progress(&format!("fleets: {n} Controllers reading one Secret"));
        points.push(hub_side(n).await);
    }
    let mut out = render;
    out["points"] = json!(points);
    out
}
