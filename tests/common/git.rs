//! The lab's Git server for the tests of Git chart sources: repositories on it, commits pushed and tagged with the real git CLI (signed with SSH keys where asked), push webhooks, and the operator's Git fetcher.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use tenancy_hub::api::{
    crd::SecretReference,
    policy::{GitAccess, GitWebhook, SourceAccess, TenancyPolicySpec},
};

use super::lab::Lab;

/// The lab's Git server, as kind/up.sh left it in DIR/git.
#[allow(dead_code)] // used by some test crates only
pub struct GitServer {
    /// Its smart HTTP base url, `http://127.0.0.1:PORT`.
    pub http: String,
    /// Its SSH base url, `ssh://git@127.0.0.1:PORT`.
    pub ssh: String,
    /// The directory of the bare repositories it serves.
    pub repos: PathBuf,
    /// The basic auth it accepts.
    pub username: String,
    /// The password of that basic auth.
    pub password: String,
    /// The bearer token it accepts.
    pub token: String,
    /// The file of the SSH client key it accepts (an OpenSSH private key, no passphrase).
    pub ssh_key: PathBuf,
    /// The known_hosts file holding its SSH host key.
    pub known_hosts: PathBuf,
    /// The operator's Git fetcher (tenancy-hub-git), built by kind/git.sh.
    pub fetcher: PathBuf,
}

/// A bare repository of the lab's Git server.
#[allow(dead_code)] // used by some test crates only
pub struct GitRepo {
    /// Its name on the server, e.g. `team/charts` (served as `/team/charts.git`).
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Its smart HTTP url.
    pub http_url: String,
    /// Its SSH url.
    pub ssh_url: String,
    /// The `Authorization` header of the server's basic auth, for the git CLI.
    authorization: String,
}

#[allow(dead_code)] // used by some test crates only
impl GitServer {
    /// Puts its basic auth into a new platform Secret of the operator's namespace `namespace`;
    /// returns the Secret's name.
    #[allow(dead_code)] // used by some test crates only
    pub async fn pull_secret(&self, lab: &Lab, namespace: &str) -> String {
        let secret = super::fixtures::unique("git-pull");
        super::fixtures::put_secret(
            lab,
            namespace,
            &secret,
            &[("username", &self.username), ("password", &self.password)],
        )
        .await;
        secret
    }

    /// The lab's Git server, read from DIR/git and the env file.
    pub fn get(lab: &Lab) -> Self {
        let dir = lab.dir.join("git");
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .unwrap_or_else(|e| panic!("the lab's Git server has no {name} in {}: {e}; start the lab again with kind/up.sh", dir.display()))
                .trim()
                .to_owned()
        };
        let env = std::fs::read_to_string(lab.dir.join("env")).expect("the lab writes an env file");
        let fetcher = env
            .lines()
            .find_map(|l| l.strip_prefix("export TENANCY_HUB_GIT_FETCHER=\""))
            .expect("the env file sets TENANCY_HUB_GIT_FETCHER")
            .trim_end_matches('"');
        Self {
            http: read("http-url"),
            ssh: read("ssh-url"),
            repos: dir.join("repos"),
            username: read("username"),
            password: read("password"),
            token: read("token"),
            ssh_key: dir.join("client_ed25519"),
            known_hosts: dir.join("known_hosts"),
            fetcher: PathBuf::from(fetcher),
        }
    }

    /// Creates an empty bare repository `name` (e.g. `team/charts`, unique per test), branch main.
    pub fn create_repo(&self, name: &str) -> GitRepo {
        let dir = self.repos.join(format!("{name}.git"));
        run(git(&self.repos)
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&dir));
        use base64::Engine as _;
        let basic = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", self.username, self.password));
        GitRepo {
            name: name.to_owned(),
            dir,
            http_url: format!("{}/{name}.git", self.http),
            ssh_url: format!("{}/{name}.git", self.ssh),
            authorization: format!("Authorization: Basic {basic}"),
        }
    }

    /// The client's SSH private key (PEM), as a fetch request's `sshPrivateKey`.
    pub fn ssh_private_key(&self) -> String {
        std::fs::read_to_string(&self.ssh_key).expect("the lab's SSH client key")
    }

    /// The server's known_hosts line, as a fetch request's `knownHosts`.
    pub fn known_hosts_lines(&self) -> String {
        std::fs::read_to_string(&self.known_hosts).expect("the lab's known_hosts")
    }

    /// Runs the fetcher on one JSON request (written on its stdin); returns its JSON answer.
    pub fn fetch(&self, request: &serde_json::Value) -> serde_json::Value {
        self.fetch_with_stats(request).0
    }

    /// Like [`GitServer::fetch`], with what the fetcher printed on stderr (a fetch's line of
    /// figures: the bytes of pack received).
    pub fn fetch_with_stats(&self, request: &serde_json::Value) -> (serde_json::Value, String) {
        use std::io::Write as _;
        let mut child = Command::new(&self.fetcher)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", self.fetcher.display()));
        child
            .stdin
            .take()
            .unwrap()
            .write_all(request.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the fetcher failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answer = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "the fetcher's answer is not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        (
            answer,
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        )
    }
}

#[allow(dead_code)] // used by some test crates only
impl GitRepo {
    /// Pushes the content of `dir` as one commit on `branch` (a child of the branch's tip, if it
    /// has one), over HTTP with the server's basic auth: the commit's id.
    pub fn push_dir(&self, dir: &Path, branch: &str, message: &str) -> String {
        self.push(dir, branch, message, None)
    }

    /// Like [`GitRepo::push_dir`], the commit signed with the SSH key in the file `signing_key`
    /// (`git -c gpg.format=ssh -c user.signingkey=...`).
    pub fn push_dir_signed(
        &self,
        dir: &Path,
        branch: &str,
        message: &str,
        signing_key: &Path,
    ) -> String {
        self.push(dir, branch, message, Some(signing_key))
    }

    /// Tags `commit` as `tag` (an annotated tag), pushed over HTTP.
    pub fn tag(&self, commit: &str, tag: &str) {
        let work = tempfile::tempdir().unwrap();
        let path = work.path();
        run(git(path).args(["init", "-q"]));
        run(self
            .authorized(git(path))
            .args(["fetch", "-q", &self.http_url, commit]));
        run(git(path).args(["tag", "-a", "-m", tag, tag, commit]));
        run(self.authorized(git(path)).args([
            "push",
            "-q",
            &self.http_url,
            &format!("refs/tags/{tag}"),
        ]));
    }

    /// Names where the server announces each push to this repository: a Gitea push event to
    /// `url` (loopback), signed with `secret` (X-Gitea-Signature).
    pub fn set_webhook(&self, url: &str, secret: &str) {
        let hook = serde_json::json!({"url": url, "secret": secret});
        std::fs::write(self.dir.join("tenancy-hub-webhook.json"), hook.to_string()).unwrap();
    }

    /// The commit a branch's tip is, on the server.
    pub fn tip(&self, branch: &str) -> String {
        run(git(&self.dir)
            .args(["--git-dir"])
            .arg(&self.dir)
            .args(["rev-parse", &format!("refs/heads/{branch}")]))
        .trim()
        .to_owned()
    }

    /// One commit of `dir` on `branch`, signed when a key is given, pushed over HTTP.
    fn push(&self, dir: &Path, branch: &str, message: &str, signing_key: Option<&Path>) -> String {
        let work = tempfile::tempdir().unwrap();
        let path = work.path();
        run(Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", dir.display()))
            .arg(path));
        run(git(path).args(["init", "-q"]));
        run(git(path).args(["add", "-A"]));
        let tree = run(git(path).args(["write-tree"])).trim().to_owned();
        let mut commit = git(path);
        commit.args(["commit-tree", &tree, "-m", message]);
        let fetched = self
            .authorized(git(path))
            .args([
                "fetch",
                "-q",
                "--depth",
                "1",
                &self.http_url,
                &format!("refs/heads/{branch}"),
            ])
            .output()
            .unwrap();
        if fetched.status.success() {
            let parent = run(git(path).args(["rev-parse", "FETCH_HEAD"]))
                .trim()
                .to_owned();
            commit.args(["-p", &parent]);
        }
        if let Some(key) = signing_key {
            commit.arg("-S").env("GIT_CONFIG_COUNT", "2");
            commit
                .env("GIT_CONFIG_KEY_0", "gpg.format")
                .env("GIT_CONFIG_VALUE_0", "ssh");
            commit
                .env("GIT_CONFIG_KEY_1", "user.signingkey")
                .env("GIT_CONFIG_VALUE_1", key);
        }
        let id = run(&mut commit).trim().to_owned();
        run(self.authorized(git(path)).args([
            "push",
            "-q",
            &self.http_url,
            &format!("{id}:refs/heads/{branch}"),
        ]));
        id
    }

    /// The git command with the server's basic auth in an extra header, set through the
    /// environment (never argv).
    fn authorized(&self, mut command: Command) -> Command {
        command
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env("GIT_CONFIG_VALUE_0", &self.authorization);
        command
    }
}

/// A policy of `namespace` allowing the Git repositories under `<server>/<team>/` (paths under
/// `charts`, branch main, plain http as the lab's server speaks it, so `insecure`) with the
/// server's password from Secret `secret`, push hooks signed with the secret of Secret `hook`
/// when given, and the chart sources `sources`.
#[allow(dead_code)] // used by some test crates only
pub fn git_policy(
    server: &GitServer,
    namespace: &str,
    team: &str,
    secret: &str,
    hook: Option<&str>,
    sources: &[&str],
) -> TenancyPolicySpec {
    let mut policy = super::hub::allow_all(namespace, sources);
    policy.sources = vec![SourceAccess {
        url: format!("{}/{team}/", server.http),
        secret_ref: Some(SecretReference {
            name: secret.to_owned(),
        }),
        git: Some(GitAccess {
            paths: vec!["charts".into()],
            branches: vec!["main".into()],
            insecure: true,
            webhook: hook.map(|name| GitWebhook {
                secret_ref: SecretReference {
                    name: name.to_owned(),
                },
            }),
            ..GitAccess::default()
        }),
        ..SourceAccess::default()
    }];
    policy
}

/// The example chart's directory in the repositories the tests push.
#[allow(dead_code)] // used by some test crates only
pub const CHART_PATH: &str = "charts/deployment-example";

/// A working copy holding the example chart at `version` with `replicas`, and `values` files.
#[allow(dead_code)] // used by some test crates only
pub fn work_tree(version: &str, replicas: u32, values: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join(CHART_PATH);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts/deployment-example");
    for file in [
        "Chart.yaml",
        "values.yaml",
        "templates/deployment.yaml",
        "templates/service.yaml",
    ] {
        let to = chart.join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let text = std::fs::read_to_string(source.join(file)).unwrap();
        let text = match file {
            "Chart.yaml" => text.replace("version: 0.1.0", &format!("version: {version}")),
            "values.yaml" => text.replace("replicaCount: 1", &format!("replicaCount: {replicas}")),
            _ => text,
        };
        std::fs::write(to, text).unwrap();
    }
    for (path, text) in values {
        let to = dir.path().join(path);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text).unwrap();
    }
    dir
}

/// Makes `dir` a Git repository of one commit (of `file`), so a tree holding it is pushed by
/// [`GitRepo::push_dir`] with a submodule (a gitlink) there.
#[allow(dead_code)] // used by some test crates only
pub fn embedded_repo(dir: &Path, file: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(file), "elsewhere\n").unwrap();
    run(git(dir).args(["init", "-q"]));
    run(git(dir).args(["add", "-A"]));
    run(git(dir).args(["commit", "-q", "-m", "elsewhere"]));
}

/// The `X-Gitea-Signature` of a webhook body: the hex HMAC-SHA256 of `body` with `secret`.
#[allow(dead_code)] // used by some test crates only
pub fn gitea_signature(secret: &[u8], body: &[u8]) -> String {
    use hmac::Mac as _;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A new SSH key for signing commits, in a directory removed when dropped: the directory, the
/// private key file, and the public key as an authorized_keys line (a policy's trusted key).
#[allow(dead_code)] // used by some test crates only
pub fn ssh_signing_key() -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("signing");
    run(Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "tenancy-hub-test-signing",
            "-f",
        ])
        .arg(&key));
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    (dir, key, public.trim().to_owned())
}

/// git run in `dir` with no user or system configuration, a fixed identity and no prompt.
#[allow(dead_code)] // used by some test crates only
fn git(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "Lab")
        .env("GIT_AUTHOR_EMAIL", "lab@example.invalid")
        .env("GIT_COMMITTER_NAME", "Lab")
        .env("GIT_COMMITTER_EMAIL", "lab@example.invalid");
    command
}

/// Runs a command to success, returning its stdout; panics with its stderr otherwise.
#[allow(dead_code)] // used by some test crates only
fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{:?}: {e}", command.get_program()));
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        command.get_program(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
