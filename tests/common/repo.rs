//! Chart sources for the end-to-end tests: a loopback Helm repository and an OCI registry.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use super::{fixtures::wait_until, lab::Lab, tokens};

/// The example chart every source serves.
#[allow(dead_code)] // used by some test crates only
pub fn example_chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts/deployment-example")
}

/// Packages the chart at `chart` as `version` into `dir`, returning the package's path.
#[allow(dead_code)] // used by some test crates only
pub fn package(lab: &Lab, chart: &Path, version: &str, dir: &Path) -> PathBuf {
    let out = Command::new(lab.bin_dir().join("helm"))
        .args(["package", "--version", version, "-d"])
        .arg(dir)
        .arg(chart)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm package: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = String::from_utf8_lossy(&out.stdout);
    let path = name.trim().rsplit(' ').next().unwrap_or_default();
    PathBuf::from(path)
}

/// Python's `http.server` with redirects: a GET of a path named in the JSON object in the file
/// `argv[3]` (read at each request) answers 302 to its value; any other path is served from the
/// directory `argv[2]`. Each request is logged on stderr as `http.server` logs it. With
/// `argv[4]`, a file holding `user:password` (read at each request), every request without that
/// basic auth answers 401; with `argv[5]` and `argv[6]`, a certificate and its key, it serves
/// TLS.
const SERVER: &str = r#"
import base64, functools, http.server, json, ssl, sys
port, root, redirects = int(sys.argv[1]), sys.argv[2], sys.argv[3]
auth = sys.argv[4] if len(sys.argv) > 4 else None
class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if auth is not None:
            wanted = "Basic " + base64.b64encode(open(auth, "rb").read().strip()).decode()
            if self.headers.get("Authorization") != wanted:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="charts"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        try:
            to = json.load(open(redirects)).get(self.path)
        except (OSError, ValueError):
            to = None
        if to is None:
            return super().do_GET()
        self.send_response(302)
        self.send_header("Location", to)
        self.send_header("Content-Length", "0")
        self.end_headers()
handler = functools.partial(Handler, directory=root)
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
if len(sys.argv) > 6:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[5], sys.argv[6])
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

/// A CA of a test's own, which nothing on the machine trusts, and the certificates it signs.
#[allow(dead_code)] // used by some test crates only
pub struct PrivateCa {
    dir: tempfile::TempDir,
}

#[allow(dead_code)] // used by some test crates only
impl PrivateCa {
    /// Makes the CA's key and certificate.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        sh(&format!(
            "cd {d} && openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null \
             && openssl req -x509 -new -key ca.key -subj /CN=private-test-ca -days 1 -out ca.crt 2>/dev/null",
            d = dir.path().display()
        ));
        Self { dir }
    }

    /// The CA's certificate file.
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The CA's certificate, as PEM.
    pub fn pem(&self) -> String {
        std::fs::read_to_string(self.cert()).unwrap()
    }

    /// A server certificate for 127.0.0.1 in `dir`: its certificate and key files.
    pub fn issue(&self, dir: &Path) -> (PathBuf, PathBuf) {
        sh(&format!(
            "cd {d} && openssl ecparam -name prime256v1 -genkey -noout -out tls.key 2>/dev/null \
             && openssl req -new -key tls.key -subj /CN=127.0.0.1 -out tls.csr 2>/dev/null \
             && printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > ext \
             && openssl x509 -req -in tls.csr -CA {ca}/ca.crt -CAkey {ca}/ca.key -CAcreateserial -CAserial {d}/serial \
                -days 1 -extfile ext -out tls.crt 2>/dev/null",
            d = dir.display(),
            ca = self.dir.path().display()
        ));
        (dir.join("tls.crt"), dir.join("tls.key"))
    }
}

/// Runs `cmd` with bash, asserting it succeeds.
pub(super) fn sh(cmd: &str) {
    let ok = Command::new("bash")
        .args(["-c", cmd])
        .status()
        .unwrap()
        .success();
    assert!(ok, "{cmd}");
}

/// Writes `text` into a new file `name` of `dir`, readable by its owner only.
#[allow(dead_code)] // used by some test crates only
pub fn private_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// An htpasswd line (bcrypt, as distribution wants) for `user` and `password`, made by Python's
/// `crypt` with the password on stdin, so no process list ever shows it.
#[allow(dead_code)] // used by some test crates only
pub fn htpasswd(user: &str, password: &str) -> String {
    use std::io::Write as _;
    let mut child = Command::new("python3")
        .args([
            "-W",
            "ignore",
            "-c",
            "import crypt, sys; print(crypt.crypt(sys.stdin.read(), crypt.mksalt(crypt.METHOD_BLOWFISH)))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(password.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let hash = String::from_utf8(out.stdout).unwrap();
    assert!(
        hash.starts_with("$2"),
        "python's crypt makes no bcrypt here: {hash}"
    );
    format!("{user}:{}\n", hash.trim())
}

/// A Helm repository served over loopback HTTP from a temporary directory, stopped when dropped.
#[allow(dead_code)] // used by some test crates only
pub struct ChartRepo {
    server: Child,
    /// The repository's URL.
    pub url: String,
    helm: PathBuf,
    dir: tempfile::TempDir,
    /// The `user:password` file a private repository answers to, and its TLS files.
    private: Option<tempfile::TempDir>,
    /// The server's request log, one line per request.
    log: tempfile::NamedTempFile,
    /// The redirects it answers, a JSON object of path to location.
    redirects: tempfile::NamedTempFile,
}

#[allow(dead_code)] // used by some test crates only
impl ChartRepo {
    /// Serves the example chart at each of `versions`.
    pub fn serve(lab: &Lab, versions: &[&str]) -> Self {
        Self::serve_as(lab, versions, None)
    }

    /// Serves the example chart at each of `versions` over TLS with a certificate `ca` signs,
    /// only to requests with basic auth `user` and `password` (see [`ChartRepo::set_password`]).
    pub fn serve_private(
        lab: &Lab,
        versions: &[&str],
        ca: &PrivateCa,
        user: &str,
        password: &str,
    ) -> Self {
        let private = tempfile::tempdir().unwrap();
        private_file(private.path(), "auth", &format!("{user}:{password}"));
        ca.issue(private.path());
        Self::serve_as(lab, versions, Some(private))
    }

    fn serve_as(lab: &Lab, versions: &[&str], private: Option<tempfile::TempDir>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for version in versions {
            package(lab, &example_chart(), version, dir.path());
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let scheme = if private.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{port}");
        let log = tempfile::NamedTempFile::new().unwrap();
        let redirects = tempfile::NamedTempFile::new().unwrap();
        let server = Command::new("python3")
            .args(["-c", SERVER, &port.to_string()])
            .arg(dir.path())
            .arg(redirects.path())
            .args(private.iter().flat_map(|p| {
                ["auth", "tls.crt", "tls.key"].map(|f| p.path().join(f).into_os_string())
            }))
            .stdout(Stdio::null())
            // It logs each request on stderr, a line as it is answered.
            .stderr(log.reopen().unwrap())
            .spawn()
            .expect("python3 serves the repository");
        let repo = Self {
            server,
            url,
            helm: lab.bin_dir().join("helm"),
            dir,
            private,
            log,
            redirects,
        };
        repo.index("");
        repo
    }

    /// Answers from now on only to basic auth `user` and `password`.
    pub fn set_password(&self, user: &str, password: &str) {
        let private = self.private.as_ref().expect("a private repository");
        let next = private_file(private.path(), "auth.next", &format!("{user}:{password}"));
        std::fs::rename(next, private.path().join("auth")).unwrap();
    }

    /// Indexes the repository in the directory `sub` (`""`: the top one).
    fn index(&self, sub: &str) {
        let url = format!("{}/{sub}", self.url);
        let index = Command::new(&self.helm)
            .args(["repo", "index", "--url", url.trim_end_matches('/')])
            .arg(self.dir.path().join(sub))
            .status()
            .unwrap();
        assert!(index.success());
    }

    /// Adds the example chart at `version` and indexes the repository again.
    pub fn publish(&self, lab: &Lab, version: &str) {
        self.publish_in(lab, "", version);
    }

    /// Adds the example chart at `version` to a repository of its own in the directory `sub`
    /// (served at `URL/sub`), and indexes it.
    pub fn publish_in(&self, lab: &Lab, sub: &str, version: &str) {
        let dir = self.dir.path().join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        package(lab, &example_chart(), version, &dir);
        self.index(sub);
    }

    /// Adds `files` (archives and their `.prov`, say) to the top repository, replacing files of
    /// the same names, and indexes it again.
    pub fn add(&self, files: &[PathBuf]) {
        for file in files {
            let name = file.file_name().expect("a file name");
            std::fs::copy(file, self.dir.path().join(name)).unwrap();
        }
        self.index("");
    }

    /// Answers a GET of `path` with a redirect (302) to `location`, from now on.
    pub fn redirect(&self, path: &str, location: &str) {
        let mut redirects: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(self.redirects.path()).unwrap())
                .unwrap_or_default();
        redirects.insert(path.into(), location.into());
        let text = serde_json::to_string(&redirects).unwrap();
        std::fs::write(self.redirects.path(), text).unwrap();
    }

    /// A file the repository serves, such as `index.yaml`.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// How many GET requests of `path` (such as `/index.yaml`) the repository has answered.
    pub fn requests(&self, path: &str) -> usize {
        self.requested().iter().filter(|p| *p == path).count()
    }

    /// The path of every GET request the repository has answered, in order, as sent.
    pub fn requested(&self) -> Vec<String> {
        std::fs::read_to_string(self.log.path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once("\"GET ")?.1.split_once(" HTTP/"))
            .map(|(path, _)| path.to_owned())
            .collect()
    }

    /// Waits until the repository serves its index (a private one: until it listens).
    pub async fn wait_ready(&self) {
        if self.private.is_some() {
            let address = self.url.trim_start_matches("https://").to_owned();
            return wait_until(
                "the private chart repository to listen",
                Duration::from_secs(30),
                || {
                    let address = address.clone();
                    async move { std::net::TcpStream::connect(&address).ok().map(|_| ()) }
                },
            )
            .await;
        }
        let address = self.url.trim_start_matches("http://").to_owned();
        wait_until(
            "the chart repository to serve its index",
            Duration::from_secs(30),
            || {
                let address = address.clone();
                async move {
                    use std::io::{Read, Write};
                    let mut stream = std::net::TcpStream::connect(&address).ok()?;
                    stream.write_all(b"GET /index.yaml HTTP/1.0\r\n\r\n").ok()?;
                    let mut body = String::new();
                    stream.read_to_string(&mut body).ok()?;
                    body.contains("deployment-example").then_some(())
                }
            },
        )
        .await;
    }
}

impl Drop for ChartRepo {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// An OCI registry (distribution) over TLS with a certificate from the lab's CA, stopped when dropped.
#[allow(dead_code)] // used by some test crates only
pub struct OciRegistry {
    server: Child,
    /// `host:port` of the registry.
    pub host: String,
    /// The lab's CA, which signed the registry's certificate; helm trusts it through SSL_CERT_FILE.
    pub ca: String,
    dir: tempfile::TempDir,
    /// For a private registry behind htpasswd: the file it reads (again when it changes).
    htpasswd: Option<PathBuf>,
    /// For a private registry: the test's own login file for pushing, made with the password
    /// on stdin.
    login: Option<PathBuf>,
}

#[allow(dead_code)] // used by some test crates only
impl OciRegistry {
    /// Starts an empty registry with a certificate of `ca`, answering only `user` with
    /// `password` (htpasswd; see [`OciRegistry::set_password`]).
    pub async fn serve_private(lab: &Lab, ca: &PrivateCa, user: &str, password: &str) -> Self {
        Self::serve_private_with(lab, ca, user, password, "").await
    }

    /// [`OciRegistry::serve_private`] with `extra` added to its configuration (a storage
    /// `middleware` section, say).
    pub async fn serve_private_with(
        lab: &Lab,
        ca: &PrivateCa,
        user: &str,
        password: &str,
        extra: &str,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_owned();
        ca.issue(&d);
        let htpasswd = private_file(&d, "htpasswd", &htpasswd(user, password));
        let auth = format!(
            "auth:\n  htpasswd: {{realm: charts, path: {}}}\n{extra}",
            htpasswd.display()
        );
        let mut registry = Self::start(lab, dir, ca.cert().to_str().unwrap().to_owned(), &auth);
        registry.htpasswd = Some(htpasswd);
        registry.login = Some(d.join("login.json"));
        registry.login(lab, user, password).await;
        registry
    }

    /// Starts an empty registry with a certificate of `ca` that asks every client for a bearer
    /// token of the service at `realm` (distribution's token authentication), taking tokens of
    /// [`tokens::ISSUER`] signed under the certificate `issuer`; with `login`, logs the test's
    /// pushes in through that service.
    pub async fn serve_token(
        lab: &Lab,
        ca: &PrivateCa,
        realm: &str,
        issuer: &Path,
        login: Option<(&str, &str)>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        ca.issue(dir.path());
        let auth = format!(
            "auth:\n  token: {{realm: \"{realm}\", service: {}, issuer: {}, rootcertbundle: {}}}\n",
            tokens::SERVICE,
            tokens::ISSUER,
            issuer.display()
        );
        let login_file = dir.path().join("login.json");
        let mut registry = Self::start(lab, dir, ca.cert().to_str().unwrap().to_owned(), &auth);
        if let Some((user, password)) = login {
            registry.login = Some(login_file);
            registry.login(lab, user, password).await;
        }
        registry
    }

    /// Where the registry keeps its files: what a storage middleware's redirect points into.
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts an empty registry.
    pub fn serve(lab: &Lab) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let pki = std::fs::canonicalize(lab.dir.join("pki")).unwrap();
        sh(&format!(
            "cd {d} && openssl ecparam -name prime256v1 -genkey -noout -out tls.key 2>/dev/null \
             && openssl req -new -key tls.key -subj /CN=registry -out tls.csr 2>/dev/null \
             && printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > ext \
             && openssl x509 -req -in tls.csr -CA {ca}/ca.crt -CAkey {ca}/ca.key -CAcreateserial -CAserial {d}/serial \
                -days 1 -extfile ext -out tls.crt 2>/dev/null",
            d = d.display(),
            ca = pki.display()
        ));
        let ca = pki.join("ca.crt").to_str().unwrap().to_owned();
        Self::start(lab, dir, ca, "")
    }

    /// Starts the registry in `dir` (holding `tls.crt` and `tls.key`), with `auth` as its
    /// configuration's `auth` section.
    fn start(lab: &Lab, dir: tempfile::TempDir, ca: String, auth: &str) -> Self {
        let d = dir.path();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let host = format!("127.0.0.1:{port}");
        std::fs::write(
            d.join("config.yml"),
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {d}/data}}}}\nhttp:\n  addr: {host}\n  tls: {{certificate: {d}/tls.crt, key: {d}/tls.key}}\n{auth}",
                d = d.display()
            ),
        )
        .unwrap();
        let server = Command::new(lab.bin_dir().join("registry"))
            .arg("serve")
            .arg(d.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the registry starts");
        Self {
            server,
            host,
            ca,
            dir,
            htpasswd: None,
            login: None,
        }
    }

    /// Answers from now on only to `user` with `password` (distribution reads its htpasswd
    /// file again when it changes), and logs the test's pushes in with them.
    pub async fn set_password(&self, lab: &Lab, user: &str, password: &str) {
        let file = self.htpasswd.as_ref().expect("a registry behind htpasswd");
        let dir = file.parent().unwrap();
        let next = private_file(dir, "htpasswd.next", &htpasswd(user, password));
        std::fs::rename(next, file).unwrap();
        self.login(lab, user, password).await;
    }

    /// `helm registry login` into the test's own login file, the password on stdin.
    async fn login(&self, lab: &Lab, user: &str, password: &str) {
        let login = self.login.as_ref().expect("a private registry");
        let helm = lab.bin_dir().join("helm");
        wait_until(
            "the registry to take the login",
            Duration::from_secs(30),
            || {
                use std::io::Write as _;
                let child = Command::new(&helm)
                    .args([
                        "registry",
                        "login",
                        &self.host,
                        "--username",
                        user,
                        "--password-stdin",
                    ])
                    .args(["--ca-file", &self.ca])
                    .arg("--registry-config")
                    .arg(login)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn();
                let ok = child.ok().and_then(|mut child| {
                    child.stdin.take()?.write_all(password.as_bytes()).ok()?;
                    child.wait().ok()?.success().then_some(())
                });
                async move { ok }
            },
        )
        .await;
    }

    /// The `oci://` prefix of the registry's `charts` repository, for a policy's chartSources.
    pub fn prefix(&self) -> String {
        format!("oci://{}/charts/", self.host)
    }

    /// The `oci://` reference of a chart in the registry's `charts` repository.
    pub fn reference(&self, chart: &str) -> String {
        format!("oci://{}/charts/{chart}", self.host)
    }

    /// Packages the chart at `chart` as `version` and pushes it, waiting for the registry to take it.
    pub async fn push(&self, lab: &Lab, chart: &Path, version: &str) {
        let packages = self.dir.path().join("packages");
        std::fs::create_dir_all(&packages).unwrap();
        let tgz = package(lab, chart, version, &packages);
        let target = format!("oci://{}/charts", self.host);
        let helm = lab.bin_dir().join("helm");
        wait_until(
            "the registry to take the chart",
            Duration::from_secs(30),
            || {
                let out = Command::new(&helm)
                    .arg("push")
                    .arg(&tgz)
                    .args([&target, "--ca-file", &self.ca])
                    .args(
                        self.login
                            .iter()
                            .flat_map(|login| [OsString::from("--registry-config"), login.into()]),
                    )
                    .output();
                async move { out.ok()?.status.success().then_some(()) }
            },
        )
        .await;
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}
