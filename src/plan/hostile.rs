//! Hostile specs against the planner and admission: each attack found as a test, and a property test over generated specs and policies (test-only).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
};

use proptest::prelude::*;

use crate::{
    api::crd::{Chart, ClusterSelector, ControllerSpec, Setting, Tenancy},
    api::key::{ClusterName, ReleaseKey},
    api::policy::{Impersonation, PolicyClusterSelector, TenancyPolicySpec},
    plan::limits::{MAX_CHARTS, MAX_RELEASES},
    plan::{
        Applied, ChartLookup, ChartSource, Desired, Inputs, Job, OwnerId, Plan, Problem, desired,
        plan,
    },
    policy::{Admission, Mode, NamedPolicy},
};

type Registry = BTreeMap<ClusterName, BTreeMap<String, String>>;

fn owner() -> OwnerId {
    OwnerId {
        namespace: "default".into(),
        name: "hostile".into(),
    }
}

fn found(
    _: &ChartSource,
    _: &crate::policy::access::Credentials,
    _: &crate::policy::access::Trust,
    _: Option<&str>,
) -> ChartLookup {
    ChartLookup::Found {
        commit: None,
        version: None,
        digest: None,
        verified: None,
    }
}

/// The hub and `members` clusters member-0 …, half of them labelled `tier: a`, the rest `tier: b`.
fn registry(members: usize) -> Registry {
    let mut out = BTreeMap::from([("hub".parse().unwrap(), BTreeMap::new())]);
    for i in 0..members {
        let tier = if i % 2 == 0 { "a" } else { "b" };
        out.insert(
            format!("member-{i}").parse().unwrap(),
            BTreeMap::from([("tier".to_owned(), tier.to_owned())]),
        );
    }
    out
}

fn chart(name: &str, release: &str, keys: &[&str]) -> Chart {
    Chart {
        chart_name: name.into(),
        release_name: Some(release.into()),
        settings: keys
            .iter()
            .map(|k| Setting {
                key: (*k).into(),
                value: "1".into(),
            })
            .collect(),
        ..Chart::default()
    }
}

/// `tenancies` tenancies of namespace `foo` on the hub, each with the same `charts` releases.
fn same_releases(tenancies: usize, charts: usize) -> ControllerSpec {
    let charts: Vec<Chart> = (0..charts)
        .map(|i| chart("deployment-example", &format!("r{i}"), &[]))
        .collect();
    ControllerSpec {
        tenancies: (0..tenancies)
            .map(|_| Tenancy {
                namespace: "foo".into(),
                charts: charts.clone(),
                ..Tenancy::default()
            })
            .collect(),
        ..ControllerSpec::default()
    }
}

fn desired_of(spec: &ControllerSpec, clusters: &Registry) -> Desired {
    desired(
        &owner(),
        spec,
        clusters,
        Path::new("/charts"),
        &found,
        &Admission::permissive(),
        &crate::plan::fleet::Fleet::none(),
    )
}

fn plan_of(
    spec: &ControllerSpec,
    clusters: &Registry,
    applied: &HashMap<ReleaseKey, Applied>,
) -> Plan {
    plan_with(spec, clusters, applied, &Admission::permissive())
}

fn plan_with(
    spec: &ControllerSpec,
    clusters: &Registry,
    applied: &HashMap<ReleaseKey, Applied>,
    admission: &Admission,
) -> Plan {
    let synced: BTreeSet<ClusterName> = clusters.keys().cloned().collect();
    plan(&Inputs {
        fleet: &crate::plan::fleet::Fleet::none(),
        owner: &owner(),
        spec,
        clusters,
        synced: &synced,
        applied,
        claims: &HashMap::new(),
        admission,
        chart_home: Path::new("/charts"),
        chart_lookup: &found,
        now: 10_000,
        pending_timeout_secs: 600,
        drifted: &HashMap::new(),
    })
}

#[test]
fn four_hundred_tenancies_of_the_same_sixteen_releases_make_sixteen_short_problems() {
    let d = desired_of(&same_releases(400, 16), &registry(0));
    assert!(d.releases.is_empty(), "no duplicate is planned");
    assert_eq!(d.named.len(), 16);
    assert_eq!(
        d.problems.len(),
        16,
        "one problem per key, not per entry or pair"
    );
    for problem in &d.problems {
        let Problem::Duplicate { count, entries, .. } = problem else {
            panic!("{problem}");
        };
        assert_eq!((*count, entries.len()), (400, 3));
        let text = problem.to_string();
        assert!(text.len() < 400, "{} bytes: {text}", text.len());
        assert!(
            text.contains("by 400 entries") && text.contains("and 397 more"),
            "{text}"
        );
    }
}

#[test]
fn a_spec_over_the_chart_limit_is_one_problem_and_uninstalls_nothing() {
    let spec = same_releases(MAX_CHARTS / 16 + 1, 16);
    let key: ReleaseKey = "hub/foo/r0".parse().unwrap();
    let applied = HashMap::from([(
        key.clone(),
        Applied {
            key,
            owner: Some(owner()),
            spec_hash: Some("h".into()),
            revision: 1,
            status: "deployed".into(),
            modified_at: Some(1),
        },
    )]);
    let p = plan_of(&spec, &registry(0), &applied);
    assert!(p.jobs.is_empty() && p.desired.is_empty(), "{:?}", p.jobs);
    let [problem] = &p.problems[..] else {
        panic!("{:?}", p.problems)
    };
    assert_eq!(problem.reason(), "SpecTooLarge");
    assert_eq!(
        problem.to_string(),
        format!(
            "Controller default/hostile asks for {} charts, more than the {MAX_CHARTS} one Controller may; nothing of it is planned and what runs stays as it is: split it into several Controllers",
            (MAX_CHARTS / 16 + 1) * 16
        )
    );
}

#[test]
fn a_selector_fanning_out_past_the_release_limit_is_refused_before_any_key_is_made() {
    // 1,000 charts, well within the chart limit, on 21 selected clusters (the hub and 20
    // members): 21,000 releases.
    let mut spec = same_releases(100, 10);
    for (i, t) in spec.tenancies.iter_mut().enumerate() {
        t.namespace = format!("t{i}");
        t.cluster_selector = Some(ClusterSelector::default());
    }
    let d = desired_of(&spec, &registry(20));
    assert!(d.too_large && d.named.is_empty() && d.releases.is_empty());
    let text = d.problems[0].to_string();
    assert!(
        text.contains("asks for 21000 releases (each chart once per cluster its tenancy goes to), more than the 20000"),
        "{text}"
    );
    let within = desired_of(&spec, &registry(18));
    assert_eq!(within.releases.len(), 19_000);
    assert!(within.releases.len() <= MAX_RELEASES);
}

#[test]
fn a_setting_key_with_a_huge_list_index_is_invalid_before_any_helm_call() {
    let spec = ControllerSpec {
        tenancies: vec![Tenancy {
            namespace: "foo".into(),
            charts: vec![
                chart("deployment-example", "big", &["k[65535]"]),
                chart("deployment-example", "fine", &["env[3].name"]),
            ],
            ..Tenancy::default()
        }],
        ..ControllerSpec::default()
    };
    let p = plan_of(&spec, &registry(0), &HashMap::new());
    let applied: Vec<String> = p.jobs.iter().map(|j| j.key().to_string()).collect();
    assert_eq!(applied, ["hub/foo/fine"]);
    assert_eq!(
        p.problems[0].to_string(),
        "release hub/foo/big: setting key \"k[65535]\" has the list index [65535], over the 1024 a setting may use (Helm would build a list of 65536 elements); use values instead"
    );
}

#[test]
fn an_unknown_cluster_names_a_few_registered_ones_however_many_there_are() {
    let spec = ControllerSpec {
        tenancies: vec![Tenancy {
            namespace: "foo".into(),
            clusters: vec!["nowhere".into()],
            ..Tenancy::default()
        }],
        ..ControllerSpec::default()
    };
    let d = desired_of(&spec, &registry(500));
    let text = d.problems[0].to_string();
    assert!(
        text.contains("(registered: hub, member-0, member-1 and 498 more)"),
        "{text}"
    );
}

#[test]
fn many_suspended_tenancies_hold_back_their_releases() {
    let mut spec = same_releases(1000, 1);
    for (i, t) in spec.tenancies.iter_mut().enumerate() {
        t.namespace = format!("t{i}");
        t.suspend = i % 2 == 0;
    }
    let p = plan_of(&spec, &registry(0), &HashMap::new());
    assert_eq!((p.jobs.len(), p.suspended.len()), (500, 500));
}

// The property test: generated registries, specs and policies.

const NAMESPACES: [&str; 5] = ["shop", "shop-dev", "kube-system", "tenancy-hub", "other"];
const CLUSTERS: [&str; 4] = ["hub", "member-0", "member-1", "nowhere"];
const CHART_NAMES: [&str; 4] = ["web", "db", "../etc", "oci://registry.example.com/team/web"];
const REPOS: [&str; 3] = [
    "https://charts.example.com/team",
    "https://charts.example.com.evil/team",
    "http://plain.example.com/charts",
];
const KEYS: [&str; 5] = ["replicaCount", "a,b", "k[65535]", "env[3].name", "x[1024]"];
const PATTERNS: [&str; 5] = ["shop", "shop-*", "*", "kube-system", "other"];
const SOURCES: [&str; 4] = [
    "chart-home",
    "https://charts.example.com",
    "http://plain.example.com",
    "oci://registry.example.com/team",
];

fn pick<T: Clone + std::fmt::Debug + 'static>(pool: &'static [T]) -> impl Strategy<Value = T> {
    proptest::sample::select(pool)
}

fn some_of(pool: &'static [&'static str], most: usize) -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(pick(pool).prop_map(String::from), 0..=most)
}

fn tier() -> impl Strategy<Value = Option<BTreeMap<String, String>>> {
    proptest::option::of(proptest::option::of(pick(&["a", "b"])).prop_map(|tier| {
        tier.map(|t| BTreeMap::from([("tier".to_owned(), t.to_owned())]))
            .unwrap_or_default()
    }))
}

fn arb_chart() -> impl Strategy<Value = Chart> {
    (
        pick(&CHART_NAMES),
        proptest::option::of(pick(&["r1", "r2", "r3"])),
        proptest::option::of(pick(&REPOS)),
        some_of(&KEYS, 2),
    )
        .prop_map(|(name, release, repo, keys)| Chart {
            chart_name: name.into(),
            release_name: release.map(String::from),
            repo: repo.map(String::from),
            settings: keys
                .into_iter()
                .map(|key| Setting {
                    key,
                    value: "1".into(),
                })
                .collect(),
            ..Chart::default()
        })
}

fn arb_tenancy() -> impl Strategy<Value = Tenancy> {
    (
        pick(&NAMESPACES),
        some_of(&CLUSTERS, 2),
        tier(),
        proptest::collection::vec(arb_chart(), 0..4),
        any::<bool>(),
    )
        .prop_map(|(namespace, clusters, selector, charts, suspend)| Tenancy {
            namespace: namespace.into(),
            clusters,
            cluster_selector: selector.map(|match_labels| ClusterSelector { match_labels }),
            charts,
            suspend,
        })
}

// Field by field, so fields added to policies keep their defaults here.
#[allow(clippy::field_reassign_with_default)]
fn arb_policy() -> impl Strategy<Value = TenancyPolicySpec> {
    (
        some_of(&["default", "elsewhere"], 2),
        some_of(&CLUSTERS, 2),
        tier(),
        some_of(&PATTERNS, 2),
        some_of(&SOURCES, 2),
        proptest::option::of(pick(&["deployer-1", "deployer-2"])),
    )
        .prop_map(
            |(hub_namespaces, clusters, selector, namespaces, chart_sources, user)| {
                let mut policy = TenancyPolicySpec::default();
                policy.hub_namespaces = hub_namespaces;
                policy.clusters = clusters;
                policy.cluster_selector =
                    selector.map(|match_labels| PolicyClusterSelector { match_labels });
                policy.namespaces = namespaces;
                policy.chart_sources = chart_sources;
                policy.impersonate = user.map(|user| Impersonation {
                    user: user.into(),
                    ..Impersonation::default()
                });
                policy
            },
        )
}

/// Whether `policy`, read independently of admission's code, allows `release` of Controller
/// default/hostile: it governs hub namespace `default`, names the cluster (or selects a member
/// by label), names the namespace (or matches it by pattern, never a protected one) and lists
/// the chart's source.
fn allows(
    policy: &TenancyPolicySpec,
    clusters: &Registry,
    key: &ReleaseKey,
    source: &ChartSource,
) -> bool {
    let cluster = key.scope.cluster.as_str();
    let namespace = key.scope.namespace.as_str();
    let governs = policy.hub_namespaces.iter().any(|n| n == "default");
    let labels = &clusters[&key.scope.cluster];
    let cluster_ok = policy.clusters.iter().any(|c| c == cluster)
        || (cluster != "hub"
            && policy
                .cluster_selector
                .as_ref()
                .is_some_and(|s| s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))));
    let protected = [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "tenancy-hub",
    ];
    let namespace_ok = policy.namespaces.iter().any(|p| {
        p == namespace
            || (!protected.contains(&namespace)
                && p.strip_suffix('*')
                    .is_some_and(|pre| namespace.starts_with(pre)))
    });
    let under = |url: &str, prefix: &str| {
        let (url, prefix) = (url.trim_end_matches('/'), prefix.trim_end_matches('/'));
        url == prefix || url.starts_with(&format!("{prefix}/"))
    };
    let source_ok = policy.chart_sources.iter().any(|s| match source {
        ChartSource::Directory(_) => s == "chart-home",
        ChartSource::Repository { url, .. } => s.starts_with("http") && under(url, s),
        ChartSource::Oci(reference) => s.starts_with("oci://") && under(reference, s),
        ChartSource::Git { .. } => false,
    });
    governs && cluster_ok && namespace_ok && source_ok
}

/// How many entries of `spec` ask for each key, counted the plain way.
fn askers(spec: &ControllerSpec, clusters: &Registry) -> BTreeMap<ReleaseKey, usize> {
    let mut out = BTreeMap::new();
    for t in &spec.tenancies {
        for cluster in crate::plan::targets(t, clusters).0 {
            for c in &t.charts {
                let release = c
                    .release_name
                    .clone()
                    .unwrap_or_else(|| t.namespace.clone());
                let key = format!("{cluster}/{}/{release}", t.namespace)
                    .parse()
                    .unwrap();
                *out.entry(key).or_default() += 1;
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_planner_is_bounded_and_admits_nothing_outside_a_policy(
        members in 0usize..3,
        tenancies in proptest::collection::vec(arb_tenancy(), 0..8),
        policies in proptest::collection::vec(arb_policy(), 0..3),
        suspend in any::<bool>(),
    ) {
        let clusters = registry(members);
        let spec = ControllerSpec { tenancies, suspend, ..ControllerSpec::default() };
        let admission = Admission {
            mode: Mode::Enforce,
            policies: policies
                .iter()
                .enumerate()
                .map(|(i, spec)| NamedPolicy { name: format!("p{i}"), spec: spec.clone() })
                .collect(),
            operator_namespace: "tenancy-hub".into(),
        };
        let p = plan_with(&spec, &clusters, &HashMap::new(), &admission);

        // Linear in the spec's size: a problem per named cluster and tenancy, one per release at most.
        let charts: usize = spec.tenancies.iter().map(|t| t.charts.len()).sum();
        let named: usize = spec.tenancies.iter().map(|t| t.clusters.len() + 1).sum();
        let releases = charts * clusters.len();
        prop_assert!(p.problems.len() <= named + releases, "{} problems", p.problems.len());
        prop_assert!(p.jobs.len() + p.suspended.len() <= releases);
        for problem in &p.problems {
            prop_assert!(problem.to_string().len() <= 2048, "{problem}");
        }

        // A key asked for twice is one problem and never applied.
        let asked = askers(&spec, &clusters);
        let twice: BTreeSet<&ReleaseKey> = asked.iter().filter(|(_, n)| **n > 1).map(|(k, _)| k).collect();
        let duplicates: Vec<&ReleaseKey> = p
            .problems
            .iter()
            .filter(|p| matches!(p, Problem::Duplicate { .. }))
            .filter_map(Problem::release)
            .collect();
        prop_assert_eq!(duplicates.len(), twice.len());
        prop_assert!(duplicates.iter().all(|k| twice.contains(k)));

        // Nothing is admitted outside a policy, and it acts as an allowing policy's identity.
        for job in &p.jobs {
            let Job::Apply { release, .. } = job else { continue };
            prop_assert!(!twice.contains(&release.key), "{} asked for twice", release.key);
            let allowing: Vec<&TenancyPolicySpec> = policies
                .iter()
                .filter(|policy| allows(policy, &clusters, &release.key, &release.source))
                .collect();
            prop_assert!(!allowing.is_empty(), "{} applied with no policy allowing it", release.key);
            prop_assert!(
                allowing.iter().any(|policy| policy.impersonate == release.identity),
                "{} acts as {:?}", release.key, release.identity
            );
            let settings = spec_settings(&spec, &clusters, &release.key, &release.chart_name);
            prop_assert!(crate::plan::limits::refused_setting(&settings).is_none());
        }
        prop_assert!(!suspend || p.jobs.is_empty());
    }
}

/// The settings of the entries of `spec` that ask for `key` with chart `chart`.
fn spec_settings(
    spec: &ControllerSpec,
    clusters: &Registry,
    key: &ReleaseKey,
    chart: &str,
) -> Vec<Setting> {
    spec.tenancies
        .iter()
        .filter(|t| t.namespace == key.scope.namespace)
        .filter(|t| {
            crate::plan::targets(t, clusters)
                .0
                .contains(&key.scope.cluster)
        })
        .flat_map(|t| {
            t.charts.iter().filter(move |c| {
                c.chart_name == chart
                    && c.release_name.as_deref().unwrap_or(&t.namespace) == key.release
            })
        })
        .flat_map(|c| c.settings.clone())
        .collect()
}
