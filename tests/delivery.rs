//! End-to-end tests of Helm delivery: the operator, the lab's API servers and the real helm.

mod common;

use std::{collections::BTreeMap, path::Path};

use common::{
    fixtures::{
        DEADLINE, SEED, chart, create_seed, message, ready, tenancy, unique, wait_until, web,
    },
    hub::{Hub, allow_all},
    lab::Lab,
    operator::Operator,
    repo::{ChartRepo, OciRegistry, example_chart},
};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::Event,
};
use kube::{Api, api::ListParams};
use tenancy_hub::api::crd::{Chart, ControllerSpec};

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_seed_example_is_delivered_to_the_hub_as_written() {
    let hub = Hub::new("seed").await;
    create_seed(&hub.api()).await;

    let status = hub
        .status_until(SEED, "the seed example to be ready", ready)
        .await;
    let foo = message(&status, "hub", "foo").expect("a message for release foo");
    assert_eq!(
        (foo.chart_name.as_str(), foo.phase.as_str(), foo.revision),
        ("deployment-example", "Deployed", Some(1))
    );
    assert_eq!(foo.setting_map["replicaCount"], "2");
    assert_eq!(
        message(&status, "hub", "nginx").unwrap().setting_map["service.internalPort"],
        "8080"
    );
    assert_eq!(status.updated_tenancies[0].namespace, "foo");

    assert_eq!(
        hub.lab.values("hub", "foo", "foo"),
        serde_json::json!({"replicaCount": 2})
    );
    assert_eq!(
        hub.lab.values("hub", "foo", "nginx"),
        serde_json::json!({"replicas": 3, "service": {"internalPort": 8080}})
    );
    let deployments: Api<Deployment> = Api::namespaced(hub.client.clone(), "foo");
    let statefulsets: Api<StatefulSet> = Api::namespaced(hub.client.clone(), "foo");
    wait_until("Deployment foo with 2 ready replicas", DEADLINE, || async {
        let d = deployments.get("foo").await.ok()?;
        (d.spec?.replicas == Some(2) && d.status?.ready_replicas == Some(2)).then_some(())
    })
    .await;
    wait_until(
        "StatefulSet nginx with 3 ready replicas",
        DEADLINE,
        || async {
            let s = statefulsets.get("nginx").await.ok()?;
            (s.spec?.replicas == Some(3) && s.status?.ready_replicas == Some(3)).then_some(())
        },
    )
    .await;

    hub.delete_and_wait_gone(SEED).await;
    assert!(
        hub.lab.releases("hub", "foo").is_empty(),
        "deleting the resource uninstalls its releases"
    );
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_tenancy_on_two_members_follows_every_spec_change() {
    let hub = Hub::new("members").await;
    follow_every_spec_change(&hub).await;
    assert!(
        hub.log().contains("helm runs in the long-lived executor"),
        "the operator did not run the long-lived executor"
    );
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_cli_executor_follows_every_spec_change_too() {
    // One helm process per job: the fallback when tenancy-hub-helm is not installed.
    let hub = Hub::with_args("members-cli", &["--executor", "cli"]).await;
    follow_every_spec_change(&hub).await;
    assert!(
        hub.log().contains("helm runs one process per job"),
        "the operator did not run the CLI executor"
    );
}

/// Installs, upgrades, moves and removes releases over two members, checking each step.
async fn follow_every_spec_change(hub: &Hub) {
    let ns = unique("team");
    let spec = |clusters: &[&str], replicas: &str, with_db: bool| {
        let mut charts = vec![chart(
            "deployment-example",
            "web",
            &[("replicaCount", replicas)],
        )];
        if with_db {
            charts.push(chart("statefulset-example", "db", &[("replicas", "1")]));
        }
        ControllerSpec {
            tenancies: vec![tenancy(&ns, clusters, charts)],
            ..Default::default()
        }
    };
    let both = ["member-1", "member-2"];
    hub.apply("team", spec(&both, "1", true)).await;
    for member in both {
        hub.releases_become(member, &ns, &[("db", 1), ("web", 1)])
            .await;
    }
    hub.status_until("team", "status to show both members ready", |s| {
        ready(s) && s.clusters.len() == 2 && s.summary.as_ref().is_some_and(|t| t.releases == "4/4")
    })
    .await;

    hub.apply("team", spec(&both, "2", true)).await;
    for member in both {
        hub.releases_become(member, &ns, &[("db", 1), ("web", 2)])
            .await;
        assert_eq!(
            hub.lab.values(member, &ns, "web"),
            serde_json::json!({"replicaCount": 2})
        );
    }

    hub.apply("team", spec(&["member-1"], "2", true)).await;
    hub.releases_become("member-2", &ns, &[]).await;
    hub.releases_become("member-1", &ns, &[("db", 1), ("web", 2)])
        .await;

    hub.apply("team", spec(&["member-1"], "2", false)).await;
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;

    hub.delete_and_wait_gone("team").await;
    assert!(hub.lab.releases("member-1", &ns).is_empty());
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_chart_from_a_helm_repository_is_pinned_to_its_version() {
    let hub = Hub::new("repo").await;
    let repo = ChartRepo::serve(&hub.lab, &["0.1.0", "0.2.0"]);
    repo.wait_ready().await;
    // A plain-http repository is used only under a prefix a policy lists.
    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[&repo.url]))
        .await;
    let ns = unique("repo-tenant");
    let spec = |version: &str| {
        let mut c = chart("deployment-example", "web", &[]);
        c.repo = Some(repo.url.clone());
        c.version = Some(version.into());
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1"], vec![c])],
            ..Default::default()
        }
    };
    hub.apply("from-repo", spec("0.1.0")).await;
    let status = hub
        .status_until("from-repo", "the repository chart to be deployed", ready)
        .await;
    assert_eq!(
        message(&status, "member-1", "web").unwrap().chart_version,
        "0.1.0"
    );
    let listed = hub.lab.helm("member-1", &["list", "-n", &ns, "-o", "json"]);
    assert!(listed.contains("deployment-example-0.1.0"), "{listed}");

    hub.apply("from-repo", spec("0.2.0")).await;
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;
    let listed = hub.lab.helm("member-1", &["list", "-n", &ns, "-o", "json"]);
    assert!(listed.contains("deployment-example-0.2.0"), "{listed}");
    hub.delete_and_wait_gone("from-repo").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn restarting_the_operator_changes_nothing() {
    let mut hub = Hub::new("restart").await;
    let ns = unique("steady");
    let witness = unique("witness");
    let base = vec![tenancy(
        &ns,
        &["member-1"],
        vec![
            chart("deployment-example", "web", &[("replicaCount", "1")]),
            chart("statefulset-example", "db", &[]),
        ],
    )];
    hub.apply(
        "steady",
        ControllerSpec {
            tenancies: base.clone(),
            ..Default::default()
        },
    )
    .await;
    hub.releases_become("member-1", &ns, &[("db", 1), ("web", 1)])
        .await;
    hub.status_until("steady", "the releases to be ready", ready)
        .await;

    hub.operator.take().unwrap().stop();
    hub.operator = Some(Operator::start(&hub.lab, &hub.namespace));
    // A change elsewhere proves the new operator has reconciled this resource.
    let mut with_witness = base.clone();
    with_witness.push(tenancy(
        &witness,
        &["member-1"],
        vec![chart("deployment-example", "w", &[])],
    ));
    hub.apply(
        "steady",
        ControllerSpec {
            tenancies: with_witness,
            ..Default::default()
        },
    )
    .await;
    hub.releases_become("member-1", &witness, &[("w", 1)]).await;
    hub.status_until("steady", "the witness to be ready", ready)
        .await;

    assert_eq!(
        hub.lab.releases("member-1", &ns),
        BTreeMap::from([
            ("db".to_string(), (1, "deployed".to_string())),
            ("web".to_string(), (1, "deployed".to_string()))
        ]),
        "a restart made new revisions"
    );
    let log = hub.log();
    assert_eq!(
        log.matches("installed member-1/").count(),
        1,
        "the restarted operator installed only the witness:\n{log}"
    );
    assert!(
        !log.contains("upgraded member-1/"),
        "nothing upgraded:\n{log}"
    );
    hub.delete_and_wait_gone("steady").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn bad_input_is_reported_on_its_own_release_and_the_rest_is_deployed() {
    let hub = Hub::new("bad").await;
    let ns = unique("mixed");
    let literal =
        "a,b\\c {x,y} $(rm -rf /) `id` 'q' \"z\" --set=evil=1; echo hi\nline two ünï = done";
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1", "member-9"],
            vec![
                chart(
                    "deployment-example",
                    "good",
                    &[("podAnnotations.note", literal)],
                ),
                chart("no-such-chart", "missing", &[]),
                chart(
                    "deployment-example",
                    "broken",
                    &[("podAnnotations", "notamap")],
                ),
            ],
        )],
        ..Default::default()
    };
    hub.apply("mixed", spec).await;
    let status = hub
        .status_until(
            "mixed",
            "every release of the mixed tenancy to be reported",
            |s| {
                message(s, "member-1", "good").is_some_and(|m| m.phase == "Deployed")
                    && message(s, "member-1", "broken").is_some_and(|m| m.phase == "Failed")
            },
        )
        .await;

    let unknown = status
        .updated_tenancies
        .iter()
        .find(|t| t.cluster == "member-9")
        .expect("an entry for member-9");
    assert!(
        unknown.chart_messages[0]
            .error_message
            .contains("\"member-9\" is not registered"),
        "{unknown:?}"
    );
    let missing = message(&status, "member-1", "missing").unwrap();
    assert!(
        missing
            .error_message
            .contains("\"no-such-chart\" not found"),
        "{missing:?}"
    );
    let broken = message(&status, "member-1", "broken").unwrap();
    assert!(
        broken.error_message.contains("can't iterate over notamap"),
        "{broken:?}"
    );
    assert!(!ready(&status));

    let values = hub.lab.values("member-1", &ns, "good");
    assert_eq!(
        values["podAnnotations"]["note"], literal,
        "the value arrived exactly as written"
    );
    assert_eq!(
        hub.lab
            .releases("member-1", &ns)
            .get("good")
            .map(|r| r.1.as_str()),
        Some("deployed")
    );

    let events: Api<Event> = Api::namespaced(hub.client.clone(), &hub.namespace);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.involved_object.name.as_deref() == Some("mixed"))
        .filter_map(|e| e.reason.clone())
        .collect();
    for reason in ["Installed", "Failed", "UnknownCluster", "ChartNotFound"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event among {reasons:?}"
        );
    }
    hub.delete_and_wait_gone("mixed").await;
    assert!(hub.lab.releases("member-1", &ns).is_empty());
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_release_claimed_by_two_resources_stays_with_the_first() {
    let hub = Hub::new("claims").await;
    let ns = unique("shared");
    let spec = |replicas: &str| web(&ns, &["member-1"], replicas);
    hub.apply("first", spec("1")).await;
    hub.status_until("first", "the first resource to deploy", ready)
        .await;
    hub.apply("second", spec("2")).await;
    let status = hub
        .status_until("second", "the conflict to be reported on the second", |s| {
            message(s, "member-1", "web").is_some_and(|m| m.phase == "Conflict")
        })
        .await;
    let conflict = message(&status, "member-1", "web").unwrap();
    assert!(
        conflict.error_message.contains("held by Controller"),
        "{conflict:?}"
    );
    assert!(conflict.error_message.contains("/first"), "{conflict:?}");
    assert_eq!(
        hub.lab.releases("member-1", &ns)["web"],
        (1, "deployed".to_string()),
        "never fought over"
    );
    assert_eq!(
        hub.lab.values("member-1", &ns, "web"),
        serde_json::json!({"replicaCount": 1})
    );

    hub.delete_and_wait_gone("first").await;
    hub.status_until(
        "second",
        "the second resource to take the release over",
        ready,
    )
    .await;
    assert_eq!(
        hub.lab.values("member-1", &ns, "web"),
        serde_json::json!({"replicaCount": 2})
    );
    hub.delete_and_wait_gone("second").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_release_installed_by_hand_is_a_conflict_and_never_taken_over() {
    let hub = Hub::new("byhand").await;
    let ns = unique("byhand");
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts/deployment-example");
    let chart = chart.to_str().unwrap();
    let by_hand = |verb: &str, replicas: &str| {
        let set = format!("replicaCount={replicas}");
        hub.lab.helm(
            "member-1",
            &[
                verb,
                "web",
                chart,
                "-n",
                &ns,
                "--create-namespace",
                "--set",
                &set,
            ],
        );
    };
    by_hand("install", "3");
    hub.apply("wants", web(&ns, &["member-1"], "1")).await;
    let conflict = |s: &tenancy_hub::api::crd::ControllerStatus| {
        message(s, "member-1", "web").is_some_and(|m| {
            m.phase == "Conflict"
                && m.error_message
                    .contains("a Helm release not managed by tenancy-hub")
        })
    };
    hub.status_until("wants", "the hand-made release to be a conflict", conflict)
        .await;
    // Upgraded by hand: its older record leaves the watched records and a newer one comes; it is
    // still somebody else's.
    by_hand("upgrade", "2");
    wait_until("the upgrade by hand to be deployed", DEADLINE, || async {
        (hub.lab.releases("member-1", &ns).get("web") == Some(&(2, "deployed".into())))
            .then_some(())
    })
    .await;
    hub.status_until("wants", "the conflict to stay after the upgrade", conflict)
        .await;
    assert_eq!(
        hub.lab.values("member-1", &ns, "web"),
        serde_json::json!({"replicaCount": 2}),
        "never upgraded by the operator"
    );
    hub.delete_and_wait_gone("wants").await;
    assert_eq!(
        hub.lab.releases("member-1", &ns).get("web"),
        Some(&(2, "deployed".to_string())),
        "never uninstalled by the operator"
    );
    hub.lab.helm("member-1", &["uninstall", "web", "-n", &ns]);
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_release_left_pending_by_a_killed_helm_is_recovered() {
    let lab = Lab::get();
    let ns = unique("stuck");
    let hub_ns = unique("pending");
    // A chart whose pre-install hook pod can never be scheduled keeps helm waiting in pending-install.
    let chart = tempfile::tempdir().unwrap();
    std::fs::create_dir(chart.path().join("templates")).unwrap();
    std::fs::write(
        chart.path().join("Chart.yaml"),
        "apiVersion: v2\nname: stuck\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.path().join("templates/hook.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: never\n  annotations: {\"helm.sh/hook\": pre-install}\nspec:\n  nodeSelector: {nowhere: \"true\"}\n  containers: [{name: c, image: busybox}]\n",
    )
    .unwrap();
    let labels = format!(
        "multitenancy.dev/managed-by=tenancy-hub,multitenancy.dev/controller-namespace={hub_ns},multitenancy.dev/controller-name=recover,multitenancy.dev/spec-hash=0"
    );
    let mut helm = std::process::Command::new(lab.bin_dir().join("helm"))
        .args([
            "upgrade",
            "--install",
            "web",
            "--create-namespace",
            "--timeout",
            "10m",
            "-n",
            &ns,
            "--labels",
            &labels,
        ])
        .arg(chart.path())
        .arg("--kubeconfig")
        .arg(lab.kubeconfig_path())
        .args(["--kube-context", "member-1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_until(
        "helm to leave the release pending-install",
        DEADLINE,
        || async {
            (lab.releases("member-1", &ns)
                .get("web")
                .map(|r| r.1.as_str())
                == Some("pending-install"))
            .then_some(())
        },
    )
    .await;
    helm.kill().unwrap();
    helm.wait().unwrap();
    // The operator's executor seals every record it writes, a pending one too: the stand-in's
    // record is sealed with the operator's key as the executor would have sealed it.
    let key =
        tenancy_hub::helm::seal::SealKey::load_or_create(lab.client("hub").await, "tenancy-hub")
            .await
            .unwrap();
    let release: tenancy_hub::api::key::ReleaseKey = format!("member-1/{ns}/web").parse().unwrap();
    let owner = tenancy_hub::plan::OwnerId {
        namespace: hub_ns.clone(),
        name: "recover".into(),
    };
    tenancy_hub::helm::seal::seal_revision(&key, lab.client("member-1").await, &release, &owner, 1)
        .await
        .unwrap();

    let mut hub = Hub::without_operator(lab, hub_ns).await;
    hub.operator = Some(Operator::start_with(
        &hub.lab,
        &hub.namespace,
        &["--pending-timeout", "1"],
    ));
    hub.apply(
        "recover",
        ControllerSpec {
            tenancies: vec![tenancy(
                &ns,
                &["member-1"],
                vec![chart_ref("deployment-example", "web")],
            )],
            ..Default::default()
        },
    )
    .await;
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;
    let status = hub
        .status_until("recover", "the recovered release to be ready", ready)
        .await;
    assert_eq!(
        message(&status, "member-1", "web").unwrap().chart_name,
        "deployment-example"
    );
    assert!(
        hub.log()
            .contains("cleared a release revision left pending"),
        "{}",
        hub.log()
    );
    hub.delete_and_wait_gone("recover").await;
}

fn chart_ref(name: &str, release: &str) -> Chart {
    chart(name, release, &[])
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_chart_from_an_oci_registry_is_delivered_at_its_pinned_version() {
    let lab = Lab::get();
    let registry = OciRegistry::serve(&lab);
    for version in ["0.3.0", "0.4.0"] {
        registry.push(&lab, &example_chart(), version).await;
    }
    let ca = registry.ca.clone();

    let mut hub = Hub::without_operator(lab, unique("oci")).await;
    // helm trusts the registry through the lab's CA, as a real hub trusts its registry's CA.
    hub.operator = Some(Operator::start_with_env(
        &hub.lab,
        &hub.namespace,
        &[],
        &[("SSL_CERT_FILE", ca.as_str())],
    ));
    // A registry on loopback is used only under a prefix a policy lists.
    hub.policy(
        &hub.namespace,
        allow_all(&hub.namespace, &[&registry.prefix()]),
    )
    .await;
    let ns = unique("oci-tenant");
    let spec = |version: &str| {
        let mut c = chart(&registry.reference("deployment-example"), "web", &[]);
        c.version = Some(version.into());
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1"], vec![c])],
            ..Default::default()
        }
    };
    hub.apply("from-oci", spec("0.3.0")).await;
    let status = hub
        .status_until("from-oci", "the OCI chart to be deployed", ready)
        .await;
    assert_eq!(
        message(&status, "member-1", "web").unwrap().chart_version,
        "0.3.0"
    );
    hub.apply("from-oci", spec("0.4.0")).await;
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;
    let listed = hub.lab.helm("member-1", &["list", "-n", &ns, "-o", "json"]);
    assert!(listed.contains("deployment-example-0.4.0"), "{listed}");
    hub.delete_and_wait_gone("from-oci").await;
}

/// The chart's own default of a value in config/charts/CHART/values.yaml.
fn chart_default(chart: &str, key: &str) -> serde_yaml::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/charts")
        .join(chart)
        .join("values.yaml");
    let values: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    values[key].clone()
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_removed_setting_returns_to_the_charts_default() {
    let hub = Hub::new("reset").await;
    let ns = unique("reset");
    let spec = |settings: &[(&str, &str)], values: Option<serde_json::Value>| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![Chart {
                values,
                ..chart("deployment-example", "web", settings)
            }],
        )],
        ..Default::default()
    };
    let deployments: Api<Deployment> = Api::namespaced(hub.lab.client("member-1").await, &ns);
    let replicas_become = |n: i64| {
        let deployments = deployments.clone();
        async move {
            wait_until(
                &format!("Deployment web with spec.replicas {n}"),
                DEADLINE,
                || async {
                    let d = deployments.get("web").await.ok()?;
                    (d.spec?.replicas == Some(n as i32)).then_some(())
                },
            )
            .await
        }
    };

    // A setting is typed as --set types it; a quoted string under values stays a string.
    let quoted = serde_json::json!({"podAnnotations": {"replicas": "3"}});
    hub.apply("reset", spec(&[("replicaCount", "3")], Some(quoted)))
        .await;
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;
    assert_eq!(
        hub.lab.values("member-1", &ns, "web"),
        serde_json::json!({"replicaCount": 3, "podAnnotations": {"replicas": "3"}})
    );
    replicas_become(3).await;

    hub.apply("reset", spec(&[], None)).await;
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;
    let values = hub.lab.values("member-1", &ns, "web");
    assert!(
        values.is_null() || values == serde_json::json!({}),
        "no values are reused from the last release: {values}"
    );
    let default = chart_default("deployment-example", "replicaCount")
        .as_i64()
        .unwrap();
    assert_ne!(default, 3);
    replicas_become(default).await;
    hub.status_until("reset", "the release to be ready at the default", ready)
        .await;

    hub.delete_and_wait_gone("reset").await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_rejected_upgrade_is_rolled_back_when_the_chart_asks_for_it() {
    let hub = Hub::new("rollback").await;
    let ns = unique("rollback");
    let spec = |settings: &[(&str, &str)]| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![Chart {
                rollback_on_failure: true,
                ..chart("statefulset-example", "db", settings)
            }],
        )],
        ..Default::default()
    };
    hub.apply("rollback", spec(&[])).await;
    hub.releases_become("member-1", &ns, &[("db", 1)]).await;
    hub.status_until("rollback", "revision 1 to be ready", ready)
        .await;

    // The API server rejects a negative replica count (422 Invalid); the Service's port would change.
    hub.apply(
        "rollback",
        spec(&[("replicas", "-1"), ("service.externalPort", "8081")]),
    )
    .await;
    let status = hub
        .status_until("rollback", "the rejected upgrade to be reported", |s| {
            message(s, "member-1", "db").is_some_and(|m| m.phase == "Failed")
        })
        .await;
    let error = &message(&status, "member-1", "db").unwrap().error_message;
    assert!(
        error.contains("has been rolled back due to rollback-on-failure")
            && error.contains("spec.replicas: Invalid value: -1"),
        "{error}"
    );
    assert!(!ready(&status));

    let history: Vec<serde_json::Value> = serde_json::from_str(
        &hub.lab
            .helm("member-1", &["history", "db", "-n", &ns, "-o", "json"]),
    )
    .unwrap();
    let revisions: Vec<(i64, &str, &str)> = history
        .iter()
        .map(|r| {
            (
                r["revision"].as_i64().unwrap(),
                r["status"].as_str().unwrap(),
                r["description"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(revisions.len(), 3, "{revisions:?}");
    assert_eq!(revisions[1].1, "failed", "{revisions:?}");
    assert_eq!(
        (revisions[2].1, revisions[2].2),
        ("deployed", "Rollback to 1"),
        "{revisions:?}"
    );

    let member = hub.lab.client("member-1").await;
    let statefulset = Api::<StatefulSet>::namespaced(member.clone(), &ns)
        .get("db")
        .await
        .unwrap();
    assert_eq!(statefulset.spec.unwrap().replicas, Some(1));
    let service = Api::<k8s_openapi::api::core::v1::Service>::namespaced(member, &ns)
        .get("db")
        .await
        .unwrap();
    let ports: Vec<i32> = service
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, [80], "the live Service is revision 1's");
    assert_eq!(
        hub.lab.values("member-1", &ns, "db"),
        serde_json::Value::Null,
        "the values in force are revision 1's"
    );

    hub.delete_and_wait_gone("rollback").await;
}
