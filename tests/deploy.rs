//! Tests of deploy/: the manifests agree with the code, apply to the hub, and give the operator what it needs and no more.

mod common;

use std::{
    io::Write as _,
    panic::AssertUnwindSafe,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use common::{
    agent::join,
    fixtures::{DEADLINE, chart, entry, message, ready, tenancy, unique, wait_until},
    hub::{create_namespace, install_crd, reader_token},
    lab::Lab,
    manifests::{Process, documents, find, kind, service_account_kubeconfig, stream},
    operator::http_get,
};
use futures::FutureExt as _;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Namespace, events::v1::Event};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_yaml::Value;
use tenancy_hub::{
    api::crd::{ControllerSpec, TenancyController},
    api::member_cluster::MemberCluster,
    api::policy::{TenancyPolicy, TenancyPolicySpec},
    clusters::registry::RegistrationFile,
};

/// The operator's namespace, as deploy/ creates it.
const NAMESPACE: &str = "tenancy-hub";

/// The user the operator's pods authenticate as.
const SERVICE_ACCOUNT: &str = "system:serviceaccount:tenancy-hub:tenancy-hub";

/// Field manager of everything these tests apply.
const FIELD_MANAGER: &str = "tenancy-hub-deploy-tests";

/// Every kind the kustomization ships, with the prefix `kubectl apply` names it by.
const KINDS: [(&str, &str); 13] = [
    ("Namespace", "namespace/"),
    (
        "CustomResourceDefinition",
        "customresourcedefinition.apiextensions.k8s.io/",
    ),
    ("ServiceAccount", "serviceaccount/"),
    ("ClusterRole", "clusterrole.rbac.authorization.k8s.io/"),
    (
        "ClusterRoleBinding",
        "clusterrolebinding.rbac.authorization.k8s.io/",
    ),
    ("Role", "role.rbac.authorization.k8s.io/"),
    ("RoleBinding", "rolebinding.rbac.authorization.k8s.io/"),
    (
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicy.admissionregistration.k8s.io/",
    ),
    (
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/",
    ),
    ("ConfigMap", "configmap/"),
    ("Secret", "secret/"),
    ("Deployment", "deployment.apps/"),
    ("Service", "service/"),
];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// The documents of one file of deploy/, read without kustomize.
fn file(name: &str) -> Vec<Value> {
    documents(&std::fs::read_to_string(deploy_dir().join(name)).unwrap())
}

/// What a kubectl run printed.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs the lab's kubectl as the lab's admin on the hub, with `stdin` if given.
fn kubectl(lab: &Lab, args: &[&str], stdin: Option<&str>) -> Run {
    kubectl_as(lab, &lab.kubeconfig_path(), args, stdin)
}

/// Runs the lab's kubectl on the hub context of `kubeconfig`.
fn kubectl_as(lab: &Lab, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    kubectl_on(lab, kubeconfig, "hub", args, stdin)
}

/// Runs the lab's kubectl on `context` of `kubeconfig`, with `stdin` if given.
fn kubectl_on(
    lab: &Lab,
    kubeconfig: &Path,
    context: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> Run {
    let mut child = Command::new(lab.bin_dir().join("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--context", context])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs kubectl and panics, with its output, unless it succeeds.
fn kubectl_ok(lab: &Lab, args: &[&str], stdin: Option<&str>) -> String {
    succeeded(kubectl(lab, args, stdin), args)
}

/// What a kubectl run printed, or a panic with its output unless it succeeded.
fn succeeded(run: Run, args: &[&str]) -> String {
    assert!(
        run.ok,
        "kubectl {args:?} failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    run.stdout
}

/// `kubectl kustomize deploy`, with the lab's kubectl.
fn render(lab: &Lab) -> String {
    render_dir(lab, &deploy_dir())
}

/// `kubectl kustomize DIR`, with the lab's kubectl.
fn render_dir(lab: &Lab, dir: &Path) -> String {
    kubectl_ok(lab, &["kustomize", dir.to_str().unwrap()], None)
}

/// Applies documents to the hub for real, server-side.
fn apply(lab: &Lab, docs: &[Value]) -> String {
    let args = ["apply", "--server-side", "--force-conflicts"];
    let manager = format!("--field-manager={FIELD_MANAGER}");
    let mut all = args.to_vec();
    all.extend([manager.as_str(), "-f", "-"]);
    kubectl_ok(lab, &all, Some(&stream(docs)))
}

/// One question for `kubectl auth can-i`: verb, resource, namespace (None: cluster-wide).
type Right<'a> = (&'a str, &'a str, Option<&'a str>);

/// Asserts that `who` has every right of `needed` and none of `refused`, as `may` answers.
fn assert_rights(
    who: &str,
    may: impl Fn(&str, &str, Option<&str>) -> bool,
    needed: &[Right],
    refused: &[Right],
) {
    for &(verb, resource, namespace) in needed {
        assert!(
            may(verb, resource, namespace),
            "{who} cannot {verb} {resource} in {namespace:?}"
        );
    }
    for &(verb, resource, namespace) in refused {
        assert!(
            !may(verb, resource, namespace),
            "{who} may {verb} {resource} in {namespace:?}, which it does not need"
        );
    }
}

#[test]
fn the_deployed_crd_is_the_generated_one() {
    let shipped = std::fs::read_to_string(deploy_dir().join("crd.yaml")).unwrap();
    assert!(
        shipped == tenancy_hub::api::crds_yaml(),
        "deploy/crd.yaml is stale: run kind/crds.sh"
    );
}

#[test]
fn the_deployment_reads_its_configuration_from_the_mounted_configmap_and_secret() {
    let config = file("config.yaml");
    let data = &find(&config, "ConfigMap", "tenancy-hub-clusters")["data"];
    let deployment = file("deployment.yaml");
    let pod = &deployment[0]["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let mount_of = |volume: &Value| -> String {
        let name = volume["name"].as_str().unwrap();
        let mounts = container["volumeMounts"].as_sequence().unwrap();
        let mount = mounts.iter().find(|m| m["name"].as_str() == Some(name));
        mount.expect("the volume is mounted")["mountPath"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let volumes = pod["volumes"].as_sequence().unwrap();
    let volume = |source: &str, field: &str, name: &str| {
        volumes
            .iter()
            .find(|v| v[source][field].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume of {source} {name}"))
    };
    let config_dir = mount_of(volume("configMap", "name", "tenancy-hub-clusters"));
    let secret_dir = mount_of(volume("secret", "secretName", "tenancy-hub-kubeconfigs"));
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for (flag, key) in [
        ("--clusters", "clusters.yaml"),
        ("--kubeconfig", "hub-kubeconfig.yaml"),
    ] {
        assert!(
            args.contains(&format!("{flag}={config_dir}/{key}").as_str()),
            "{flag} does not point at {key} in the mounted ConfigMap: {args:?}"
        );
        assert!(data[key].is_string(), "the ConfigMap has no {key}");
    }
    let registration = RegistrationFile::parse(
        Path::new("clusters.yaml"),
        data["clusters.yaml"].as_str().unwrap(),
    )
    .expect("the shipped registration file is valid");
    assert!(!registration.clusters.is_empty(), "no example entry");
    for entry in &registration.clusters {
        let kubeconfig = entry.kubeconfig.as_ref().expect("a kubeconfig path");
        assert!(
            kubeconfig.starts_with(&secret_dir),
            "{} is outside the mounted Secret {secret_dir}",
            kubeconfig.display()
        );
    }
    let secret = find(&config, "Secret", "tenancy-hub-kubeconfigs");
    assert!(
        secret.get("data").is_none() && secret.get("stringData").is_none(),
        "the placeholder Secret must have no data, or re-applying it would replace real kubeconfigs"
    );
}

#[test]
fn the_chart_cache_lives_on_a_writable_volume_of_its_own_within_a_bound() {
    let deployment = file("deployment.yaml");
    let pod = &deployment[0]["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    let dir = container["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .find_map(|a| a.as_str()?.strip_prefix("--chart-cache-dir="))
        .expect("a --chart-cache-dir argument");
    let mount = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| dir.starts_with(m["mountPath"].as_str().unwrap()) && m["mountPath"] != "/tmp")
        .expect("the cache directory is on a volume of its own");
    assert_ne!(mount["readOnly"].as_bool(), Some(true));
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert!(
        volume["emptyDir"]["sizeLimit"].is_string(),
        "the cache volume is bounded: {volume:?}"
    );
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn the_kustomization_applies_to_the_hub_with_server_side_dry_run() {
    let lab = Lab::get();
    let rendered = render(&lab);
    let docs = documents(&rendered);
    for doc in &docs {
        assert_eq!(
            doc["metadata"]["labels"]["app.kubernetes.io/name"].as_str(),
            Some("tenancy-hub"),
            "{} {} lacks the app label",
            kind(doc),
            doc["metadata"]["name"].as_str().unwrap_or_default()
        );
    }
    // A dry run cannot place objects in a namespace that does not exist yet: create it for real.
    let namespace = find(&docs, "Namespace", NAMESPACE).clone();
    apply(&lab, &[namespace]);

    let manager = format!("--field-manager={FIELD_MANAGER}");
    let run = kubectl(
        &lab,
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            // The CRD is already on the hub, applied by other tests under their own field manager.
            "--force-conflicts",
            &manager,
            "-f",
            "-",
        ],
        Some(&rendered),
    );
    assert!(
        run.ok,
        "the dry run failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    for (kind_, prefix) in KINDS {
        assert!(
            docs.iter().any(|d| kind(d) == kind_),
            "the kustomization renders no {kind_}"
        );
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(prefix) && l.ends_with("(server dry run)")),
            "no {kind_} in the dry run's output:\n{}",
            run.stdout
        );
    }
    // The namespace warns about pods that would break the "restricted" Pod Security Standard.
    assert!(
        !run.stderr.contains("PodSecurity"),
        "the Deployment's pods would be refused in namespace {NAMESPACE}:\n{}",
        run.stderr
    );
}

/// The operator as its Deployment runs it, with the hub kubeconfig `kubeconfig`, reconciling the
/// Controllers of hub namespace `namespace`.
fn start_operator(lab: &Lab, kubeconfig: &Path, namespace: &str) -> Process {
    let http = Process::free_address();
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let args = [
        "run".into(),
        format!("--kubeconfig={}", path(kubeconfig)),
        "--context=hub".into(),
        format!("--namespace={namespace}"),
        format!("--clusters={}", path(&lab.clusters_path())),
        format!(
            "--chart-home={}",
            path(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts"))
        ),
        format!("--helm={}", path(&lab.bin_dir().join("helm"))),
        // The image ships the long-lived executor beside helm.
        format!("--helm-executor={}", path(&lab.executor())),
        // The Deployment's Lease: limited to one namespace, the operator would take a Lease of
        // that scope, which the RBAC does not grant.
        "--leader-elect".into(),
        format!("--lease-namespace={NAMESPACE}"),
        "--lease-name=tenancy-hub".into(),
        format!("--http-addr={http}"),
    ];
    Process::start(lab, &args, &[], http)
}

/// The example hub tenant namespace and its RoleBinding, for namespace `name`.
fn hub_tenant(name: &str) -> Vec<Value> {
    let mut docs = file("examples/hub-tenant-namespace.yaml");
    for doc in &mut docs {
        match kind(doc) {
            "Namespace" => doc["metadata"]["name"] = name.into(),
            _ => doc["metadata"]["namespace"] = name.into(),
        }
    }
    docs
}

/// The Deployment's pod template as a Pod, to ask the hub's admission whether it may run.
fn pod_of(docs: &[Value]) -> Value {
    let template = &find(docs, "Deployment", "tenancy-hub")["spec"]["template"];
    let mut pod: Value = serde_yaml::from_str("{apiVersion: v1, kind: Pod}").unwrap();
    pod["metadata"] = template["metadata"].clone();
    pod["metadata"]["name"] = "tenancy-hub-admission-probe".into();
    pod["metadata"]["namespace"] = NAMESPACE.into();
    pod["spec"] = template["spec"].clone();
    pod
}

async fn delete_namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("deleting namespace {name}: {e}"),
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn the_operator_runs_under_its_service_account_rbac() {
    let lab = Lab::get();
    let names = Names {
        home: unique("deploy"),
        hub: unique("deploy-hub"),
        member: unique("deploy-m1"),
        managed: unique("deploy-managed"),
        pull: unique("deploy-edge"),
        pulled: unique("deploy-pulled"),
    };
    let outcome = AssertUnwindSafe(run_under_rbac(&lab, &names))
        .catch_unwind()
        .await;
    clean_up(&lab, &names).await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The namespaces one run of the test makes: of its Controller on the hub, of its hub tenancy,
/// of its member-1 tenancy, one marked as a pull member's, a pull member and its tenancy.
struct Names {
    home: String,
    hub: String,
    member: String,
    managed: String,
    /// A pull member joined for the test, and its tenancy's namespace there.
    pull: String,
    pulled: String,
}

/// Removes what the test made, also after a failure: a Controller left with its finalizer, the
/// releases, the namespaces. The operator's namespace and cluster-wide RBAC stay, as installed.
async fn clean_up(lab: &Lab, names: &Names) {
    let admin = lab.client("hub").await;
    let controllers: Api<TenancyController> = Api::namespaced(admin.clone(), &names.home);
    if controllers.get_opt("deploy").await.ok().flatten().is_some() {
        let unblock = serde_json::json!({"metadata": {"finalizers": null}});
        let _ = controllers
            .patch("deploy", &PatchParams::default(), &Patch::Merge(&unblock))
            .await;
    }
    let _ = lab.try_helm("hub", &["uninstall", "web", "-n", &names.hub]);
    let _ = lab.try_helm("member-1", &["uninstall", "web", "-n", &names.member]);
    delete_namespace(&admin, &names.hub).await;
    delete_namespace(&admin, &names.home).await;
    delete_namespace(&admin, &names.managed).await;
    let members: Api<MemberCluster> = Api::all(admin.clone());
    let _ = members.delete(&names.pull, &DeleteParams::default()).await;
    let _ = lab.try_pull_kubectl(
        "pull-1",
        &[
            "delete",
            "namespace",
            &names.pulled,
            "--ignore-not-found",
            "--wait=false",
        ],
    );
    let policies: Api<TenancyPolicy> = Api::all(admin.clone());
    let _ = policies
        .delete(&names.home, &kube::api::DeleteParams::default())
        .await;
    delete_namespace(&lab.client("member-1").await, &names.member).await;
}

async fn run_under_rbac(lab: &Lab, names: &Names) {
    let (home, hub_ns, member_ns) = (&names.home, &names.hub, &names.member);
    let admin = lab.client("hub").await;
    install_crd(&admin).await;
    let docs = documents(&render(lab));
    let rbac: Vec<Value> = docs
        .iter()
        .filter(|d| {
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
            ]
            .contains(&kind(d))
        })
        .cloned()
        .collect();
    apply(lab, &rbac);
    // Pod Security "restricted" is enforced in the namespace: its admission takes the pods.
    kubectl_ok(
        lab,
        &["create", "--dry-run=server", "-f", "-"],
        Some(&stream(&[pod_of(&docs)])),
    );

    create_namespace(&admin, home).await;
    // The deployed operator enforces the tenancy policies: the test's hub namespace gets one.
    let policies: Api<TenancyPolicy> = Api::all(admin.clone());
    let policy = TenancyPolicySpec {
        hub_namespaces: vec![home.clone()],
        clusters: vec!["hub".into(), "member-1".into(), names.pull.clone()],
        namespaces: vec![hub_ns.clone(), member_ns.clone(), names.pulled.clone()],
        chart_sources: vec!["chart-home".into()],
        trusted: true,
        ..Default::default()
    };
    policies
        .patch(
            home,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&TenancyPolicy::new(home, policy)),
        )
        .await
        .expect("the TenancyPolicy applies");
    apply(lab, &hub_tenant(hub_ns));
    let scratch = tempfile::tempdir().unwrap();
    let configmap = find(&docs, "ConfigMap", "tenancy-hub-clusters");
    let kubeconfig = service_account_kubeconfig(
        lab,
        configmap["data"]["hub-kubeconfig.yaml"].as_str().unwrap(),
        NAMESPACE,
        "tenancy-hub",
        scratch.path(),
    );
    let whoami = kubectl_as(
        lab,
        &kubeconfig,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    assert_eq!(
        whoami.stdout, SERVICE_ACCOUNT,
        "the hub kubeconfig's identity: {}",
        whoami.stderr
    );

    let mut operator = start_operator(lab, &kubeconfig, home);
    let identity = format!("-{}", operator.child.id());
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NAMESPACE);
    wait_until("the operator to hold the Lease", DEADLINE, || async {
        let holder = leases
            .get("tenancy-hub")
            .await
            .ok()?
            .spec?
            .holder_identity?;
        holder.ends_with(&identity).then_some(())
    })
    .await;

    // A pull member, enrolled by the operator under these rights: its hub namespace, the
    // operator's RoleBinding there (which the admission policy lets through), its agent's
    // identities; its reports read in that namespace alone.
    let _agent = join(lab, &names.pull, "pull-1", scratch.path());

    let web = || vec![chart("deployment-example", "web", &[("replicaCount", "1")])];
    let spec = ControllerSpec {
        tenancies: vec![
            tenancy(member_ns, &["member-1"], web()),
            tenancy(hub_ns, &[], web()),
            tenancy(&names.pulled, &[names.pull.as_str()], web()),
        ],
        ..Default::default()
    };
    let controllers: Api<TenancyController> = Api::namespaced(admin.clone(), home);
    controllers
        .patch(
            "deploy",
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&TenancyController::new("deploy", spec)),
        )
        .await
        .expect("the Controller applies");
    wait_until(
        "both releases deployed and the hub's Deployment ready in the status",
        DEADLINE,
        || async {
            operator.assert_not_refused();
            let status = controllers.get("deploy").await.ok()?.status?;
            let deployed =
                |cluster| message(&status, cluster, "web").is_some_and(|m| m.phase == "Deployed");
            let hub = entry(&status, "hub", hub_ns)?;
            let running = hub
                .replication_controller_status
                .iter()
                .any(|w| w.replication_controller_name == "web" && w.ready == "1/1");
            let pulled = deployed(names.pull.as_str());
            (ready(&status) && deployed("hub") && deployed("member-1") && pulled && running)
                .then_some(())
        },
    )
    .await;

    // The status API checks its callers with a TokenReview and SubjectAccessReviews, which the
    // operator's RBAC allows: a reader of the home namespace sees the member tenancy, no token is 401.
    let token = reader_token(lab, &admin, home).await;
    let scope = format!("/api/v1/clusters/member-1/namespaces/{member_ns}");
    wait_until(
        "the status API to show the member tenancy",
        DEADLINE,
        || async {
            operator.assert_not_refused();
            let (code, body) = http_get(operator.http, &scope, Some(&token));
            assert!(code == 200 || code == 404, "{code}: {body}");
            (code == 200).then_some(())
        },
    )
    .await;
    assert_eq!(http_get(operator.http, &scope, None).0, 401);

    // kube-runtime's Recorder creates the first Event and patches its series count on repeats.
    let events: Api<Event> = Api::namespaced(admin.clone(), home);
    wait_until(
        "Installed Events for both releases (created, then patched)",
        DEADLINE,
        || async {
            operator.assert_not_refused();
            let listed = events.list(&ListParams::default()).await.ok()?;
            let installed: i32 = listed
                .items
                .iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("deploy")
                        && e.reporting_controller.as_deref() == Some("tenancy-hub")
                        && e.reason.as_deref() == Some("Installed")
                })
                .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                .sum();
            (installed >= 2).then_some(())
        },
    )
    .await;

    controllers
        .delete("deploy", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "the finalizer to go once the releases are uninstalled",
        DEADLINE,
        || async {
            controllers
                .get_opt("deploy")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(lab.releases("hub", hub_ns).is_empty());
    assert!(lab.releases("member-1", member_ns).is_empty());
    assert!(lab.pull_releases("pull-1", &names.pulled).is_empty());
    operator.assert_not_refused();

    operator.stop();
    let lease = leases.get("tenancy-hub").await.unwrap().spec.unwrap();
    assert!(
        !lease
            .holder_identity
            .unwrap_or_default()
            .ends_with(&identity),
        "the operator did not release the Lease on SIGTERM"
    );

    // And no more than it needs.
    let needed = [
        ("list", "controllers.multitenancy.dev", None),
        (
            "patch",
            "controllers.multitenancy.dev/status",
            Some("default"),
        ),
        ("create", "events.events.k8s.io", Some("default")),
        ("update", "leases/tenancy-hub", Some(NAMESPACE)),
        ("create", "secrets", Some(hub_ns.as_str())),
        ("create", "tokenreviews.authentication.k8s.io", None),
        ("create", "subjectaccessreviews.authorization.k8s.io", None),
        ("watch", "tenancypolicies.multitenancy.dev", None),
        // Pods and workloads are watched cluster-wide: a few streams per cluster.
        ("watch", "pods", None),
        ("watch", "daemonsets.apps", None),
        // Releases a TenancyPolicy with `impersonate` allows on the hub act as its user and
        // groups: those deploy/examples/team-a-hub.yaml names, and no one else.
        ("impersonate", "users/team-a-deployer", None),
        ("impersonate", "groups/team-a", None),
        // Pull members: their MemberClusters, their hub namespaces, the operator's rights there.
        ("watch", "memberclusters.multitenancy.dev", None),
        ("list", "memberclusters.multitenancy.dev", None),
        ("create", "namespaces", None),
        ("watch", "leases.coordination.k8s.io", None),
        (
            "bind",
            "clusterroles.rbac.authorization.k8s.io/tenancy-hub-member-namespace",
            None,
        ),
    ];
    let refused = [
        ("*", "*", None),
        ("delete", "nodes", None),
        ("create", "clusterroles", None),
        ("patch", "rolebindings", Some(hub_ns.as_str())),
        ("create", "roles", Some(hub_ns.as_str())),
        ("create", "serviceaccounts", Some(hub_ns.as_str())),
        ("bind", "clusterroles.rbac.authorization.k8s.io/admin", None),
        (
            "escalate",
            "roles.rbac.authorization.k8s.io",
            Some(hub_ns.as_str()),
        ),
        ("delete", "namespaces", None),
        ("patch", "namespaces/kube-system", None),
        ("delete", "memberclusters.multitenancy.dev", None),
        ("impersonate", "serviceaccounts", None),
        ("impersonate", "users", None),
        ("impersonate", "users/system:admin", None),
        ("impersonate", "groups/system:masters", None),
        // Secrets are listed (as metadata, by the code) but never read by name cluster-wide.
        ("get", "secrets", None),
        ("create", "secrets", None),
        ("create", "tenancypolicies.multitenancy.dev", None),
        (
            "create",
            "localsubjectaccessreviews.authorization.k8s.io",
            Some(hub_ns.as_str()),
        ),
        ("get", "secrets", Some("kube-system")),
        ("create", "secrets", Some("kube-system")),
        ("delete", "secrets", Some("default")),
        ("get", "secrets/tenancy-hub-kubeconfigs", Some(NAMESPACE)),
        ("get", "configmaps/tenancy-hub-clusters", Some(NAMESPACE)),
        ("update", "leases/kube-scheduler", Some("kube-system")),
        ("update", "leases/another", Some(NAMESPACE)),
        ("create", "pods", Some(hub_ns.as_str())),
        ("get", "pods", Some("kube-system")),
        ("delete", "pods", Some("kube-system")),
        ("delete", "controllers.multitenancy.dev", Some("default")),
        (
            "update",
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
        ),
    ];
    let may = |verb: &str, resource: &str, namespace: Option<&str>| {
        lab.can_i(SERVICE_ACCOUNT, verb, resource, namespace)
    };
    assert_rights("the operator", may, &needed, &refused);

    // RBAC lets it create RoleBindings in every namespace; admission keeps them to the namespaces
    // it created: refused in a tenant's hub namespace, accepted in a pull member's.
    let binding = |namespace: &str| {
        format!(
            "{{apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, \
             metadata: {{name: tenancy-hub-probe, namespace: {namespace}}}, \
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, \
             name: tenancy-hub-member-namespace}}, \
             subjects: [{{kind: ServiceAccount, name: tenancy-hub, namespace: {NAMESPACE}}}]}}"
        )
    };
    let create = ["create", "--dry-run=server", "-f", "-"];
    let outside = kubectl_as(lab, &kubeconfig, &create, Some(&binding(hub_ns)));
    assert!(
        !outside.ok && outside.stderr.contains("only in namespaces it created"),
        "a RoleBinding in tenant namespace {hub_ns}: {}{}",
        outside.stdout,
        outside.stderr
    );
    create_namespace(&admin, &names.managed).await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let mark =
        serde_json::json!({"metadata": {"labels": {"multitenancy.dev/member-cluster": "probe"}}});
    namespaces
        .patch(
            &names.managed,
            &PatchParams::default(),
            &Patch::Merge(&mark),
        )
        .await
        .unwrap();
    wait_until(
        "a RoleBinding accepted in a pull member's hub namespace",
        DEADLINE,
        || async {
            let inside = kubectl_as(lab, &kubeconfig, &create, Some(&binding(&names.managed)));
            inside.ok.then_some(())
        },
    )
    .await;
}

/// The flags `tenancy-hub agent` is documented to accept (docs/pull-members.md, "The agent, in a pull
/// member").
const AGENT_FLAGS: [&str; 6] = [
    "--namespace",
    "--kubeconfig",
    "--context",
    "--executor",
    "--http-addr",
    "--chart-cache",
];

/// The agent's namespace in a member, as deploy/agent/ creates it.
const AGENT_NAMESPACE: &str = "tenancy-hub-agent";

/// The user the agent's pod authenticates as in its member.
const AGENT_ACCOUNT: &str = "system:serviceaccount:tenancy-hub-agent:tenancy-hub-agent";

fn agent_dir() -> PathBuf {
    deploy_dir().join("agent")
}

/// The files deploy/agent/kustomization.yaml lists as resources.
fn agent_resources() -> Vec<String> {
    let text = std::fs::read_to_string(agent_dir().join("kustomization.yaml")).unwrap();
    let kustomization: Value = serde_yaml::from_str(&text).expect("the kustomization parses");
    kustomization["resources"]
        .as_sequence()
        .expect("the kustomization lists resources")
        .iter()
        .map(|r| r.as_str().expect("a file name").to_owned())
        .collect()
}

/// The documents of deploy/agent/, every file its kustomization lists, read without kustomize.
fn agent_docs() -> Vec<Value> {
    agent_resources()
        .iter()
        .flat_map(|name| documents(&std::fs::read_to_string(agent_dir().join(name)).unwrap()))
        .collect()
}

/// The agent Deployment's one container.
fn agent_container(docs: &[Value]) -> &Value {
    let pod = &find(docs, "Deployment", "tenancy-hub-agent")["spec"]["template"]["spec"];
    let containers = pod["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1, "one container: the agent");
    &containers[0]
}

#[test]
fn the_agent_kustomization_lists_every_file_of_deploy_agent_and_each_parses() {
    let mut listed = agent_resources();
    listed.sort();
    let mut files: Vec<String> = std::fs::read_dir(agent_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    files.sort();
    assert_eq!(
        listed, files,
        "deploy/agent/kustomization.yaml lists every manifest"
    );

    let docs = agent_docs();
    for doc in &docs {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            doc["apiVersion"].is_string() && !name.is_empty(),
            "{} {name}: no apiVersion or name",
            kind(doc)
        );
        if let Some(namespace) = doc["metadata"]["namespace"].as_str() {
            assert_eq!(namespace, AGENT_NAMESPACE, "{} {name}", kind(doc));
        }
    }
    for kind_ in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
    ] {
        assert!(
            docs.iter().any(|d| kind(d) == kind_),
            "no {kind_} in deploy/agent/"
        );
    }
    find(&docs, "Namespace", AGENT_NAMESPACE);
    // The Secret comes from the hub admin (`cluster add --pull -o yaml`) or `tenancy-hub join`;
    // shipping one here would overwrite the credentials on every apply.
    assert!(
        !docs.iter().any(|d| kind(d) == "Secret"),
        "deploy/agent/ must not ship the Secret hub-credentials"
    );
}

#[test]
fn the_agent_deployment_passes_only_flags_the_agent_accepts() {
    let docs = agent_docs();
    let container = agent_container(&docs);
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args.first(), Some(&"agent"), "the container runs `agent`");
    let mut given = std::collections::BTreeMap::new();
    for arg in &args[1..] {
        let (flag, value) = arg
            .split_once('=')
            .unwrap_or_else(|| panic!("{arg}: write flags as --flag=value"));
        assert!(
            AGENT_FLAGS.contains(&flag),
            "{flag} is not a flag of `tenancy-hub agent` ({AGENT_FLAGS:?})"
        );
        assert!(given.insert(flag, value).is_none(), "{flag} given twice");
    }
    assert_eq!(given.get("--namespace"), Some(&AGENT_NAMESPACE));
    assert!(
        !given.contains_key("--kubeconfig") && !given.contains_key("--context"),
        "in its member the agent uses its ServiceAccount, not a kubeconfig"
    );

    // The probes ask the agent's health port, which --http-addr listens on.
    let port = given["--http-addr"]
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u64>().ok())
        .expect("--http-addr=HOST:PORT");
    let ports = container["ports"].as_sequence().expect("ports");
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some("/healthz"), "{probe}");
        let named = ports
            .iter()
            .find(|p| p["name"] == get["port"])
            .unwrap_or_else(|| panic!("{probe} names no declared port"));
        assert_eq!(named["containerPort"].as_u64(), Some(port), "{probe}");
    }

    // Non-root on a read-only root filesystem, within limits; the chart cache is writable.
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(security["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(security["allowPrivilegeEscalation"].as_bool(), Some(false));
    for bound in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                container["resources"][bound][resource].is_string(),
                "no {bound}.{resource}"
            );
        }
    }
    let cache = given["--chart-cache"];
    let mount = container["volumeMounts"]
        .as_sequence()
        .expect("volume mounts")
        .iter()
        .find(|m| cache.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("the chart cache is on a mounted volume");
    assert_ne!(mount["readOnly"].as_bool(), Some(true));

    // It runs as the ServiceAccount its RBAC binds.
    let pod = &find(&docs, "Deployment", "tenancy-hub-agent")["spec"]["template"]["spec"];
    let account = pod["serviceAccountName"]
        .as_str()
        .expect("a ServiceAccount");
    find(&docs, "ServiceAccount", account);
    for (binding, name) in [
        ("ClusterRoleBinding", "tenancy-hub-agent"),
        ("RoleBinding", "tenancy-hub-agent"),
    ] {
        let subjects = find(&docs, binding, name)["subjects"]
            .as_sequence()
            .unwrap();
        assert!(
            subjects.iter().any(|s| s["kind"] == "ServiceAccount"
                && s["name"].as_str() == Some(account)
                && s["namespace"].as_str() == Some(AGENT_NAMESPACE)),
            "{binding} {name} does not bind {account}"
        );
    }
}

#[test]
fn the_agent_tenant_role_grants_what_the_hub_tenant_role_does() {
    let hub = file("rbac.yaml");
    let agent = agent_docs();
    assert_eq!(
        find(&agent, "ClusterRole", "tenancy-hub-agent-tenant")["rules"],
        find(&hub, "ClusterRole", "tenancy-hub-tenant")["rules"],
        "deploy/agent/rbac.yaml's tenancy-hub-agent-tenant differs from deploy/rbac.yaml's tenancy-hub-tenant"
    );
}

/// Applies deploy/agent/'s namespace and RBAC to the lab's first pull member for real (they
/// stay, as an installed agent's would), its Deployment with a server-side dry run, and asks the
/// member what the agent's ServiceAccount may do.
#[test]
#[ignore = "needs the lab with a pull member: run tests/run.sh"]
fn the_agent_manifests_apply_to_a_pull_member_and_grant_what_the_agent_needs() {
    let lab = Lab::get();
    let member =
        lab.pull_members().into_iter().next().unwrap_or_else(|| {
            panic!("this test needs a pull member: kind/up.sh --pull-members 1")
        });
    let kubeconfig = lab.pull_kubeconfig(&member);
    let on_member = |args: &[&str], stdin: Option<&str>| {
        succeeded(kubectl_on(&lab, &kubeconfig, &member, args, stdin), args)
    };
    let docs = documents(&render_dir(&lab, &agent_dir()));
    for doc in &docs {
        assert_eq!(
            doc["metadata"]["labels"]["app.kubernetes.io/name"].as_str(),
            Some("tenancy-hub-agent"),
            "{} {} lacks the app label",
            kind(doc),
            doc["metadata"]["name"].as_str().unwrap_or_default()
        );
    }
    let (deployment, rest): (Vec<Value>, Vec<Value>) =
        docs.into_iter().partition(|d| kind(d) == "Deployment");
    let manager = format!("--field-manager={FIELD_MANAGER}");
    let apply = [
        "apply",
        "--server-side",
        "--force-conflicts",
        &manager,
        "-f",
        "-",
    ];
    on_member(&apply, Some(&stream(&rest)));
    let run = kubectl_on(
        &lab,
        &kubeconfig,
        &member,
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            &manager,
            "-f",
            "-",
        ],
        Some(&stream(&deployment)),
    );
    assert!(
        run.ok,
        "the dry run failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    assert!(
        !run.stderr.contains("PodSecurity"),
        "the agent's pods would be refused in namespace {AGENT_NAMESPACE}:\n{}",
        run.stderr
    );

    let needed = [
        // Release records and what runs, watched cluster-wide.
        ("list", "secrets", None),
        ("watch", "secrets", None),
        ("watch", "pods", None),
        ("watch", "deployments.apps", None),
        ("watch", "statefulsets.apps", None),
        ("watch", "daemonsets.apps", None),
        // Tenant namespaces, created and annotated.
        ("create", "namespaces", None),
        ("patch", "namespaces", None),
        // The identities policies name.
        ("impersonate", "users", None),
        ("impersonate", "groups", None),
        // Its own Secret.
        ("get", "secrets/hub-credentials", Some(AGENT_NAMESPACE)),
        ("patch", "secrets/hub-credentials", Some(AGENT_NAMESPACE)),
    ];
    let refused = [
        ("*", "*", None),
        ("get", "secrets", Some("kube-system")),
        ("get", "secrets/other", Some(AGENT_NAMESPACE)),
        ("create", "secrets", Some(AGENT_NAMESPACE)),
        ("delete", "secrets/hub-credentials", Some(AGENT_NAMESPACE)),
        ("create", "secrets", Some("default")),
        ("delete", "namespaces", None),
        ("create", "clusterroles", None),
        ("create", "rolebindings", Some("default")),
        ("impersonate", "serviceaccounts", None),
        ("create", "pods", Some("default")),
        ("delete", "nodes", None),
        (
            "create",
            "leases.coordination.k8s.io",
            Some(AGENT_NAMESPACE),
        ),
    ];
    let may = |verb: &str, resource: &str, namespace: Option<&str>| {
        lab.pull_can_i(&member, AGENT_ACCOUNT, verb, resource, namespace)
    };
    assert_rights("the agent", may, &needed, &refused);
}
