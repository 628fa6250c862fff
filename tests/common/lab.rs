//! The running lab: its kubeconfig and clients per context, its helm, and its control script.

use std::path::{Path, PathBuf};

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

/// What to tell someone who runs the end-to-end tests without a lab.
pub const NEEDS_LAB: &str = "needs the lab: run tests/run.sh, or kind/up.sh and then \
    `cargo test -- --ignored` with TENANCY_HUB_LAB_DIR set to the lab's directory";

/// A running lab, as left by kind/up.sh.
#[allow(dead_code)] // used by some test crates only
pub struct Lab {
    /// The lab's directory.
    pub dir: PathBuf,
    /// Its kubeconfig, with contexts hub and member-1 … member-N.
    pub kubeconfig: Kubeconfig,
}

#[allow(dead_code)] // used by some test crates only
impl Lab {
    /// Finds the lab in TENANCY_HUB_LAB_DIR (default: `<repo>/.lab`), or panics saying how to start one.
    pub fn get() -> Self {
        let dir = std::env::var_os("TENANCY_HUB_LAB_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".lab"));
        let path = dir.join("kubeconfig");
        let kubeconfig = Kubeconfig::read_from(&path).unwrap_or_else(|e| {
            panic!(
                "no lab kubeconfig at {}: {e}; this test {NEEDS_LAB}",
                path.display()
            )
        });
        Self { dir, kubeconfig }
    }

    /// Path of the lab's kubeconfig.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// Path of the lab's registration file.
    pub fn clusters_path(&self) -> PathBuf {
        self.dir.join("clusters.yaml")
    }

    /// Every context: hub first, then the members.
    pub fn contexts(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .kubeconfig
            .contexts
            .iter()
            .map(|c| c.name.clone())
            .collect();
        names.sort_by_key(|n| (n != "hub", n.clone()));
        names
    }

    /// A client for one context.
    pub async fn client(&self, context: &str) -> Client {
        client_of(
            self.kubeconfig.clone(),
            context,
            &format!("context {context}"),
        )
        .await
    }

    /// A client for one context acting as `user` (impersonated with the context's admin
    /// credentials), as a tenant would act with its own identity.
    #[allow(dead_code)] // used by some test crates only
    pub async fn client_as(&self, context: &str, user: &str) -> Client {
        self.client_as_in(context, user, &[]).await
    }

    /// Like [`Lab::client_as`], the user a member of `groups`, as a tenant's credentials name
    /// its team.
    #[allow(dead_code)] // used by some test crates only
    pub async fn client_as_in(&self, context: &str, user: &str, groups: &[&str]) -> Client {
        let mut kubeconfig = self.kubeconfig.clone();
        let auth = kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .and_then(|c| c.user.clone())
            .expect("the context names a user");
        for named in &mut kubeconfig.auth_infos {
            if named.name == auth
                && let Some(info) = named.auth_info.as_mut()
            {
                info.impersonate = Some(user.to_owned());
                info.impersonate_groups =
                    (!groups.is_empty()).then(|| groups.iter().map(|g| g.to_string()).collect());
            }
        }
        client_of(kubeconfig, context, &format!("context {context} as {user}")).await
    }

    /// A variable the lab's env file exports, unquoted.
    fn exported(&self, name: &str) -> String {
        let env =
            std::fs::read_to_string(self.dir.join("env")).expect("the lab writes an env file");
        let prefix = format!("export {name}=\"");
        env.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("the env file sets {name}"))
            .trim_end_matches('"')
            .to_owned()
    }

    /// The lab's long-lived Helm executor (tenancy-hub-helm), built by `kind/executor.sh`.
    pub fn executor(&self) -> PathBuf {
        self.exported("TENANCY_HUB_HELM_EXECUTOR").into()
    }

    /// The operator's checker of chart signatures (tenancy-hub-verify), built by `kind/verifier.sh`.
    pub fn verifier(&self) -> PathBuf {
        self.exported("TENANCY_HUB_VERIFIER").into()
    }

    /// The directory holding the lab's signing tools (cosign, tenancy-hub-notation-sign), built by
    /// `kind/signing.sh`.
    pub fn signing_tools(&self) -> PathBuf {
        self.exported("TENANCY_HUB_SIGNING_TOOLS").into()
    }

    /// The directory holding the lab's kubectl and helm.
    pub fn bin_dir(&self) -> PathBuf {
        PathBuf::from(self.exported("PATH").split(':').next().unwrap())
    }

    /// Runs the lab's helm against one context; returns stdout, panicking with stderr on failure.
    pub fn helm(&self, context: &str, args: &[&str]) -> String {
        self.try_helm(context, args)
            .unwrap_or_else(|e| panic!("helm {args:?} on {context} failed: {e}"))
    }

    /// Runs the lab's helm against one context.
    pub fn try_helm(&self, context: &str, args: &[&str]) -> Result<String, String> {
        self.helm_in(&self.kubeconfig_path(), context, args)
    }

    /// Runs the lab's helm with `kubeconfig` and `context`.
    fn helm_in(&self, kubeconfig: &Path, context: &str, args: &[&str]) -> Result<String, String> {
        let out = std::process::Command::new(self.bin_dir().join("helm"))
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--kube-context", context])
            .output()
            .expect("helm runs");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs the lab's kubectl against one context; returns stdout, panicking with stderr on failure.
    pub fn kubectl(&self, context: &str, args: &[&str]) -> String {
        self.try_kubectl(context, args)
            .unwrap_or_else(|e| panic!("kubectl {args:?} on {context} failed: {e}"))
    }

    /// Runs the lab's kubectl against one context: stdout, or stdout and stderr when it fails.
    pub fn try_kubectl(&self, context: &str, args: &[&str]) -> Result<String, String> {
        self.kubectl_in(&self.kubeconfig_path(), context, args)
    }

    /// Runs the lab's kubectl against one pull member, with its own kubeconfig: stdout, or stdout
    /// and stderr when it fails.
    pub fn try_pull_kubectl(&self, name: &str, args: &[&str]) -> Result<String, String> {
        self.kubectl_in(&self.pull_kubeconfig(name), name, args)
    }

    /// Runs the lab's kubectl with `kubeconfig` and `context`.
    fn kubectl_in(
        &self,
        kubeconfig: &Path,
        context: &str,
        args: &[&str],
    ) -> Result<String, String> {
        let out = self
            .kubectl_command(kubeconfig, context, args)
            .output()
            .expect("kubectl runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// The lab's kubectl with `kubeconfig`, `context` and `args`, not yet run.
    fn kubectl_command(
        &self,
        kubeconfig: &Path,
        context: &str,
        args: &[&str],
    ) -> std::process::Command {
        let mut command = std::process::Command::new(self.bin_dir().join("kubectl"));
        command
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--context", context])
            .args(args);
        command
    }

    /// Whether `as_user` may `verb` `resource` on the hub, in `namespace` or cluster-wide, per
    /// `kubectl auth can-i --as` (with the hub admin's right to impersonate).
    pub fn can_i(
        &self,
        as_user: &str,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> bool {
        self.answer_can_i(
            &self.kubeconfig_path(),
            "hub",
            as_user,
            verb,
            resource,
            namespace,
        )
    }

    /// Like [`Lab::can_i`], on the pull member `name`, asked with its own admin.
    pub fn pull_can_i(
        &self,
        name: &str,
        as_user: &str,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> bool {
        let kubeconfig = self.pull_kubeconfig(name);
        self.answer_can_i(&kubeconfig, name, as_user, verb, resource, namespace)
    }

    /// `kubectl auth can-i VERB RESOURCE --as USER [-n NAMESPACE]`: its yes or no (exit code 1 is a no).
    fn answer_can_i(
        &self,
        kubeconfig: &Path,
        context: &str,
        as_user: &str,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> bool {
        let mut args = vec!["auth", "can-i", verb, resource, "--as", as_user];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        let out = self
            .kubectl_command(kubeconfig, context, &args)
            .output()
            .expect("kubectl runs");
        match String::from_utf8_lossy(&out.stdout).trim() {
            "yes" => true,
            "no" => false,
            other => panic!(
                "kubectl {args:?} on {context} answered neither yes nor no: {other}\n{}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// The lab's pull members, `pull-1` … `pull-N` in order (`kind/up.sh --pull-members N`):
    /// members the hub side holds no credentials for, in neither its kubeconfig nor its
    /// registration file. Empty when the lab has none.
    pub fn pull_members(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.pull_dir()) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                Some(name.strip_suffix(".kubeconfig")?.to_owned())
            })
            .filter(|n| n.starts_with("pull-"))
            .collect();
        names.sort_by_key(|n| (n.len(), n.clone()));
        names
    }

    /// The kubeconfig of the pull member `name`: its admin, in context `name`; the only place its
    /// credentials are. Panics, saying how to start a lab with pull members, when there is none.
    pub fn pull_kubeconfig(&self, name: &str) -> PathBuf {
        let path = self.pull_dir().join(format!("{name}.kubeconfig"));
        assert!(
            path.is_file(),
            "no pull member {name} in the lab at {} (it has {:?}); start one with \
             kind/up.sh --pull-members N",
            self.dir.display(),
            self.pull_members()
        );
        path
    }

    /// A client of the pull member `name`, from its own kubeconfig.
    pub async fn pull_client(&self, name: &str) -> Client {
        let path = self.pull_kubeconfig(name);
        let kubeconfig = Kubeconfig::read_from(&path)
            .unwrap_or_else(|e| panic!("pull member {name}'s kubeconfig {}: {e}", path.display()));
        client_of(kubeconfig, name, &format!("pull member {name}")).await
    }

    /// A client of the pull member `name` acting as `user` (impersonated with its admin), as a
    /// tenant of that member acts with its own identity.
    #[allow(dead_code)] // used by some test crates only
    pub async fn pull_client_as(&self, name: &str, user: &str) -> Client {
        let path = self.pull_kubeconfig(name);
        let mut kubeconfig = Kubeconfig::read_from(&path)
            .unwrap_or_else(|e| panic!("pull member {name}'s kubeconfig {}: {e}", path.display()));
        for named in &mut kubeconfig.auth_infos {
            if let Some(info) = named.auth_info.as_mut() {
                info.impersonate = Some(user.to_owned());
            }
        }
        client_of(kubeconfig, name, &format!("pull member {name} as {user}")).await
    }

    /// The pid of the lab's process `name` (as kind/up.sh wrote it into DIR/pids).
    pub fn pid(&self, name: &str) -> u32 {
        let pids = std::fs::read_to_string(self.dir.join("pids")).unwrap();
        pids.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let pid = f.next()?.parse().ok()?;
                (f.next()? == name).then_some(pid)
            })
            .unwrap_or_else(|| panic!("no {name} in the lab's pids"))
    }

    /// The hub API server's URL, as a member-side join is given it (`--hub-server`).
    pub fn hub_server(&self) -> String {
        let path = self.pull_dir().join("hub-server");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; the lab writes it with kind/up.sh --pull-members N",
                    path.display()
                )
            })
            .trim()
            .to_owned()
    }

    /// The CA that signed the hub API server's certificate, as a member-side join is given it
    /// (`--hub-ca-file`).
    pub fn hub_ca_file(&self) -> PathBuf {
        let path = self.pull_dir().join("hub.ca.crt");
        assert!(
            path.is_file(),
            "no {}; the lab writes it with kind/up.sh --pull-members N",
            path.display()
        );
        path
    }

    /// Where the lab keeps what the member side of its pull members holds.
    fn pull_dir(&self) -> PathBuf {
        self.dir.join("pull")
    }

    /// Helm releases in one namespace of one cluster: name -> (revision, status).
    pub fn releases(
        &self,
        context: &str,
        namespace: &str,
    ) -> std::collections::BTreeMap<String, (i64, String)> {
        self.releases_in(&self.kubeconfig_path(), context, namespace)
    }

    /// Like [`Lab::releases`], in the pull member `name`, read with its own kubeconfig.
    #[allow(dead_code)] // used by some test crates only
    pub fn pull_releases(
        &self,
        name: &str,
        namespace: &str,
    ) -> std::collections::BTreeMap<String, (i64, String)> {
        self.releases_in(&self.pull_kubeconfig(name), name, namespace)
    }

    /// The releases of `namespace` in the cluster of `kubeconfig`'s `context`.
    fn releases_in(
        &self,
        kubeconfig: &Path,
        context: &str,
        namespace: &str,
    ) -> std::collections::BTreeMap<String, (i64, String)> {
        let out = self
            .helm_in(
                kubeconfig,
                context,
                &[
                    "list",
                    "-n",
                    namespace,
                    "--deployed",
                    "--failed",
                    "--pending",
                    "-o",
                    "json",
                ],
            )
            .unwrap_or_else(|e| panic!("helm list on {context} failed: {e}"));
        let list: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
        list.iter()
            .map(|r| {
                let revision = r["revision"].as_str().unwrap().parse().unwrap();
                (
                    r["name"].as_str().unwrap().to_owned(),
                    (revision, r["status"].as_str().unwrap().to_owned()),
                )
            })
            .collect()
    }

    /// The user-supplied values of a release, as JSON.
    pub fn values(&self, context: &str, namespace: &str, release: &str) -> serde_json::Value {
        serde_json::from_str(&self.helm(
            context,
            &["get", "values", release, "-n", namespace, "-o", "json"],
        ))
        .unwrap()
    }

    /// Writes `object` (JSON) under `key` of `context`'s storage in the lab's etcd, past the API
    /// server and its admission: how an object stored before a policy existed looks to it.
    /// `key` is what follows the API server's prefix, such as `multitenancy.dev/controllers/NS/NAME`.
    pub async fn store_past_admission(&self, context: &str, key: &str, object: &str) {
        use base64::Engine;
        let command = std::fs::read_to_string(
            self.dir
                .join("cmds")
                .join(format!("{context}-kube-apiserver")),
        )
        .expect("the lab keeps the API server's command line");
        let flag = |name: &str| {
            let mut words = command.split_whitespace();
            words.find(|w| *w == name);
            words
                .next()
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("{name} in {command}"))
        };
        let (etcd, prefix) = (flag("--etcd-servers"), flag("--etcd-prefix"));
        let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        let put = serde_json::json!({"key": b64(&format!("{prefix}/{key}")), "value": b64(object)});
        let answer = reqwest::Client::new()
            .post(format!("{etcd}/v3/kv/put"))
            .header("content-type", "application/json")
            .body(put.to_string())
            .send()
            .await
            .expect("etcd answers");
        assert!(
            answer.status().is_success(),
            "etcd refused the put: {}",
            answer.status()
        );
    }
}

/// A client for `context` of `kubeconfig`; panics naming `what` when it cannot be made.
async fn client_of(kubeconfig: Kubeconfig, context: &str, what: &str) -> Client {
    let options = KubeConfigOptions {
        context: Some(context.to_owned()),
        ..Default::default()
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    Client::try_from(config).unwrap()
}

/// Runs a lab control command (kind/ctl.sh) on the test's lab.
#[allow(dead_code)] // used by some test crates only
pub fn lab_ctl(lab: &Lab, args: &[&str]) {
    let status =
        std::process::Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("kind/ctl.sh"))
            .args(args)
            .arg("--dir")
            .arg(&lab.dir)
            .status()
            .expect("kind/ctl.sh runs");
    assert!(status.success(), "kind/ctl.sh {args:?} failed");
}

/// A member's control-plane processes, in the order they start.
const MEMBER_PROCESSES: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

/// Stops a whole member cluster: its API server and the components that work through it
/// (controller manager, scheduler, kwok), the last first.
#[allow(dead_code)] // used by some test crates only
pub fn stop_member(lab: &Lab, cluster: &str) {
    for process in MEMBER_PROCESSES.iter().rev() {
        lab_ctl(lab, &["stop", &format!("{cluster}-{process}")]);
    }
}

/// Starts a member stopped by [`stop_member`]: its API server (`start` waits until it is ready),
/// then the components, which list afresh at once. Restarting only the API server would leave
/// them to find it again on their own client backoff (up to 30 s each, one after the other for
/// a new pod), which is the member's delay, not the operator's.
#[allow(dead_code)] // used by some test crates only
pub fn start_member(lab: &Lab, cluster: &str) {
    for process in MEMBER_PROCESSES {
        lab_ctl(lab, &["start", &format!("{cluster}-{process}")]);
    }
}
