//! The tenant boundary against the lab: TenancyPolicy enforcement, impersonation, tightening and loosening.

mod common;

use std::path::Path;

use common::{
    fixtures::{chart, entry, message, tenancy, unique},
    hub::Hub,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::Api;
use tenancy_hub::api::{
    crd::{Chart, ControllerSpec, ControllerStatus},
    policy::{Impersonation, TenancyPolicySpec},
};

/// A chart home with the example chart, a chart that creates a ClusterRole, and a chart whose
/// template looks up a Secret of namespace `vault` and prints it.
fn chart_home(vault: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts/deployment-example");
    copy_dir(&example, &home.path().join("deployment-example"));
    let chart = |name: &str, template: String| {
        let dir = home.path().join(name).join("templates");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            home.path().join(name).join("Chart.yaml"),
            format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
        )
        .unwrap();
        std::fs::write(dir.join("object.yaml"), template).unwrap();
    };
    chart(
        "clusterrole-example",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {{ .Release.Namespace }}-escalate\nrules:\n  - apiGroups: ['*']\n    resources: ['*']\n    verbs: ['*']\n".into(),
    );
    chart(
        "lookup-example",
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: peek\ndata:\n  found: {{{{ (lookup \"v1\" \"Secret\" \"{vault}\" \"treasure\").data | toJson | quote }}}}\n"
        ),
    );
    home
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn policy(hub_namespace: &str, clusters: &[&str], namespaces: &[&str]) -> TenancyPolicySpec {
    TenancyPolicySpec {
        hub_namespaces: vec![hub_namespace.into()],
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        chart_sources: vec!["chart-home".into()],
        trusted: true,
        ..Default::default()
    }
}

fn phase_of(status: &ControllerStatus, cluster: &str, release: &str) -> Option<String> {
    message(status, cluster, release).map(|m| m.phase.clone())
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_tenant_delivers_only_where_its_policy_allows() {
    let hub = Hub::with_args("tenant", &["--tenancy-policy", "enforce"]).await;
    let team = unique("ta");
    let author = format!("{team}-author");
    hub.tenant_may_write_controllers(&author).await;
    let pattern = format!("{team}-*");
    hub.policy(
        &hub.namespace,
        policy(&hub.namespace, &["member-1"], &[&pattern]),
    )
    .await;

    let ok = format!("{team}-ok");
    let web = |release: &str| chart("deployment-example", release, &[("replicaCount", "1")]);
    let named = |name: &str, release: &str| Chart {
        chart_name: name.into(),
        ..chart("x", release, &[])
    };
    let mut from_elsewhere = web("src");
    from_elsewhere.repo = Some("https://charts.example.com/".into());
    let spec = ControllerSpec {
        tenancies: vec![
            tenancy(&ok, &["member-1"], vec![web("web")]),
            tenancy(
                "kube-system",
                &["member-1"],
                vec![web(&format!("{team}-sys"))],
            ),
            tenancy(&format!("other-{team}"), &["member-1"], vec![web("web")]),
            tenancy(&format!("{team}-two"), &["member-2"], vec![web("web")]),
            tenancy(&format!("{team}-hub"), &[], vec![web("web")]),
            tenancy(
                &format!("{team}-src"),
                &["member-1"],
                vec![
                    from_elsewhere,
                    named("/etc/charts/deployment-example", "abs"),
                    named("../charts/deployment-example", "dots"),
                ],
            ),
        ],
        ..Default::default()
    };
    hub.apply_as(&author, "tenant", spec).await;

    let status = hub
        .status_until("tenant", "web deployed and the rest refused", |s| {
            entry(s, "member-1", &ok)
                .is_some_and(|t| t.chart_messages.iter().any(|m| m.phase == "Deployed"))
                && s.updated_tenancies
                    .iter()
                    .flat_map(|t| &t.chart_messages)
                    .filter(|m| m.phase == "Forbidden")
                    .count()
                    == 7
        })
        .await;
    let refusal = |cluster: &str, namespace: &str, release: &str| -> String {
        let entry = status
            .updated_tenancies
            .iter()
            .find(|t| t.cluster == cluster && t.namespace == namespace)
            .unwrap_or_else(|| panic!("no status entry {cluster}/{namespace}"));
        let m = entry
            .chart_messages
            .iter()
            .find(|m| m.release_name == release)
            .unwrap();
        assert_eq!(m.phase, "Forbidden", "{m:?}");
        m.error_message.clone()
    };
    let sys = refusal("member-1", "kube-system", &format!("{team}-sys"));
    assert!(sys.contains("namespace kube-system is protected"), "{sys}");
    assert!(
        sys.contains(&format!("TenancyPolicy {}", hub.namespace)),
        "{sys}"
    );
    let other = refusal("member-1", &format!("other-{team}"), "web");
    assert!(other.contains("is not allowed"), "{other}");
    let two = refusal("member-2", &format!("{team}-two"), "web");
    assert!(two.contains("cluster member-2 is not allowed"), "{two}");
    let on_hub = refusal("hub", &format!("{team}-hub"), "web");
    assert!(
        on_hub.contains("hub cluster is allowed only when named"),
        "{on_hub}"
    );
    let src = format!("{team}-src");
    let source = refusal("member-1", &src, "src");
    assert!(source.contains("is not in chartSources"), "{source}");
    for release in ["abs", "dots"] {
        let path = refusal("member-1", &src, release);
        assert!(path.contains("must be a plain chart name"), "{path}");
    }
    let stalled = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "Forbidden")
    );

    // Helm was called for the allowed release only.
    assert_eq!(hub.lab.releases("member-1", &ok).len(), 1);
    for (context, namespace) in [
        ("member-1", "kube-system".to_owned()),
        ("member-1", format!("other-{team}")),
        ("member-2", format!("{team}-two")),
        ("hub", format!("{team}-hub")),
        ("member-1", src.clone()),
    ] {
        assert!(
            hub.lab
                .releases(context, &namespace)
                .keys()
                .all(|r| !r.starts_with(&team) && r != "web" && r != "src"),
            "a refused release reached {context}/{namespace}"
        );
    }
    assert_eq!(
        hub.operator
            .as_ref()
            .unwrap()
            .metric("tenancy_hub_helm_jobs_total"),
        1.0,
        "one helm job: the allowed release"
    );
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_hub_namespace_no_policy_governs_delivers_nothing() {
    let hub = Hub::with_args("ungoverned", &["--tenancy-policy", "enforce"]).await;
    let ns = unique("ungoverned-tenant");
    hub.apply(
        "stray",
        ControllerSpec {
            tenancies: vec![tenancy(
                &ns,
                &["member-1"],
                vec![chart("deployment-example", "web", &[])],
            )],
            ..Default::default()
        },
    )
    .await;
    let status = hub
        .status_until("stray", "the release to be refused", |s| {
            phase_of(s, "member-1", "web").as_deref() == Some("Forbidden")
        })
        .await;
    let m = message(&status, "member-1", "web").unwrap();
    assert!(
        m.error_message.contains(&format!(
            "no TenancyPolicy governs hub namespace {}",
            hub.namespace
        )),
        "{}",
        m.error_message
    );
    assert!(hub.lab.releases("member-1", &ns).is_empty());
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn impersonation_lets_the_target_clusters_rbac_decide_what_a_chart_may_do() {
    let vault = unique("vault");
    let secret = unique("hunter2");
    let admin = Hub::without_operator(common::lab::Lab::get(), unique("imp")).await;
    admin.lab.kubectl("hub", &["create", "namespace", &vault]);
    admin.lab.kubectl(
        "hub",
        &[
            "-n",
            &vault,
            "create",
            "secret",
            "generic",
            "treasure",
            &format!("--from-literal=key={secret}"),
        ],
    );
    let home = chart_home(&vault);
    let mut hub = admin;
    hub.operator = Some(common::operator::Operator::start_with(
        &hub.lab,
        &hub.namespace,
        &[
            "--tenancy-policy",
            "enforce",
            "--chart-home",
            home.path().to_str().unwrap(),
        ],
    ));
    let team = unique("tb");
    let deployer = format!("{team}-deployer");
    let mut allowed = policy(
        &hub.namespace,
        &["hub", "member-1"],
        &[&format!("{team}-*")],
    );
    allowed.trusted = false;
    allowed.impersonate = Some(Impersonation {
        user: deployer.clone(),
        groups: vec![format!("{team}-group")],
        namespace_role: Some("admin".into()),
    });
    hub.policy(&hub.namespace, allowed).await;

    let apps = format!("{team}-apps");
    let peek = format!("{team}-peek");
    let spec = ControllerSpec {
        tenancies: vec![
            tenancy(
                &apps,
                &["member-1"],
                vec![
                    chart("deployment-example", "web", &[("replicaCount", "1")]),
                    chart("clusterrole-example", "escalate", &[]),
                ],
            ),
            tenancy(&peek, &[], vec![chart("lookup-example", "peek", &[])]),
        ],
        ..Default::default()
    };
    hub.apply("impersonated", spec).await;
    let status = hub
        .status_until(
            "impersonated",
            "web deployed, the ClusterRole and the lookup refused by RBAC",
            |s| {
                phase_of(s, "member-1", "web").as_deref() == Some("Deployed")
                    && phase_of(s, "member-1", "escalate").as_deref() == Some("Failed")
                    && phase_of(s, "hub", "peek").as_deref() == Some("Failed")
            },
        )
        .await;
    let escalate = message(&status, "member-1", "escalate").unwrap();
    assert!(
        escalate.error_message.contains("forbidden") && escalate.error_message.contains(&deployer),
        "{}",
        escalate.error_message
    );
    let peeked = message(&status, "hub", "peek").unwrap();
    assert!(
        peeked.error_message.contains("forbidden"),
        "{}",
        peeked.error_message
    );
    let everything = serde_json::to_string(&status).unwrap();
    assert!(
        !everything.contains(&secret),
        "the Secret's value reached the status"
    );
    assert!(
        !hub.log().contains(&secret),
        "the Secret's value reached the log"
    );

    // Nothing was created outside the tenant's namespace: no ClusterRole on member-1.
    let member = hub.lab.client("member-1").await;
    let roles: Api<ClusterRole> = Api::all(member.clone());
    assert!(
        roles
            .get_opt(&format!("{apps}-escalate"))
            .await
            .unwrap()
            .is_none()
    );
    // The operator created the namespace and bound the policy's role to the identity there only.
    let bindings: Api<RoleBinding> = Api::namespaced(member, &apps);
    let bound = bindings.list(&Default::default()).await.unwrap();
    assert!(
        bound.items.iter().any(|b| b.role_ref.name == "admin"
            && b.subjects.iter().flatten().any(|s| s.name == deployer)),
        "no RoleBinding of admin to {deployer} in {apps}"
    );
    // The release really is the identity's: helm stored it in its namespace.
    assert_eq!(hub.lab.releases("member-1", &apps).len(), 1, "web only");
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn tightening_a_policy_leaves_the_release_in_place_and_loosening_it_delivers() {
    let hub = Hub::with_args("tighten", &["--tenancy-policy", "enforce"]).await;
    let ns = unique("tighten-tenant");
    let loose = policy(&hub.namespace, &["member-1"], &[&ns]);
    hub.policy(&hub.namespace, loose.clone()).await;
    let spec = |replicas: &str| ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1"],
            vec![chart(
                "deployment-example",
                "web",
                &[("replicaCount", replicas)],
            )],
        )],
        ..Default::default()
    };
    hub.apply("team", spec("1")).await;
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;

    // Tightened: the release stays as it is and is reported Forbidden.
    hub.policy(
        &hub.namespace,
        policy(&hub.namespace, &["member-1"], &["elsewhere"]),
    )
    .await;
    hub.status_until("team", "the release reported Forbidden", |s| {
        phase_of(s, "member-1", "web").as_deref() == Some("Forbidden")
    })
    .await;
    let jobs = hub
        .operator
        .as_ref()
        .unwrap()
        .metric("tenancy_hub_helm_jobs_total");

    // A spec change makes no helm call for it.
    hub.apply("team", spec("2")).await;
    let generation = hub.api().get("team").await.unwrap().metadata.generation;
    hub.status_until("team", "the new generation planned, still Forbidden", |s| {
        s.observed_generation == generation
            && phase_of(s, "member-1", "web").as_deref() == Some("Forbidden")
    })
    .await;
    assert_eq!(hub.lab.releases("member-1", &ns)["web"].0, 1);
    assert_eq!(
        hub.operator
            .as_ref()
            .unwrap()
            .metric("tenancy_hub_helm_jobs_total"),
        jobs
    );

    // Loosened again: the change is delivered.
    hub.policy(&hub.namespace, loose).await;
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;

    // Tightened once more, deleting the Controller removes nothing the policies no longer allow:
    // no helm call with the operator's rights on the tenant's behalf; the release is left in place.
    hub.policy(
        &hub.namespace,
        policy(&hub.namespace, &["member-1"], &["elsewhere"]),
    )
    .await;
    hub.status_until("team", "the release reported Forbidden again", |s| {
        phase_of(s, "member-1", "web").as_deref() == Some("Forbidden")
    })
    .await;
    hub.delete_and_wait_gone("team").await;
    assert!(
        hub.log()
            .contains("no policy allows removing these releases; they are left in place"),
        "the deletion says what it left"
    );
    assert_eq!(
        hub.lab.releases("member-1", &ns)["web"],
        (2, "deployed".to_owned())
    );
}
