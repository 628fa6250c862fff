//! End-to-end tests of `tenancy-hub doctor` against the lab: it passes on a healthy install and finds each mistake a new install makes, with identities, files and flags of the test's own (the lab's shared CRDs and RBAC stay untouched).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    fixtures::{unique, wait_until, web},
    hub::{Hub, allow_all, impersonating},
    lab::Lab,
};
use tenancy_hub::api::policy::Impersonation;

/// How long the API server may take to apply a change of admission policies.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// What a doctor run gave: its exit code and its JSON report.
struct Run {
    code: Option<i32>,
    report: serde_json::Value,
    stderr: String,
}

impl Run {
    /// The finding of `check` on `subject`, panicking with the report when there is none.
    fn finding(&self, check: &str, subject: &str) -> &serde_json::Value {
        self.report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["check"] == check && f["subject"] == subject)
            .unwrap_or_else(|| panic!("no {check} check of {subject} in {:#}", self.report))
    }

    /// The verdict of `check` on `subject`.
    fn verdict(&self, check: &str, subject: &str) -> &str {
        self.finding(check, subject)["verdict"].as_str().unwrap()
    }
}

/// Runs `doctor -o json` against the lab's hub (context hub of `kubeconfig`) with the lab's
/// helm, executor and chart home unless `extra` gives them, then `extra`.
fn doctor(lab: &Lab, kubeconfig: &Path, extra: &[&str]) -> Run {
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts");
    let defaults: [(&str, PathBuf); 3] = [
        ("--helm", lab.bin_dir().join("helm")),
        ("--helm-executor", lab.executor()),
        ("--chart-home", charts),
    ];
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenancy-hub"));
    command
        .args([
            "doctor",
            "-o",
            "json",
            "--leader-elect=false",
            "--context",
            "hub",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig);
    for (flag, value) in defaults.iter().filter(|(f, _)| !extra.contains(f)) {
        command.arg(flag).arg(value);
    }
    let out = command
        .args(extra)
        .env_remove("KUBECONFIG")
        .env_remove("TENANCY_HUB_CLUSTERS")
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not a JSON report ({e}): {stdout}\n{stderr}"));
    Run {
        code: out.status.code(),
        report,
        stderr,
    }
}

/// A copy of the lab's kubeconfig, changed by `change` (on its YAML), in a file of the test's own.
fn kubeconfig_with(lab: &Lab, change: impl FnOnce(&mut serde_yaml::Value)) -> PathBuf {
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(lab.kubeconfig_path()).unwrap()).unwrap();
    change(&mut config);
    let path = std::env::temp_dir().join(format!("{}.kubeconfig", unique("doctor")));
    std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
    path
}

/// Sets the entry `name` of the kubeconfig's list `list` (users, clusters) field `key` to `value`.
fn set(config: &mut serde_yaml::Value, list: &str, name: &str, key: &str, value: &str) {
    let item = if list == "users" { "user" } else { "cluster" };
    let entry = config[list]
        .as_sequence_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no {list} entry {name}"));
    entry[item][key] = value.into();
}

/// A registration file naming member-1 of `kubeconfig`.
fn registration(kubeconfig: &Path) -> PathBuf {
    let path = std::env::temp_dir().join(format!("{}.yaml", unique("doctor-clusters")));
    std::fs::write(
        &path,
        format!(
            "clusters:\n  - {{name: member-1, context: member-1, kubeconfig: {}}}\n",
            kubeconfig.display()
        ),
    )
    .unwrap();
    path
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn doctor_passes_on_a_healthy_install_and_fails_a_namespace_no_policy_governs() {
    let hub = Hub::without_operator(Lab::get(), unique("doctor")).await;
    hub.apply("web", web("doctor-web", &["member-1"], "1"))
        .await;
    let clusters = hub.lab.clusters_path();
    let base = [
        "--clusters",
        clusters.to_str().unwrap(),
        "-n",
        hub.namespace.as_str(),
    ];

    let ungoverned = doctor(&hub.lab, &hub.lab.kubeconfig_path(), &base);
    assert_eq!(ungoverned.code, Some(1), "{:#}", ungoverned.report);
    assert_eq!(ungoverned.verdict("policy", &hub.namespace), "fail");
    let fix = ungoverned.finding("policy", &hub.namespace)["fix"]
        .as_str()
        .unwrap();
    assert!(
        fix.contains(&format!("hubNamespaces: [{}]", hub.namespace)),
        "{fix}"
    );
    let permissive = doctor(
        &hub.lab,
        &hub.lab.kubeconfig_path(),
        &[&base[..], &["--tenancy-policy", "permissive"]].concat(),
    );
    assert_eq!(permissive.verdict("policy", &hub.namespace), "warn");
    assert_eq!(permissive.code, Some(0), "{:#}", permissive.report);

    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[]))
        .await;
    let healthy = doctor(&hub.lab, &hub.lab.kubeconfig_path(), &base);
    assert_eq!(
        healthy.code,
        Some(0),
        "{:#}\n{}",
        healthy.report,
        healthy.stderr
    );
    assert_eq!(healthy.report["ok"], true);
    for finding in healthy.report["checks"].as_array().unwrap() {
        // The lab's admin holds every right, which is wider than the operator's.
        let expected = if finding["check"] == "hub-rbac-width" {
            "warn"
        } else {
            "pass"
        };
        assert_eq!(finding["verdict"], expected, "{finding}");
    }
    for crd in ["controllers", "tenancypolicies", "memberclusters"] {
        assert_eq!(
            healthy.verdict("crd", &format!("{crd}.multitenancy.dev")),
            "pass"
        );
    }
    assert_eq!(healthy.verdict("member-rbac", "member-1"), "pass");
    assert_eq!(healthy.verdict("policy", &hub.namespace), "pass");
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn doctor_finds_a_hub_identity_without_the_operators_rights() {
    let lab = Lab::get();
    let nobody = kubeconfig_with(&lab, |c| {
        set(c, "users", "admin@hub", "as", "doctor-nobody")
    });
    let run = doctor(&lab, &nobody, &[]);
    std::fs::remove_file(&nobody).unwrap();
    assert_eq!(run.code, Some(1), "{:#}", run.report);
    let rbac = run.finding("hub-rbac", "hub");
    assert_eq!(rbac["verdict"], "fail");
    assert!(
        rbac["detail"]
            .as_str()
            .unwrap()
            .contains("list controllers.multitenancy.dev"),
        "{rbac}"
    );
    assert!(
        rbac["fix"].as_str().unwrap().contains("deploy/rbac.yaml"),
        "{rbac}"
    );
    // Whether the CRDs are current cannot be told without reading them: said, with the fix.
    let crd = run.finding("crd", "controllers.multitenancy.dev");
    assert_eq!(crd["verdict"], "warn", "{crd}");
    assert!(
        crd["fix"].as_str().unwrap().contains("tenancy-hub crd"),
        "{crd}"
    );
    assert_eq!(run.verdict("policy", "hub"), "fail");
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn doctor_finds_an_unreachable_member_and_a_member_identity_without_rights() {
    let lab = Lab::get();
    let far = kubeconfig_with(&lab, |c| {
        set(c, "clusters", "member-1", "server", "https://127.0.0.1:9")
    });
    let far_clusters = registration(&far);
    let run = doctor(
        &lab,
        &lab.kubeconfig_path(),
        &["--clusters", far_clusters.to_str().unwrap()],
    );
    assert_eq!(run.code, Some(1), "{:#}", run.report);
    assert_eq!(run.verdict("member", "member-1"), "fail");
    assert_eq!(run.verdict("member-rbac", "member-1"), "skip");
    assert_eq!(run.verdict("hub-rbac", "hub"), "pass");

    let nobody = kubeconfig_with(&lab, |c| {
        set(c, "users", "admin@member-1", "as", "doctor-nobody")
    });
    let nobody_clusters = registration(&nobody);
    let run = doctor(
        &lab,
        &lab.kubeconfig_path(),
        &["--clusters", nobody_clusters.to_str().unwrap()],
    );
    for file in [far, far_clusters, nobody, nobody_clusters] {
        std::fs::remove_file(file).unwrap();
    }
    assert_eq!(run.code, Some(1), "{:#}", run.report);
    assert_eq!(run.verdict("member", "member-1"), "pass");
    let rbac = run.finding("member-rbac", "member-1");
    assert_eq!(rbac["verdict"], "fail");
    let detail = rbac["detail"].as_str().unwrap();
    assert!(
        detail.contains("create namespaces") && detail.contains("watch secrets"),
        "{rbac}"
    );
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn doctor_finds_a_missing_executor_and_helm_and_an_unreadable_chart_home() {
    let lab = Lab::get();
    let not_a_directory = lab.kubeconfig_path();
    let run = doctor(
        &lab,
        &lab.kubeconfig_path(),
        &[
            "--executor",
            "sdk",
            "--helm-executor",
            "/nonexistent/tenancy-hub-helm",
            "--helm",
            "/nonexistent/helm",
            "--chart-home",
            not_a_directory.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, Some(1), "{:#}", run.report);
    assert_eq!(
        run.verdict("executor", "/nonexistent/tenancy-hub-helm"),
        "fail"
    );
    assert_eq!(run.verdict("helm", "/nonexistent/helm"), "fail");
    let home = run.finding("chart-home", not_a_directory.to_str().unwrap());
    assert_eq!(home["verdict"], "fail");
    assert!(
        home["fix"].as_str().unwrap().contains("--chart-home"),
        "{home}"
    );
}

#[test]
fn doctor_that_cannot_load_the_hubs_kubeconfig_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_tenancy-hub"))
        .args([
            "doctor",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--context",
            "hub",
        ])
        .env_remove("KUBECONFIG")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cluster hub") && stderr.contains("/nonexistent/kubeconfig"),
        "{stderr}"
    );
}

/// deploy/rbac.yaml's ClusterRole tenancy-hub and its ValidatingAdmissionPolicy, renamed
/// `name`, for ServiceAccount `tenancy-hub` of namespace `namespace` (the test's own), with
/// `extra` rules added to the ClusterRole.
fn shipped_rbac_for(name: &str, namespace: &str, extra: &str) -> String {
    let rbac =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/rbac.yaml"))
            .unwrap();
    let mut out = Vec::new();
    for doc in rbac.split("\n---\n") {
        let mut doc: serde_yaml::Value = serde_yaml::from_str(doc).unwrap();
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        let named = |doc: &serde_yaml::Value, n: &str| doc["metadata"]["name"] == n;
        match kind.as_str() {
            "ClusterRole" if named(&doc, "tenancy-hub") => {
                let added: Vec<serde_yaml::Value> = serde_yaml::from_str(extra).unwrap();
                doc["rules"].as_sequence_mut().unwrap().extend(added);
            }
            "ClusterRoleBinding" => {
                doc["roleRef"]["name"] = name.into();
                doc["subjects"][0]["namespace"] = namespace.into();
            }
            "ValidatingAdmissionPolicy" => {
                doc["spec"]["matchConditions"][0]["expression"] = format!(
                    "request.userInfo.username == 'system:serviceaccount:{namespace}:tenancy-hub'"
                )
                .into();
            }
            "ValidatingAdmissionPolicyBinding" => doc["spec"]["policyName"] = name.into(),
            _ => continue,
        }
        doc["metadata"]["name"] = name.into();
        out.push(serde_yaml::to_string(&doc).unwrap());
    }
    assert_eq!(
        out.len(),
        4,
        "a ClusterRole, its binding, a policy and its binding"
    );
    out.join("---\n")
}

/// Applies `manifests` to the lab's hub as its admin.
fn apply(lab: &Lab, manifests: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("{}.yaml", unique("doctor-rbac")));
    std::fs::write(&path, manifests).unwrap();
    lab.kubectl("hub", &["apply", "-f", path.to_str().unwrap()]);
    path
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn doctor_warns_when_the_operators_hub_rights_are_wider_than_deploy_rbac() {
    use futures::FutureExt as _;
    let hub = Hub::without_operator(Lab::get(), unique("doctor-width")).await;
    let name = unique("doctor-width");
    let outcome = std::panic::AssertUnwindSafe(judge_width(&hub, &name))
        .catch_unwind()
        .await;
    // The cluster-wide objects go, also after a failure.
    let _ = hub.lab.try_kubectl(
        "hub",
        &[
            "delete",
            "clusterrole,clusterrolebinding,validatingadmissionpolicy,\
             validatingadmissionpolicybinding,tenancypolicies.multitenancy.dev",
            &name,
            "--ignore-not-found",
        ],
    );
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The body of the test above: the shipped rights, then wider ones, for names `name`.
async fn judge_width(hub: &Hub, name: &str) {
    // The shipped example names team-a-deployer and team-a: a policy names them.
    let team_a = Impersonation {
        user: "team-a-deployer".into(),
        groups: vec!["team-a".into()],
        namespace_role: None,
    };
    hub.policy(name, impersonating(&hub.namespace, &["*"], team_a))
        .await;
    let account = format!("system:serviceaccount:{}:tenancy-hub", hub.namespace);
    let operator = kubeconfig_with(&hub.lab, |c| set(c, "users", "admin@hub", "as", &account));
    let base = ["-n", hub.namespace.as_str()];

    let shipped = apply(&hub.lab, &shipped_rbac_for(name, &hub.namespace, "[]"));
    // The API server takes a new admission policy in within seconds, not at once.
    let run = wait_until(
        "doctor to find the shipped rights no wider",
        DEADLINE,
        || async {
            let run = doctor(&hub.lab, &operator, &base);
            (run.verdict("hub-rbac-width", "hub") == "pass").then_some(run)
        },
    )
    .await;
    // The identities the policy names may be impersonated (the seal Secret's Role, in the
    // operator's own namespace, is not the test's).
    let rbac = run.finding("hub-rbac", "hub")["detail"].to_string();
    assert!(
        !rbac.contains("team-a"),
        "the identities the policy names are held: {rbac}"
    );

    // Wider: Secrets read in every namespace, anyone impersonated, and no admission policy.
    let wide = shipped_rbac_for(
        name,
        &hub.namespace,
        "[{apiGroups: [''], resources: [secrets], verbs: [get]}, \
          {apiGroups: [''], resources: [users], verbs: [impersonate]}]",
    );
    let without_policy: Vec<&str> = wide
        .split("---\n")
        .filter(|d| !d.contains("kind: ValidatingAdmissionPolicy"))
        .collect();
    hub.lab.kubectl(
        "hub",
        &[
            "delete",
            "validatingadmissionpolicy,validatingadmissionpolicybinding",
            name,
        ],
    );
    let widened = apply(&hub.lab, &without_policy.join("---\n"));
    // ...and the removal of one within seconds too.
    let run = wait_until("doctor to find the rights wider", DEADLINE, || async {
        let run = doctor(&hub.lab, &operator, &base);
        let detail = run.finding("hub-rbac-width", "hub")["detail"].to_string();
        detail.contains("rolebindings").then_some(run)
    })
    .await;
    let width = run.finding("hub-rbac-width", "hub");
    assert_eq!(width["verdict"], "warn", "{width}");
    let detail = width["detail"].as_str().unwrap();
    for wider in [
        "get secrets (any name)",
        "impersonate users (any name)",
        "create rolebindings in namespace default",
    ] {
        assert!(detail.contains(wider), "{wider} not in {width}");
    }
    let fix = width["fix"].as_str().unwrap();
    assert!(fix.contains("resourceNames"), "{width}");
    assert!(fix.contains("tenancy-hub-rolebindings"), "{width}");

    for path in [shipped, widened, operator] {
        std::fs::remove_file(path).unwrap();
    }
}
