//! A hub namespace of a test's own: the CRD, the namespace, its operator, and waits on its resources.

use std::time::Duration;

use k8s_openapi::api::{
    admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    core::v1::{Namespace, ServiceAccount},
    rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, CustomResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use tenancy_hub::api::alert::Alert;
use tenancy_hub::api::crd::{
    ControllerSpec, ControllerStatus, TenancyController,
    depth_policy::{self, POLICY_NAME},
    free_form::MAX_VALUES_DEPTH,
};
use tenancy_hub::api::member_cluster::MemberCluster;
use tenancy_hub::api::policy::{
    Impersonation, PolicyClusterSelector, TenancyPolicy, TenancyPolicySpec,
};

use super::{
    fixtures::{DEADLINE, chart, tenancy, unique, wait_until},
    lab::Lab,
    operator::Operator,
};

/// Applies the Alert, Controller, TenancyPolicy and MemberCluster CRDs to the hub and waits until they are
/// established, then the admission policy refusing too-deep values, until the API server enforces it.
#[allow(dead_code)] // used by some test crates only
pub async fn install_crd(hub: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    for crd in [
        Alert::crd(),
        tenancy_hub::api::crd::controller_crd(),
        TenancyPolicy::crd(),
        MemberCluster::crd(),
    ] {
        let name = crd.metadata.name.clone().unwrap();
        crds.patch(
            &name,
            &PatchParams::apply("tenancy-hub-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("the CRD applies to the hub");
        wait_until(
            "the CRD to be established",
            Duration::from_secs(30),
            || async {
                let crd = crds.get(&name).await.ok()?;
                let established = crd
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            },
        )
        .await;
    }
    install_values_depth_policy(hub).await;
}

/// Applies the admission policy (and binding) refusing Controllers whose values nest too deep, as
/// deploy/ ships it, and waits until a dry run of such a Controller is refused.
async fn install_values_depth_policy(hub: &Client) {
    let params = PatchParams::apply("tenancy-hub-tests").force();
    Api::<ValidatingAdmissionPolicy>::all(hub.clone())
        .patch(POLICY_NAME, &params, &Patch::Apply(depth_policy::policy()))
        .await
        .expect("the values depth policy applies to the hub");
    Api::<ValidatingAdmissionPolicyBinding>::all(hub.clone())
        .patch(POLICY_NAME, &params, &Patch::Apply(depth_policy::binding()))
        .await
        .expect("the values depth policy's binding applies to the hub");
    let mut values = serde_json::json!("leaf");
    for _ in 0..=MAX_VALUES_DEPTH {
        values = serde_json::json!({ "a": values });
    }
    let mut probe = chart("probe", "probe", &[]);
    probe.values = Some(values);
    let probe = TenancyController::new(
        "values-depth-probe",
        ControllerSpec {
            tenancies: vec![tenancy("probe", &[], vec![probe])],
            ..ControllerSpec::default()
        },
    );
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let controllers = Api::<TenancyController>::namespaced(hub.clone(), "default");
    wait_until(
        "the API server to enforce the values depth policy",
        Duration::from_secs(30),
        || async {
            match controllers.create(&dry_run, &probe).await {
                Err(kube::Error::Api(e)) if e.message.contains(POLICY_NAME) => Some(()),
                _ => None,
            }
        },
    )
    .await;
}

/// A policy letting the Controllers of hub namespace `namespace` deliver anywhere (the hub
/// included, protected namespaces excepted), from the chart home and `sources`.
#[allow(dead_code)] // used by some test crates only
pub fn allow_all(namespace: &str, sources: &[&str]) -> TenancyPolicySpec {
    TenancyPolicySpec {
        allow_adoption: false,
        hub_namespaces: vec![namespace.to_owned()],
        clusters: vec!["hub".into()],
        cluster_selector: Some(PolicyClusterSelector::default()),
        namespaces: vec!["*".into()],
        chart_sources: std::iter::once("chart-home")
            .chain(sources.iter().copied())
            .map(String::from)
            .collect(),
        impersonate: None,
        trusted: true,
        values_from: Vec::new(),
        alert_secrets: Vec::new(),
        alert_internal_addresses: Vec::new(),
        sources: Vec::new(),
        helm: None,
    }
}

/// A hub namespace of the test's own, with its own operator reconciling only that namespace.
#[allow(dead_code)] // used by some test crates only
pub struct Hub {
    /// The lab.
    pub lab: Lab,
    /// A client of the hub.
    pub client: Client,
    /// The test's own hub namespace.
    pub namespace: String,
    /// The operator reconciling that namespace.
    pub operator: Option<Operator>,
}

#[allow(dead_code)] // used by some test crates only
impl Hub {
    /// A hub namespace named after `prefix`, with its own operator.
    pub async fn new(prefix: &str) -> Self {
        Self::with_args(prefix, &[]).await
    }

    /// Like [`Hub::new`], with extra arguments for the operator's `run`.
    pub async fn with_args(prefix: &str, extra: &[&str]) -> Self {
        Self::with_env(prefix, extra, &[]).await
    }

    /// Like [`Hub::with_args`], with extra environment variables for the operator.
    pub async fn with_env(prefix: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut hub = Self::without_operator(Lab::get(), unique(prefix)).await;
        hub.operator = Some(Operator::start_with_env(
            &hub.lab,
            &hub.namespace,
            extra,
            env,
        ));
        hub
    }

    /// The CRD and hub namespace `namespace` with no operator yet, for tests that start their own.
    pub async fn without_operator(lab: Lab, namespace: String) -> Self {
        let client = lab.client("hub").await;
        install_crd(&client).await;
        create_namespace(&client, &namespace).await;
        Self {
            lab,
            client,
            namespace,
            operator: None,
        }
    }

    /// Two teams on one operator: hub namespaces `<id>-a` (the test's own, returned with the
    /// hub) and `<id>-b`; the operator enforces the policies and reconciles the Controllers
    /// labelled `<label>=<id>` of both, with `extra` arguments for its `run`.
    pub async fn two_teams(id: &str, label: &str, extra: &[&str]) -> (Self, String) {
        let team_b = format!("{id}-b");
        let mut hub = Self::without_operator(Lab::get(), format!("{id}-a")).await;
        create_namespace(&hub.client, &team_b).await;
        let selector = format!("{label}={id}");
        let args = [
            "--selector",
            &selector,
            "--lease-name",
            id,
            "--tenancy-policy",
            "enforce",
        ];
        let args = [&args[..], extra].concat();
        hub.operator = Some(Operator::start_with(&hub.lab, &hub.namespace, &args));
        (hub, team_b)
    }

    /// The Controllers of the test's hub namespace.
    pub fn api(&self) -> Api<TenancyController> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Server-side applies Controller `name` with `spec`.
    pub async fn apply(&self, name: &str, spec: ControllerSpec) {
        self.apply_in(&self.namespace, &TenancyController::new(name, spec))
            .await;
    }

    /// Server-side applies Controller `c` (its name, labels and spec) in hub namespace `namespace`.
    pub async fn apply_in(&self, namespace: &str, c: &TenancyController) {
        let name = c.metadata.name.as_deref().expect("a named Controller");
        Api::<TenancyController>::namespaced(self.client.clone(), namespace)
            .patch(
                name,
                &PatchParams::apply("tenancy-hub-tests").force(),
                &Patch::Apply(c),
            )
            .await
            .expect("the Controller applies");
    }

    /// Waits until the resource's status satisfies `check`, returning it; on the deadline, the
    /// panic shows the conditions and every release's phase and message last seen.
    pub async fn status_until(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&ControllerStatus) -> bool,
    ) -> ControllerStatus {
        let api = self.api();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let mut last = None;
        loop {
            if let Some(status) = api.get(name).await.ok().and_then(|c| c.status) {
                if check(&status) {
                    return status;
                }
                last = Some(status);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out after {DEADLINE:?} waiting for {what}; the status last seen:\n{}",
                last.as_ref().map_or("none".into(), status_digest)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until releases in `namespace` of `context` are exactly `expected` (name -> revision, all deployed).
    pub async fn releases_become(&self, context: &str, namespace: &str, expected: &[(&str, i64)]) {
        let expected: std::collections::BTreeMap<String, (i64, String)> = expected
            .iter()
            .map(|(n, r)| (n.to_string(), (*r, "deployed".to_string())))
            .collect();
        let what = format!("releases {expected:?} in {context}/{namespace}");
        wait_until(&what, DEADLINE, || async {
            (self.lab.releases(context, namespace) == expected).then_some(())
        })
        .await;
    }

    /// Deletes Controller `name` and waits until its finalizer has run and it is gone.
    pub async fn delete_and_wait_gone(&self, name: &str) {
        self.delete_and_wait_gone_within(name, DEADLINE).await;
    }

    /// As [`Self::delete_and_wait_gone`], for a Controller of many releases: within `deadline`.
    pub async fn delete_and_wait_gone_within(&self, name: &str, deadline: Duration) {
        self.api()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        let api = self.api();
        wait_until(
            &format!("Controller {name} to be deleted (finalizer removed)"),
            deadline,
            || async { api.get_opt(name).await.ok()?.is_none().then_some(()) },
        )
        .await;
    }

    /// Server-side applies TenancyPolicy `name` (cluster-scoped; named after the test's namespace
    /// by the caller) with `spec`.
    pub async fn policy(&self, name: &str, spec: TenancyPolicySpec) {
        let policies: Api<TenancyPolicy> = Api::all(self.client.clone());
        policies
            .patch(
                name,
                &PatchParams::apply("tenancy-hub-tests").force(),
                &Patch::Apply(&TenancyPolicy::new(name, spec)),
            )
            .await
            .expect("the TenancyPolicy applies");
    }

    /// Runs `tenancy-hub diff -o json` of Controller `name` with `spec` in the test's hub
    /// namespace, against the registration file `clusters`, with `extra` arguments.
    pub fn diff(
        &self,
        clusters: &std::path::Path,
        name: &str,
        spec: &ControllerSpec,
        extra: &[&str],
    ) -> std::process::Output {
        let file = std::env::temp_dir().join(format!("{}.yaml", unique("preview")));
        let mut c = TenancyController::new(name, spec.clone());
        c.metadata.namespace = Some(self.namespace.clone());
        std::fs::write(&file, serde_yaml::to_string(&c).unwrap()).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenancy-hub"))
            .args(["diff", "-o", "json", "-f"])
            .arg(&file)
            .arg("--kubeconfig")
            .arg(self.lab.kubeconfig_path())
            .args(["--context", "hub", "--clusters"])
            .arg(clusters)
            .arg("--chart-home")
            .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts"))
            .arg("--helm")
            .arg(self.lab.bin_dir().join("helm"))
            .arg("--verifier")
            .arg(self.lab.verifier())
            .args(extra)
            .env_remove("KUBECONFIG")
            .output()
            .expect("the binary runs");
        std::fs::remove_file(&file).unwrap();
        out
    }

    /// Lets `user` manage Controllers in the test's hub namespace, and nothing else: the tenant.
    pub async fn tenant_may_write_controllers(&self, user: &str) {
        self.tenant_may_write(&self.namespace, ("User", user), &["controllers"])
            .await;
    }

    /// Lets `subject` (its kind, `User` or `Group`, and name) manage `resources` of
    /// multitenancy.dev in hub namespace `namespace`, and nothing else: the tenant's Role of
    /// deploy/examples/team-a-hub.yaml.
    pub async fn tenant_may_write(
        &self,
        namespace: &str,
        (kind, name): (&str, &str),
        resources: &[&str],
    ) {
        let apply = PatchParams::apply("tenancy-hub-tests").force();
        let role: Role = serde_json::from_value(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "controller-author", "namespace": namespace},
            "rules": [{"apiGroups": ["multitenancy.dev"], "resources": resources,
                       "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}],
        }))
        .unwrap();
        let binding: RoleBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "controller-author", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "controller-author"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}],
        }))
        .unwrap();
        Api::<Role>::namespaced(self.client.clone(), namespace)
            .patch("controller-author", &apply, &Patch::Apply(&role))
            .await
            .unwrap();
        Api::<RoleBinding>::namespaced(self.client.clone(), namespace)
            .patch("controller-author", &apply, &Patch::Apply(&binding))
            .await
            .unwrap();
    }

    /// Applies Controller `name` as the tenant `user`, through the hub's RBAC, waiting (within
    /// the deadline) for a Role just granted to take effect.
    pub async fn apply_as(&self, user: &str, name: &str, spec: ControllerSpec) {
        let client = self.lab.client_as("hub", user).await;
        let api = Api::<TenancyController>::namespaced(client, &self.namespace);
        let c = TenancyController::new(name, spec);
        let what = format!("the tenant {user} to apply Controller {name}");
        wait_until(&what, DEADLINE, || async {
            api.patch(
                name,
                &PatchParams::apply("tenant").force(),
                &Patch::Apply(&c),
            )
            .await
            .ok()
        })
        .await;
    }

    /// What the operator has logged so far.
    pub fn log(&self) -> String {
        self.operator.as_ref().unwrap().logged()
    }

    /// A token that may read the status API's view of the test's hub namespace; see [`reader_token`].
    pub async fn reader_token(&self) -> String {
        reader_token(&self.lab, &self.client, &self.namespace).await
    }
}

/// Name of the ServiceAccount, Role and RoleBinding of [`reader_token`].
pub const READER: &str = "status-reader";

/// A token of ServiceAccount `status-reader` in hub namespace `namespace`, which may `get` the
/// Controllers of that namespace and nothing else, so the status API shows it that namespace's
/// scopes. Made once per namespace; waits until the hub's RBAC grants it.
#[allow(dead_code)] // used by some test crates only
pub async fn reader_token(lab: &Lab, hub: &Client, namespace: &str) -> String {
    token_of(lab, hub, namespace, READER, &["get"]).await
}

/// Like [`reader_token`], for ServiceAccount `account` (Role and RoleBinding of the same name):
/// another identity with the same reading rights.
#[allow(dead_code)] // used by some test crates only
pub async fn reader_token_as(lab: &Lab, hub: &Client, namespace: &str, account: &str) -> String {
    token_of(lab, hub, namespace, account, &["get"]).await
}

/// Name of the ServiceAccount, Role and RoleBinding of [`editor_token`].
pub const EDITOR: &str = "controller-editor";

/// A token of ServiceAccount `controller-editor` in hub namespace `namespace`, which may `get`
/// and `patch` the Controllers of that namespace and nothing else (what the fleet view's
/// actions need). Waits until the hub's RBAC grants it.
#[allow(dead_code)] // used by some test crates only
pub async fn editor_token(lab: &Lab, hub: &Client, namespace: &str) -> String {
    token_of(lab, hub, namespace, EDITOR, &["get", "patch"]).await
}

/// A token of ServiceAccount `account` in hub namespace `namespace`, which may do `verbs` to the
/// Controllers of that namespace and nothing else, through a Role and RoleBinding of the same
/// name. Waits until the hub's RBAC grants every verb.
async fn token_of(
    lab: &Lab,
    hub: &Client,
    namespace: &str,
    account: &str,
    verbs: &[&str],
) -> String {
    let apply = PatchParams::apply("tenancy-hub-tests").force();
    let mut sa = ServiceAccount::default();
    sa.metadata.name = Some(account.into());
    Api::<ServiceAccount>::namespaced(hub.clone(), namespace)
        .patch(account, &apply, &Patch::Apply(&sa))
        .await
        .expect("the ServiceAccount applies");
    let mut role = Role::default();
    role.metadata.name = Some(account.into());
    role.rules = Some(vec![PolicyRule {
        api_groups: Some(vec!["multitenancy.dev".into()]),
        resources: Some(vec!["controllers".into()]),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }]);
    Api::<Role>::namespaced(hub.clone(), namespace)
        .patch(account, &apply, &Patch::Apply(&role))
        .await
        .expect("the Role applies");
    let mut binding = RoleBinding::default();
    binding.metadata.name = Some(account.into());
    binding.role_ref = RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "Role".into(),
        name: account.into(),
    };
    binding.subjects = Some(vec![Subject {
        kind: "ServiceAccount".into(),
        name: account.into(),
        namespace: Some(namespace.into()),
        ..Subject::default()
    }]);
    Api::<RoleBinding>::namespaced(hub.clone(), namespace)
        .patch(account, &apply, &Patch::Apply(&binding))
        .await
        .expect("the RoleBinding applies");
    let user = format!("system:serviceaccount:{namespace}:{account}");
    for verb in verbs {
        wait_until(
            &format!("the hub's RBAC to let {account} {verb} Controllers"),
            Duration::from_secs(30),
            || async {
                let args = ["auth", "can-i", verb, "controllers.multitenancy.dev"];
                let args = [&args[..], &["-n", namespace, "--as", &user]].concat();
                let answer = lab.try_kubectl("hub", &args).unwrap_or_else(|no| no);
                (answer.trim() == "yes").then_some(())
            },
        )
        .await;
    }
    lab.kubectl("hub", &["create", "token", account, "-n", namespace])
        .trim()
        .to_owned()
}

/// Waits until `api` lists no Controller (their finalizers have run), within `timeout`.
#[allow(dead_code)] // used by some test crates only
pub async fn all_gone(api: &Api<TenancyController>, timeout: Duration) {
    wait_until("the Controllers to be deleted", timeout, || async {
        api.list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}

/// Creates namespace `name` unless it exists.
#[allow(dead_code)] // used by some test crates only
pub async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut n = Namespace::default();
    n.metadata.name = Some(name.to_owned());
    match namespaces.create(&PostParams::default(), &n).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

/// A policy letting the Controllers of hub namespace `namespace` deliver to every member, into
/// the target namespaces `namespaces` allows, from the chart home, as the identity `who`.
#[allow(dead_code)] // used by some test crates only
pub fn impersonating(
    namespace: &str,
    namespaces: &[&str],
    who: Impersonation,
) -> TenancyPolicySpec {
    TenancyPolicySpec {
        hub_namespaces: vec![namespace.to_owned()],
        cluster_selector: Some(PolicyClusterSelector::default()),
        namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        chart_sources: vec!["chart-home".into()],
        impersonate: Some(who),
        ..Default::default()
    }
}

/// A status in a few lines: its conditions, then each release's cluster, phase, revision and
/// message.
fn status_digest(status: &ControllerStatus) -> String {
    let mut out: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={} ({}: {})", c.type_, c.status, c.reason, c.message))
        .collect();
    for t in &status.updated_tenancies {
        for m in &t.chart_messages {
            out.push(format!(
                "{}/{}/{}: {} rev {:?} {}",
                t.cluster, t.namespace, m.release_name, m.phase, m.revision, m.error_message
            ));
        }
    }
    out.join("\n")
}
