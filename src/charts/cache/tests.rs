//! Tests of the chart cache: repository indexes, the archive store and OCI pulls.

use super::*;
use crate::charts::fetch;
use crate::charts::fetch::testing::{Answer, Server};
use crate::policy::access::Credentials;
use crate::policy::source;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// A loopback repository at `/repo`, counting the requests of each path.
struct Repo {
    server: Server,
    url: String,
    /// The repository itself, as the prefix its fetches stay under.
    scope: SourceUrl,
}

impl Repo {
    async fn serve(files: Vec<(&str, Vec<u8>)>) -> Self {
        let answers = files
            .into_iter()
            .map(|(p, b)| (p.to_owned(), Answer::Body(b)));
        Self::answering(|_| answers.collect()).await
    }

    /// An index of chart `web` 1.0.0 whose archive `missing.tgz` is not served.
    async fn without_archives() -> Self {
        let index = index(&[("1.0.0", "missing.tgz", b"x")]);
        Self::serve(vec![("/repo/index.yaml", index)]).await
    }

    /// Serves what `answers` gives for the server's origin (`http://127.0.0.1:PORT`).
    async fn answering(answers: impl FnOnce(&str) -> Vec<(String, Answer)>) -> Self {
        let server = Server::serve_with(answers).await;
        let url = format!("{}/repo", server.origin);
        let scope = SourceUrl::parse(&url).unwrap();
        Self { server, url, scope }
    }

    fn hits(&self, path: &str) -> usize {
        self.server.hits(path)
    }

    /// Why resolving its chart `web` from `url` (`/repo` itself when None), under the
    /// repository's scope, fails.
    async fn failure(&self, cache: &ChartCache, url: Option<&str>) -> Error {
        let url = url.unwrap_or(&self.url);
        cache
            .repository(url, "web", None, &self.scope, &Credentials::None, None)
            .await
            .expect_err("the resolution fails")
    }
}

fn sha(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// An index of chart `web` at each (version, archive URL, archive content).
fn index(versions: &[(&str, &str, &[u8])]) -> Vec<u8> {
    let mut text = String::from("apiVersion: v1\nentries:\n  web:\n");
    for (version, url, content) in versions {
        text.push_str(&format!(
                "  - apiVersion: v2\n    name: web\n    description: a chart\n    created: \"2026-01-01T00:00:00Z\"\n    version: {version}\n    digest: {}\n    urls:\n    - \"{url}\"\n",
                sha(content)
            ));
    }
    text.push_str("generated: \"2026-01-01T00:00:00Z\"\n");
    text.into_bytes()
}

fn open(dir: &Path, limit: u64) -> (ChartCache, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let cache = ChartCache::open(dir, limit, "helm".into(), metrics.clone()).unwrap();
    (cache, metrics)
}

/// An empty cache in a directory of its own, kept while the directory lives.
fn fresh() -> (tempfile::TempDir, ChartCache) {
    let dir = tempfile::tempdir().unwrap();
    let (cache, _) = open(dir.path(), DEFAULT_SIZE);
    (dir, cache)
}

fn metric(metrics: &Metrics, series: &str) -> f64 {
    metrics
        .render(&Default::default())
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series}"))
}

fn repository_source(repo: &Repo) -> ChartSource {
    ChartSource::Repository {
        url: repo.url.clone(),
        chart: "web".into(),
    }
}

/// The names of the files in a directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn an_index_and_an_archive_are_fetched_once_for_every_resolution_and_install() {
    let archive = b"the 1.1.0 archive".to_vec();
    let index = index(&[
        ("1.0.0", "charts/web-1.0.0.tgz", b"old"),
        ("1.1.0", "charts/web-1.1.0.tgz", &archive),
    ]);
    let index_size = index.len();
    let repo = Repo::serve(vec![
        ("/repo/index.yaml", index),
        ("/repo/charts/web-1.1.0.tgz", archive.clone()),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (cache, metrics) = open(dir.path(), DEFAULT_SIZE);
    for constraint in [None, Some("^1"), Some(">=1.1.0 <2")] {
        let resolved = cache
            .repository(
                &repo.url,
                "web",
                constraint,
                &repo.scope,
                &Credentials::None,
                None,
            )
            .await
            .unwrap();
        assert_eq!(resolved.version, "1.1.0");
        assert_eq!(resolved.digest, None);
    }
    assert_eq!(repo.hits("/repo/index.yaml"), 1);
    assert_eq!(repo.hits("/repo/charts/web-1.1.0.tgz"), 1);
    assert_eq!(repo.hits("/repo/charts/web-1.0.0.tgz"), 0);

    let source = repository_source(&repo);
    let checkouts: Vec<Checkout> = (0..30)
        .map(|_| {
            cache
                .checkout(&source, &Credentials::None, Some("1.1.0"), None)
                .expect("cached")
        })
        .collect();
    assert_eq!(std::fs::read(checkouts[0].path()).unwrap(), archive);
    assert_eq!(
        checkouts[0].path(),
        dir.path().join(format!("{}.tgz", sha(&archive)))
    );
    assert!(
        cache
            .checkout(&source, &Credentials::None, Some("1.0.0"), None)
            .is_none(),
        "never fetched"
    );
    assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_hits_total"), 32.0);
    assert_eq!(
        metric(&metrics, "tenancy_hub_chart_cache_misses_total"),
        2.0
    );
    assert_eq!(
        metric(
            &metrics,
            "tenancy_hub_chart_fetched_bytes_total{kind=\"index\"}"
        ),
        index_size as f64
    );
    assert_eq!(
        metric(
            &metrics,
            "tenancy_hub_chart_fetched_bytes_total{kind=\"archive\"}"
        ),
        archive.len() as f64
    );
    assert_eq!(
        metric(&metrics, "tenancy_hub_chart_cache_bytes"),
        archive.len() as f64
    );
}

#[tokio::test]
async fn an_index_fetched_before_since_is_fetched_again_and_a_kept_archive_is_not() {
    let archive = b"archive".to_vec();
    let repo = Repo::serve(vec![
        ("/repo/index.yaml", index(&[("1.0.0", "web.tgz", &archive)])),
        ("/repo/web.tgz", archive),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (cache, _) = open(dir.path(), DEFAULT_SIZE);
    web_of(&cache, &repo, None).await.unwrap();
    let since = Instant::now();
    web_of(&cache, &repo, Some(since)).await.unwrap();
    web_of(&cache, &repo, Some(since)).await.unwrap();
    assert_eq!(repo.hits("/repo/index.yaml"), 2, "once per `since`");
    assert_eq!(repo.hits("/repo/web.tgz"), 1);

    let (reopened, metrics) = open(dir.path(), DEFAULT_SIZE);
    web_of(&reopened, &repo, None).await.unwrap();
    assert_eq!(
        repo.hits("/repo/web.tgz"),
        1,
        "an archive kept on disk is found by the index digest after a restart"
    );
    assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_hits_total"), 1.0);
}

#[tokio::test]
async fn an_archive_whose_digest_differs_from_the_index_is_refused_and_not_kept() {
    let repo = Repo::serve(vec![
        (
            "/repo/index.yaml",
            index(&[("1.0.0", "web.tgz", b"what was published")]),
        ),
        ("/repo/web.tgz", b"what is served now".to_vec()),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (cache, _) = open(dir.path(), DEFAULT_SIZE);
    assert_eq!(
        repo.failure(&cache, None).await.to_string(),
        format!(
            "chart web version 1.0.0 from {}: digest mismatch, expected {}, got {}; the repository changed the archive",
            repo.url,
            sha(b"what was published"),
            sha(b"what is served now")
        )
    );
    assert!(names(dir.path()).is_empty(), "{:?}", names(dir.path()));
    assert!(
        cache
            .checkout(
                &repository_source(&repo),
                &Credentials::None,
                Some("1.0.0"),
                None
            )
            .is_none()
    );
}

#[tokio::test]
async fn an_archive_that_cannot_be_fetched_fails_the_resolution_for_helm_never_fetches_one() {
    let repo = Repo::without_archives().await;
    let dir = tempfile::tempdir().unwrap();
    let (cache, metrics) = open(dir.path(), DEFAULT_SIZE);
    assert_eq!(
        repo.failure(&cache, None).await.to_string(),
        format!("{}/missing.tgz answered 404 Not Found", repo.url)
    );
    assert!(
        cache
            .checkout(
                &repository_source(&repo),
                &Credentials::None,
                Some("1.0.0"),
                None
            )
            .is_none()
    );
    assert_eq!(
        metric(&metrics, "tenancy_hub_chart_cache_misses_total"),
        2.0
    );
    assert!(names(dir.path()).is_empty());
}

#[tokio::test]
async fn an_archive_the_index_puts_outside_the_scope_is_refused_and_never_requested() {
    let outside: [fn(&str) -> String; 4] = [
        |origin| format!("{origin}/team-x/web-1.0.0.tgz"),
        |_| "../team-x/web-1.0.0.tgz".into(),
        |_| "%2e%2e/team-x/web-1.0.0.tgz".into(),
        |_| "http://169.254.169.254/latest/meta-data/".into(),
    ];
    for archive in outside {
        let repo = Repo::answering(|origin| {
            let index = index(&[("1.0.0", &archive(origin), b"x")]);
            vec![
                ("/repo/index.yaml".into(), Answer::Body(index)),
                ("/team-x/web-1.0.0.tgz".into(), Answer::Body(b"x".to_vec())),
            ]
        })
        .await;
        let (_dir, cache) = fresh();
        let error = repo.failure(&cache, None).await.to_string();
        let starts = format!(
            "chart web version 1.0.0: the index of {} lists its archive at ",
            repo.url
        );
        assert!(error.starts_with(&starts), "{error}");
        let outside = format!(", outside the chartSources prefix {}", repo.url);
        assert!(error.contains(&outside), "{error}");
        assert_eq!(repo.hits("/repo/index.yaml"), 1);
        assert_eq!(repo.hits("/team-x/web-1.0.0.tgz"), 0, "{error}");
    }
}

#[tokio::test]
async fn an_index_that_does_not_parse_says_where_and_never_what_it_holds() {
    let bad_digest = String::from_utf8(index(&[("1.0.0", "web.tgz", b"x")]))
        .unwrap()
        .replace(&sha(b"x"), "the-body-text");
    let repo = Repo::serve(vec![
        (
            "/repo/index.yaml",
            b"entries:\n  web: the-body-text".to_vec(),
        ),
        ("/repo/bad-digest/index.yaml", bad_digest.into_bytes()),
    ])
    .await;
    let (_dir, cache) = fresh();
    assert_eq!(
        repo.failure(&cache, None).await.to_string(),
        format!(
            "{}/index.yaml is not a Helm repository index: YAML error at line 2, column 8",
            repo.url
        )
    );
    let bad_digest = format!("{}/bad-digest", repo.url);
    let error = repo.failure(&cache, Some(&bad_digest)).await.to_string();
    assert!(error.contains("is not a sha256"), "{error}");
    assert!(!error.contains("the-body-text"), "{error}");
}

#[tokio::test]
async fn an_index_is_kept_by_its_normal_url_and_a_query_makes_no_new_one() {
    let repo = Repo::without_archives().await;
    let (_dir, cache) = fresh();
    let origin = repo.url.trim_end_matches("/repo").to_uppercase();
    for url in [
        repo.url.clone(),
        format!("{}/", repo.url),
        format!("{origin}/./repo"),
        format!("{origin}/x/../repo/"),
    ] {
        let _ = cache
            .repository(&url, "web", None, &repo.scope, &Credentials::None, None)
            .await;
    }
    for query in ["?x=1", "?x=2", "#x"] {
        let url = format!("{}{query}", repo.url);
        let error = repo.failure(&cache, Some(&url)).await;
        assert!(matches!(error, Error::Source { .. }), "{error}");
    }
    assert_eq!(repo.hits("/repo/index.yaml"), 1);
    assert_eq!(cache.indexes.len(), 1);
}

#[tokio::test]
async fn an_index_over_the_limit_is_refused() {
    let repo = Repo::serve(vec![("/repo/index.yaml", vec![b'#'; 4096])]).await;
    let (_dir, cache) = fresh();
    let error = repo.failure(&cache.with_index_limit(1024), None).await;
    assert!(
        matches!(error, Error::Fetch(fetch::Error::TooLarge { .. })),
        "{error}"
    );
}

#[tokio::test]
async fn missing_charts_versions_and_repositories_say_which() {
    let repo = Repo::serve(vec![(
        "/repo/index.yaml",
        index(&[("1.0.0", "web.tgz", b"x")]),
    )])
    .await;
    let (_dir, cache) = fresh();
    let error = |chart: &'static str, constraint: Option<&'static str>| {
        let (cache, url, scope) = (&cache, repo.url.clone(), repo.scope.clone());
        async move {
            cache
                .repository(&url, chart, constraint, &scope, &Credentials::None, None)
                .await
                .unwrap_err()
                .to_string()
        }
    };
    assert_eq!(
        error("db", None).await,
        format!("chart db not found in the repository {}", repo.url)
    );
    assert_eq!(
        error("web", Some(">=2")).await,
        format!(
            "no version of chart web in the repository {} matches >=2",
            repo.url
        )
    );
    assert!(
        error("web", Some(">>2"))
            .await
            .contains("invalid version constraint")
    );
    let gone = format!("{}/elsewhere", repo.url);
    let message = cache
        .repository(&gone, "web", None, &repo.scope, &Credentials::None, None)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(message, format!("{gone}/index.yaml answered 404 Not Found"));
}

/// Puts `content` in the cache as an archive of chart `web` from `url` at `version`.
fn stock(cache: &ChartCache, url: &str, version: &str, content: &[u8]) -> String {
    let digest = sha(content);
    let partial = cache.dir().join(format!("{PARTIAL}{version}"));
    std::fs::write(&partial, content).unwrap();
    cache
        .store
        .keep(&partial, &digest, content.len() as u64)
        .unwrap();
    let source = ChartSource::Repository {
        url: url.into(),
        chart: "web".into(),
    };
    cache
        .store
        .state()
        .pins
        .insert((source, Credentials::None, version.into()), digest.clone());
    digest
}

#[test]
fn the_least_recently_used_archives_go_first_and_never_one_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, metrics) = open(dir.path(), 30);
    let url = "https://charts.example.com";
    let source = ChartSource::Repository {
        url: url.into(),
        chart: "web".into(),
    };
    let a = stock(&cache, url, "1", &[b'a'; 10]);
    let b = stock(&cache, url, "2", &[b'b'; 10]);
    let in_use = cache
        .checkout(&source, &Credentials::None, Some("1"), None)
        .expect("kept");
    stock(&cache, url, "3", &[b'c'; 10]);
    drop(
        cache
            .checkout(&source, &Credentials::None, Some("2"), None)
            .expect("kept"),
    );
    stock(&cache, url, "4", &[b'd'; 10]);
    assert!(
        dir.path().join(format!("{a}.tgz")).is_file(),
        "the oldest is in use"
    );
    assert!(
        cache
            .checkout(&source, &Credentials::None, Some("3"), None)
            .is_none(),
        "the least recently used of the others went"
    );
    assert!(dir.path().join(format!("{b}.tgz")).is_file());
    assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_bytes"), 30.0);

    drop(in_use);
    stock(&cache, url, "5", &[b'e'; 10]);
    assert!(
        !dir.path().join(format!("{a}.tgz")).exists(),
        "released, the oldest goes first"
    );
    assert!(dir.path().join(format!("{b}.tgz")).is_file());
    assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_bytes"), 30.0);
}

#[test]
fn on_start_archives_are_verified_by_name_and_partial_files_removed() {
    let dir = tempfile::tempdir().unwrap();
    let good = format!("{}.tgz", sha(b"good"));
    std::fs::write(dir.path().join(&good), b"good").unwrap();
    let corrupt = format!("{}.tgz", sha(b"what it was"));
    std::fs::write(dir.path().join(&corrupt), b"half of wh").unwrap();
    std::fs::write(dir.path().join(".partial-abc"), b"a crash left this").unwrap();
    std::fs::create_dir(dir.path().join(".partial-pull")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"not ours").unwrap();
    let (_, metrics) = open(dir.path(), DEFAULT_SIZE);
    assert_eq!(names(dir.path()), [good, "notes.txt".to_owned()]);
    assert_eq!(metric(&metrics, "tenancy_hub_chart_cache_bytes"), 4.0);
}

#[test]
fn a_cache_over_its_bound_on_start_keeps_the_most_recently_written() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join(format!("{}.tgz", sha(b"old archive")));
    std::fs::write(&old, b"old archive").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&old)
        .unwrap()
        .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1))
        .unwrap();
    let new = format!("{}.tgz", sha(b"new archive"));
    std::fs::write(dir.path().join(&new), b"new archive").unwrap();
    open(dir.path(), 15);
    assert_eq!(names(dir.path()), [new]);
}

#[test]
fn archive_urls_are_joined_to_the_repository_as_helm_joins_them() {
    let join = |repo: &str, reference: &str| {
        let repo = SourceUrl::parse(repo).unwrap();
        source::follow(&archive_base(&repo).unwrap(), reference, &repo).map(String::from)
    };
    assert_eq!(
        join("https://charts.example.com/stable", "web-1.0.0.tgz").unwrap(),
        "https://charts.example.com/stable/web-1.0.0.tgz"
    );
    assert_eq!(
        join("https://charts.example.com/stable/", "charts/web-1.0.0.tgz").unwrap(),
        "https://charts.example.com/stable/charts/web-1.0.0.tgz"
    );
    assert_eq!(
        join(
            "https://charts.example.com",
            "https://CHARTS.example.com/web.tgz"
        )
        .unwrap(),
        "https://charts.example.com/web.tgz"
    );
    assert!(join("https://charts.example.com/stable", "/other/web.tgz").is_err());
    assert!(
        join(
            "https://charts.example.com",
            "https://cdn.example.net/web.tgz"
        )
        .is_err()
    );
    let index = |repo: &str| index_url(&SourceUrl::parse(repo).unwrap()).unwrap();
    assert_eq!(
        index("https://charts.example.com/stable/").as_str(),
        "https://charts.example.com/stable/index.yaml"
    );
    assert_eq!(
        index("http://127.0.0.1:8080").as_str(),
        "http://127.0.0.1:8080/index.yaml"
    );
}

#[test]
fn an_index_is_read_for_versions_archive_urls_and_digests_only() {
    let url = Url::parse("https://charts.example.com/index.yaml").unwrap();
    let text = "apiVersion: v1\nentries:\n  web:\n  - name: web\n    version: 1.0.0\n    digest: sha256:ABC\n    urls: [web-1.0.0.tgz, https://mirror/web-1.0.0.tgz]\n    maintainers: [{name: x}]\n  db:\n  - version: 0.1.0\ngenerated: now\n";
    let index = parse_index(&url, text.as_bytes()).unwrap();
    let web = &index.entries["web"][0];
    assert_eq!(web.version, "1.0.0");
    assert_eq!(web.urls[0], "web-1.0.0.tgz");
    assert_eq!(web.digest.as_deref().and_then(normal_digest), None);
    let digest = format!("sha256:{}", "AB".repeat(32));
    assert_eq!(normal_digest(&digest), Some("ab".repeat(32)));
    assert!(index.entries["db"][0].urls.is_empty());
    let json = r#"{"apiVersion":"v1","entries":{"web":[{"version":"2.0.0","urls":["w.tgz"]}]}}"#;
    assert_eq!(
        parse_index(&url, json.as_bytes()).unwrap().entries["web"][0].version,
        "2.0.0"
    );
    let error = parse_index(&url, b"entries: [").unwrap_err().to_string();
    assert!(
            error.starts_with(
                "https://charts.example.com/index.yaml is not a Helm repository index: YAML error at line"
            ),
            "{error}"
        );
}

#[test]
fn helm_pull_arguments_keep_the_reference_after_a_double_dash() {
    let files = PullFiles {
        registry_config: "/cache/.partial-y/config.json".into(),
        ..PullFiles::default()
    };
    let args = pull_args(
        "oci://registry.example.com/charts/web",
        Some(">=0.1.0 <1.0.0"),
        Path::new("/cache/.partial-x"),
        &files,
    );
    assert_eq!(
        args,
        [
            "pull",
            "--destination=/cache/.partial-x",
            "--version=>=0.1.0 <1.0.0",
            "--registry-config=/cache/.partial-y/config.json",
            "--",
            "oci://registry.example.com/charts/web"
        ]
    );
    assert_eq!(
        pull_args("oci://r/web", None, Path::new("/d"), &files).len(),
        5
    );
}

#[test]
fn helm_pull_output_gives_the_manifest_digest() {
    let stderr = "Pulled: 127.0.0.1:5000/charts/deployment-example:0.2.0\nDigest: sha256:7086de44fdc4479d4ee397497c065215d6875fc8b81754aaefb53bc3e3691828\n";
    assert_eq!(
        parse_digest("", stderr).as_deref(),
        Some("sha256:7086de44fdc4479d4ee397497c065215d6875fc8b81754aaefb53bc3e3691828")
    );
    assert!(parse_digest(stderr, "").is_some(), "or on stdout");
    assert_eq!(parse_digest("", "Digest:\n"), None);
}

#[test]
fn the_version_of_an_archive_is_read_from_its_chart_yaml() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("web.tgz");
    let gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    let mut tar = tar::Builder::new(gz);
    for (name, content) in [
        ("web/templates/Chart.yaml", "version: 9.9.9\n"),
        (
            "web/Chart.yaml",
            "apiVersion: v2\nname: web\nversion: 0.3.0+build.1\n",
        ),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, content.as_bytes())
            .unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap();
    assert_eq!(archive_version(&path), Ok("0.3.0+build.1".into()));
    std::fs::write(&path, b"not gzip").unwrap();
    assert!(archive_version(&path).is_err());
}

/// Answers every read with one Secret, whatever its name, as the test last set it.
struct OneSecret(std::sync::Mutex<credentials::SecretData>);

impl credentials::ReadSecret for OneSecret {
    fn read<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<credentials::SecretData>, String>> {
        let data = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(Some(data)) })
    }

    fn labels<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<std::collections::BTreeMap<String, String>>, String>,
    > {
        Box::pin(async { Ok(Some(Default::default())) })
    }
}

fn basic(password: &str, version: &str) -> credentials::SecretData {
    credentials::SecretData {
        data: [("username", "u"), ("password", password)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.as_bytes().to_vec()))
            .collect(),
        version: version.into(),
    }
}

fn platform(prefix: &str) -> Credentials {
    Credentials::Platform {
        secret: "pull".into(),
        policy: "team-a".into(),
        prefix: prefix.into(),
    }
}

/// `Basic` of `u:pw`.
const AUTH: &str = "Basic dTpwdw==";

/// A repository whose index and archive answer only `AUTH`, whose `away` index redirects to
/// `other`, and a cache reading one Secret (`u`/`pw`, version 1) for any source.
async fn guarded(other: &str) -> (Repo, tempfile::TempDir, ChartCache, Arc<OneSecret>) {
    let archive = b"the archive".to_vec();
    let other = other.to_owned();
    let repo = Repo::answering(move |_| {
        vec![
            (
                "/repo/index.yaml".into(),
                Answer::Guarded(AUTH.into(), index(&[("1.0.0", "web.tgz", &archive)])),
            ),
            (
                "/repo/web.tgz".into(),
                Answer::Guarded(AUTH.into(), archive),
            ),
            (
                "/repo/away/index.yaml".into(),
                Answer::Redirect(format!("{other}/x/index.yaml")),
            ),
        ]
    })
    .await;
    let secret = Arc::new(OneSecret(std::sync::Mutex::new(basic("pw", "1"))));
    let dir = tempfile::tempdir().unwrap();
    let (cache, _) = open(dir.path(), DEFAULT_SIZE);
    let cache = cache.with_secrets(credentials::SourceSecrets {
        reader: secret.clone(),
        operator_namespace: "tenancy-hub".into(),
    });
    (repo, dir, cache, secret)
}

#[tokio::test]
async fn credentials_go_with_the_index_and_the_archive_and_never_to_another_host() {
    let other = Server::serve(vec![("/x/index.yaml", Answer::Body(b"x".to_vec()))]).await;
    let (repo, _dir, cache, _) = guarded(&other.origin).await;
    let with = platform(repo.scope.as_str());
    cache
        .repository(&repo.url, "web", None, &repo.scope, &with, None)
        .await
        .expect("resolved with the Secret's credentials");
    assert_eq!(
        repo.server.auths("/repo/index.yaml"),
        [Some(AUTH.to_owned())]
    );
    assert_eq!(repo.server.auths("/repo/web.tgz"), [Some(AUTH.to_owned())]);

    let away = format!("{}/away", repo.url);
    let error = cache
        .repository(&away, "web", None, &repo.scope, &with, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("outside the chartSources prefix"), "{error}");
    assert_eq!(
        other.hits("/x/index.yaml"),
        0,
        "never requested, so never sent"
    );
    assert!(!error.contains("pw"), "{error}");
}

#[tokio::test]
async fn what_one_set_of_credentials_fetched_is_never_served_to_another() {
    let (repo, _dir, cache, _) = guarded("http://127.0.0.1:9").await;
    let with = platform(repo.scope.as_str());
    let source = ChartSource::Repository {
        url: repo.url.clone(),
        chart: "web".into(),
    };
    cache
        .repository(&repo.url, "web", None, &repo.scope, &with, None)
        .await
        .unwrap();
    assert!(
        cache
            .checkout(&source, &with, Some("1.0.0"), None)
            .is_some()
    );
    let tenant = Credentials::Tenant {
        namespace: "team-b".into(),
        secret: "pull".into(),
        policy: "team-a".into(),
        prefix: repo.scope.to_string(),
        labels: Vec::new(),
    };
    for other in [&Credentials::None, &tenant] {
        assert!(
            cache
                .checkout(&source, other, Some("1.0.0"), None)
                .is_none(),
            "{other}: not its archive"
        );
    }
    let anonymous = web_of(&cache, &repo, None).await.unwrap_err().to_string();
    assert!(
        anonymous.contains(
            "/repo/index.yaml answered 401 Unauthorized; the source asks for credentials and none were given"
        ),
        "{anonymous}"
    );
    assert_eq!(
        repo.server.auths("/repo/index.yaml"),
        [Some(AUTH.to_owned()), None],
        "its own index, fetched without credentials"
    );
}

#[tokio::test]
async fn a_changed_secret_takes_effect_at_the_next_fetch() {
    let (repo, _dir, cache, secret) = guarded("http://127.0.0.1:9").await;
    let with = platform(repo.scope.as_str());
    cache
        .repository(&repo.url, "web", None, &repo.scope, &with, None)
        .await
        .unwrap();
    // The index fetched again now, as the next interval would.
    let fetch_again = || {
        cache.repository(
            &repo.url,
            "web",
            None,
            &repo.scope,
            &with,
            Some(Instant::now()),
        )
    };
    *secret.0.lock().unwrap() = basic("wrong-password", "2");
    let error = fetch_again().await.unwrap_err().to_string();
    assert!(
        error.contains("answered 401 Unauthorized; the source refused the credentials of Secret tenancy-hub/pull (TenancyPolicy team-a"),
        "{error}"
    );
    assert!(!error.contains("wrong-password"), "{error}");
    *secret.0.lock().unwrap() = basic("pw", "3");
    fetch_again().await.expect("the Secret put right");
    assert_eq!(repo.server.auths("/repo/index.yaml").len(), 3);
}

#[test]
fn oci_credentials_reach_helm_through_private_files_and_never_its_arguments() {
    use std::os::unix::fs::PermissionsExt as _;
    let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let key = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";
    let mut data = basic("s3cret-pa55", "1");
    for (k, v) in [("ca.crt", cert), ("tls.crt", cert), ("tls.key", key)] {
        data.data.insert(k.into(), v.as_bytes().to_vec());
    }
    let material = Material::parse(&data, true).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = PullFiles::write(dir.path(), Some(&material), "127.0.0.1:5000").unwrap();
    let (cert_file, key_file) = files.identity.clone().unwrap();
    let ca_file = files.ca.clone().unwrap();
    for path in [&files.registry_config, &ca_file, &cert_file, &key_file] {
        let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
    let config = std::fs::read_to_string(&files.registry_config).unwrap();
    let encoded =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "u:s3cret-pa55");
    assert!(config.contains(&encoded) && config.contains("127.0.0.1:5000"));
    let args = pull_args(
        "oci://127.0.0.1:5000/charts/web",
        None,
        Path::new("/d"),
        &files,
    );
    let argv = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        !argv.contains("s3cret-pa55") && !argv.contains(&encoded),
        "{argv}"
    );
    for flag in [
        format!("--registry-config={}", files.registry_config.display()),
        format!("--ca-file={}", ca_file.display()),
        format!("--cert-file={}", cert_file.display()),
        format!("--key-file={}", key_file.display()),
    ] {
        assert!(argv.contains(&flag), "{flag} in {argv}");
    }
    assert!(!argv.contains("--username") && !argv.contains("--password"));
    let anonymous = PullFiles::write(&dir.path().join("none"), None, "r").err();
    assert!(anonymous.is_some(), "a directory that is not there");
    std::fs::create_dir(dir.path().join("none")).unwrap();
    let anonymous = PullFiles::write(&dir.path().join("none"), None, "r").unwrap();
    assert_eq!(
        std::fs::read_to_string(anonymous.registry_config).unwrap(),
        r#"{"auths":{}}"#,
        "no fallback on a login of the operator's user"
    );
}

/// `web`'s newest version in `repo`, resolved by `cache` without credentials (the index fetched
/// again when older than `since`).
async fn web_of(cache: &ChartCache, repo: &Repo, since: Option<Instant>) -> Result<Resolved> {
    cache
        .repository(
            &repo.url,
            "web",
            None,
            &repo.scope,
            &Credentials::None,
            since,
        )
        .await
}

#[tokio::test]
async fn a_source_that_never_finishes_its_tls_handshake_fails_within_the_connect_bound_and_delays_no_other()
 {
    // Accepts every connection and holds it, answering nothing: a TLS handshake that never ends.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow = format!("https://{}/repo", listener.local_addr().unwrap());
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let archive = b"the 1.0.0 archive".to_vec();
    let repo = Repo::serve(vec![
        (
            "/repo/index.yaml",
            index(&[("1.0.0", "web-1.0.0.tgz", &archive)]),
        ),
        ("/repo/web-1.0.0.tgz", archive),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (cache, _) = open(dir.path(), DEFAULT_SIZE);
    let scope = SourceUrl::parse(&slow).unwrap();
    let started = Instant::now();
    let stalled = async {
        let failed = cache
            .repository(&slow, "web", None, &scope, &Credentials::None, None)
            .await;
        (failed, started.elapsed())
    };
    let other = async {
        let resolved = web_of(&cache, &repo, None).await;
        (resolved, started.elapsed())
    };
    let ((failed, stalled_for), (resolved, other_took)) = tokio::join!(stalled, other);
    assert_eq!(
        resolved.expect("the other source resolves").version,
        "1.0.0"
    );
    assert!(
        other_took < Duration::from_secs(5),
        "the other source waited {other_took:?}"
    );
    let error = failed.expect_err("the stalled source fails").to_string();
    assert!(
        error.contains(&format!("fetching {slow}/index.yaml")),
        "{error}"
    );
    assert!(
        (CONNECT_BOUND..CONNECT_BOUND + Duration::from_secs(10)).contains(&stalled_for),
        "bounded by the connect timeout: {stalled_for:?} ({error})"
    );
    holder.abort();
}

/// The connect timeout of the chart cache's client (TCP and TLS handshake).
const CONNECT_BOUND: Duration = Duration::from_secs(10);
