//! Tests of the chart catalog: resolution and keeping charts fresh.

use super::*;
use crate::api::crd::{Chart, Tenancy};
use crate::policy::access::Credentials;
use futures::future::BoxFuture;

fn spec(chart: &str) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![Tenancy {
            namespace: "a".into(),
            charts: vec![Chart {
                chart_name: chart.into(),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

const HOUR: Duration = Duration::from_secs(3600);

/// The prefix every test chart is fetched under.
const SCOPE: &str = "https://charts.example.com/";

/// Lets the hub fetch every chart, under [`SCOPE`].
fn anywhere(_: &Chart) -> Option<Scope> {
    Some(Scope::Under(
        SourceUrl::parse(SCOPE).unwrap(),
        Credentials::None,
        Trust::default(),
    ))
}

/// Answers resolutions from a script, after a pause, counting the calls.
#[derive(Default)]
struct Script {
    answers: Mutex<Vec<Result<Resolved, String>>>,
    calls: std::sync::atomic::AtomicUsize,
    /// The `since` of each resolution, in order.
    sinces: Mutex<Vec<Option<Instant>>>,
}

impl Script {
    fn answering(answers: &[Result<&str, &str>]) -> Arc<Self> {
        let answers = answers
            .iter()
            .rev()
            .map(|a| {
                a.map(|v| Resolved {
                    version: v.into(),
                    ..Default::default()
                })
                .map_err(str::to_owned)
            })
            .collect();
        Arc::new(Self {
            answers: Mutex::new(answers),
            calls: Default::default(),
            sinces: Default::default(),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Resolve for Arc<Script> {
    fn resolve<'a>(
        &'a self,
        _: &'a RemoteKey,
        _: &'a SourceUrl,
        since: Option<Instant>,
    ) -> BoxFuture<'a, Result<Resolved, String>> {
        Box::pin(async move {
            self.sinces.lock().unwrap().push(since);
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut answers = self.answers.lock().unwrap();
            if answers.len() > 1 {
                answers.pop().unwrap()
            } else {
                answers[0].clone()
            }
        })
    }
}

impl Resolve for Script {
    fn resolve<'a>(
        &'a self,
        _: &'a RemoteKey,
        _: &'a SourceUrl,
        _: Option<Instant>,
    ) -> BoxFuture<'a, Result<Resolved, String>> {
        Box::pin(async { Err("no resolver in this test".to_owned()) })
    }
}

fn repo_spec(version: Option<&str>) -> ControllerSpec {
    let mut spec = spec("web");
    let chart = &mut spec.tenancies[0].charts[0];
    chart.repo = Some("https://user:secret@charts.example.com/stable".into());
    chart.version = version.map(str::to_owned);
    spec
}

fn repo_source() -> ChartSource {
    ChartSource::Repository {
        url: "https://user:secret@charts.example.com/stable".into(),
        chart: "web".into(),
    }
}

fn version_of(catalog: &ChartCatalog, constraint: Option<&str>) -> Result<String, String> {
    match catalog.lookup(
        "",
        &repo_source(),
        &Credentials::None,
        &Trust::default(),
        constraint,
    ) {
        ChartLookup::Found { version, .. } => Ok(version.expect("a resolved version")),
        ChartLookup::Missing(reason) | ChartLookup::Unverified(reason) => Err(reason),
    }
}

fn digest_of(catalog: &ChartCatalog, path: &Path) -> Option<String> {
    match catalog.lookup(
        "",
        &ChartSource::Directory(path.to_owned()),
        &Credentials::None,
        &Trust::default(),
        None,
    ) {
        ChartLookup::Found { digest, .. } => digest,
        ChartLookup::Missing(_) | ChartLookup::Unverified(_) => None,
    }
}

#[tokio::test]
async fn a_chart_directory_digest_follows_its_content_not_its_place() {
    let home = tempfile::tempdir().unwrap();
    let chart = home.path().join("web");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(chart.join("Chart.yaml"), "name: web\nversion: 0.1.0\n").unwrap();
    std::fs::write(chart.join("templates/cm.yaml"), "kind: ConfigMap\n").unwrap();
    let catalog = ChartCatalog::with_resolver(Box::new(Script::default()), HOUR);
    catalog
        .prepare("", &spec("web"), home.path(), &anywhere)
        .await;
    let first = digest_of(&catalog, &chart).expect("found");

    std::fs::write(
        chart.join("templates/cm.yaml"),
        "kind: ConfigMap # changed\n",
    )
    .unwrap();
    catalog
        .prepare("", &spec("web"), home.path(), &anywhere)
        .await;
    let changed = digest_of(&catalog, &chart).expect("found");
    assert_ne!(first, changed, "same name and version, new content");

    let other = tempfile::tempdir().unwrap();
    let copy = other.path().join("web");
    std::fs::create_dir_all(copy.join("templates")).unwrap();
    for f in ["Chart.yaml", "templates/cm.yaml"] {
        std::fs::copy(chart.join(f), copy.join(f)).unwrap();
    }
    catalog
        .prepare("", &spec("web"), other.path(), &anywhere)
        .await;
    assert_eq!(digest_of(&catalog, &copy), Some(changed));
}

#[tokio::test]
async fn a_directory_without_chart_yaml_is_missing_and_says_where_it_was_looked_for() {
    let home = tempfile::tempdir().unwrap();
    let catalog = ChartCatalog::with_resolver(Box::new(Script::default()), HOUR);
    catalog
        .prepare("", &spec("nothing"), home.path(), &anywhere)
        .await;
    let ChartLookup::Missing(reason) = catalog.lookup(
        "",
        &ChartSource::Directory(home.path().join("nothing")),
        &Credentials::None,
        &Trust::default(),
        None,
    ) else {
        panic!("a missing chart is found");
    };
    assert!(
        reason.contains("nothing") && reason.contains("--chart-home"),
        "{reason}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_resolution_is_reused_within_the_interval_and_renewed_after_it() {
    let script = Script::answering(&[Ok("1.0.0"), Ok("1.1.0")]);
    let catalog = ChartCatalog::with_resolver(Box::new(script.clone()), HOUR);
    catalog
        .prepare("", &repo_spec(None), Path::new("/charts"), &anywhere)
        .await;
    assert_eq!(version_of(&catalog, None), Ok("1.0.0".into()));
    tokio::time::advance(HOUR / 2).await;
    catalog
        .prepare("", &repo_spec(None), Path::new("/charts"), &anywhere)
        .await;
    assert_eq!(script.calls(), 1, "a fresh resolution is not repeated");
    tokio::time::advance(HOUR).await;
    catalog
        .prepare("", &repo_spec(None), Path::new("/charts"), &anywhere)
        .await;
    assert_eq!(script.calls(), 2);
    assert_eq!(version_of(&catalog, None), Ok("1.1.0".into()));
}

#[tokio::test(start_paused = true)]
async fn a_new_scope_resolves_again_and_what_the_old_one_resolved_no_longer_counts() {
    let script = Script::answering(&[Ok("1.0.0"), Err("outside the chartSources prefix")]);
    let catalog = ChartCatalog::with_resolver(Box::new(script.clone()), HOUR);
    let home = Path::new("/charts");
    catalog.prepare("", &repo_spec(None), home, &anywhere).await;
    assert_eq!(version_of(&catalog, None), Ok("1.0.0".into()));
    let narrower = |_: &Chart| {
        let prefix = SourceUrl::parse("https://charts.example.com/stable").unwrap();
        Some(Scope::Under(prefix, Credentials::None, Trust::default()))
    };
    catalog.prepare("", &repo_spec(None), home, &narrower).await;
    assert_eq!(
        script.calls(),
        2,
        "within the interval, but under another scope"
    );
    let reason = version_of(&catalog, None).unwrap_err();
    assert!(
        reason.contains("outside the chartSources prefix"),
        "{reason}"
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_prepares_of_one_chart_run_helm_once() {
    let script = Script::answering(&[Ok("1.0.0")]);
    let catalog = ChartCatalog::with_resolver(Box::new(script.clone()), HOUR);
    let spec = repo_spec(Some("^1"));
    let home = Path::new("/charts");
    tokio::join!(
        catalog.prepare("", &spec, home, &anywhere),
        catalog.prepare("", &spec, home, &anywhere),
        catalog.prepare("", &spec, home, &anywhere)
    );
    assert_eq!(script.calls(), 1);
    assert_eq!(version_of(&catalog, Some("^1")), Ok("1.0.0".into()));
    assert!(
        version_of(&catalog, None).is_err(),
        "another constraint is another entry"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_resolution_keeps_the_last_good_version_and_without_one_says_why() {
    let script = Script::answering(&[Ok("1.0.0"), Err("connection refused")]);
    let catalog = ChartCatalog::with_resolver(Box::new(script.clone()), HOUR);
    let home = Path::new("/charts");
    catalog
        .prepare("", &repo_spec(Some(">=1")), home, &anywhere)
        .await;
    tokio::time::advance(HOUR).await;
    catalog
        .prepare("", &repo_spec(Some(">=1")), home, &anywhere)
        .await;
    assert_eq!(script.calls(), 2);
    assert_eq!(version_of(&catalog, Some(">=1")), Ok("1.0.0".into()));

    let failing = Script::answering(&[Err(
        "chart \"web\" not found in https://user:secret@charts.example.com/stable repository",
    )]);
    let catalog = ChartCatalog::with_resolver(Box::new(failing), HOUR);
    catalog
        .prepare("", &repo_spec(Some(">=1")), home, &anywhere)
        .await;
    let reason = version_of(&catalog, Some(">=1")).unwrap_err();
    assert_eq!(
        reason,
        "cannot resolve chart web version >=1 from https://charts.example.com/stable: chart \"web\" not found in https://charts.example.com/stable repository; check repo/version"
    );
}

#[tokio::test(start_paused = true)]
async fn a_refresh_tells_which_charts_changed_and_forgets_charts_no_spec_names() {
    let script = Script::answering(&[Ok("1.0.0"), Ok("1.0.0"), Ok("1.1.0")]);
    let catalog = ChartCatalog::with_resolver(Box::new(script.clone()), HOUR);
    let home = Path::new("/charts");
    catalog.prepare("", &repo_spec(None), home, &anywhere).await;
    let wanted = wanted_by("", &repo_spec(None), home, &anywhere);
    assert!(
        catalog.refresh(&wanted).await.is_empty(),
        "the same version is no change"
    );
    assert_eq!(script.calls(), 2, "a refresh resolves again, however fresh");
    assert_eq!(catalog.refresh(&wanted).await, wanted);
    assert_eq!(version_of(&catalog, None), Ok("1.1.0".into()));

    catalog.refresh(&HashSet::new()).await;
    assert!(
        version_of(&catalog, None).is_ok(),
        "a chart named within the interval is kept"
    );
    tokio::time::advance(HOUR).await;
    catalog.refresh(&HashSet::new()).await;
    assert!(
        version_of(&catalog, None).is_err(),
        "an unused chart is forgotten"
    );
}

#[tokio::test]
async fn a_refresh_finds_a_chart_home_template_changed_under_the_same_version() {
    let home = tempfile::tempdir().unwrap();
    let chart = home.path().join("web");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(chart.join("Chart.yaml"), "name: web\nversion: 0.1.0\n").unwrap();
    std::fs::write(chart.join("templates/cm.yaml"), "kind: ConfigMap\n").unwrap();
    let catalog = ChartCatalog::with_resolver(Box::new(Script::default()), HOUR);
    catalog
        .prepare("", &spec("web"), home.path(), &anywhere)
        .await;
    let wanted = wanted_by("", &spec("web"), home.path(), &anywhere);
    assert!(catalog.refresh(&wanted).await.is_empty());
    std::fs::write(chart.join("templates/cm.yaml"), "kind: ConfigMap # v2\n").unwrap();
    assert_eq!(catalog.refresh(&wanted).await, wanted);
}

#[tokio::test(start_paused = true)]
async fn a_prepare_takes_an_index_younger_than_the_interval_and_a_refresh_one_fetched_since_it_began()
 {
    let script = Script::answering(&[Ok("1.0.0")]);
    let catalog = ChartCatalog::with_resolver(Box::new(script.clone()), HOUR);
    let home = Path::new("/charts");
    tokio::time::advance(2 * HOUR).await;
    let prepared = Instant::now();
    catalog.prepare("", &repo_spec(None), home, &anywhere).await;
    let refreshed = Instant::now();
    catalog
        .refresh(&wanted_by("", &repo_spec(None), home, &anywhere))
        .await;
    assert_eq!(
        *script.sinces.lock().unwrap(),
        [Some(prepared - HOUR), Some(refreshed)]
    );
}

/// Resolves every chart to one archive and answers each signature check from a script.
struct Signed {
    verdicts: Mutex<Vec<Result<Checked, String>>>,
    checks: std::sync::atomic::AtomicUsize,
}

impl Signed {
    fn answering(verdicts: Vec<Result<Checked, String>>) -> Self {
        Self {
            verdicts: Mutex::new(verdicts.into_iter().rev().collect()),
            checks: Default::default(),
        }
    }
}

impl Resolve for Signed {
    fn resolve<'a>(
        &'a self,
        _: &'a RemoteKey,
        _: &'a SourceUrl,
        _: Option<Instant>,
    ) -> BoxFuture<'a, Result<Resolved, String>> {
        Box::pin(async {
            Ok(Resolved {
                version: "1.0.0".into(),
                archive: Some("ab".repeat(32)),
                ..Default::default()
            })
        })
    }

    fn verify<'a>(
        &'a self,
        key: &'a RemoteKey,
        _: &'a SourceUrl,
        _: &'a Resolved,
    ) -> BoxFuture<'a, Result<Checked, String>> {
        assert!(!key.trust.is_empty(), "only keys with rules are checked");
        self.checks
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut verdicts = self.verdicts.lock().unwrap();
        let next = if verdicts.len() > 1 {
            verdicts.pop().unwrap()
        } else {
            verdicts[0].clone()
        };
        Box::pin(async move { next })
    }
}

/// A cosign rule of policy `platform` for the test prefix.
fn cosign_rule() -> Trust {
    Trust {
        rules: vec![crate::policy::access::TrustRule {
            policy: "platform".into(),
            prefix: SCOPE.into(),
            verify: crate::api::policy::SourceVerify {
                provider: crate::api::policy::VerifyProvider::Cosign,
                secret_ref: crate::api::crd::SecretReference {
                    name: "keys".into(),
                },
                trusted_identities: Vec::new(),
                match_oidc_identity: Vec::new(),
                transparency_log: None,
            },
        }],
        tags: None,
    }
}

/// Lets the hub fetch every chart under [`SCOPE`], checked by [`cosign_rule`].
fn ruled(_: &Chart) -> Option<Scope> {
    Some(Scope::Under(
        SourceUrl::parse(SCOPE).unwrap(),
        Credentials::None,
        cosign_rule(),
    ))
}

fn signed_lookup(catalog: &ChartCatalog, trust: &Trust) -> ChartLookup {
    catalog.lookup("", &repo_source(), &Credentials::None, trust, Some("1.0.0"))
}

fn verified() -> Checked {
    Checked::Verified(Verified {
        by: "cosign: key sha256:12".into(),
        archive: "ab".repeat(32),
    })
}

#[tokio::test]
async fn a_chart_under_a_signature_rule_is_found_only_once_verified_and_then_by_its_archive() {
    let resolver = Signed::answering(vec![Ok(verified())]);
    let catalog = ChartCatalog::with_resolver(Box::new(resolver), HOUR);
    let home = Path::new("/charts");
    catalog
        .prepare("", &repo_spec(Some("1.0.0")), home, &ruled)
        .await;
    assert_eq!(
        signed_lookup(&catalog, &cosign_rule()),
        ChartLookup::Found {
            commit: None,
            version: Some("1.0.0".into()),
            digest: Some(format!("sha256:{}", "ab".repeat(32))),
            verified: Some(Verified {
                by: "cosign: key sha256:12".into(),
                archive: "ab".repeat(32),
            }),
        }
    );
    // The same chart asked for under no rule is another entry: never resolved here.
    assert!(matches!(
        signed_lookup(&catalog, &Trust::default()),
        ChartLookup::Missing(_)
    ));
}

#[tokio::test]
async fn a_refused_chart_is_unverified_and_an_unchecked_one_keeps_only_what_was_verified_before() {
    let resolver = Signed::answering(vec![
        Ok(verified()),
        Err("the registry did not answer".into()),
        Ok(Checked::Refused(
            "refused by cosign (TenancyPolicy platform, source https://charts.example.com/): no signature".into(),
        )),
        Err("the registry did not answer".into()),
    ]);
    let catalog = ChartCatalog::with_resolver(Box::new(resolver), Duration::ZERO);
    let home = Path::new("/charts");
    let spec = repo_spec(Some("1.0.0"));
    catalog.prepare("", &spec, home, &ruled).await;
    assert!(matches!(
        signed_lookup(&catalog, &cosign_rule()),
        ChartLookup::Found {
            verified: Some(_),
            ..
        }
    ));

    // Not checked this time, same content: the verdict reached before stands.
    catalog.prepare("", &spec, home, &ruled).await;
    assert!(matches!(
        signed_lookup(&catalog, &cosign_rule()),
        ChartLookup::Found {
            verified: Some(_),
            ..
        }
    ));

    // Refused: nothing is planned, not even what was verified before, and the rule is named.
    catalog.prepare("", &spec, home, &ruled).await;
    let ChartLookup::Unverified(why) = signed_lookup(&catalog, &cosign_rule()) else {
        panic!("a refused chart is unverified")
    };
    assert!(
        why.contains("refused by cosign (TenancyPolicy platform"),
        "{why}"
    );
    assert!(!why.contains("secret"), "no credentials of the URL: {why}");

    // Not checked, with nothing verified to keep: it waits, saying why.
    catalog.prepare("", &spec, home, &ruled).await;
    let ChartLookup::Unverified(why) = signed_lookup(&catalog, &cosign_rule()) else {
        panic!("an unchecked chart is unverified")
    };
    assert!(
        why.contains("cannot be checked: the registry did not answer"),
        "{why}"
    );
}

#[test]
fn a_git_chart_no_rule_covers_shows_who_signed_its_dependencies_with_the_archive_it_installs() {
    let packed = |signed_by: &[&str]| Resolved {
        version: "1.0.0".into(),
        archive: Some("a".repeat(64)),
        git: Some(crate::charts::common::GitFound {
            commit: "1".repeat(40),
            signed_by: signed_by.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }),
        ..Default::default()
    };

    let signed =
        super::signed_dependencies(&packed(&["dependency redis 18.1.0: cosign: key sha256:ab"]));
    let unsigned = super::signed_dependencies(&packed(&[]));
    let not_git = super::signed_dependencies(&Resolved {
        archive: Some("a".repeat(64)),
        ..Default::default()
    });

    assert_eq!(
        signed,
        Some(crate::plan::Verified {
            by: "dependency redis 18.1.0: cosign: key sha256:ab".into(),
            archive: "a".repeat(64),
        })
    );
    assert_eq!(unsigned, None, "nothing was checked");
    assert_eq!(not_git, None);
}
