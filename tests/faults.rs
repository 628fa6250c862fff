//! End-to-end fault tests: dead members, a restarted hub, registration edits, crashes and hostile input.

mod common;

use std::time::Instant;

use common::{
    fixtures::{
        DEADLINE, WAVE, chart, entry, ready, roll_wave, spread, tenancy, unique, wait_until, wave,
        wave_at,
    },
    hub::Hub,
    lab::{Lab, lab_ctl, start_member, stop_member},
    operator::Operator,
};
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, PostParams};
use tenancy_hub::api::crd::{Chart, ControllerSpec, Setting, TenancyController};

/// The fault tests take turns: each stops or freezes lab processes others would depend on.
static LAB_FAULTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_stopped_member_turns_unknown_while_the_other_stays_fresh() {
    let _turn = LAB_FAULTS.lock().await;
    let hub = Hub::new("stale").await;
    let ns = unique("stale");
    hub.apply("stale", wave(&ns, &["member-1", "member-2"], "2"))
        .await;
    hub.status_until("stale", "both members fresh with ready pods", |s| {
        ["member-1", "member-2"]
            .iter()
            .all(|c| entry(s, c, &ns).is_some_and(|t| t.fresh && t.pods_ready == 6))
    })
    .await;

    lab_ctl(&hub.lab, &["stop", "member-2-kube-apiserver"]);
    let stopped = Instant::now();
    let status = hub
        .status_until("stale", "member-2 to turn Unknown", |s| {
            entry(s, "member-2", &ns).is_some_and(|t| !t.fresh)
        })
        .await;
    let took = stopped.elapsed();
    let unreachable = hub
        .status_until("stale", "member-2 to be marked unreachable", |s| {
            s.clusters
                .iter()
                .any(|c| c.name == "member-2" && !c.reachable)
        })
        .await;
    let marked = stopped.elapsed();
    lab_ctl(&hub.lab, &["start", "member-2-kube-apiserver"]);
    let m2 = entry(&status, "member-2", &ns).unwrap();
    let m1 = entry(&status, "member-1", &ns).unwrap();
    assert!(
        took.as_secs() < 30,
        "member-2 took {took:?} to turn Unknown"
    );
    assert!(
        marked.as_secs() < 20,
        "member-2 took {marked:?} to be marked unreachable"
    );
    assert!(
        m1.fresh && m1.pods_ready == 6,
        "member-1 stays fresh: {m1:?}"
    );
    assert!(
        m2.pod_status
            .iter()
            .all(|p| p.phase == "Unknown" && !p.ready),
        "{m2:?}"
    );
    assert!(
        m2.last_seen.is_some(),
        "member-2 says when it was last seen"
    );
    assert!(
        unreachable
            .clusters
            .iter()
            .any(|c| c.name == "member-1" && c.reachable)
    );

    let restarted = Instant::now();
    let back = hub
        .status_until("stale", "member-2 to come back", |s| {
            entry(s, "member-2", &ns).is_some_and(|t| t.fresh && t.pods_ready == 6)
                && s.clusters.iter().all(|c| c.reachable)
        })
        .await;
    assert!(
        restarted.elapsed().as_secs() < 20,
        "member-2 took {:?} to be Ready again",
        restarted.elapsed()
    );
    assert!(ready(&back));
    eprintln!(
        "member-2: Unknown after {took:?}, unreachable after {marked:?}, back after {:?}",
        restarted.elapsed()
    );
    hub.delete_and_wait_gone("stale").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_member_killed_during_an_upgrade_wave_delays_only_itself() {
    let _turn = LAB_FAULTS.lock().await;
    let hub = Hub::new("wave").await;
    let ns = unique("wave");
    let both = ["member-1", "member-2"];
    roll_wave(&hub, "wave", &ns, &both, 1).await;

    stop_member(&hub.lab, "member-2");
    let started = Instant::now();
    hub.apply("wave", wave(&ns, &both, "2")).await;
    hub.releases_become("member-1", &ns, &wave_at(2)).await;
    let member1 = started.elapsed();
    start_member(&hub.lab, "member-2");
    hub.releases_become("member-2", &ns, &wave_at(2)).await;
    let member2 = started.elapsed();
    hub.status_until("wave", "the resource to be Ready again", ready)
        .await;
    eprintln!(
        "upgrade wave with member-2 down: member-1 converged in {member1:?}, member-2 {member2:?} after the wave began"
    );
    assert!(
        member1.as_secs() < 20,
        "member-1 was held up by the dead member: {member1:?}"
    );
    for c in both {
        assert_eq!(
            hub.lab.values(c, &ns, "a"),
            serde_json::json!({"replicaCount": 2})
        );
    }
    hub.delete_and_wait_gone("wave").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_operator_rides_out_a_hub_api_server_restart() {
    let _turn = LAB_FAULTS.lock().await;
    // With leader election, a leader that cannot renew its Lease for the renew deadline steps
    // down and exits by design (tests/leader.rs); here one operator rides the outage out.
    let hub = Hub::with_args("hubdown", &["--leader-elect=false"]).await;
    let ns = unique("hubdown");
    roll_wave(&hub, "hubdown", &ns, &["member-1"], 1).await;
    lab_ctl(&hub.lab, &["stop", "hub-kube-apiserver"]);
    lab_ctl(&hub.lab, &["start", "hub-kube-apiserver"]);
    roll_wave(&hub, "hubdown", &ns, &["member-1"], 2).await;
    hub.status_until("hubdown", "status written after the hub came back", |s| {
        ready(s) && s.observed_generation == Some(2)
    })
    .await;
    hub.delete_and_wait_gone("hubdown").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn registration_edits_apply_without_a_restart_and_broken_ones_are_refused() {
    let _turn = LAB_FAULTS.lock().await; // it delivers to member-2, which other tests stop
    let lab = Lab::get();
    let file = lab.dir.join(format!("{}.yaml", unique("clusters")));
    let kubeconfig = lab.kubeconfig_path();
    let k = kubeconfig.display();
    std::fs::write(
        &file,
        format!("clusters:\n  - {{name: member-1, context: member-1, kubeconfig: {k}}}\n"),
    )
    .unwrap();
    let hub = Hub::with_args("reload", &["--clusters", file.to_str().unwrap()]).await;
    let ns = unique("reload");
    let spec = |clusters: &[&str]| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            clusters,
            vec![chart("deployment-example", "web", &[])],
        )],
        ..Default::default()
    };
    hub.apply("reload", spec(&["member-1", "extra"])).await;
    hub.status_until("reload", "extra to be reported unknown", |s| {
        entry(s, "extra", &ns)
            .is_some_and(|t| t.chart_messages[0].error_message.contains("not registered"))
    })
    .await;

    std::fs::write(&file, "clusters: [this is: not valid\n").unwrap();
    let events = kube::Api::<Event>::namespaced(hub.client.clone(), &hub.namespace);
    wait_until("the broken edit to be reported", DEADLINE, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RegistrationRejected"))
            .then_some(())
    })
    .await;
    assert!(
        hub.log()
            .contains("the last good registry (2 clusters) stays in force"),
        "{}",
        hub.log()
    );
    hub.apply("reload", spec(&["member-1"])).await;
    hub.status_until(
        "reload",
        "member-1 to keep working with the last good registry",
        ready,
    )
    .await;

    std::fs::write(
        &file,
        format!(
            "clusters:\n  - {{name: member-1, context: member-1, kubeconfig: {k}}}\n  - {{name: extra, context: member-2, kubeconfig: {k}}}\n"
        ),
    )
    .unwrap();
    hub.apply("reload", spec(&["member-1", "extra"])).await;
    hub.releases_become("member-2", &ns, &[("web", 1)]).await;
    hub.status_until("reload", "the added cluster to be delivered to", |s| {
        ready(s) && entry(s, "extra", &ns).is_some_and(|t| t.fresh)
    })
    .await;

    std::fs::write(
        &file,
        format!("clusters:\n  - {{name: member-1, context: member-1, kubeconfig: {k}}}\n"),
    )
    .unwrap();
    let status = hub
        .status_until(
            "reload",
            "the removed cluster's release to be reported orphaned",
            |s| {
                entry(s, "extra", &ns)
                    .is_some_and(|t| t.chart_messages.iter().any(|m| m.phase == "Orphaned"))
            },
        )
        .await;
    assert!(!status.conditions.is_empty());
    assert_eq!(
        hub.lab
            .releases("member-2", &ns)
            .get("web")
            .map(|r| r.1.as_str()),
        Some("deployed"),
        "a removed cluster's releases are never uninstalled by surprise"
    );
    hub.apply("reload", spec(&["member-1"])).await;
    hub.delete_and_wait_gone("reload").await;
    hub.lab.helm("member-2", &["uninstall", "web", "-n", &ns]);
    std::fs::remove_file(&file).unwrap();
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn rotated_credentials_in_a_registered_kubeconfig_apply_without_a_restart() {
    let _turn = LAB_FAULTS.lock().await; // it delivers to member-1, which other tests stop
    let lab = Lab::get();
    let good = std::fs::read_to_string(lab.kubeconfig_path()).unwrap();
    // member-1's user presents a token its API server does not know (401) instead of its certificate.
    let mut broken: serde_yaml::Value = serde_yaml::from_str(&good).unwrap();
    let users = broken["users"].as_sequence_mut().unwrap();
    let user = users
        .iter_mut()
        .find(|u| u["name"].as_str() == Some("admin@member-1"))
        .expect("the lab has a user for member-1");
    user["user"] = serde_yaml::from_str("{token: not-a-valid-token}").unwrap();
    let kubeconfig = lab.dir.join(format!("{}.kubeconfig", unique("rotated")));
    std::fs::write(&kubeconfig, serde_yaml::to_string(&broken).unwrap()).unwrap();
    let file = lab.dir.join(format!("{}.yaml", unique("clusters")));
    std::fs::write(
        &file,
        format!(
            "clusters:\n  - {{name: member-1, context: member-1, kubeconfig: {}}}\n",
            kubeconfig.display()
        ),
    )
    .unwrap();
    let hub = Hub::with_args("rotate", &["--clusters", file.to_str().unwrap()]).await;
    let ns = unique("rotate");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![chart("deployment-example", "web", &[])],
        )],
        ..Default::default()
    };
    hub.apply("rotate", spec).await;
    hub.status_until(
        "rotate",
        "member-1 to be unreachable with the broken credentials",
        |s| {
            s.clusters
                .iter()
                .any(|c| c.name == "member-1" && !c.reachable)
        },
    )
    .await;
    assert!(hub.lab.releases("member-1", &ns).is_empty());

    // Credentials rotated in place: same file, same registration, new content.
    std::fs::write(&kubeconfig, &good).unwrap();
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;
    hub.status_until("rotate", "the release on member-1 to be ready", |s| {
        ready(s)
            && s.clusters
                .iter()
                .any(|c| c.name == "member-1" && c.reachable)
    })
    .await;
    let log = hub.log();
    assert!(
        log.contains("registration file reloaded") && log.contains("member-1"),
        "{log}"
    );

    hub.delete_and_wait_gone("rotate").await;
    std::fs::remove_file(&file).unwrap();
    std::fs::remove_file(&kubeconfig).unwrap();
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_sigkilled_operator_loses_no_install_or_uninstall() {
    let _turn = LAB_FAULTS.lock().await;
    let mut hub = Hub::new("crash").await;
    let ns = unique("crash");
    let names: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    let spec = |n: usize| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            names[..n]
                .iter()
                .map(|r| chart("deployment-example", r, &[]))
                .collect(),
        )],
        ..Default::default()
    };
    hub.apply("crash", spec(8)).await;
    wait_until("some releases to be installed", DEADLINE, || async {
        (!hub.lab.releases("member-1", &ns).is_empty()).then_some(())
    })
    .await;
    hub.operator.take().unwrap().kill();
    hub.operator = Some(Operator::start_with(
        &hub.lab,
        &hub.namespace,
        &["--pending-timeout", "5"],
    ));
    let all: Vec<(&str, i64)> = names.iter().map(|n| (n.as_str(), 1)).collect();
    hub.releases_become("member-1", &ns, &all).await;
    hub.status_until("crash", "every release deployed once", ready)
        .await;

    hub.apply("crash", spec(2)).await;
    wait_until("an uninstall to begin", DEADLINE, || async {
        (hub.lab.releases("member-1", &ns).len() < 8).then_some(())
    })
    .await;
    hub.operator.take().unwrap().kill();
    hub.operator = Some(Operator::start_with(
        &hub.lab,
        &hub.namespace,
        &["--pending-timeout", "5"],
    ));
    hub.releases_become("member-1", &ns, &[("r0", 1), ("r1", 1)])
        .await;
    hub.delete_and_wait_gone("crash").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn huge_and_hostile_input_is_handled_or_refused_clearly() {
    let _turn = LAB_FAULTS.lock().await;
    let hub = Hub::new("huge").await;
    let ns = unique("huge");
    // 1,000 tenancies on a cluster nobody registered: planned, reported in a bounded status.
    let many = spread("web", (0..1000).map(|i| (format!("t{i}"), vec!["nowhere"])));
    hub.apply("many", many).await;
    let status = hub
        .status_until("many", "1,000 tenancies to be reported", |s| {
            s.conditions.iter().any(|c| c.reason == "InvalidSpec")
        })
        .await;
    let size = serde_json::to_vec(&status).unwrap().len();
    assert!(
        size < 256 * 1024,
        "status of 1,000 tenancies is {size} bytes"
    );

    // 10,000 settings over 10 charts, and a secret in values: delivered; the secret stays out of logs,
    // events and status.
    let secret = "s3cr3t-value-never-logged";
    let charts: Vec<Chart> = (0..10)
        .map(|c| {
            let mut ch = chart("deployment-example", &format!("s{c}"), &[]);
            ch.settings = (0..1000)
                .map(|i| Setting {
                    key: format!("extra.k{i}"),
                    value: format!("v{i},x"),
                })
                .collect();
            ch.values = Some(serde_json::json!({"podAnnotations": {"password": secret}}));
            ch
        })
        .collect();
    hub.apply(
        "settings",
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1"], charts)],
            ..Default::default()
        },
    )
    .await;
    hub.status_until(
        "settings",
        "10 charts with 1,000 settings each to deploy",
        ready,
    )
    .await;
    let values = hub.lab.values("member-1", &ns, "s9");
    assert_eq!(values["extra"]["k999"], "v999,x");
    assert_eq!(values["podAnnotations"]["password"], secret);

    // 1,001 settings on one chart are refused by the API server with a clear message.
    let mut too_many = chart("deployment-example", "x", &[]);
    too_many.settings = (0..1001)
        .map(|i| Setting {
            key: format!("k{i}"),
            value: "v".into(),
        })
        .collect();
    let refused = hub
        .api()
        .create(
            &PostParams::default(),
            &TenancyController::new(
                "too-many",
                ControllerSpec {
                    tenancies: vec![tenancy(&ns, &["member-1"], vec![too_many])],
                    ..Default::default()
                },
            ),
        )
        .await
        .expect_err("1,001 settings are refused");
    assert!(
        refused.to_string().contains("must have at most 1000 items"),
        "{refused}"
    );

    let log = hub.log();
    let key_data = std::fs::read_to_string(hub.lab.kubeconfig_path()).unwrap();
    let key = key_data
        .lines()
        .find_map(|l| l.split("client-key-data: ").nth(1))
        .unwrap()
        .trim_end_matches('}')
        .trim();
    assert!(
        !log.contains(secret) && !log.contains(&key[..40]),
        "the operator log leaks a secret"
    );
    let events = kube::Api::<Event>::namespaced(hub.client.clone(), &hub.namespace)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .all(|e| !e.message.clone().unwrap_or_default().contains(secret))
    );
    let status = serde_json::to_string(&hub.api().get("settings").await.unwrap().status).unwrap();
    assert!(!status.contains(secret), "status leaks the values secret");
    hub.delete_and_wait_gone("settings").await;
    hub.delete_and_wait_gone("many").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_standby_takes_over_within_fifteen_seconds_when_the_leader_is_killed() {
    let _turn = LAB_FAULTS.lock().await;
    let mut hub = Hub::without_operator(Lab::get(), unique("leader")).await;
    let namespace = hub.namespace.clone();
    let lease = [
        "--leader-elect",
        "--lease-namespace",
        namespace.as_str(),
        "--lease-name",
        "tenancy-hub-test",
    ];
    let first = Operator::start_with(&hub.lab, &namespace, &lease);
    wait_until("the first replica to lead", DEADLINE, || async {
        first.logged().contains("acquired leadership").then_some(())
    })
    .await;
    let second = Operator::start_with(&hub.lab, &namespace, &lease);
    let ns = unique("ha");
    roll_wave(&hub, "ha", &ns, &["member-1"], 1).await;
    hub.status_until("ha", "the leader's status", ready).await;
    let standby = second.logged();
    assert!(standby.contains("waiting for leadership"), "{standby}");
    assert!(
        !standby.contains("installed "),
        "the standby ran helm:\n{standby}"
    );

    first.kill();
    let killed = Instant::now();
    hub.apply("ha", wave(&ns, &["member-1"], "2")).await;
    wait_until("the standby to take over", DEADLINE, || async {
        second
            .logged()
            .contains("acquired leadership")
            .then_some(())
    })
    .await;
    let takeover = killed.elapsed();
    hub.releases_become("member-1", &ns, &wave_at(2)).await;
    eprintln!("the standby took over {takeover:?} after the leader was killed");
    assert!(takeover.as_secs() < 15, "takeover took {takeover:?}");

    let leases = kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        hub.client.clone(),
        &namespace,
    );
    let held = leases
        .get("tenancy-hub-test")
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity;
    assert!(held.is_some_and(|h| !h.is_empty()));
    hub.operator = Some(second);
    hub.delete_and_wait_gone("ha").await;
    hub.operator.take().unwrap().stop();
    let released = leases.get("tenancy-hub-test").await.unwrap().spec.unwrap();
    assert!(
        released
            .holder_identity
            .as_ref()
            .is_none_or(|h| h.is_empty()),
        "SIGTERM releases the lease: {released:?}"
    );
}

/// How many lines of `operator`'s log contain `text`.
fn lines_of(operator: &Operator, text: &str) -> usize {
    operator
        .logged()
        .lines()
        .filter(|l| l.contains(text))
        .count()
}

/// The sum of every series of one metric of `operator`.
fn metric_sum(operator: &Operator, name: &str) -> f64 {
    let (_, body) = operator.get("/metrics");
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn two_operators_with_default_flags_elect_one_leader_and_never_fight_over_a_release() {
    let _turn = LAB_FAULTS.lock().await;
    let mut hub = Hub::without_operator(Lab::get(), unique("twins")).await;
    let namespace = hub.namespace.clone();
    // No leader flags: election is on, with Lease tenancy-hub/tenancy-hub-<namespace>.
    let first = Operator::start_with(&hub.lab, &namespace, &[]);
    let second = Operator::start_with(&hub.lab, &namespace, &[]);
    let lease = format!("tenancy-hub/tenancy-hub-{namespace}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let holder = format!("{}-{}", host.trim(), first.pid());
    assert!(
        first.logged().contains("acquired leadership"),
        "the first operator leads"
    );
    let waiting = format!("standby: waiting for leadership of Lease {lease} held by {holder}");
    assert!(second.logged().contains(&waiting), "{}", second.logged());
    assert_eq!(
        second.get("/readyz"),
        (
            200,
            format!("standby: waiting for Lease {lease} held by {holder}")
        )
    );

    hub.operator = Some(first);
    let ns = unique("twins");
    roll_wave(&hub, "twins", &ns, &["member-1"], 1).await;
    roll_wave(&hub, "twins", &ns, &["member-1"], 2).await;
    hub.status_until("twins", "the upgrade to be ready", ready)
        .await;

    // "A while": the standby tries the lease 8 more times (16 s, longer than the 10 s lease), and
    // the leader keeps it; a second operator doing work would have added revisions by then.
    let still_held = "is still held by";
    let retries = lines_of(&second, still_held);
    wait_until(
        "the standby to retry the lease 8 more times",
        DEADLINE,
        || async { (lines_of(&second, still_held) >= retries + 8).then_some(()) },
    )
    .await;
    for release in WAVE {
        let history = hub
            .lab
            .helm("member-1", &["history", release, "-n", &ns, "-o", "json"]);
        let revisions: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
        assert_eq!(revisions.len(), 2, "release {release}: {history}");
    }
    assert_eq!(
        hub.lab.releases("member-1", &ns),
        wave_at(2)
            .map(|(r, n)| (r.to_owned(), (n, "deployed".to_owned())))
            .into()
    );
    let standby = second.logged();
    assert!(
        !standby.contains("acquired leadership") && !standby.contains("installed "),
        "the standby worked:\n{standby}"
    );
    assert_eq!(lines_of(&second, "standby: waiting for leadership"), 1);
    assert_eq!(
        metric_sum(&second, "tenancy_hub_reconciles_total"),
        0.0,
        "the standby reconciled"
    );
    assert_eq!(second.get("/readyz").0, 200);

    hub.delete_and_wait_gone("twins").await;
    second.stop();
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_silent_member_is_found_out_by_its_probe_and_holds_up_no_one() {
    let _turn = LAB_FAULTS.lock().await;
    let hub = Hub::new("silent").await;
    let ns = unique("silent");
    let both = ["member-1", "member-2"];
    hub.apply("silent", wave(&ns, &both, "1")).await;
    hub.status_until("silent", "both members fresh", |s| {
        both.iter()
            .all(|c| entry(s, c, &ns).is_some_and(|t| t.fresh && t.pods_ready == 3))
    })
    .await;

    // A frozen API server accepts nothing and refuses nothing: only timeouts tell.
    struct Resume<'a>(&'a Lab);
    impl Drop for Resume<'_> {
        fn drop(&mut self) {
            lab_ctl(self.0, &["resume", "member-2-kube-apiserver"]);
        }
    }
    lab_ctl(&hub.lab, &["pause", "member-2-kube-apiserver"]);
    let resume = Resume(&hub.lab);
    let paused = Instant::now();
    let outcome = async {
        hub.status_until("silent", "member-2 to be marked unreachable", |s| {
            s.clusters
                .iter()
                .any(|c| c.name == "member-2" && !c.reachable)
                && entry(s, "member-2", &ns).is_some_and(|t| !t.fresh)
        })
        .await;
        let marked = paused.elapsed();
        roll_wave(&hub, "silent", &ns, &["member-1"], 2).await;
        (marked, paused.elapsed() - marked)
    }
    .await;
    drop(resume);
    let (marked, member1) = outcome;
    eprintln!(
        "silent member-2 marked unreachable after {marked:?}; member-1 upgraded in {member1:?} meanwhile"
    );
    assert!(
        marked.as_secs() < 20,
        "a silent member took {marked:?} to be marked unreachable"
    );
    assert!(
        member1.as_secs() < 20,
        "member-1 was held up by the silent member: {member1:?}"
    );
    hub.status_until(
        "silent",
        "member-2 back and its releases uninstalled as the spec asks",
        |s| s.clusters.iter().all(|c| c.reachable) && entry(s, "member-2", &ns).is_none(),
    )
    .await;
    hub.releases_become("member-2", &ns, &[]).await;
    hub.delete_and_wait_gone("silent").await;
}

/// The operator's live Helm executor (its newest child `tenancy-hub-helm` not yet exited), if
/// one runs.
fn executor_of(operator: u32) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let (comm, rest) = stat.split_once(") ").unwrap_or_default();
                let mut fields = rest.split_whitespace();
                let (state, parent) = (fields.next(), fields.next());
                comm.ends_with("(tenancy-hub-hel")
                    && state != Some("Z")
                    && parent == Some(&operator.to_string())
            })
        })
        .max()
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn an_executor_killed_mid_install_leaves_no_release_waiting_out_helms_timeout() {
    let _turn = LAB_FAULTS.lock().await;
    let hub = Hub::new("exec-kill").await;
    let ns = unique("exec-kill");
    // Enough releases that the executor has installs in flight for a few seconds.
    let names: Vec<String> = (0..16).map(|i| format!("r{i}")).collect();
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            names
                .iter()
                .map(|r| chart("deployment-example", r, &[]))
                .collect(),
        )],
        ..Default::default()
    };
    let operator = hub.operator.as_ref().unwrap().pid();
    let member = hub.lab.client("member-1").await;
    let records: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(member, &ns);
    let pending =
        kube::runtime::watcher::Config::default().labels("owner=helm,status=pending-install");
    let mut seen = Box::pin(kube::runtime::watcher::watcher(records, pending));
    hub.apply("exec-kill", spec).await;
    // The executor is killed as soon as an install it runs has written its pending revision,
    // seen through a watch of the release records.
    let executor = tokio::time::timeout(DEADLINE, async {
        use futures::StreamExt as _;
        while let Some(event) = seen.next().await {
            if let Ok(kube::runtime::watcher::Event::Apply(_)) = event
                && let Some(pid) = executor_of(operator)
            {
                return pid;
            }
        }
        panic!("the watch of release records ended")
    })
    .await
    .expect("an install in flight in the executor within the deadline");
    drop(seen);
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &executor.to_string()])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -KILL {executor}");
    let started = Instant::now();
    // Every release deployed within DEADLINE (120 s): well inside helm's timeout (300 s), which
    // a revision left pending would otherwise wait out. At revision 1, or 2 where the executor
    // died after deploying but before answering (the job tried again upgrades, unchanged).
    let deployed = wait_until("every release deployed", DEADLINE, || async {
        let releases = hub.lab.releases("member-1", &ns);
        (releases.len() == names.len()
            && releases
                .values()
                .all(|(revision, status)| status == "deployed" && *revision <= 2))
        .then_some(releases)
    })
    .await;
    assert!(
        deployed
            .values()
            .filter(|(revision, _)| *revision == 2)
            .count()
            <= 4,
        "at most the installs in flight made a second revision: {deployed:?}"
    );
    hub.status_until("exec-kill", "every release deployed once", ready)
        .await;
    assert!(
        started.elapsed().as_secs() < 120,
        "the releases waited {:?}",
        started.elapsed()
    );
    let log = hub.operator.as_ref().unwrap().logged();
    // Said as its output ending by the signal, or, when a request was being written to it as it
    // died (a loaded machine), as its input closing.
    assert!(
        log.contains("the helm executor's output ended (signal: 9")
            || log.contains("stopped the helm executor: its input closed"),
        "the operator saw the executor it ran installs in killed, and said how:\n{log}"
    );
    hub.delete_and_wait_gone("exec-kill").await;
}
