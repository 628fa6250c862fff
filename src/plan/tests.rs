//! Tests of planning: desired releases, the planner, suspend and the keys resources claim.

use super::*;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
};

use crate::api::crd::{ClusterSelector, Setting};
use crate::{
    api::crd::{Chart, ControllerSpec, DriftDetection, DriftMode, Tenancy},
    api::key::{ClusterName, ReleaseKey},
    api::policy::Impersonation,
    policy::Admission,
};

fn owner(name: &str) -> OwnerId {
    OwnerId {
        namespace: "default".into(),
        name: name.into(),
    }
}

fn cluster(name: &str) -> ClusterName {
    name.parse().unwrap()
}

fn registry() -> BTreeMap<ClusterName, BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    m.insert(cluster("hub"), BTreeMap::new());
    m.insert(
        cluster("member-1"),
        BTreeMap::from([("region".into(), "east".into())]),
    );
    m.insert(
        cluster("member-2"),
        BTreeMap::from([("region".into(), "west".into())]),
    );
    m
}

fn seed() -> ControllerSpec {
    let c: crate::api::crd::TenancyController =
        serde_yaml::from_str(include_str!("../../config/example-controller.yaml")).unwrap();
    c.spec
}

fn tenancy(ns: &str, clusters: &[&str], charts: Vec<Chart>) -> Tenancy {
    Tenancy {
        namespace: ns.into(),
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        cluster_selector: None,
        charts,
        suspend: false,
    }
}

fn chart(name: &str, release: Option<&str>, settings: &[(&str, &str)]) -> Chart {
    Chart {
        chart_name: name.into(),
        release_name: release.map(Into::into),
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

/// Charts under /charts exist unless named "missing"; nothing has a digest.
fn lookup(
    source: &ChartSource,
    _: &crate::policy::access::Credentials,
    _: &crate::policy::access::Trust,
    _version: Option<&str>,
) -> ChartLookup {
    match source {
        ChartSource::Directory(p) if p.ends_with("missing") => {
            ChartLookup::Missing(format!("no chart directory at {}", p.display()))
        }
        _ => ChartLookup::Found {
            commit: None,
            version: None,
            digest: None,
            verified: None,
        },
    }
}

struct World {
    clusters: BTreeMap<ClusterName, BTreeMap<String, String>>,
    synced: BTreeSet<ClusterName>,
    applied: HashMap<ReleaseKey, Applied>,
    claims: HashMap<ReleaseKey, OwnerId>,
    admission: Admission,
    drifted: HashMap<ReleaseKey, Drifted>,
}

impl World {
    fn new() -> Self {
        let clusters = registry();
        let synced = clusters.keys().cloned().collect();
        Self {
            clusters,
            synced,
            applied: HashMap::new(),
            claims: HashMap::new(),
            admission: Admission::permissive(),
            drifted: HashMap::new(),
        }
    }

    fn plan(&self, who: &OwnerId, spec: &ControllerSpec) -> Plan {
        plan(&Inputs {
            fleet: &crate::plan::fleet::Fleet::none(),
            owner: who,
            spec,
            clusters: &self.clusters,
            synced: &self.synced,
            applied: &self.applied,
            claims: &self.claims,
            admission: &self.admission,
            chart_home: Path::new("/charts"),
            chart_lookup: &lookup,
            now: 10_000,
            pending_timeout_secs: 600,
            drifted: &self.drifted,
        })
    }

    /// Records every job of a plan as successfully applied.
    fn apply(&mut self, plan: &Plan) {
        for job in &plan.jobs {
            match job {
                Job::Apply { release, .. } => {
                    let revision = self.applied.get(&release.key).map_or(1, |a| a.revision + 1);
                    self.applied.insert(
                        release.key.clone(),
                        Applied {
                            key: release.key.clone(),
                            owner: Some(release.owner.clone()),
                            spec_hash: Some(release.spec_hash.clone()),
                            revision,
                            status: "deployed".into(),
                            modified_at: Some(9_000),
                        },
                    );
                }
                Job::Uninstall { key, .. } => {
                    self.applied.remove(key);
                }
                Job::Rollback { .. } => {}
            }
        }
    }
}

fn keys(jobs: &[Job]) -> Vec<String> {
    jobs.iter()
        .map(|j| match j {
            Job::Apply { release, .. } => format!("apply {}", release.key),
            Job::Uninstall { key, .. } => format!("uninstall {key}"),
            Job::Rollback { key, .. } => format!("rollback {key}"),
        })
        .collect()
}

fn policy(namespaces: &[&str], clusters: &[&str]) -> crate::policy::NamedPolicy {
    crate::policy::NamedPolicy {
        name: "team".into(),
        spec: crate::api::policy::TenancyPolicySpec {
            hub_namespaces: vec!["default".into()],
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            chart_sources: vec!["chart-home".into()],
            impersonate: Some(Impersonation {
                user: "team-deployer".into(),
                ..Impersonation::default()
            }),
            ..Default::default()
        },
    }
}

fn enforcing(policies: Vec<crate::policy::NamedPolicy>) -> Admission {
    Admission {
        mode: crate::policy::Mode::Enforce,
        policies,
        operator_namespace: "tenancy-hub".into(),
    }
}

#[test]
fn a_forbidden_release_gets_no_job_while_the_allowed_ones_deliver_as_the_policys_identity() {
    let mut w = World::new();
    w.admission = enforcing(vec![policy(&["shop"], &["member-1"])]);
    let spec = ControllerSpec {
        tenancies: vec![
            tenancy(
                "shop",
                &["member-1", "member-2"],
                vec![chart("web", None, &[])],
            ),
            tenancy("kube-system", &["member-1"], vec![chart("web", None, &[])]),
        ],
        ..Default::default()
    };
    let p = w.plan(&owner("a"), &spec);
    assert_eq!(keys(&p.jobs), ["apply member-1/shop/shop"]);
    let Job::Apply { release, .. } = &p.jobs[0] else {
        unreachable!()
    };
    assert_eq!(release.identity.as_ref().unwrap().user, "team-deployer");
    let forbidden: Vec<String> = p
        .problems
        .iter()
        .filter(|p| p.reason() == "Forbidden")
        .map(ToString::to_string)
        .collect();
    assert_eq!(forbidden.len(), 2, "{forbidden:?}");
    assert!(
        forbidden[0].contains("member-2/shop/shop")
            && forbidden[0].contains("cluster member-2 is not allowed")
    );
    assert!(forbidden[1].contains("kube-system is protected"));
}

/// A world where Controller default/a delivered `web` as release shop to member-1/shop,
/// allowed by a policy; and the spec it did that with.
fn shop_delivered_under_a_policy() -> (World, ControllerSpec) {
    let mut w = World::new();
    w.admission = enforcing(vec![policy(&["shop"], &["member-1"])]);
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            "shop",
            &["member-1"],
            vec![chart("web", None, &[])],
        )],
        ..Default::default()
    };
    let first = w.plan(&owner("a"), &spec);
    w.apply(&first);
    (w, spec)
}

#[test]
fn tightening_a_policy_leaves_the_release_in_place_and_loosening_it_delivers_again() {
    let (mut w, spec) = shop_delivered_under_a_policy();
    w.admission = enforcing(vec![policy(&["other"], &["member-1"])]);
    let mut changed = spec.clone();
    changed.tenancies[0].charts[0].settings.push(Setting {
        key: "replicaCount".into(),
        value: "3".into(),
    });
    let tightened = w.plan(&owner("a"), &changed);
    assert!(tightened.jobs.is_empty(), "{:?}", keys(&tightened.jobs));
    assert_eq!(tightened.problems[0].reason(), "Forbidden");
    w.admission = enforcing(vec![policy(&["shop"], &["member-1"])]);
    assert_eq!(
        keys(&w.plan(&owner("a"), &changed).jobs),
        ["apply member-1/shop/shop"]
    );
}

#[test]
fn a_release_the_spec_drops_is_uninstalled_as_the_identity_that_delivered_it() {
    let (w, _) = shop_delivered_under_a_policy();
    let p = w.plan(&owner("a"), &ControllerSpec::default());
    match &p.jobs[..] {
        [Job::Uninstall { identity, .. }] => {
            assert_eq!(identity.as_ref().unwrap().user, "team-deployer");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_path_as_chart_name_is_forbidden_in_every_mode_and_nothing_is_looked_up() {
    let w = World::new();
    let looked = std::cell::Cell::new(0);
    let counting = |s: &ChartSource,
                    c: &crate::policy::access::Credentials,
                    t: &crate::policy::access::Trust,
                    v: Option<&str>| {
        looked.set(looked.get() + 1);
        lookup(s, c, t, v)
    };
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            "shop",
            &["member-1"],
            vec![
                chart("/etc/charts/web", Some("a"), &[]),
                chart("../web", Some("b"), &[]),
            ],
        )],
        ..Default::default()
    };
    let d = desired(
        &owner("a"),
        &spec,
        &w.clusters,
        Path::new("/charts"),
        &counting,
        &w.admission,
        &crate::plan::fleet::Fleet::none(),
    );
    assert!(d.releases.is_empty());
    assert_eq!(looked.get(), 0);
    assert!(
        d.problems.iter().all(|p| p.reason() == "Forbidden"),
        "{:?}",
        d.problems
    );
}

#[test]
fn the_seed_example_goes_to_the_hub_with_release_names_as_in_the_seed() {
    let world = World::new();
    let plan = world.plan(&owner("example-controller"), &seed());
    assert_eq!(
        keys(&plan.jobs),
        ["apply hub/foo/foo", "apply hub/foo/nginx"]
    );
    assert!(plan.problems.is_empty());
    let Job::Apply { release, .. } = &plan.jobs[1] else {
        panic!()
    };
    assert_eq!(
        release.source,
        ChartSource::Directory("/charts/statefulset-example".into())
    );
    assert_eq!(
        release.settings,
        [
            ("replicas".to_string(), "3".to_string()),
            ("service.internalPort".into(), "8080".into())
        ]
    );
}

#[test]
fn an_unchanged_spec_produces_no_job() {
    let mut world = World::new();
    let first = world.plan(&owner("a"), &seed());
    world.apply(&first);
    let second = world.plan(&owner("a"), &seed());
    assert!(second.jobs.is_empty(), "{:?}", second.jobs);
    assert_eq!(second.desired.len(), 2);
}

#[test]
fn changing_one_setting_upgrades_that_release_only_on_every_cluster() {
    let mut world = World::new();
    let mut spec = ControllerSpec {
        tenancies: vec![tenancy(
            "team",
            &["member-1", "member-2"],
            vec![
                chart("deployment-example", Some("web"), &[("replicaCount", "1")]),
                chart("statefulset-example", Some("db"), &[]),
            ],
        )],
        ..Default::default()
    };
    let first = world.plan(&owner("a"), &spec);
    assert_eq!(first.jobs.len(), 4);
    world.apply(&first);
    spec.tenancies[0].charts[0].settings[0].value = "2".into();
    let second = world.plan(&owner("a"), &spec);
    assert_eq!(
        keys(&second.jobs),
        ["apply member-1/team/web", "apply member-2/team/web"]
    );
}

#[test]
fn removing_a_cluster_or_a_chart_uninstalls_there_only() {
    let mut world = World::new();
    let mut spec = ControllerSpec {
        tenancies: vec![tenancy(
            "team",
            &["member-1", "member-2"],
            vec![
                chart("deployment-example", Some("web"), &[]),
                chart("statefulset-example", Some("db"), &[]),
            ],
        )],
        ..Default::default()
    };
    world.apply(&world.plan(&owner("a"), &spec));
    spec.tenancies[0].clusters = vec!["member-1".into()];
    let plan = world.plan(&owner("a"), &spec);
    assert_eq!(
        keys(&plan.jobs),
        ["uninstall member-2/team/db", "uninstall member-2/team/web"]
    );
    world.apply(&plan);
    spec.tenancies[0].charts.pop();
    assert_eq!(
        keys(&world.plan(&owner("a"), &spec).jobs),
        ["uninstall member-1/team/db"]
    );
}

#[test]
fn an_out_of_band_uninstall_is_reinstalled() {
    let mut world = World::new();
    world.apply(&world.plan(&owner("a"), &seed()));
    world.applied.retain(|k, _| k.release != "nginx");
    assert_eq!(
        keys(&world.plan(&owner("a"), &seed()).jobs),
        ["apply hub/foo/nginx"]
    );
}

#[test]
fn a_failed_release_is_tried_again_and_a_fresh_pending_one_is_left_alone() {
    let mut world = World::new();
    world.apply(&world.plan(&owner("a"), &seed()));
    let foo: ReleaseKey = "hub/foo/foo".parse().unwrap();
    world.applied.get_mut(&foo).unwrap().status = "failed".into();
    assert_eq!(
        keys(&world.plan(&owner("a"), &seed()).jobs),
        ["apply hub/foo/foo"]
    );
    let a = world.applied.get_mut(&foo).unwrap();
    a.status = "pending-upgrade".into();
    a.modified_at = Some(9_900);
    let plan = world.plan(&owner("a"), &seed());
    assert!(plan.jobs.is_empty());
    assert_eq!(
        plan.recheck_in,
        Some(501),
        "checked again once it would count as stuck"
    );
}

#[test]
fn a_release_pending_past_its_timeout_is_cleared_and_applied() {
    let mut world = World::new();
    world.apply(&world.plan(&owner("a"), &seed()));
    let foo: ReleaseKey = "hub/foo/foo".parse().unwrap();
    let a = world.applied.get_mut(&foo).unwrap();
    a.status = "pending-install".into();
    a.modified_at = Some(1_000);
    let plan = world.plan(&owner("a"), &seed());
    assert!(
        matches!(
            &plan.jobs[..],
            [Job::Apply {
                stale_pending: Some(1),
                ..
            }]
        ),
        "{:?}",
        plan.jobs
    );
}

#[test]
fn an_unknown_cluster_is_a_problem_for_that_tenancy_only() {
    let world = World::new();
    let spec = ControllerSpec {
        tenancies: vec![
            tenancy(
                "a",
                &["member-1", "member-9"],
                vec![chart("deployment-example", None, &[])],
            ),
            tenancy(
                "b",
                &["member-2"],
                vec![chart("deployment-example", None, &[])],
            ),
        ],
        ..Default::default()
    };
    let plan = world.plan(&owner("x"), &spec);
    assert_eq!(
        keys(&plan.jobs),
        ["apply member-1/a/a", "apply member-2/b/b"]
    );
    assert_eq!(plan.problems.len(), 1);
    let msg = plan.problems[0].to_string();
    assert!(
        msg.contains("tenancy a")
            && msg.contains("\"member-9\"")
            && msg.contains("hub, member-1, member-2"),
        "{msg}"
    );
}

#[test]
fn a_missing_chart_is_a_problem_for_that_release_only() {
    let world = World::new();
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            "a",
            &[],
            vec![
                chart("missing", Some("m"), &[]),
                chart("deployment-example", None, &[]),
            ],
        )],
        ..Default::default()
    };
    let plan = world.plan(&owner("x"), &spec);
    assert_eq!(keys(&plan.jobs), ["apply hub/a/a"]);
    assert_eq!(plan.problems[0].release().unwrap().to_string(), "hub/a/m");
    assert!(plan.problems[0].to_string().contains("/charts/missing"));
}

#[test]
fn a_cluster_selector_picks_clusters_by_label() {
    let world = World::new();
    let mut t = tenancy("a", &[], vec![chart("deployment-example", None, &[])]);
    t.cluster_selector = Some(ClusterSelector {
        match_labels: BTreeMap::from([("region".into(), "west".into())]),
    });
    let plan = world.plan(
        &owner("x"),
        &ControllerSpec {
            tenancies: vec![t.clone()],
            ..Default::default()
        },
    );
    assert_eq!(keys(&plan.jobs), ["apply member-2/a/a"]);
    t.cluster_selector = Some(ClusterSelector {
        match_labels: BTreeMap::from([("region".into(), "north".into())]),
    });
    let plan = world.plan(
        &owner("x"),
        &ControllerSpec {
            tenancies: vec![t],
            ..Default::default()
        },
    );
    assert!(plan.jobs.is_empty());
    assert_eq!(plan.problems[0].reason(), "NoClusterSelected");
}

#[test]
fn a_release_claimed_by_an_older_resource_is_a_conflict_for_the_newer() {
    let mut world = World::new();
    let keys_of = |o: &OwnerId| {
        desired(
            o,
            &seed(),
            &registry(),
            Path::new("/charts"),
            &lookup,
            &Admission::permissive(),
            &crate::plan::fleet::Fleet::none(),
        )
        .releases
        .into_iter()
        .map(|r| r.key)
        .collect::<Vec<_>>()
    };
    world.claims = claims(
        [
            (owner("new"), 200, keys_of(&owner("new"))),
            (owner("old"), 100, keys_of(&owner("old"))),
        ],
        &world.applied,
    );
    let newer = world.plan(&owner("new"), &seed());
    assert!(newer.jobs.is_empty());
    assert_eq!(newer.problems.len(), 2);
    assert!(
        newer.problems[0]
            .to_string()
            .contains("held by Controller default/old")
    );
    assert_eq!(world.plan(&owner("old"), &seed()).jobs.len(), 2);
}

#[test]
fn a_release_held_outside_tenancy_hub_is_never_touched() {
    let mut world = World::new();
    let key: ReleaseKey = "hub/foo/foo".parse().unwrap();
    world.applied.insert(
        key.clone(),
        Applied {
            key,
            owner: None,
            spec_hash: None,
            revision: 3,
            status: "deployed".into(),
            modified_at: None,
        },
    );
    let plan = world.plan(&owner("a"), &seed());
    assert_eq!(keys(&plan.jobs), ["apply hub/foo/nginx"]);
    assert!(
        plan.problems[0]
            .to_string()
            .contains("not managed by tenancy-hub")
    );
}

#[test]
fn clusters_not_yet_synced_are_waited_for_and_never_uninstalled_from() {
    let mut world = World::new();
    world.apply(&world.plan(&owner("a"), &seed()));
    world.synced.remove(&cluster("hub"));
    let plan = world.plan(&owner("a"), &ControllerSpec::default());
    assert!(plan.jobs.is_empty());
    let plan = world.plan(&owner("a"), &seed());
    assert!(plan.jobs.is_empty());
    assert_eq!(plan.waiting.len(), 2);
}

#[test]
fn a_health_expression_that_does_not_compile_is_a_problem_naming_the_controller_chart_and_kind() {
    let world = World::new();
    let mut broken = chart("missing-expr", Some("m"), &[]);
    broken.chart_name = "deployment-example".into();
    broken.health_check_exprs = vec![crate::api::crd::HealthCheckExpr {
        api_version: "bitnami.com/v1alpha1".into(),
        kind: "SealedSecret".into(),
        current: "status.conditions.exists(c, c.type == ".into(),
        ..Default::default()
    }];
    let mut fine = chart("deployment-example", None, &[]);
    fine.health_check_exprs = vec![crate::api::crd::HealthCheckExpr {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        current: "status.availableReplicas >= 1".into(),
        ..Default::default()
    }];
    let spec = ControllerSpec {
        tenancies: vec![tenancy("a", &[], vec![broken, fine])],
        ..Default::default()
    };
    let plan = world.plan(&owner("x"), &spec);
    assert_eq!(keys(&plan.jobs), ["apply hub/a/a"]);
    assert_eq!(plan.problems[0].reason(), "InvalidHealthCheck");
    let text = plan.problems[0].to_string();
    assert!(
        text.starts_with("release hub/a/m: Controller default/x, chart \"deployment-example\": healthCheckExprs[0] (bitnami.com/v1alpha1 SealedSecret) current: does not compile"),
        "{text}"
    );
    assert_eq!(
        plan.desired[0].health.len(),
        1,
        "the expressions travel with the release"
    );
    let mut fingerprint = plan.desired[0].clone();
    fingerprint.health.clear();
    assert_eq!(
        spec_hash(&fingerprint),
        plan.desired[0].spec_hash,
        "not part of the fingerprint"
    );
}

#[test]
fn the_spec_hash_changes_with_what_helm_sees_and_nothing_else() {
    let world = World::new();
    let base = world.plan(&owner("a"), &seed()).desired[0].clone();
    let mut moved = base.clone();
    moved.source = ChartSource::Directory("/elsewhere/deployment-example".into());
    assert_eq!(spec_hash(&base), spec_hash(&moved));
    let mut changed = base.clone();
    changed.settings[0].1 = "3".into();
    assert_ne!(spec_hash(&base), spec_hash(&changed));
    let mut pinned = base.clone();
    pinned.version = Some("0.1.0".into());
    assert_ne!(spec_hash(&base), spec_hash(&pinned));
    assert_eq!(spec_hash(&base).len(), 16);
    let mut watched = base.clone();
    watched.drift.mode = DriftMode::Enabled;
    assert_eq!(spec_hash(&base), spec_hash(&watched));
}

fn with_drift(mode: DriftMode) -> ControllerSpec {
    let mut spec = seed();
    for chart in &mut spec.tenancies[0].charts {
        chart.drift_detection = Some(DriftDetection {
            mode,
            ignore: Vec::new(),
        });
    }
    spec
}

#[test]
fn drift_of_the_deployed_revision_is_repaired_only_in_enabled_mode() {
    let mut world = World::new();
    let first = world.plan(&owner("a"), &with_drift(DriftMode::Enabled));
    world.apply(&first);
    let key: ReleaseKey = "hub/foo/nginx".parse().unwrap();
    world.drifted.insert(
        key.clone(),
        Drifted {
            revision: 1,
            summary: "Deployment/nginx /spec/replicas".into(),
        },
    );
    let plan = world.plan(&owner("a"), &with_drift(DriftMode::Enabled));
    let [
        Job::Apply {
            release, repair, ..
        },
    ] = plan.jobs.as_slice()
    else {
        panic!("one repair expected: {:?}", plan.jobs);
    };
    assert_eq!(release.key, key);
    assert_eq!(repair.as_deref(), Some("Deployment/nginx /spec/replicas"));
    assert_eq!(
        plan.jobs[0].fingerprint(),
        format!("apply:{}", release.spec_hash)
    );
    assert!(
        world
            .plan(&owner("a"), &with_drift(DriftMode::Warn))
            .jobs
            .is_empty()
    );
    assert!(
        world
            .plan(&owner("a"), &with_drift(DriftMode::Disabled))
            .jobs
            .is_empty()
    );
}

#[test]
fn a_suspended_resource_gets_no_drift_repair_until_resumed() {
    let mut world = World::new();
    let first = world.plan(&owner("a"), &with_drift(DriftMode::Enabled));
    world.apply(&first);
    let key: ReleaseKey = "hub/foo/nginx".parse().unwrap();
    world.drifted.insert(
        key.clone(),
        Drifted {
            revision: 1,
            summary: "Deployment/nginx /spec/replicas".into(),
        },
    );
    let mut suspended = with_drift(DriftMode::Enabled);
    suspended.suspend = true;
    let held = world.plan(&owner("a"), &suspended);
    assert!(held.jobs.is_empty(), "{:?}", held.jobs);
    assert_eq!(held.suspended, std::slice::from_ref(&key));
    let resumed = world.plan(&owner("a"), &with_drift(DriftMode::Enabled));
    assert_eq!(keys(&resumed.jobs), [format!("apply {key}")]);
}

#[test]
fn drift_found_in_an_older_revision_is_not_repaired_again() {
    let mut world = World::new();
    let first = world.plan(&owner("a"), &with_drift(DriftMode::Enabled));
    world.apply(&first);
    world.apply(&first);
    world.drifted.insert(
        "hub/foo/nginx".parse().unwrap(),
        Drifted {
            revision: 1,
            summary: "Service/nginx missing".into(),
        },
    );
    assert!(
        world
            .plan(&owner("a"), &with_drift(DriftMode::Enabled))
            .jobs
            .is_empty()
    );
}

#[test]
fn a_drifted_release_held_by_another_owner_is_not_repaired() {
    let mut world = World::new();
    let first = world.plan(&owner("a"), &with_drift(DriftMode::Enabled));
    world.apply(&first);
    world.drifted.insert(
        "hub/foo/nginx".parse().unwrap(),
        Drifted {
            revision: 1,
            summary: "Service/nginx missing".into(),
        },
    );
    let plan = world.plan(&owner("b"), &with_drift(DriftMode::Enabled));
    assert!(plan.jobs.is_empty());
    assert!(plan.problems.iter().all(|p| p.reason() == "Conflict"));
}

#[test]
fn a_suspended_controller_makes_no_helm_call_and_resuming_catches_up_with_the_newest_spec() {
    let mut world = World::new();
    let mut spec = seed();
    world.apply(&world.plan(&owner("a"), &spec));
    spec.suspend = true;
    spec.tenancies[0].charts[0].settings[0].value = "5".into();
    spec.tenancies[0].charts.pop();
    let held = world.plan(&owner("a"), &spec);
    assert!(held.jobs.is_empty(), "{:?}", keys(&held.jobs));
    assert_eq!(
        held.suspended,
        [
            "hub/foo/foo".parse().unwrap(),
            "hub/foo/nginx".parse().unwrap()
        ],
        "the upgrade and the uninstall are both held back"
    );
    assert_eq!(held.desired.len(), 1, "status still covers the release");
    assert!(held.suspension.unwrap().contains("spec.suspend"));
    spec.suspend = false;
    let resumed = world.plan(&owner("a"), &spec);
    assert_eq!(
        keys(&resumed.jobs),
        ["apply hub/foo/foo", "uninstall hub/foo/nginx"]
    );
    assert!(resumed.suspended.is_empty() && resumed.suspension.is_none());
}

#[test]
fn a_suspended_tenancy_holds_back_its_own_releases_only() {
    let world = World::new();
    let mut held = tenancy("a", &["member-1"], vec![chart("web", None, &[])]);
    held.suspend = true;
    let spec = ControllerSpec {
        tenancies: vec![
            held,
            tenancy("b", &["member-1"], vec![chart("web", None, &[])]),
        ],
        ..Default::default()
    };
    let plan = world.plan(&owner("x"), &spec);
    assert_eq!(keys(&plan.jobs), ["apply member-1/b/b"]);
    assert_eq!(plan.suspended, ["member-1/a/a".parse().unwrap()]);
    let key = |k: &str| k.parse::<ReleaseKey>().unwrap();
    let held = Held::of(&spec, &world.clusters);
    assert!(held.holds(&key("member-1/a/gone")));
    assert!(!held.holds(&key("member-2/a/a")));
    assert!(!held.holds(&key("member-1/b/b")));
    assert_eq!(
        suspension(&spec).unwrap(),
        "tenancies a are suspended: no Helm call is made for their releases"
    );
}

#[test]
fn an_unchanged_suspended_release_is_not_listed_as_held_back() {
    let mut world = World::new();
    let mut spec = seed();
    world.apply(&world.plan(&owner("a"), &spec));
    spec.suspend = true;
    let plan = world.plan(&owner("a"), &spec);
    assert!(plan.jobs.is_empty() && plan.suspended.is_empty());
}

#[test]
fn setting_keys_helm_would_split_are_refused() {
    let world = World::new();
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            "a",
            &[],
            vec![chart("deployment-example", None, &[("a,b", "1")])],
        )],
        ..Default::default()
    };
    let plan = world.plan(&owner("x"), &spec);
    assert!(plan.jobs.is_empty());
    assert_eq!(plan.problems[0].reason(), "InvalidSetting");
}

#[test]
fn a_chart_a_policy_asks_signatures_of_is_planned_only_verified_and_its_refusal_is_unverified() {
    use crate::api::policy::{SourceAccess, SourceVerify, TenancyPolicySpec, VerifyProvider};
    let url = "oci://registry.example.com/charts/";
    let admission = Admission {
        mode: crate::policy::Mode::Permissive,
        policies: vec![crate::policy::NamedPolicy::new(
            "platform",
            TenancyPolicySpec {
                hub_namespaces: vec!["default".into()],
                sources: vec![SourceAccess {
                    url: url.into(),
                    verify: Some(SourceVerify {
                        provider: VerifyProvider::Cosign,
                        secret_ref: crate::api::crd::SecretReference {
                            name: "keys".into(),
                        },
                        trusted_identities: Vec::new(),
                        match_oidc_identity: Vec::new(),
                        transparency_log: None,
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            },
        )],
        operator_namespace: "tenancy-hub".into(),
    };
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            "shop",
            &["member-1"],
            vec![
                chart(&format!("{url}signed"), Some("signed"), &[]),
                chart(&format!("{url}refused"), Some("refused"), &[]),
                chart(&format!("{url}unchecked"), Some("unchecked"), &[]),
                chart("oci://elsewhere.example.com/free", Some("free"), &[]),
            ],
        )],
        ..Default::default()
    };
    let verified = crate::plan::Verified {
        by: "cosign: key sha256:12".into(),
        archive: "ab".repeat(32),
    };
    let found = |source: &ChartSource,
                 _: &crate::policy::access::Credentials,
                 trust: &crate::policy::access::Trust,
                 _: Option<&str>| {
        let ChartSource::Oci(reference) = source else {
            panic!("{source:?}")
        };
        let ruled = !trust.is_empty();
        assert_eq!(ruled, reference.starts_with(url), "{reference}");
        match reference.rsplit('/').next().unwrap() {
            "signed" => ChartLookup::Found {
                commit: None,
                version: Some("1.0.0".into()),
                digest: Some("sha256:cd".into()),
                verified: Some(verified.clone()),
            },
            "refused" => ChartLookup::Unverified("refused by cosign: no signature".into()),
            _ => ChartLookup::Found {
                commit: None,
                version: Some("1.0.0".into()),
                digest: Some("sha256:ef".into()),
                verified: None,
            },
        }
    };
    let d = desired(
        &owner("default"),
        &spec,
        &registry(),
        Path::new("/charts"),
        &found,
        &admission,
        &crate::plan::fleet::Fleet::none(),
    );
    let planned: BTreeMap<&str, Option<&crate::plan::Verified>> = d
        .releases
        .iter()
        .map(|r| (r.key.release.as_str(), r.verified.as_ref()))
        .collect();
    assert_eq!(
        planned,
        BTreeMap::from([("free", None), ("signed", Some(&verified))]),
        "the verified chart carries its check; a chart no rule covers is planned as before"
    );
    let unverified: Vec<(&str, String)> = d
        .problems
        .iter()
        .map(|p| {
            assert_eq!(p.reason(), "Unverified", "{p}");
            (p.release().unwrap().release.as_str(), p.to_string())
        })
        .collect();
    assert_eq!(unverified.len(), 2, "{unverified:?}");
    assert!(unverified[0].1.contains("refused by cosign: no signature"));
    assert!(unverified[1].1.contains("not checked yet"));
    assert!(
        d.named.iter().any(|k| k.release == "refused"),
        "an unverified release stays named: what runs is not uninstalled"
    );
}

/// The seed with every chart asking Helm for its own timeouts, waits, hooks and history.
fn with_helm_settings(crds: crate::api::crd::CrdPolicy) -> ControllerSpec {
    use crate::api::crd::{Install, Uninstall, Upgrade};
    let mut spec = seed();
    for chart in &mut spec.tenancies[0].charts {
        chart.install = Some(Install {
            timeout: Some("20s".into()),
            wait_for_jobs: true,
            ..Install::default()
        });
        chart.upgrade = Some(Upgrade {
            timeout: Some("45m".into()),
            force: true,
            crds: Some(crds),
            ..Upgrade::default()
        });
        chart.uninstall = Some(Uninstall {
            keep_history: true,
            ..Uninstall::default()
        });
        chart.max_history = Some(12);
    }
    spec
}

#[test]
fn helm_settings_alone_keep_the_fingerprint_and_make_no_revision() {
    use crate::api::crd::CrdPolicy;
    let mut world = World::new();
    let before = world.plan(&owner("a"), &seed());
    world.apply(&before);
    let after = world.plan(&owner("a"), &with_helm_settings(CrdPolicy::Create));
    assert!(after.jobs.is_empty(), "{:?}", after.jobs);
    assert!(after.problems.is_empty(), "{:?}", after.problems);
    for (old, new) in before.desired.iter().zip(&after.desired) {
        assert_eq!(old.spec_hash, new.spec_hash, "{}", new.key);
        assert_eq!(spec_hash(old), spec_hash(new));
        assert_eq!(new.helm.max_history, Some(12));
        assert_eq!(new.helm.upgrade.crds, Some(CrdPolicy::Create));
    }
}

#[test]
fn the_next_helm_action_of_a_release_carries_its_settings() {
    use crate::api::crd::CrdPolicy;
    let mut world = World::new();
    world.apply(&world.plan(&owner("a"), &seed()));
    let mut spec = with_helm_settings(CrdPolicy::Skip);
    spec.tenancies[0].charts[0].settings[0].value = "3".into();
    let plan = world.plan(&owner("a"), &spec);
    let [Job::Apply { release, .. }] = plan.jobs.as_slice() else {
        panic!("one upgrade expected: {:?}", plan.jobs);
    };
    assert_eq!(release.helm.install.timeout.as_deref(), Some("20s"));
    assert!(release.helm.install.wait_for_jobs && release.helm.upgrade.force);
    assert!(release.helm.uninstall.keep_history);
    assert_eq!(release.helm.apply_timeout_secs(), Some(45 * 60));
}

#[test]
fn a_crd_policy_of_create_replace_is_planned_with_the_release_for_the_policy_to_judge() {
    use crate::api::crd::CrdPolicy;
    let world = World::new();
    let plan = world.plan(&owner("a"), &with_helm_settings(CrdPolicy::CreateReplace));
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    assert!(!plan.desired.is_empty());
    for release in &plan.desired {
        assert_eq!(release.helm.upgrade.crds, Some(CrdPolicy::CreateReplace));
    }
}

#[test]
fn an_uninstall_takes_the_settings_of_the_entry_releasing_it_or_the_defaults() {
    let spec = with_helm_settings(crate::api::crd::CrdPolicy::Skip);
    let nginx: ReleaseKey = "member-1/foo/nginx".parse().unwrap();
    assert!(uninstall_settings(&spec, &nginx).keep_history);
    let other: ReleaseKey = "member-1/bar/nginx".parse().unwrap();
    assert_eq!(uninstall_settings(&spec, &other), Default::default());
}

#[test]
fn a_release_with_a_longer_timeout_of_its_own_is_left_pending_that_long() {
    use crate::api::crd::CrdPolicy;
    let mut world = World::new();
    let spec = with_helm_settings(CrdPolicy::Skip);
    world.apply(&world.plan(&owner("a"), &spec));
    let key: ReleaseKey = "hub/foo/foo".parse().unwrap();
    let deployed = world.applied[&key].clone();
    let pending = |age: i64| Applied {
        status: "pending-upgrade".into(),
        modified_at: Some(10_000 - age),
        ..deployed.clone()
    };
    // 601 s: past the operator's 600, well within the chart's own 45 minutes and a minute.
    world.applied.insert(key.clone(), pending(601));
    assert!(world.plan(&owner("a"), &spec).jobs.is_empty());
    world.applied.insert(key.clone(), pending(45 * 60 + 61));
    let plan = world.plan(&owner("a"), &spec);
    assert!(
        matches!(
            plan.jobs.as_slice(),
            [Job::Apply {
                stale_pending: Some(_),
                ..
            }]
        ),
        "{:?}",
        plan.jobs
    );
}

#[test]
fn an_apply_with_other_helm_settings_is_another_job_for_the_same_revision() {
    use crate::api::crd::CrdPolicy;
    let world = World::new();
    let plain = world.plan(&owner("a"), &seed());
    let with = world.plan(&owner("a"), &with_helm_settings(CrdPolicy::Skip));
    let longer = {
        let mut spec = with_helm_settings(CrdPolicy::Skip);
        spec.tenancies[0].charts[0]
            .install
            .as_mut()
            .unwrap()
            .timeout = Some("10m".into());
        world.plan(&owner("a"), &spec)
    };
    let key = plain.jobs[0].key().clone();
    let job = |plan: &Plan| plan.jobs.iter().find(|j| *j.key() == key).unwrap().clone();
    let spec_hash = plain.desired[0].spec_hash.clone();
    assert_eq!(job(&plain).fingerprint(), format!("apply:{spec_hash}"));
    let (a, b) = (job(&with).fingerprint(), job(&longer).fingerprint());
    assert!(a.starts_with(&format!("apply:{spec_hash}:")), "{a}");
    assert_ne!(a, b, "a changed timeout is another job");
    assert!(b.starts_with(&format!("apply:{spec_hash}:")), "{b}");
}

mod adoption;
mod git;
/// Two releases on two clusters; `web` patched on the east cluster by an override.
fn with_east_patch(value: &str) -> ControllerSpec {
    use crate::api::crd::{ChartOverride, ClusterSelector, Kustomize, Patch, PostRenderer};
    let mut web = chart("deployment-example", Some("web"), &[]);
    web.overrides = vec![ChartOverride {
        cluster_selector: ClusterSelector {
            match_labels: BTreeMap::from([("region".into(), "east".into())]),
        },
        post_renderers: vec![PostRenderer {
            kustomize: Some(Kustomize {
                patches: vec![Patch {
                    patch: format!(
                        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels:\n    tier: {value}\n"
                    ),
                    target: None,
                }],
                images: Vec::new(),
            }),
        }],
        ..ChartOverride::default()
    }];
    ControllerSpec {
        tenancies: vec![tenancy(
            "team",
            &["member-1", "member-2"],
            vec![web, chart("statefulset-example", Some("db"), &[])],
        )],
        ..Default::default()
    }
}

#[test]
fn a_changed_patch_upgrades_exactly_the_releases_it_patches_and_an_unchanged_one_none() {
    let mut world = World::new();
    let first = world.plan(&owner("a"), &with_east_patch("gold"));
    assert_eq!(first.jobs.len(), 4);
    world.apply(&first);
    let again = world.plan(&owner("a"), &with_east_patch("gold"));
    assert!(again.jobs.is_empty(), "{:?}", again.jobs);
    let changed = world.plan(&owner("a"), &with_east_patch("silver"));
    assert_eq!(keys(&changed.jobs), ["apply member-1/team/web"]);
    let [Job::Apply { release, .. }] = changed.jobs.as_slice() else {
        unreachable!()
    };
    let post_render = release
        .post_render
        .as_ref()
        .expect("the patch travels with the job");
    assert!(
        post_render.renderers[0].patches[0]
            .patch
            .contains("tier: silver")
    );
}

#[test]
fn a_post_render_adds_to_the_fingerprint_only_where_it_applies() {
    let world = World::new();
    let mut plain = with_east_patch("gold");
    plain.tenancies[0].charts[0].overrides.clear();
    let before = world.plan(&owner("a"), &plain);
    let after = world.plan(&owner("a"), &with_east_patch("gold"));
    let changed: Vec<String> = before
        .desired
        .iter()
        .zip(&after.desired)
        .filter(|(old, new)| old.spec_hash != new.spec_hash)
        .map(|(_, new)| new.key.to_string())
        .collect();
    assert_eq!(changed, ["member-1/team/web"]);
}

#[test]
fn the_executor_is_told_of_sensitive_kinds_only_where_the_allowing_policy_says_so() {
    let allowances = |sensitive: bool| {
        let mut w = World::new();
        let mut p = policy(&["team"], &["member-1", "member-2"]);
        p.spec.helm = Some(crate::api::policy::HelmRule {
            allow_post_render_sensitive_kinds: sensitive,
            ..Default::default()
        });
        w.admission = enforcing(vec![p]);
        let plan = w.plan(&owner("a"), &with_east_patch("gold"));
        plan.desired
            .iter()
            .filter_map(|r| {
                Some((
                    r.key.to_string(),
                    r.post_render.as_ref()?.allow_sensitive_kinds,
                ))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(allowances(false), [("member-1/team/web".to_owned(), false)]);
    assert_eq!(allowances(true), [("member-1/team/web".to_owned(), true)]);
}
