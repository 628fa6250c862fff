//! Chart sources for the end-to-end tests: a loopback Helm repository and an OCI registry.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use super::{fixtures::wait_until, lab::Lab};

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
/// directory `argv[2]`. Each request is logged on stderr as `http.server` logs it.
const SERVER: &str = r#"
import functools, http.server, json, sys
port, root, redirects = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
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
http.server.ThreadingHTTPServer(("127.0.0.1", port), handler).serve_forever()
"#;

/// A Helm repository served over loopback HTTP from a temporary directory, stopped when dropped.
#[allow(dead_code)] // used by some test crates only
pub struct ChartRepo {
    server: Child,
    /// The repository's URL.
    pub url: String,
    helm: PathBuf,
    dir: tempfile::TempDir,
    /// The server's request log, one line per request.
    log: tempfile::NamedTempFile,
    /// The redirects it answers, a JSON object of path to location.
    redirects: tempfile::NamedTempFile,
}

#[allow(dead_code)] // used by some test crates only
impl ChartRepo {
    /// Serves the example chart at each of `versions`.
    pub fn serve(lab: &Lab, versions: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for version in versions {
            package(lab, &example_chart(), version, dir.path());
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url = format!("http://127.0.0.1:{port}");
        let log = tempfile::NamedTempFile::new().unwrap();
        let redirects = tempfile::NamedTempFile::new().unwrap();
        let server = Command::new("python3")
            .args(["-c", SERVER, &port.to_string()])
            .arg(dir.path())
            .arg(redirects.path())
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
            log,
            redirects,
        };
        repo.index("");
        repo
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

    /// Waits until the repository serves its index.
    pub async fn wait_ready(&self) {
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
}

#[allow(dead_code)] // used by some test crates only
impl OciRegistry {
    /// Starts an empty registry.
    pub fn serve(lab: &Lab) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let pki = std::fs::canonicalize(lab.dir.join("pki")).unwrap();
        let sh = |cmd: &str| {
            let ok = Command::new("bash")
                .args(["-c", cmd])
                .status()
                .unwrap()
                .success();
            assert!(ok, "{cmd}");
        };
        sh(&format!(
            "cd {d} && openssl ecparam -name prime256v1 -genkey -noout -out tls.key 2>/dev/null \
             && openssl req -new -key tls.key -subj /CN=registry -out tls.csr 2>/dev/null \
             && printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > ext \
             && openssl x509 -req -in tls.csr -CA {ca}/ca.crt -CAkey {ca}/ca.key -CAcreateserial -CAserial {d}/serial \
                -days 1 -extfile ext -out tls.crt 2>/dev/null",
            d = d.display(),
            ca = pki.display()
        ));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let host = format!("127.0.0.1:{port}");
        std::fs::write(
            d.join("config.yml"),
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {d}/data}}}}\nhttp:\n  addr: {host}\n  tls: {{certificate: {d}/tls.crt, key: {d}/tls.key}}\n",
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
        let ca = pki.join("ca.crt").to_str().unwrap().to_owned();
        Self {
            server,
            host,
            ca,
            dir,
        }
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
