//! Tests of `dependsOn`: the graph a spec names (cycles, missing names, other tenancies, names
//! that could be read two ways), the gate on installs and upgrades, and the uninstall order.

use super::*;
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
};

use crate::{
    api::crd::{Chart, ControllerSpec, Tenancy},
    api::key::{ClusterName, ReleaseKey},
    plan::{Inputs, Plan, plan},
    policy::Admission,
};

fn key(k: &str) -> ReleaseKey {
    k.parse().unwrap()
}

fn clusters() -> BTreeMap<ClusterName, BTreeMap<String, String>> {
    ["member-1", "member-2"]
        .iter()
        .map(|c| (c.parse().unwrap(), BTreeMap::new()))
        .collect()
}

fn chart(release: &str, depends_on: &[&str]) -> Chart {
    Chart {
        chart_name: "deployment-example".into(),
        release_name: Some(release.into()),
        depends_on: depends_on.iter().map(|d| d.to_string()).collect(),
        ..Default::default()
    }
}

fn tenancy(namespace: &str, clusters: &[&str], charts: Vec<Chart>) -> Tenancy {
    Tenancy {
        namespace: namespace.into(),
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        charts,
        ..Default::default()
    }
}

fn spec(tenancies: Vec<Tenancy>) -> ControllerSpec {
    ControllerSpec {
        tenancies,
        ..Default::default()
    }
}

fn owner() -> OwnerId {
    OwnerId {
        namespace: "team-a".into(),
        name: "app".into(),
    }
}

/// The plan of `spec` with nothing installed yet, every cluster synced.
fn planned(spec: &ControllerSpec) -> Plan {
    let clusters = clusters();
    let synced = clusters.keys().cloned().collect();
    let found = |_: &ChartSource,
                 _: &crate::policy::access::Credentials,
                 _: &crate::policy::access::Trust,
                 _: Option<&str>| {
        ChartLookup::Found {
            commit: None,
            version: None,
            digest: None,
            verified: None,
        }
    };
    plan(&Inputs {
        fleet: &crate::plan::fleet::Fleet::none(),
        owner: &owner(),
        spec,
        clusters: &clusters,
        synced: &synced,
        applied: &HashMap::new(),
        claims: &HashMap::new(),
        admission: &Admission::permissive(),
        chart_home: Path::new("/charts"),
        chart_lookup: &found,
        now: 0,
        pending_timeout_secs: 600,
        drifted: &HashMap::new(),
    })
}

/// The problems of a plan as (release key, text).
fn problems(plan: &Plan) -> Vec<(String, String)> {
    plan.problems
        .iter()
        .map(|p| {
            (
                p.release().map(ToString::to_string).unwrap_or_default(),
                p.to_string(),
            )
        })
        .collect()
}

fn applied_keys(plan: &Plan) -> BTreeSet<String> {
    plan.jobs.iter().map(|j| j.key().to_string()).collect()
}

#[test]
fn a_cycle_makes_the_releases_on_it_invalid_naming_the_chain_and_leaves_the_rest_planned() {
    let plan = planned(&spec(vec![tenancy(
        "shop",
        &["member-1"],
        vec![
            chart("web", &["api"]),
            chart("api", &["web"]),
            chart("front", &["web"]),
            chart("db", &[]),
        ],
    )]));
    let found = problems(&plan);
    assert_eq!(found.len(), 2, "{found:?}");
    let text = |k: &str| &found.iter().find(|(key, _)| key == k).unwrap().1;
    assert!(
        text("member-1/shop/web").contains("dependsOn forms a cycle: web → api → web"),
        "{found:?}"
    );
    assert!(
        text("member-1/shop/api").contains("dependsOn forms a cycle: api → web → api"),
        "{found:?}"
    );
    assert_eq!(plan.problems[0].reason(), "DependencyCycle");
    // No Helm job for the releases on the cycle; one that depends on it is planned (and waits).
    assert_eq!(
        applied_keys(&plan),
        BTreeSet::from(["member-1/shop/front".into(), "member-1/shop/db".into()])
    );
    assert_eq!(
        plan.depends_on[&key("member-1/shop/front")],
        BTreeSet::from([key("member-1/shop/web")])
    );
}

#[test]
fn a_release_depending_on_itself_is_a_cycle_of_one() {
    let plan = planned(&spec(vec![tenancy(
        "shop",
        &["member-1"],
        vec![chart("web", &["web"])],
    )]));
    assert!(
        problems(&plan)[0]
            .1
            .contains("dependsOn forms a cycle: web → web"),
        "{:?}",
        plan.problems
    );
    assert!(plan.jobs.is_empty());
}

#[test]
fn a_long_cycle_across_tenancies_names_its_releases_from_the_one_told() {
    let plan = planned(&spec(vec![
        tenancy("a", &["member-1"], vec![chart("one", &["b/two"])]),
        tenancy("b", &["member-1"], vec![chart("two", &["a/one"])]),
    ]));
    let found = problems(&plan);
    assert!(found[0].1.contains("cycle: one → b/two → one"), "{found:?}");
    assert!(found[1].1.contains("cycle: two → a/one → two"), "{found:?}");
}

#[test]
fn a_missing_name_makes_only_its_dependent_invalid_and_lists_the_releases_there() {
    let plan = planned(&spec(vec![tenancy(
        "shop",
        &["member-1"],
        vec![chart("web", &["db"]), chart("api", &[])],
    )]));
    assert_eq!(
        problems(&plan),
        vec![(
            "member-1/shop/web".into(),
            "release member-1/shop/web: dependsOn names db, which this resource does not release on cluster member-1 (its releases there: api); nothing is installed or changed for it until the spec names a release it has there (what runs stays as it is)".into()
        )]
    );
    assert_eq!(plan.problems[0].reason(), "UnknownDependency");
    assert_eq!(
        applied_keys(&plan),
        BTreeSet::from(["member-1/shop/api".into()])
    );
}

#[test]
fn another_tenancy_is_named_namespace_slash_release_and_only_on_the_same_cluster() {
    // `data` goes to member-1 only: on member-2, web's dependency is not released.
    let plan = planned(&spec(vec![
        tenancy(
            "shop",
            &["member-1", "member-2"],
            vec![chart("web", &["data/db"])],
        ),
        tenancy("data", &["member-1"], vec![chart("db", &[])]),
    ]));
    assert_eq!(
        plan.depends_on[&key("member-1/shop/web")],
        BTreeSet::from([key("member-1/data/db")])
    );
    let found = problems(&plan);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "member-2/shop/web");
    assert!(
        found[0]
            .1
            .contains("dependsOn names data/db, which this resource does not release on cluster member-2 (its releases there: none)"),
        "{found:?}"
    );
    assert_eq!(
        applied_keys(&plan),
        BTreeSet::from(["member-1/shop/web".into(), "member-1/data/db".into()])
    );
}

#[test]
fn names_that_could_be_read_two_ways_are_read_one_way() {
    // A bare name is always the dependent's own namespace, even when another tenancy on the
    // cluster has a release of that name; `own-namespace/name` is the same release as `name`.
    let plan = planned(&spec(vec![
        tenancy(
            "shop",
            &["member-1"],
            vec![chart("web", &["db", "shop/db"]), chart("db", &[])],
        ),
        tenancy(
            "data",
            &["member-1"],
            vec![chart("db", &[]), chart("api", &["db"])],
        ),
    ]));
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
    assert_eq!(
        plan.depends_on[&key("member-1/shop/web")],
        BTreeSet::from([key("member-1/shop/db")])
    );
    assert_eq!(
        plan.depends_on[&key("member-1/data/api")],
        BTreeSet::from([key("member-1/data/db")])
    );
    // An entry that cannot name a release at all is a missing name, not a guess.
    let plan = planned(&spec(vec![tenancy(
        "shop",
        &["member-1"],
        vec![chart("web", &["a/b/c"]), chart("db", &[])],
    )]));
    assert!(
        problems(&plan)[0]
            .1
            .contains("dependsOn names a/b/c, which"),
        "{:?}",
        plan.problems
    );
}

#[test]
fn a_release_asked_for_twice_is_named_but_only_its_duplicate_problem_is_told() {
    let plan = planned(&spec(vec![
        tenancy(
            "shop",
            &["member-1"],
            vec![chart("web", &["db"]), chart("db", &[])],
        ),
        tenancy("shop", &["member-1"], vec![chart("db", &["web"])]),
    ]));
    // db is a duplicate (Invalid, no job); web depends on it, so web's install waits for it.
    let reasons: Vec<&str> = plan.problems.iter().map(Problem::reason).collect();
    assert_eq!(reasons, ["DuplicateRelease"], "{:?}", plan.problems);
    assert_eq!(
        plan.depends_on[&key("member-1/shop/web")],
        BTreeSet::from([key("member-1/shop/db")])
    );
}

fn apply_job(k: &str) -> Job {
    let key = key(k);
    Job::Apply {
        adopt: false,
        release: Box::new(Release {
            health: Vec::new(),
            adoption: Default::default(),
            commit: None,
            masked: Default::default(),
            post_render: None,
            credentials: Default::default(),
            verified: None,
            key: key.clone(),
            owner: owner(),
            chart_name: "deployment-example".into(),
            source: ChartSource::Directory("deployment-example".into()),
            version: None,
            chart_digest: None,
            settings: Vec::new(),
            values: None,
            rollback_on_failure: false,
            spec_hash: "h".into(),
            identity: None,
            drift: Default::default(),
            helm: Default::default(),
        }),
        stale_pending: None,
        repair: None,
        installing: false,
        attempt: 0,
    }
}

fn uninstall_job(k: &str) -> Job {
    Job::Uninstall {
        key: key(k),
        owner: owner(),
        identity: None,
        settings: Default::default(),
    }
}

fn edges(pairs: &[(&str, &str)]) -> Edges {
    let mut out = Edges::new();
    for (from, to) in pairs {
        out.entry(key(from)).or_default().insert(key(to));
    }
    out
}

#[test]
fn an_install_waits_until_what_it_depends_on_is_ready_and_says_what_it_waits_for() {
    let e = edges(&[("member-1/shop/web", "member-1/shop/db")]);
    let jobs = vec![
        apply_job("member-1/shop/db"),
        apply_job("member-1/shop/web"),
    ];
    let not_ready = |_: &ReleaseKey| {
        Some("not ready: Deployment shop/db not rolled out (0/1 ready)".to_owned())
    };
    let (go, held) = gate(jobs.clone(), &e, &not_ready, &|_| false);
    assert_eq!(go, vec![jobs[0].clone()]);
    assert_eq!(
        held,
        Held::from([(
            key("member-1/shop/web"),
            "waiting for dependency db (not ready: Deployment shop/db not rolled out (0/1 ready))"
                .into()
        )])
    );
    // Ready: both go.
    let (go, held) = gate(jobs.clone(), &e, &|_| None, &|_| false);
    assert_eq!((go, held), (jobs, Held::new()));
}

#[test]
fn an_install_waiting_for_several_names_the_first_and_counts_the_rest() {
    let e = edges(&[
        ("member-1/shop/web", "member-1/shop/db"),
        ("member-1/shop/web", "member-1/data/cache"),
    ]);
    let (_, held) = gate(
        vec![apply_job("member-1/shop/web")],
        &e,
        &|d| Some(format!("not deployed: release {} is Pending", d.release)),
        &|_| false,
    );
    assert_eq!(
        held[&key("member-1/shop/web")],
        "waiting for dependency data/cache (not deployed: release cache is Pending) and 1 more"
    );
}

#[test]
fn an_uninstall_waits_while_a_release_depending_on_it_is_installed() {
    let e = edges(&[("member-1/shop/web", "member-1/shop/db")]);
    let jobs = vec![
        uninstall_job("member-1/shop/web"),
        uninstall_job("member-1/shop/db"),
    ];
    let installed = |k: &ReleaseKey| k.release == "web";
    let (go, held) = gate(jobs.clone(), &e, &|_| None, &installed);
    assert_eq!(go, vec![jobs[0].clone()], "the dependent goes first");
    assert_eq!(
        held[&key("member-1/shop/db")],
        "uninstalled after the releases that depend on it: waiting for web to be uninstalled first"
    );
    // Once web is gone, db goes.
    let (go, held) = gate(vec![jobs[1].clone()], &e, &|_| None, &|_| false);
    assert_eq!((go.len(), held.len()), (1, 0));
    // Rollbacks are never held.
    let rollback = Job::Rollback {
        key: key("member-1/shop/web"),
        owner: owner(),
        from: 3,
        identity: None,
        helm: Default::default(),
    };
    let (go, _) = gate(vec![rollback.clone()], &e, &|_| Some("no".into()), &|_| {
        true
    });
    assert_eq!(go, vec![rollback]);
}

#[test]
fn the_removal_order_of_a_deleted_resource_goes_from_dependents_down_and_never_deadlocks() {
    let e = edges(&[
        ("member-1/shop/web", "member-1/shop/api"),
        ("member-1/shop/api", "member-1/shop/db"),
        // A cycle remembered from two specs has no order: its releases go in any.
        ("member-1/shop/x", "member-1/shop/y"),
        ("member-1/shop/y", "member-1/shop/x"),
    ]);
    let mut removing: BTreeSet<ReleaseKey> = ["web", "api", "db", "x", "y"]
        .iter()
        .map(|r| key(&format!("member-1/shop/{r}")))
        .collect();
    let mut order = Vec::new();
    while !removing.is_empty() {
        let held = removal_order(&removing, &e, &|k| removing.contains(k));
        let go: Vec<ReleaseKey> = removing
            .iter()
            .filter(|k| !held.contains_key(*k))
            .cloned()
            .collect();
        assert!(!go.is_empty(), "stuck with {removing:?}: {held:?}");
        order.push(go.iter().map(|k| k.release.clone()).collect::<Vec<_>>());
        for k in go {
            removing.remove(&k);
        }
    }
    assert_eq!(order, [vec!["web", "x", "y"], vec!["api"], vec!["db"]]);
}

#[test]
fn edges_are_remembered_for_releases_dropped_from_the_spec_while_they_are_installed() {
    let current = edges(&[("member-1/shop/web", "member-1/shop/db")]);
    let old = edges(&[
        ("member-1/shop/web", "member-1/shop/old"),
        ("member-1/shop/front", "member-1/shop/web"),
        ("member-1/shop/gone", "member-1/shop/web"),
    ]);
    let named = |k: &ReleaseKey| k.release == "web" || k.release == "db";
    let installed = |k: &ReleaseKey| k.release != "gone";
    let kept = remembered(&current, &named, &old, &installed);
    assert_eq!(
        kept,
        edges(&[
            // The spec's edges win for what it names; front, dropped but installed, keeps its.
            ("member-1/shop/web", "member-1/shop/db"),
            ("member-1/shop/front", "member-1/shop/web"),
        ])
    );
}

#[test]
fn a_spec_without_depends_on_costs_nothing_and_holds_nothing() {
    let plan = planned(&spec(vec![tenancy(
        "shop",
        &["member-1"],
        vec![chart("web", &[]), chart("db", &[])],
    )]));
    assert!(plan.depends_on.is_empty());
    let jobs = plan.jobs.clone();
    let (go, held) = gate(plan.jobs, &Edges::new(), &|_| Some("no".into()), &|_| true);
    assert_eq!((go, held), (jobs, Held::new()));
}
