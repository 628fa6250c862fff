//! Tests of the fleet view: escaping of every tenant-written string, what each viewer is shown,
//! cell states, sessions, live updates and their bounds, and the routes' answers.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

use super::*;
use crate::{
    api::crd::{
        ChartMessage, ClusterStatus, ControllerSpec, ControllerStatus, DriftStatus, DriftedObject,
        RolloutCluster, RolloutStatus, TenancyStatus,
    },
    observe::model::{Change, Model, PodInfo, WorkloadInfo, WorkloadKind, WorkloadRef},
    runtime::auth::Access,
    runtime::web::{
        fleet, html, live, pages, session,
        view::{CellState, ClusterInfo, Filters, Seen, cell},
    },
};

/// Strings a tenant writes, each an attempt at markup or script.
const HOSTILE: [&str; 5] = [
    "<script>alert(1)</script>",
    "\"><img src=x onerror=alert(1)>",
    "'><svg onload=alert(1)>",
    "</pre></td></tr></table><script>alert(2)</script>",
    "javascript:alert(3)\" autofocus onfocus=\"alert(4)",
];

fn message(release: &str, phase: &str) -> ChartMessage {
    ChartMessage {
        chart_name: "deployment-example".into(),
        release_name: release.into(),
        phase: phase.into(),
        chart_version: "0.1.0".into(),
        revision: Some(1),
        ..ChartMessage::default()
    }
}

fn tenancy(cluster: &str, namespace: &str, messages: Vec<ChartMessage>) -> TenancyStatus {
    TenancyStatus {
        cluster: cluster.into(),
        namespace: namespace.into(),
        chart_messages: messages,
        fresh: true,
        ..TenancyStatus::default()
    }
}

/// Controller `name` of hub namespace `namespace` with `status`.
fn controller(
    namespace: &str,
    name: &str,
    status: ControllerStatus,
) -> Arc<crate::api::crd::TenancyController> {
    let mut c = crate::api::crd::TenancyController::new(name, ControllerSpec::default());
    c.metadata.namespace = Some(namespace.into());
    c.metadata.uid = Some(format!("uid-{namespace}-{name}"));
    c.status = Some(status);
    Arc::new(c)
}

/// team-a's `web` (release `web` in member-1/apps) and team-b's `db` (release `db` in
/// member-2/data and in member-1/apps beside team-a's).
fn controllers() -> Vec<Arc<crate::api::crd::TenancyController>> {
    let web = ControllerStatus {
        updated_tenancies: vec![tenancy(
            "member-1",
            "apps",
            vec![message("web", "Deployed")],
        )],
        ..ControllerStatus::default()
    };
    let db = ControllerStatus {
        updated_tenancies: vec![
            tenancy("member-2", "data", vec![message("db", "Failed")]),
            tenancy("member-1", "apps", vec![message("db", "Deployed")]),
        ],
        ..ControllerStatus::default()
    };
    vec![
        controller("team-b", "db", db),
        controller("team-a", "web", web),
    ]
}

fn pod(name: &str, ready: bool, owner: &str) -> PodInfo {
    PodInfo {
        name: name.into(),
        phase: "Running".into(),
        ready,
        restarts: 0,
        reason: String::new(),
        owner: Some(WorkloadRef {
            kind: WorkloadKind::Deployment,
            name: owner.into(),
        }),
    }
}

fn workload(name: &str, release: &str, ready: i32) -> WorkloadInfo {
    WorkloadInfo {
        id: WorkloadRef {
            kind: WorkloadKind::Deployment,
            name: name.into(),
        },
        release: Some(release.into()),
        ready,
        desired: 1,
        rolled_out: ready == 1,
    }
}

/// member-1/apps: `web-x` (release web, ready) and `db-x` (release db, ready).
fn model() -> Model {
    let model = Model::default();
    let scope: crate::api::key::ClusterNamespace = "member-1/apps".parse().unwrap();
    let workloads = vec![workload("web", "web", 1), workload("db", "db", 1)];
    model.apply(
        (
            scope.clone(),
            Change::WorkloadsListed(WorkloadKind::Deployment, workloads),
        ),
        Timestamp::UNIX_EPOCH,
    );
    let pods = vec![pod("web-x", true, "web"), pod("db-x", true, "db")];
    model.apply((scope, Change::PodsListed(pods)), Timestamp::UNIX_EPOCH);
    model
}

fn cluster(name: &str, labels: &[(&str, &str)]) -> ClusterInfo {
    ClusterInfo {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        pull: name == "member-2",
    }
}

fn clusters() -> Vec<ClusterInfo> {
    vec![
        cluster("hub", &[]),
        cluster("member-1", &[("region", "east")]),
        cluster("member-2", &[]),
    ]
}

fn team_a() -> Access {
    Access::Namespaces(["team-a".to_owned()].into())
}

/// A Controller whose every tenant-written string is `evil`.
fn hostile(evil: &str) -> Arc<crate::api::crd::TenancyController> {
    let m = ChartMessage {
        chart_name: evil.into(),
        values: format!("{{\"note\":{}}}", serde_json::Value::from(evil)),
        error_message: evil.into(),
        chart_version: evil.into(),
        chart_digest: evil.into(),
        setting_map: BTreeMap::from([(evil.to_owned(), evil.to_owned())]),
        drift: Some(DriftStatus {
            revision: 1,
            detected_at: evil.into(),
            action: evil.into(),
            objects: vec![DriftedObject {
                kind: evil.into(),
                name: evil.into(),
                paths: vec![evil.into()],
                ..DriftedObject::default()
            }],
            more_objects: 0,
        }),
        ..message("web", "Deployed")
    };
    let status = ControllerStatus {
        updated_tenancies: vec![tenancy("member-1", "apps", vec![m])],
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: evil.into(),
            message: evil.into(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }],
        rollout: Some(RolloutStatus {
            phase: evil.into(),
            progress: evil.into(),
            waves: 1,
            wave: 1,
            halted: Some(crate::api::crd::RolloutHalt {
                cluster: evil.into(),
                release: evil.into(),
                reason: evil.into(),
                at: evil.into(),
            }),
            clusters: vec![RolloutCluster {
                name: "member-1".into(),
                wave: 1,
                state: evil.into(),
                ..RolloutCluster::default()
            }],
            ..RolloutStatus::default()
        }),
        ..ControllerStatus::default()
    };
    controller("team-a", "web", status)
}

/// Markup of ours only: `evil` never appears raw (each hostile string holds a `<` or a quote,
/// which escaping changes), and no tag a hostile string could have opened is there.
fn assert_inert(html: &str, evil: &str) {
    assert!(!html.contains(evil), "{evil} reached the HTML raw: {html}");
    for bad in ["<script>", "<img", "<svg"] {
        assert!(!html.contains(bad), "{bad} reached the HTML: {html}");
    }
}

#[test]
fn every_tenant_written_string_is_escaped_on_every_page() {
    for evil in HOSTILE {
        let model = model();
        let seen = Seen::of(vec![hostile(evil)], clusters(), &team_a());
        let filters = Filters {
            tenant: evil.into(),
            label: evil.into(),
            state: evil.into(),
        };
        let fleet = fleet::page(&seen, &model, &Filters::default());
        let controller = pages::controller(&seen.controllers[0], &model);
        let agent = pages::Agent {
            joined: true,
            last_seen: Some(evil.into()),
            ready: Some(evil.into()),
            version: Some(evil.into()),
            kube_version: Some(evil.into()),
        };
        let on_cluster = pages::cluster(
            &seen,
            &cluster("member-1", &[(evil, evil)]),
            Some(&agent),
            &model,
        );
        for page in [&fleet, &controller, &on_cluster] {
            let document = page.document(evil, evil, &fleet::filter_form(&seen, &filters));
            // Our own script tag is the only one, and it is not inline.
            let ours = document.replace("<script src=\"/ui/assets/app.js\" defer></script>", "");
            assert_inert(&ours, evil);
        }
        assert!(controller.main().contains(&html::esc(evil)));
        assert_inert(&html::login(Some(evil)), evil);
        assert_inert(&html::message(evil, evil), evil);
    }
}

#[test]
fn a_pull_members_page_shows_its_agents_version_cut_to_what_a_page_can_hold() {
    let model = model();
    let seen = Seen::of(controllers(), clusters(), &team_a());
    let long = format!("1.2.3\u{1b}[31m\n{}", "x".repeat(10_000));
    let agent = pages::Agent {
        joined: true,
        version: Some(state::shown_version(&long)),
        kube_version: Some(state::shown_version("v1.36.3")),
        ..Default::default()
    };
    let page = pages::cluster(&seen, &cluster("member-1", &[]), Some(&agent), &model);
    let main = page.main();
    assert!(
        main.contains("<dt>Agent version</dt><dd>1.2.3[31mxxx"),
        "{main}"
    );
    assert!(
        main.contains("<dt>Kubernetes</dt><dd>v1.36.3</dd>"),
        "{main}"
    );
    assert!(!main.contains(&"x".repeat(64)), "cut to 64 characters");
    let unknown = pages::Agent::default();
    let page = pages::cluster(&seen, &cluster("member-1", &[]), Some(&unknown), &model);
    assert!(
        page.main()
            .contains("<dt>Agent version</dt><dd>not reported yet</dd>")
    );
}

#[test]
fn escaping_covers_quotes_and_ampersands_and_ids_stay_plain() {
    assert_eq!(
        html::esc("<a href='x'>\"&\""),
        "&lt;a href=&#39;x&#39;&gt;&quot;&amp;&quot;"
    );
    assert_eq!(html::id("row", "a/b c\"<"), "row-a%2Fb%20c%22%3C");
    assert_eq!(html::seg("team-a"), "team-a");
}

#[test]
fn a_viewer_sees_only_the_controllers_and_clusters_of_its_hub_namespaces() {
    let model = model();
    let seen = Seen::of(controllers(), clusters(), &team_a());
    assert_eq!(seen.controllers.len(), 1);
    let names: Vec<&str> = seen.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["member-1"], "member-2 is team-b's only");
    assert!(seen.controller("team-b", "db").is_none());
    let fleet = fleet::page(&seen, &model, &Filters::default()).main();
    let page = pages::controller(seen.controller("team-a", "web").unwrap(), &model).main();
    let on_cluster = pages::cluster(&seen, seen.cluster("member-1").unwrap(), None, &model).main();
    for html in [&fleet, &page, &on_cluster] {
        for secret in ["team-b", "db-x", "member-2", ">db<"] {
            assert!(!html.contains(secret), "{secret} shown to team-a: {html}");
        }
    }
    assert!(page.contains("web-x"), "{page}");
    let everyone = Seen::of(controllers(), clusters(), &Access::Everywhere);
    assert_eq!(
        (everyone.controllers.len(), everyone.clusters.len()),
        (2, 3)
    );
}

#[test]
fn a_cell_shows_the_worst_state_of_its_releases_and_live_pods() {
    let model = model();
    let cs = controllers();
    let web = cell(&cs[1], "member-1", &model).unwrap();
    assert_eq!(
        (web.state, web.pods.ready, web.pods.total),
        (CellState::Ready, 1, 1)
    );
    assert_eq!(
        cell(&cs[0], "member-2", &model).unwrap().state,
        CellState::Failed
    );
    assert!(cell(&cs[1], "member-2", &model).is_none());

    let with = |m: ChartMessage, extra: fn(&mut ControllerStatus)| {
        let mut status = ControllerStatus {
            updated_tenancies: vec![tenancy("member-9", "apps", vec![m])],
            ..ControllerStatus::default()
        };
        extra(&mut status);
        cell(&controller("t", "c", status), "member-9", &model)
            .unwrap()
            .state
    };
    let held = ChartMessage {
        error_message: "held back by the rollout: waiting for rollout wave 2/3".into(),
        held_by: "Rollout".into(),
        ..message("web", "Pending")
    };
    assert_eq!(with(held, |_| {}), CellState::Held);
    // The state is the gate's, not the message's words: a tenant's chart failing with words
    // like the planner's is not shown held.
    let mimic = ChartMessage {
        error_message: "waiting for dependency db (not Ready)".into(),
        ..message("web", "Pending")
    };
    assert_eq!(with(mimic, |_| {}), CellState::Progressing);
    let waiting = ChartMessage {
        error_message: "waiting for dependency db (not Ready)".into(),
        held_by: "DependsOn".into(),
        ..message("web", "Pending")
    };
    assert_eq!(with(waiting, |_| {}), CellState::Held);
    let drifted = ChartMessage {
        drift: Some(DriftStatus::default()),
        ..message("web", "Deployed")
    };
    assert_eq!(with(drifted.clone(), |_| {}), CellState::Drifted);
    assert_eq!(
        with(message("web", "Forbidden"), |_| {}),
        CellState::Forbidden
    );
    // Refused releases only: never watched, so never fresh, and no word on reachability.
    let refused = TenancyStatus {
        fresh: false,
        ..tenancy("member-9", "apps", vec![message("odd", "Invalid")])
    };
    let refused = ControllerStatus {
        updated_tenancies: vec![refused],
        ..ControllerStatus::default()
    };
    let refused = cell(&controller("t", "c", refused), "member-9", &model);
    assert_eq!(refused.unwrap().state, CellState::Failed);
    assert_eq!(
        with(message("web", "Pending"), |_| {}),
        CellState::Progressing
    );
    let unreachable = |s: &mut ControllerStatus| {
        s.clusters = vec![ClusterStatus {
            name: "member-9".into(),
            reachable: false,
            ..ClusterStatus::default()
        }];
    };
    assert_eq!(with(drifted, unreachable), CellState::Unreachable);
    let pending_wave = |s: &mut ControllerStatus| {
        s.rollout = Some(RolloutStatus {
            clusters: vec![RolloutCluster {
                name: "member-9".into(),
                state: "Pending".into(),
                ..RolloutCluster::default()
            }],
            ..RolloutStatus::default()
        });
    };
    assert_eq!(
        with(message("web", "Deployed"), pending_wave),
        CellState::Held
    );
    // A rollout halted by this cluster: its cell says failed, not held.
    let halted_here = |s: &mut ControllerStatus| {
        s.rollout = Some(RolloutStatus {
            phase: "Halted".into(),
            clusters: vec![RolloutCluster {
                name: "member-9".into(),
                state: "Failed".into(),
                ..RolloutCluster::default()
            }],
            ..RolloutStatus::default()
        });
    };
    assert_eq!(
        with(message("web", "Deployed"), halted_here),
        CellState::Failed
    );
}

#[test]
fn the_matrix_filters_by_tenant_label_and_state() {
    let model = model();
    let seen = Seen::of(controllers(), clusters(), &Access::Everywhere);
    let rows = |filters: Filters| -> Vec<String> {
        fleet::page(&seen, &model, &filters)
            .parts
            .iter()
            .filter_map(|p| match p {
                html::Part::Section(id, _) if id.starts_with("row-") => Some(id.clone()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        rows(Filters::default()),
        ["row-hub", "row-member-1", "row-member-2"]
    );
    let label = Filters {
        label: "region=east".into(),
        ..Filters::default()
    };
    assert_eq!(rows(label), ["row-member-1"]);
    let failed = Filters {
        state: "failed".into(),
        ..Filters::default()
    };
    assert_eq!(rows(failed), ["row-member-2"]);
    let tenant = Filters {
        tenant: "team-a".into(),
        ..Filters::default()
    };
    let page = fleet::page(&seen, &model, &tenant).main();
    assert!(!page.contains("team-b/"), "{page}");
    assert_eq!(fleet::filter_query(&Filters::default()), "");
    let odd = Filters {
        label: "a=b&c".into(),
        ..Filters::default()
    };
    assert_eq!(fleet::filter_query(&odd), "?label=a%3Db%26c");
}

#[test]
fn a_stream_sends_the_changed_sections_or_the_whole_page_when_its_shape_changes() {
    let model = model();
    let seen = Seen::of(controllers(), clusters(), &Access::Everywhere);
    let before = fleet::page(&seen, &model, &Filters::default());
    assert!(live::update(Some(&before), &before).is_none());
    let scope: crate::api::key::ClusterNamespace = "member-1/apps".parse().unwrap();
    model.apply(
        (scope, Change::PodGone("web-x".into())),
        Timestamp::UNIX_EPOCH,
    );
    let after = fleet::page(&seen, &model, &Filters::default());
    assert!(after.same_shape(&before));
    let changed: Vec<&str> = after
        .changed_since(&before)
        .iter()
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(changed, ["row-member-1"]);
    let fewer = Seen::of(controllers(), clusters(), &team_a());
    let narrower = fleet::page(&fewer, &model, &Filters::default());
    assert!(!narrower.same_shape(&after));
    assert_eq!(live::digest(&after), live::digest(&after.clone()));
    assert_ne!(live::digest(&after), live::digest(&before));
}

#[test]
fn live_streams_are_bounded_per_viewer_and_in_all() {
    let slots = Arc::new(live::Slots::default());
    let mine: Vec<_> = (0..live::PER_VIEWER)
        .map(|_| slots.take("a").unwrap())
        .collect();
    assert!(slots.take("a").is_none(), "a ninth stream of one viewer");
    drop(mine);
    assert_eq!(slots.open(), 0);
    let all: Vec<_> = (0..live::IN_ALL)
        .map(|i| {
            slots
                .take(&format!("viewer-{}", i / live::PER_VIEWER))
                .unwrap()
        })
        .collect();
    assert!(slots.take("someone-else").is_none(), "past the cap in all");
    drop(all);
    assert!(slots.take("someone-else").is_some());
}

#[tokio::test(start_paused = true)]
async fn sessions_end_when_idle_or_old_and_are_bounded() {
    let sessions = session::Sessions::default();
    let id = sessions.start("token-1");
    assert_eq!(id.len(), 43, "32 random bytes, base64");
    assert_eq!(sessions.token(&id).as_deref(), Some("token-1"));
    assert_ne!(sessions.start("token-1"), id, "ids are random");
    tokio::time::advance(session::IDLE).await;
    assert!(sessions.token(&id).is_none(), "idle for an hour");
    for i in 0..session::MAX_SESSIONS + 10 {
        sessions.start(&format!("t{i}"));
    }
    assert_eq!(sessions.len(), session::MAX_SESSIONS);
    let cookie = session::set_cookie(&id, false);
    let cookie = cookie.to_str().unwrap();
    assert!(
        cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
            && !cookie.contains("Secure")
    );
    assert!(
        session::set_cookie(&id, true)
            .to_str()
            .unwrap()
            .ends_with("; Secure")
    );
}

/// The figure of the matrix at fleet size: 1,000 clusters and 8 Controllers, each delivering
/// one release to every cluster, with a live namespace per cell. Prints bytes and render time.
#[test]
fn the_matrix_of_a_thousand_clusters_renders_within_its_budget() {
    let model = Model::default();
    let names: Vec<String> = (0..1000).map(|i| format!("member-{i:04}")).collect();
    let controllers: Vec<_> = (0..8)
        .map(|k| {
            let tenancies = names
                .iter()
                .map(|n| {
                    tenancy(
                        n,
                        &format!("tenant-{k}"),
                        vec![message(&format!("app-{k}"), "Deployed")],
                    )
                })
                .collect();
            controller(
                &format!("tenant-{k}"),
                &format!("app-{k}"),
                ControllerStatus {
                    updated_tenancies: tenancies,
                    ..ControllerStatus::default()
                },
            )
        })
        .collect();
    for n in &names {
        for k in 0..8 {
            let scope = format!("{n}/tenant-{k}").parse().unwrap();
            let w = vec![workload("app", &format!("app-{k}"), 1)];
            model.apply(
                (scope, Change::WorkloadsListed(WorkloadKind::Deployment, w)),
                Timestamp::UNIX_EPOCH,
            );
        }
    }
    let clusters: Vec<ClusterInfo> = names.iter().map(|n| cluster(n, &[("zone", "a")])).collect();
    let started = std::time::Instant::now();
    let seen = Seen::of(controllers, clusters, &Access::Everywhere);
    let page = fleet::page(&seen, &model, &Filters::default());
    let document = page.document(
        "/ui/live/fleet?v=0",
        "admin",
        &fleet::filter_form(&seen, &Filters::default()),
    );
    let took = started.elapsed();
    let weight = document.len() + routes::tests_assets_len();
    println!(
        "fleet matrix, 1000 clusters x 8 Controllers: HTML {} bytes, HTML+JS+CSS {weight} bytes, built in {took:?}",
        document.len()
    );
    assert_eq!(
        page.parts
            .iter()
            .filter(|p| matches!(p, html::Part::Section(id, _) if id.starts_with("row-")))
            .count(),
        1000
    );
    assert!(weight < 600_000, "page weight {weight} bytes");
    assert!(
        took < std::time::Duration::from_secs(5),
        "built in {took:?}"
    );
}

mod diff;
mod sections;
mod served;
