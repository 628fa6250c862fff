//! Unit tests of `tenancy-hub diff`: entries, exit codes, output and file parsing.

use super::report::*;
use super::*;
use crate::plan::{ChartSource, OwnerId, Plan, Problem, Release};

fn key(k: &str) -> ReleaseKey {
    k.parse().unwrap()
}

fn release(k: &str) -> Release {
    Release {
        health: Vec::new(),
        adoption: Default::default(),
        commit: None,
        masked: Default::default(),
        post_render: None,
        credentials: Default::default(),
        verified: None,
        key: key(k),
        owner: OwnerId {
            namespace: "default".into(),
            name: "x".into(),
        },
        chart_name: "web".into(),
        source: ChartSource::Directory("/charts/web".into()),
        version: None,
        chart_digest: None,
        settings: Vec::new(),
        values: None,
        rollback_on_failure: false,
        spec_hash: "h".into(),
        identity: None,
        drift: Default::default(),
        helm: Default::default(),
    }
}

fn applied(k: &str, revision: i64) -> (ReleaseKey, Applied) {
    (
        key(k),
        Applied {
            key: key(k),
            owner: None,
            spec_hash: Some("h".into()),
            revision,
            status: "deployed".into(),
            modified_at: None,
        },
    )
}

fn apply(k: &str) -> Job {
    Job::Apply {
        adopt: false,
        release: Box::new(release(k)),
        stale_pending: None,
        repair: None,
        installing: false,
        attempt: 0,
    }
}

#[test]
fn each_release_of_a_plan_gets_one_action_sorted_by_cluster_namespace_and_release() {
    let plan = Plan {
        desired: ["m/a/new", "m/a/changed", "m/a/same"].map(release).to_vec(),
        jobs: vec![
            apply("m/a/new"),
            apply("m/a/changed"),
            Job::Uninstall {
                key: key("m/a/gone"),
                owner: release("m/a/gone").owner,
                identity: None,
                settings: Default::default(),
            },
        ],
        problems: vec![Problem::Conflict {
            key: key("m/b/held"),
            holder: "Controller default/other".into(),
        }],
        ..Default::default()
    };
    let applied = HashMap::from([
        applied("m/a/changed", 3),
        applied("m/a/same", 2),
        applied("m/a/gone", 5),
    ]);
    let got: Vec<(String, Action, Option<i64>)> = entries(&plan, &[], &applied)
        .into_iter()
        .map(|e| (e.name(), e.action, e.revision))
        .collect();
    assert_eq!(
        got,
        [
            ("m/a/changed".into(), Action::Upgrade, Some(3)),
            ("m/a/gone".into(), Action::Uninstall, Some(5)),
            ("m/a/new".into(), Action::Install, None),
            ("m/a/same".into(), Action::Unchanged, Some(2)),
            ("m/b/held".into(), Action::Refused, None),
        ]
    );
}

#[test]
fn held_back_and_unreadable_releases_say_why() {
    let plan = Plan {
        desired: vec![release("m/a/web"), release("n/a/web")],
        suspended: vec![key("m/a/web"), key("m/a/old")],
        waiting: vec![key("n/a/web")],
        ..Default::default()
    };
    let got = entries(&plan, &[], &HashMap::from([applied("m/a/old", 1)]));
    let actions: Vec<(String, Action)> = got.iter().map(|e| (e.name(), e.action)).collect();
    assert_eq!(
        actions,
        [
            ("m/a/old".into(), Action::Unchanged),
            ("m/a/web".into(), Action::Unchanged),
            ("n/a/web".into(), Action::Unknown),
        ]
    );
    assert!(
        got[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("uninstall is held back")
    );
    assert!(got[1].reason.as_deref().unwrap().contains("suspended"));
    assert_eq!(exit_code(&got), 2);
}

#[test]
fn the_exit_code_follows_kubectl_diff() {
    let entry = |action| Entry::of(&key("m/a/web"), action, None);
    assert_eq!(exit_code(&[]), 0);
    assert_eq!(exit_code(&[entry(Action::Unchanged)]), 0);
    for changing in [
        Action::Install,
        Action::Upgrade,
        Action::Uninstall,
        Action::Refused,
    ] {
        assert_eq!(exit_code(&[entry(Action::Unchanged), entry(changing)]), 1);
    }
    assert_eq!(
        exit_code(&[entry(Action::Install), entry(Action::Unknown)]),
        2
    );
    // A change whose diff could not be made is an error, not a difference.
    let mut unrendered = entry(Action::Upgrade);
    unrendered.failed = true;
    assert_eq!(exit_code(&[entry(Action::Install), unrendered]), 2);
}

#[test]
fn the_text_output_has_a_header_per_release_and_its_diff() {
    let mut upgrade = Entry::of(&key("member-1/team-a/web"), Action::Upgrade, Some(3));
    upgrade.diff = Some(crate::preview::unified(
        "replicas: 1\n",
        "replicas: 2\n",
        "old",
        "new",
    ));
    let mut refused = Entry::of(&key("member-2/team-a/web"), Action::Refused, None);
    refused.reason = Some("release member-2/team-a/web is forbidden".into());
    let text = render_text(&[upgrade, refused]);
    assert_eq!(
        text,
        "member-1/team-a/web: upgrade (revision 3 -> 4)\n--- old\n+++ new\n@@ -1 +1 @@\n-replicas: 1\n+replicas: 2\nmember-2/team-a/web: refused: release member-2/team-a/web is forbidden\n"
    );
}

#[test]
fn the_json_output_is_an_array_of_stable_fields() {
    let mut install = Entry::of(&key("member-1/team-a/web"), Action::Install, None);
    install.diff = Some("+x\n".into());
    let unchanged = Entry::of(&key("hub/foo/foo"), Action::Unchanged, Some(1));
    let json: serde_json::Value =
        serde_json::from_str(&render_json(&[install, unchanged])).unwrap();
    assert_eq!(
        json,
        serde_json::json!([
            {"cluster": "member-1", "namespace": "team-a", "release": "web", "action": "install", "diff": "+x\n"},
            {"cluster": "hub", "namespace": "foo", "release": "foo", "action": "unchanged"}
        ])
    );
}

#[test]
fn a_file_of_controllers_takes_the_given_namespace_when_it_names_none() {
    let text = "apiVersion: multitenancy.dev/v1alpha1\nkind: Controller\nmetadata: {name: a}\nspec: {tenancies: []}\n---\napiVersion: multitenancy.dev/v1alpha1\nkind: Controller\nmetadata: {name: b, namespace: team}\nspec: {suspend: true}\n";
    let got = parse_file(text, "default").unwrap();
    assert_eq!(got[0].metadata.namespace.as_deref(), Some("default"));
    assert_eq!(got[1].metadata.namespace.as_deref(), Some("team"));
    assert!(got[1].spec.suspend);
    let err = parse_file("kind: ConfigMap\n", "default").unwrap_err();
    assert!(err.to_string().contains("not a Controller"), "{err}");
}

#[test]
fn a_depends_on_cycle_found_by_the_planner_shows_as_refused_naming_the_chain() {
    use crate::api::crd::{Chart, ControllerSpec, Tenancy};
    let chart = |release: &str, depends_on: &str| Chart {
        chart_name: "deployment-example".into(),
        release_name: Some(release.into()),
        depends_on: vec![depends_on.into()],
        ..Default::default()
    };
    let spec = ControllerSpec {
        tenancies: vec![Tenancy {
            namespace: "a".into(),
            clusters: vec!["m".into()],
            charts: vec![chart("web", "api"), chart("api", "web")],
            ..Default::default()
        }],
        ..Default::default()
    };
    let clusters = BTreeMap::from([("m".parse().unwrap(), BTreeMap::new())]);
    let synced = clusters.keys().cloned().collect();
    let found = |_: &ChartSource,
                 _: &crate::policy::access::Credentials,
                 _: &crate::policy::access::Trust,
                 _: Option<&str>| {
        crate::plan::ChartLookup::Found {
            commit: None,
            version: None,
            digest: None,
            verified: None,
        }
    };
    let plan = crate::plan::plan(&crate::plan::Inputs {
        owner: &OwnerId {
            namespace: "t".into(),
            name: "app".into(),
        },
        spec: &spec,
        clusters: &clusters,
        synced: &synced,
        applied: &HashMap::new(),
        claims: &HashMap::new(),
        admission: &crate::policy::Admission::permissive(),
        chart_home: std::path::Path::new("/charts"),
        chart_lookup: &found,
        now: 0,
        pending_timeout_secs: 600,
        drifted: &HashMap::new(),
        fleet: &crate::plan::fleet::Fleet::none(),
    });
    let got = entries(&plan, &[], &HashMap::new());
    let shown: Vec<(String, Action)> = got.iter().map(|e| (e.name(), e.action)).collect();
    assert_eq!(
        shown,
        [
            ("m/a/api".into(), Action::Refused),
            ("m/a/web".into(), Action::Refused)
        ]
    );
    assert!(
        got[1]
            .reason
            .as_deref()
            .unwrap()
            .contains("dependsOn forms a cycle: web → api → web"),
        "{got:?}"
    );
}

/// The running operator at its first look at a change and `diff` decide one fixture the same
/// way: the same jobs let through, held back and queued, the same edges and the same report,
/// because both go through one decision and differ only in what they know of the fleet.
#[tokio::test]
async fn reconcile_and_diff_decide_the_same_fixture_to_the_same_jobs_and_report() {
    use crate::controller::fixtures::{Fixture, controller};
    use crate::controller::pipeline::Decision;
    use crate::controller::reconcile::look;

    let f = Fixture::new();
    let c = controller(
        "app",
        "2026-01-01T00:00:00Z",
        "tenancies:\n  - namespace: foo\n    charts:\n      - {chartName: statefulset-example, releaseName: db, settings: [{key: replicas, value: \"2\"}]}\n      - {chartName: deployment-example, releaseName: web, dependsOn: [db]}\n      - {chartName: no-such-chart, releaseName: ghost}\nrollout:\n  maxUnavailable: 1\n",
    );
    let clusters = f.ctx.members.registry.load().labels();
    let state = HubState {
        admission: f.ctx.admission(),
        synced: clusters.keys().cloned().collect(),
        clusters,
        applied: HashMap::new(),
        claims: HashMap::new(),
        variables: BTreeMap::new(),
        values: HubValues::new(f.ctx.hub.client.clone(), Default::default()),
        rollouts: BTreeMap::new(),
        now: Timestamp::now(),
    };
    let owner = owner_id(&c);
    let seen = Seen {
        owner: &owner,
        clusters: &state.clusters,
        applied: &state.applied,
        synced: &state.synced,
        claims: &state.claims,
        admission: &state.admission,
        orphans: &[],
    };
    let drifted = HashMap::new();
    let planning = Planning {
        charts: &f.ctx.kept.charts,
        chart_home: &f.ctx.hub.settings.chart_home,
        values: &state.values,
        variables: &state.variables,
        drifted: &drifted,
        now: state.now,
        pending_timeout: Duration::from_secs(300),
    };

    let allowed = |_: &ReleaseKey, _| (RepairVerdict::Allowed, false);
    let planned = plan_spec(&c, &seen, &planning).await;
    let running = look(&c, &f.ctx, &seen, &planned);
    let operator: Decision = decide(&c, &seen, planned, &running, &planning, &allowed);
    let planned = plan_spec(&c, &seen, &planning).await;
    let preview: Decision = decide(&c, &seen, planned, &state.live(&owner), &planning, &allowed);

    assert_eq!(operator.plan.jobs, preview.plan.jobs);
    assert_eq!(operator.held, preview.held);
    assert_eq!(operator.enqueue, preview.enqueue);
    assert_eq!(operator.edges, preview.edges);
    assert_eq!(operator.busy, preview.busy);
    assert_eq!(operator.report, preview.report);
    assert_eq!(operator.plan.problems.len(), 1, "ghost's chart is missing");
    let held: Vec<&ReleaseKey> = preview.held.iter().map(Job::key).collect();
    assert_eq!(held, [&key("hub/foo/web")], "web waits for db in both");

    // What diff prints of it: web's install is shown, held back, with what it waits for.
    let shown = entries(&preview.plan, &preview.held, &state.applied);
    let web = shown
        .iter()
        .find(|e| e.release == "web")
        .expect("web is shown");
    assert_eq!(web.action, Action::Install);
    let reason = web.reason.as_deref().unwrap_or_default();
    assert!(reason.starts_with("held back by dependsOn:"), "{reason}");
}

#[test]
fn a_remote_chart_shows_its_source_version_digest_and_signer_and_never_credentials() {
    let mut signed = release("m/a/web");
    signed.source = ChartSource::Repository {
        url: "https://robot:hunter2@charts.example.com/stable".into(),
        chart: "web".into(),
    };
    signed.version = Some("1.2.3".into());
    signed.chart_digest = Some(format!("sha256:{}", "ab".repeat(32)));
    signed.verified = Some(crate::plan::Verified {
        by: "provenance: Charts <charts@example.com>".into(),
        archive: "ab".repeat(32),
    });
    let plan = Plan {
        desired: vec![signed, release("m/a/home")],
        ..Default::default()
    };
    let got = entries(&plan, &[], &HashMap::new());
    let home = got.iter().find(|e| e.release == "home").unwrap();
    assert_eq!(home.chart, None, "a chart of the chart home shows nothing");
    let web = got.iter().find(|e| e.release == "web").unwrap();
    let chart = web.chart.as_ref().expect("a remote chart is shown");
    assert_eq!(chart.version, "1.2.3");
    assert_eq!(chart.verified_by, "provenance: Charts <charts@example.com>");
    let json = render_json(&got);
    assert!(json.contains("\"verifiedBy\""), "{json}");
    let text = render_text(&got);
    assert!(
        text.contains("verified by provenance: Charts <charts@example.com>"),
        "{text}"
    );
    for shown in [&json, &text] {
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
