//! Tests of deploy/chart/, the operator's Helm chart: it renders deploy/'s RBAC and flags, lints clean, and installs, upgrades and uninstalls on the hub, where its RBAC delivers the seed's example.

mod common;

use std::{
    collections::BTreeMap,
    panic::AssertUnwindSafe,
    path::{Path, PathBuf},
    process::Command,
};

use clap::Parser as _;
use common::{
    fixtures::{DEADLINE, SEED, entry, ready, seed_example, unique, wait_until},
    hub::create_namespace,
    lab::Lab,
    manifests::{Process, documents, find, kind, service_account_kubeconfig},
};
use futures::FutureExt as _;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Namespace},
    rbac::v1::{ClusterRole, RoleBinding, RoleRef, Subject},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_yaml::Value;
use tenancy_hub::{
    api::crd::TenancyController,
    api::policy::{TenancyPolicy, TenancyPolicySpec},
    cli::{Cli, Command as CliCommand},
    clusters::registry::RegistrationFile,
};

/// The release and namespace the comparisons with deploy/ render: deploy/'s names.
const RELEASE: &str = "tenancy-hub";

/// The CRDs the chart ships in crds/, as Helm expects them.
const CRDS: [&str; 4] = [
    "alerts.multitenancy.dev",
    "controllers.multitenancy.dev",
    "memberclusters.multitenancy.dev",
    "tenancypolicies.multitenancy.dev",
];

/// The ClusterRole the operator binds by this fixed name in pull members' hub namespaces.
const MEMBER_NAMESPACE_ROLE: &str = "tenancy-hub-member-namespace";

/// Field manager of what the end-to-end test applies.
const FIELD_MANAGER: &str = "tenancy-hub-chart-tests";

/// Value sets rendered besides the defaults, each with the flags it must add.
const VARIANTS: [(&[&str], &[&str]); 6] = [
    (&["shards=3", "replicas=3"], &["--shards=3"]),
    (
        &["leaderElection.enabled=false", "replicas=1"],
        &["--leader-elect=false"],
    ),
    (&["executor=cli"], &["--executor=cli"]),
    (
        &[
            "executor=sdk",
            "tenancyPolicy=permissive",
            "logFormat=text",
            "http.address=::",
            "http.port=8080",
        ],
        &[
            "--executor=sdk",
            "--tenancy-policy=permissive",
            "--log-format=text",
            "--http-addr=[::]:8080",
        ],
    ),
    (&["serviceMonitor.enabled=true"], &[]),
    (
        &[
            "view.service.enabled=true",
            "view.ingress.enabled=true",
            "view.ingress.host=fleet.example.com",
        ],
        &[],
    ),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart_dir() -> PathBuf {
    repo().join("deploy/chart")
}

/// The documents of one file of deploy/.
fn deploy_file(name: &str) -> Vec<Value> {
    documents(&std::fs::read_to_string(repo().join("deploy").join(name)).unwrap())
}

/// The lab's helm: the running lab's, else the one kind/build.sh built (kind/lib.sh's cache).
fn helm() -> PathBuf {
    if std::env::var_os("TENANCY_HUB_LAB_DIR").is_some() {
        return Lab::get().bin_dir().join("helm");
    }
    let out = Command::new("bash")
        .args(["-c", "source kind/lib.sh && lab_cache_dir"])
        .current_dir(repo())
        .output()
        .expect("bash runs");
    let helm = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("bin/helm");
    assert!(
        out.status.success() && helm.is_file(),
        "no helm at {}: run kind/build.sh\n{}",
        helm.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    helm
}

/// Runs helm with `args`: its stdout, or a panic with its output.
fn run_helm(args: &[&str]) -> String {
    let out = Command::new(helm()).args(args).output().expect("helm runs");
    assert!(
        out.status.success(),
        "helm {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `--set` arguments for `sets`.
fn set_args<'a>(sets: &[&'a str]) -> Vec<&'a str> {
    sets.iter().flat_map(|s| ["--set", *s]).collect()
}

/// `helm template` of the chart as release tenancy-hub in namespace tenancy-hub, with `sets`.
fn render(sets: &[&str]) -> Vec<Value> {
    let chart = chart_dir();
    let mut args = vec!["template", RELEASE, chart.to_str().unwrap(), "-n", RELEASE];
    args.extend(set_args(sets));
    documents(&run_helm(&args))
}

/// The Deployment's one container.
fn container(docs: &[Value]) -> &Value {
    let containers = &find(docs, "Deployment", RELEASE)["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers.as_sequence().map(Vec::len), Some(1));
    &containers[0]
}

/// The container's arguments.
fn args(docs: &[Value]) -> Vec<String> {
    container(docs)["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// `field` of every document of `kind_`, by name.
fn by_name(docs: &[Value], kind_: &str, field: &str) -> BTreeMap<String, Value> {
    docs.iter()
        .filter(|d| kind(d) == kind_)
        .map(|d| {
            let name = d["metadata"]["name"].as_str().unwrap().to_owned();
            (name, d[field].clone())
        })
        .collect()
}

#[test]
fn the_chart_version_follows_the_crate_and_the_kustomization_leaves_the_chart_out() {
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(chart["apiVersion"].as_str(), Some("v2"));
    for field in ["version", "appVersion"] {
        assert_eq!(
            chart[field].as_str(),
            Some(env!("CARGO_PKG_VERSION")),
            "deploy/chart/Chart.yaml's {field} is not Cargo.toml's version"
        );
    }
    let kustomization = &deploy_file("kustomization.yaml")[0];
    for resource in kustomization["resources"].as_sequence().unwrap() {
        let resource = resource.as_str().unwrap();
        assert!(
            !resource.starts_with("chart"),
            "deploy/kustomization.yaml picks up the chart: {resource}"
        );
    }
}

#[test]
fn the_charts_crds_are_the_generated_ones() {
    let mut joined = String::new();
    for name in CRDS {
        let file = format!("{name}.yaml");
        let shipped = std::fs::read_to_string(chart_dir().join("crds").join(&file)).unwrap();
        let generated = std::fs::read_to_string(repo().join("crds").join(&file)).unwrap();
        assert!(
            shipped == generated,
            "deploy/chart/crds/{file} differs from crds/{file}: run kind/crds.sh"
        );
        joined.push_str(&shipped);
    }
    assert!(
        joined == tenancy_hub::api::crds_yaml(),
        "deploy/chart/crds/ is stale: run kind/crds.sh"
    );
    let files = std::fs::read_dir(chart_dir().join("crds")).unwrap().count();
    assert_eq!(files, CRDS.len(), "deploy/chart/crds/ holds only the CRDs");
}

#[test]
fn the_charts_admission_policy_is_the_generated_one() {
    let shipped =
        std::fs::read_to_string(chart_dir().join("templates/admission-policy.yaml")).unwrap();
    let generated = format!(
        "{{{{- if .Values.valuesDepthPolicy.enabled }}}}\n{}{{{{- end }}}}\n",
        tenancy_hub::api::crd::depth_policy::policy_yaml()
    );
    assert!(
        shipped == generated,
        "deploy/chart/templates/admission-policy.yaml is stale: run kind/crds.sh"
    );
}

#[test]
#[ignore = "needs the lab's helm: kind/build.sh, then cargo test --test helm_chart -- --ignored"]
fn the_chart_lints_clean_with_its_defaults_and_every_variant() {
    let chart = chart_dir();
    let defaults: (&[&str], &[&str]) = (&[], &[]);
    for (sets, _) in std::iter::once(defaults).chain(VARIANTS) {
        let mut lint = vec!["lint", "--strict", chart.to_str().unwrap()];
        lint.extend(set_args(sets));
        let out = run_helm(&lint);
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "helm lint with {sets:?}:\n{out}"
        );
    }
}

#[test]
#[ignore = "needs the lab's helm: kind/build.sh, then cargo test --test helm_chart -- --ignored"]
fn the_chart_grants_the_rules_deploy_grants() {
    let chart = render(&[]);
    let deploy = deploy_file("rbac.yaml");
    for kind_ in ["ClusterRole", "Role"] {
        assert_eq!(
            by_name(&chart, kind_, "rules"),
            by_name(&deploy, kind_, "rules"),
            "the chart's {kind_}s differ from deploy/rbac.yaml's"
        );
    }
    for kind_ in ["ClusterRoleBinding", "RoleBinding"] {
        for field in ["roleRef", "subjects"] {
            assert_eq!(
                by_name(&chart, kind_, field),
                by_name(&deploy, kind_, field),
                "the chart's {kind_}s' {field} differ from deploy/rbac.yaml's"
            );
        }
    }
    assert_eq!(
        by_name(&chart, "ServiceAccount", "kind"),
        by_name(&deploy, "ServiceAccount", "kind")
    );
    let pod = &find(&chart, "Deployment", RELEASE)["spec"]["template"]["spec"];
    find(
        &chart,
        "ServiceAccount",
        pod["serviceAccountName"].as_str().unwrap(),
    );

    // Shards add the Role of deploy/examples/sharded.yaml.
    let sharded = render(&["shards=3", "replicas=3"]);
    let example = deploy_file("examples/sharded.yaml");
    for kind_ in ["Role", "RoleBinding"] {
        let name = "tenancy-hub-shards";
        let field = if kind_ == "Role" { "rules" } else { "roleRef" };
        assert_eq!(
            find(&sharded, kind_, name)[field],
            find(&example, kind_, name)[field],
            "the chart's {kind_} {name} differs from deploy/examples/sharded.yaml's"
        );
    }
    assert!(
        !chart
            .iter()
            .any(|d| d["metadata"]["name"] == "tenancy-hub-shards"),
        "one shard needs no shard Role"
    );
    // The admission policy keeping the operator's RoleBindings to its own namespaces is
    // deploy/'s, for the release's ServiceAccount.
    let name = "tenancy-hub-rolebindings";
    for kind_ in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert_eq!(
            find(&chart, kind_, name)["spec"],
            find(&deploy, kind_, name)["spec"],
            "the chart's {kind_} differs from deploy/rbac.yaml's"
        );
    }
    // No identity to impersonate, no impersonation at all.
    let nobody = render(&[
        "rbac.impersonate.users=null",
        "rbac.impersonate.groups=null",
    ]);
    let rules = &find(&nobody, "ClusterRole", RELEASE)["rules"];
    assert!(
        !rules
            .as_sequence()
            .unwrap()
            .iter()
            .any(|r| r["verbs"][0] == "impersonate"),
        "{rules:?}"
    );

    let without = render(&["rbac.createMemberNamespaceRole=false"]);
    assert!(
        !without
            .iter()
            .any(|d| d["metadata"]["name"] == MEMBER_NAMESPACE_ROLE)
    );
}

#[test]
#[ignore = "needs the lab's helm: kind/build.sh, then cargo test --test helm_chart -- --ignored"]
fn the_chart_runs_the_container_of_deploy_with_its_flags() {
    let chart = render(&[]);
    let deploy = deploy_file("deployment.yaml");
    assert_eq!(
        args(&chart),
        args(&deploy),
        "the chart's flags differ from deploy/deployment.yaml's"
    );
    let (ours, theirs) = (container(&chart), container(&deploy));
    for field in [
        "name",
        "env",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
    ] {
        assert_eq!(
            ours[field], theirs[field],
            "the container's {field} differs"
        );
    }
    let spec = |docs: &[Value]| find(docs, "Deployment", RELEASE)["spec"].clone();
    let (ours, theirs) = (spec(&chart), spec(&deploy));
    assert_eq!(ours["replicas"], theirs["replicas"]);
    for field in [
        "serviceAccountName",
        "automountServiceAccountToken",
        "terminationGracePeriodSeconds",
        "securityContext",
    ] {
        let (a, b) = (
            &ours["template"]["spec"][field],
            &theirs["template"]["spec"][field],
        );
        assert_eq!(a, b, "the pod's {field} differs");
    }
    // The chart makes no kubeconfig Secret (an uninstall would delete the credentials), so its
    // volume is optional; otherwise the volumes are deploy/'s.
    let mut volumes = ours["template"]["spec"]["volumes"].clone();
    for volume in volumes.as_sequence_mut().unwrap() {
        if let Some(secret) = volume.get_mut("secret").and_then(Value::as_mapping_mut) {
            assert_eq!(secret.remove("optional"), Some(Value::Bool(true)));
        }
    }
    assert_eq!(volumes, theirs["template"]["spec"]["volumes"]);
    assert!(!chart.iter().any(|d| kind(d) == "Secret"));

    let config = deploy_file("config.yaml");
    let kubeconfig = |docs: &[Value]| {
        find(docs, "ConfigMap", "tenancy-hub-clusters")["data"]["hub-kubeconfig.yaml"].clone()
    };
    assert_eq!(kubeconfig(&chart), kubeconfig(&config));
    let ports =
        |docs: &[Value]| find(docs, "Service", "tenancy-hub-metrics")["spec"]["ports"].clone();
    assert_eq!(ports(&chart), ports(&deploy_file("service.yaml")));
}

#[test]
#[ignore = "needs the lab's helm: kind/build.sh, then cargo test --test helm_chart -- --ignored"]
fn every_flag_the_chart_renders_is_one_the_operator_accepts() {
    let defaults: (&[&str], &[&str]) = (&[], &[]);
    for (sets, expected) in std::iter::once(defaults).chain(VARIANTS) {
        let args = args(&render(sets));
        for flag in expected {
            assert!(
                args.iter().any(|a| a == flag),
                "{sets:?}: no {flag} in {args:?}"
            );
        }
        let parsed =
            Cli::try_parse_from(std::iter::once("tenancy-hub".to_owned()).chain(args.clone()))
                .unwrap_or_else(|e| panic!("`tenancy-hub {}` is refused:\n{e}", args.join(" ")));
        assert!(
            matches!(parsed.command, CliCommand::Run(_)),
            "{args:?} does not run the operator"
        );
    }
}

#[test]
#[ignore = "needs the lab's helm: kind/build.sh, then cargo test --test helm_chart -- --ignored"]
fn the_service_monitor_is_rendered_only_when_asked_and_scrapes_the_service() {
    assert!(!render(&[]).iter().any(|d| kind(d) == "ServiceMonitor"));
    let docs = render(&[
        "serviceMonitor.enabled=true",
        "serviceMonitor.labels.release=prom",
    ]);
    let monitor = find(&docs, "ServiceMonitor", RELEASE);
    assert_eq!(
        monitor["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(
        monitor["metadata"]["labels"]["release"].as_str(),
        Some("prom")
    );
    let service = find(&docs, "Service", "tenancy-hub-metrics");
    for (label, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][label], value, "{label:?}");
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["path"].as_str(), Some("/metrics"));
    let ports = service["spec"]["ports"].as_sequence().unwrap();
    assert!(ports.iter().any(|p| p["name"] == endpoint["port"]));
}

#[test]
#[ignore = "needs the lab's helm: kind/build.sh, then cargo test --test helm_chart -- --ignored"]
fn the_fleet_view_is_exposed_only_when_asked_and_only_its_path() {
    let none = render(&[]);
    assert!(!none.iter().any(|d| kind(d) == "Ingress"));
    let docs = render(&[
        "view.service.enabled=true",
        "view.ingress.enabled=true",
        "view.ingress.host=fleet.example.com",
        "view.ingress.tls[0].secretName=fleet-tls",
    ]);
    let service = find(&docs, "Service", "tenancy-hub-view");
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"].as_str(),
        Some("http")
    );
    let ingress = find(&docs, "Ingress", "tenancy-hub-view");
    let rule = &ingress["spec"]["rules"][0];
    assert_eq!(rule["host"].as_str(), Some("fleet.example.com"));
    let paths = rule["http"]["paths"].as_sequence().unwrap();
    assert_eq!(paths.len(), 1, "only /ui is routed: {paths:?}");
    assert_eq!(paths[0]["path"].as_str(), Some("/ui"));
    assert_eq!(
        paths[0]["backend"]["service"]["name"].as_str(),
        Some("tenancy-hub-view")
    );
    assert_eq!(
        ingress["spec"]["tls"][0]["secretName"].as_str(),
        Some("fleet-tls")
    );
}

#[test]
#[ignore = "needs the lab's helm: kind/build.sh, then cargo test --test helm_chart -- --ignored"]
fn the_clusters_value_renders_a_registration_file_the_operator_reads() {
    let empty = render(&[]);
    let entries = |docs: &[Value]| {
        let data = &find(docs, "ConfigMap", "tenancy-hub-clusters")["data"]["clusters.yaml"];
        RegistrationFile::parse(Path::new("clusters.yaml"), data.as_str().unwrap())
            .expect("the registration file parses")
            .clusters
    };
    assert!(entries(&empty).is_empty());
    let kubeconfig = "/etc/tenancy-hub/kubeconfigs/members.kubeconfig";
    let docs = render(&[
        "clusters[0].name=member-1",
        "clusters[0].context=member-1",
        &format!("clusters[0].kubeconfig={kubeconfig}"),
        "clusters[0].labels.region=east",
    ]);
    let entries = entries(&docs);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].name.as_str(), "member-1");
    assert_eq!(
        entries[0].kubeconfig.as_deref(),
        Some(Path::new(kubeconfig))
    );
    assert_eq!(entries[0].labels["region"], "east");
}

/// What one run of the end-to-end test makes: the release and its namespace, the hub namespace of
/// its Controller, and the hub namespace the seed's example is delivered into.
struct Names {
    release: String,
    namespace: String,
    home: String,
    tenant: String,
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_chart_installs_upgrades_and_uninstalls_and_its_rbac_delivers_the_seed_example() {
    let lab = Lab::get();
    let names = Names {
        // Contains the chart's name, so the objects are named after the release alone.
        release: unique("tenancy-hub"),
        namespace: unique("chart"),
        home: unique("chart-home"),
        tenant: unique("chart-foo"),
    };
    let outcome = AssertUnwindSafe(install_upgrade_deliver_uninstall(&lab, &names))
        .catch_unwind()
        .await;
    clean_up(&lab, &names).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Removes what the test made, also after a failure: the release, a Controller left with its
/// finalizer, the seed's releases, the namespaces and the policy. The CRDs stay, as Helm leaves them.
async fn clean_up(lab: &Lab, names: &Names) {
    let admin = lab.client("hub").await;
    let controllers: Api<TenancyController> = Api::namespaced(admin.clone(), &names.home);
    if controllers.get_opt(SEED).await.ok().flatten().is_some() {
        let unblock = serde_json::json!({"metadata": {"finalizers": null}});
        let _ = controllers
            .patch(SEED, &PatchParams::default(), &Patch::Merge(&unblock))
            .await;
    }
    let _ = lab.try_helm(
        "hub",
        &["uninstall", &names.release, "-n", &names.namespace],
    );
    for release in lab.releases("hub", &names.tenant).keys() {
        let _ = lab.try_helm("hub", &["uninstall", release, "-n", &names.tenant]);
    }
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for namespace in [&names.namespace, &names.home, &names.tenant] {
        let _ = namespaces.delete(namespace, &DeleteParams::default()).await;
    }
    let policies: Api<TenancyPolicy> = Api::all(admin);
    let _ = policies.delete(&names.home, &DeleteParams::default()).await;
}

/// The release's namespace, labelled as deploy/namespace.yaml labels the operator's.
async fn create_release_namespace(admin: &kube::Client, name: &str) {
    let mut namespace = deploy_file("namespace.yaml").remove(0);
    namespace["metadata"]["name"] = name.into();
    let namespace: Namespace = serde_yaml::from_value(namespace).unwrap();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("the release's namespace is created");
}

async fn install_upgrade_deliver_uninstall(lab: &Lab, names: &Names) {
    let (release, ns) = (names.release.as_str(), names.namespace.as_str());
    let admin = lab.client("hub").await;
    create_release_namespace(&admin, ns).await;
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();

    // Install. The member-namespace ClusterRole has a fixed name: where deploy/ (or another
    // release) made it already, this release leaves it to them.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let shared_role = roles
        .get_opt(MEMBER_NAMESPACE_ROLE)
        .await
        .unwrap()
        .is_some();
    let mut install = vec!["install", release, chart, "-n", ns];
    if shared_role {
        install.extend(["--set", "rbac.createMemberNamespaceRole=false"]);
    }
    // The cluster-wide values depth policy is the lab's (every test's hub installs it with the
    // CRDs), so an uninstall here never takes it from tests running beside this one.
    install.extend(["--set", "valuesDepthPolicy.enabled=false"]);
    let notes = lab.helm("hub", &install);
    for next in [
        format!("{release}-kubeconfigs"),
        format!("{release}-clusters"),
    ] {
        assert!(
            notes.contains(&next),
            "the notes do not name {next}:\n{notes}"
        );
    }
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    wait_until("the chart's CRDs to be established", DEADLINE, || async {
        for name in CRDS {
            let established = crds.get(name).await.ok()?.status?.conditions?;
            established
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())?;
        }
        Some(())
    })
    .await;
    let scratch = tempfile::tempdir().unwrap();
    let manifest = scratch.path().join("manifest.yaml");
    std::fs::write(
        &manifest,
        lab.helm("hub", &["get", "manifest", release, "-n", ns]),
    )
    .unwrap();
    let manifest = manifest.to_str().unwrap();
    let installed = lab.kubectl("hub", &["get", "-f", manifest, "-o", "name"]);
    assert!(
        installed.contains(&format!("deployment.apps/{release}")),
        "{installed}"
    );
    assert!(
        roles
            .get_opt(MEMBER_NAMESPACE_ROLE)
            .await
            .unwrap()
            .is_some(),
        "ClusterRole {MEMBER_NAMESPACE_ROLE} exists, the release's or the one before it"
    );

    // Upgrade: a changed value lands.
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
    assert_eq!(replicas(&deployments.get(release).await.unwrap()), Some(2));
    lab.helm(
        "hub",
        &[
            "upgrade",
            release,
            chart,
            "-n",
            ns,
            "--reuse-values",
            "--set",
            "replicas=1",
            "--set",
            "resources.limits.memory=512Mi",
        ],
    );
    let upgraded = deployments.get(release).await.unwrap();
    assert_eq!(replicas(&upgraded), Some(1));
    let container = upgraded
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .remove(0);
    let limits = container.resources.clone().unwrap().limits.unwrap();
    assert_eq!(limits["memory"].0, "512Mi");
    assert_eq!(lab.releases("hub", ns)[release], (2, "deployed".to_owned()));

    // The operator beside the lab with the installed Deployment's flags and the token of the
    // release's ServiceAccount delivers the seed's example: the chart's RBAC suffices.
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let data = configmaps
        .get(&format!("{release}-clusters"))
        .await
        .unwrap()
        .data
        .unwrap();
    let kubeconfig = service_account_kubeconfig(
        lab,
        &data["hub-kubeconfig.yaml"],
        ns,
        release,
        scratch.path(),
    );
    grant_seed(lab, names).await;
    let mut operator = start_as_deployed(lab, &container, &kubeconfig, names, scratch.path());
    deliver_seed(&admin, names, &operator).await;
    operator.assert_not_refused();
    operator.stop();

    // Uninstall: the release's objects go, the CRDs stay.
    lab.helm("hub", &["uninstall", release, "-n", ns]);
    wait_until("the release's objects to be gone", DEADLINE, || async {
        let left = lab.kubectl(
            "hub",
            &["get", "-f", manifest, "--ignore-not-found", "-o", "name"],
        );
        left.trim().is_empty().then_some(())
    })
    .await;
    for name in CRDS {
        assert!(
            crds.get_opt(name).await.unwrap().is_some(),
            "CRD {name} went with the release"
        );
    }
    assert_eq!(
        roles
            .get_opt(MEMBER_NAMESPACE_ROLE)
            .await
            .unwrap()
            .is_some(),
        shared_role,
        "ClusterRole {MEMBER_NAMESPACE_ROLE} is left as it was before the release"
    );
}

/// The admin's side of the seed's example: a policy letting the Controllers of the home namespace
/// deliver into the tenant namespace of the hub, and the release's tenant ClusterRole bound there.
async fn grant_seed(lab: &Lab, names: &Names) {
    let admin = lab.client("hub").await;
    create_namespace(&admin, &names.home).await;
    create_namespace(&admin, &names.tenant).await;
    let policy = TenancyPolicySpec {
        hub_namespaces: vec![names.home.clone()],
        clusters: vec!["hub".into()],
        namespaces: vec![names.tenant.clone()],
        chart_sources: vec!["chart-home".into()],
        trusted: true,
        ..Default::default()
    };
    let policies: Api<TenancyPolicy> = Api::all(admin.clone());
    policies
        .patch(
            &names.home,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&TenancyPolicy::new(&names.home, policy)),
        )
        .await
        .expect("the TenancyPolicy applies");
    // As deploy/examples/hub-tenant-namespace.yaml binds it, for this release.
    let binding = RoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{}-tenant", names.release)),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: format!("{}-tenant", names.release),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: names.release.clone(),
            namespace: Some(names.namespace.clone()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(admin, &names.tenant)
        .create(&PostParams::default(), &binding)
        .await
        .expect("the tenant RoleBinding is created");
}

/// Starts the operator with `container`'s flags and environment, its in-pod paths made local
/// (the hub kubeconfig `kubeconfig`, the lab's registration, the repository's chart home, a
/// scratch chart cache and /tmp), scoped to the home namespace on the Deployment's Lease.
fn start_as_deployed(
    lab: &Lab,
    container: &k8s_openapi::api::core::v1::Container,
    kubeconfig: &Path,
    names: &Names,
    scratch: &Path,
) -> Process {
    let http = Process::free_address();
    let local = |path: &Path| path.to_str().unwrap().to_owned();
    let mut args: Vec<String> = container
        .args
        .clone()
        .unwrap()
        .into_iter()
        .map(|arg| {
            let Some((flag, value)) = arg.split_once('=') else {
                return arg;
            };
            let value = match flag {
                "--kubeconfig" => local(kubeconfig),
                "--clusters" => local(&lab.clusters_path()),
                "--chart-home" => local(&repo().join("config/charts")),
                "--chart-cache-dir" => local(&scratch.join("charts")),
                "--http-addr" => http.to_string(),
                _ => {
                    assert!(
                        !value.starts_with('/'),
                        "{arg}: an in-pod path left as it is"
                    );
                    value.to_owned()
                }
            };
            format!("{flag}={value}")
        })
        .collect();
    args.extend([
        // The image ships helm and the long-lived executor beside it.
        format!("--helm={}", local(&lab.bin_dir().join("helm"))),
        format!("--helm-executor={}", local(&lab.executor())),
        // Limited to one namespace the operator would take a Lease of that scope, which the
        // Role does not grant: the Deployment's Lease.
        format!("--namespace={}", names.home),
        "--lease-name=tenancy-hub".into(),
    ]);
    let tmp = scratch.join("tmp");
    let env: Vec<(String, String)> = container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|var| {
            let value = match (var.value, var.value_from) {
                (Some(value), _) => match value.strip_prefix("/tmp") {
                    Some(rest) => format!("{}{rest}", local(&tmp)),
                    None => value,
                },
                (None, Some(from)) => {
                    let field = from.field_ref.expect("a field reference").field_path;
                    assert_eq!(field, "metadata.namespace", "{}", var.name);
                    names.namespace.clone()
                }
                (None, None) => String::new(),
            };
            (var.name, value)
        })
        .collect();
    std::fs::create_dir_all(&tmp).unwrap();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Process::start(lab, &args, &env, http)
}

/// Applies the seed's example, delivered into the tenant namespace, waits until it is Ready with
/// every release deployed, then deletes it and waits until its releases are uninstalled.
async fn deliver_seed(admin: &kube::Client, names: &Names, operator: &Process) {
    let mut seed = seed_example();
    seed.spec.tenancies[0].namespace = names.tenant.clone();
    let charts = seed.spec.tenancies[0].charts.len();
    let controllers: Api<TenancyController> = Api::namespaced(admin.clone(), &names.home);
    controllers
        .patch(
            SEED,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&seed),
        )
        .await
        .expect("the seed's example applies");
    wait_until(
        "the seed's example Ready, every release deployed",
        DEADLINE,
        || async {
            operator.assert_not_refused();
            let status = controllers.get(SEED).await.ok()?.status?;
            let messages = &entry(&status, "hub", &names.tenant)?.chart_messages;
            let deployed =
                messages.len() == charts && messages.iter().all(|m| m.phase == "Deployed");
            (ready(&status) && deployed).then_some(())
        },
    )
    .await;
    controllers
        .delete(SEED, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "the seed's releases uninstalled and the Controller gone",
        DEADLINE,
        || async {
            operator.assert_not_refused();
            controllers
                .get_opt(SEED)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
}

#[test]
#[ignore = "needs the lab's helm: kind/build.sh, then cargo test --test helm_chart -- --ignored"]
fn the_values_depth_policy_is_rendered_unless_turned_off_and_matches_deploy() {
    let docs = render(&[]);
    let deployed = deploy_file("admission-policy.yaml");
    for kind_ in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert_eq!(
            find(&docs, kind_, "tenancy-hub-values-depth")["spec"],
            find(&deployed, kind_, "tenancy-hub-values-depth")["spec"],
            "the chart's {kind_} differs from deploy/admission-policy.yaml's"
        );
    }
    let off = render(&["valuesDepthPolicy.enabled=false"]);
    let depth_policy = |d: &&Value| {
        kind(d).starts_with("ValidatingAdmissionPolicy")
            && d["metadata"]["name"] == "tenancy-hub-values-depth"
    };
    assert!(!off.iter().any(|d| depth_policy(&d)), "{off:#?}");
    // The RoleBinding policy of the operator's rights stays.
    assert!(off.iter().any(|d| {
        kind(d) == "ValidatingAdmissionPolicy"
            && d["metadata"]["name"] == "tenancy-hub-rolebindings"
    }));
}
