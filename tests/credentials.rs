//! End-to-end tests of private chart sources: an OCI registry behind htpasswd and a Helm repository behind basic auth, both over TLS from a CA only their policy's Secret holds, delivered to a push and a pull member; refused where no policy gives the credentials; rotated without a restart; and their passwords nowhere else.

mod common;

use std::{
    collections::BTreeMap,
    io::Read as _,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

use base64::Engine as _;
use common::{
    agent::{deployed_revision, hub_cli, join},
    fixtures::{DEADLINE, chart, message, put_secret, ready, tenancy, unique, wait_until},
    hostile::{EndlessTokens, Stranger},
    hub::{Hub, allow_all},
    lab::Lab,
    repo::{ChartRepo, OciRegistry, PrivateCa, example_chart},
    tokens::TokenService,
};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret};
use kube::{Api, api::ListParams};
use tenancy_hub::api::{
    crd::{Chart, ControllerSpec, ControllerStatus, SecretReference, TenancyController},
    member_cluster::pull_namespace,
    policy::{SourceAccess, TenancyPolicySpec, TenantSecretRule},
};

/// One test at a time: each joins a pull member or starts sources of its own.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Charts are looked at again this often (seconds).
const INTERVAL: &str = "2";

/// The namespace the operator keeps its platform Secrets in (its `--lease-namespace`).
const OPERATOR_NAMESPACE: &str = "tenancy-hub";

/// A password no process list, log, status, Event or member may show.
fn password(what: &str) -> String {
    format!("{what}-{}-pw", unique("secret"))
}

/// Samples the command line of every process on the machine until stopped, keeping those
/// that show one of the passwords.
struct Sampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<String>>>,
    passwords: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<usize>>,
}

impl Sampler {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let passwords: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
        let (s, found, words) = (stop.clone(), seen.clone(), passwords.clone());
        let thread = std::thread::spawn(move || {
            let mut rounds = 0;
            while !s.load(Ordering::Relaxed) {
                rounds += 1;
                let words = words.lock().unwrap().clone();
                for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                    let Ok(bytes) = std::fs::read(entry.path().join("cmdline")) else {
                        continue;
                    };
                    let line = String::from_utf8_lossy(&bytes).replace('\0', " ");
                    if words.iter().any(|w| line.contains(w.as_str())) {
                        found.lock().unwrap().push(line);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            rounds
        });
        Self {
            stop,
            seen,
            passwords,
            thread: Some(thread),
        }
    }

    /// Looks for `password` from now on.
    fn watch(&self, password: &str) {
        self.passwords.lock().unwrap().push(password.to_owned());
    }

    /// Stops, asserting it sampled and no process showed a password.
    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let rounds = self.thread.take().unwrap().join().unwrap();
        assert!(rounds > 1, "the process lists were sampled");
        let seen = self.seen.lock().unwrap();
        assert!(seen.is_empty(), "a command line shows a password: {seen:?}");
    }
}

/// The sources of one test: a private registry and a private repository, each with the
/// example chart at 0.1.0, and the platform's Secret of each in the operator's namespace.
struct Sources {
    ca: PrivateCa,
    registry: OciRegistry,
    repo: ChartRepo,
    /// The platform Secrets' names: registry's, repository's.
    secrets: (String, String),
    /// The passwords now: registry's, repository's.
    passwords: (String, String),
}

const REGISTRY_USER: &str = "robot";
const REPO_USER: &str = "reader";

impl Sources {
    async fn start(lab: &Lab, sampler: &Sampler) -> Self {
        let ca = PrivateCa::new();
        let passwords = (password("registry"), password("repo"));
        sampler.watch(&passwords.0);
        sampler.watch(&passwords.1);
        let registry = OciRegistry::serve_private(lab, &ca, REGISTRY_USER, &passwords.0).await;
        registry.push(lab, &example_chart(), "0.1.0").await;
        let repo = ChartRepo::serve_private(lab, &["0.1.0"], &ca, REPO_USER, &passwords.1);
        repo.wait_ready().await;
        let secrets = (unique("registry-pull"), unique("repo-pull"));
        let sources = Self {
            ca,
            registry,
            repo,
            secrets,
            passwords,
        };
        sources.write_secrets(lab).await;
        sources
    }

    /// Writes the platform's Secrets with the passwords now.
    async fn write_secrets(&self, lab: &Lab) {
        let pem = self.ca.pem();
        put_secret(
            lab,
            OPERATOR_NAMESPACE,
            &self.secrets.0,
            &[
                ("username", REGISTRY_USER),
                ("password", &self.passwords.0),
                ("ca.crt", &pem),
            ],
        )
        .await;
        put_secret(
            lab,
            OPERATOR_NAMESPACE,
            &self.secrets.1,
            &[
                ("username", REPO_USER),
                ("password", &self.passwords.1),
                ("ca.crt", &pem),
            ],
        )
        .await;
    }

    /// A policy of `namespace` allowing both sources with the platform's Secrets.
    fn policy(&self, namespace: &str) -> TenancyPolicySpec {
        let mut policy = allow_all(namespace, &[]);
        policy.sources = vec![
            platform_source(self.registry.prefix(), &self.secrets.0),
            platform_source(format!("{}/", self.repo.url), &self.secrets.1),
        ];
        policy
    }

    /// Release `oci` from the registry and `repo` from the repository, newest 0.x each.
    fn charts(&self) -> Vec<Chart> {
        let mut oci = chart(&self.registry.reference("deployment-example"), "oci", &[]);
        oci.version = Some(">=0.1.0 <1.0.0".into());
        let mut repo = chart("deployment-example", "repo", &[]);
        repo.repo = Some(self.repo.url.clone());
        repo.version = Some(">=0.1.0 <1.0.0".into());
        vec![oci, repo]
    }

    fn passwords(&self) -> [&str; 2] {
        [&self.passwords.0, &self.passwords.1]
    }
}

/// A `sources` entry for `url` with the platform's Secret `secret`.
fn platform_source(url: String, secret: &str) -> SourceAccess {
    SourceAccess {
        url,
        secret_ref: Some(SecretReference {
            name: secret.to_owned(),
        }),
        tenant_secrets: Vec::new(),
        verify: None,
        git: None,
    }
}

/// Writes the platform's Secret `name` holding the registry user's login with `password`, and
/// `ca`'s certificate.
async fn login_secret(lab: &Lab, name: &str, password: &str, ca: &PrivateCa) {
    put_secret(
        lab,
        OPERATOR_NAMESPACE,
        name,
        &[
            ("username", REGISTRY_USER),
            ("password", password),
            ("ca.crt", &ca.pem()),
        ],
    )
    .await;
}

/// Asserts none of `passwords`, nor their base64, is in `text` (`what` names where).
fn shows_none(what: &str, text: &str, passwords: &[&str]) {
    for p in passwords {
        let encoded = base64::engine::general_purpose::STANDARD.encode(p);
        assert!(
            !text.contains(p) && !text.contains(&encoded),
            "{what} shows a password"
        );
    }
}

/// The text of every Secret and ConfigMap of a namespace, each value decoded (and gunzipped
/// when it is gzip).
async fn namespace_text(lab: &Lab, namespace: &str) -> String {
    let hub = lab.client("hub").await;
    let mut out = String::new();
    let decoded = |bytes: &[u8]| -> String {
        if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut text = Vec::new();
            let _ = flate2::read::GzDecoder::new(bytes).read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        } else {
            String::from_utf8_lossy(bytes).into_owned()
        }
    };
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), namespace);
    for s in secrets.list(&ListParams::default()).await.unwrap().items {
        out.push_str(&serde_json::to_string(&s.metadata).unwrap());
        for v in s.data.unwrap_or_default().values() {
            out.push_str(&decoded(&v.0));
        }
    }
    let maps: Api<ConfigMap> = Api::namespaced(hub, namespace);
    for m in maps.list(&ListParams::default()).await.unwrap().items {
        out.push_str(&serde_json::to_string(&m).unwrap());
        for v in m.binary_data.unwrap_or_default().values() {
            out.push_str(&decoded(&v.0));
        }
    }
    out
}

/// Every Event of a hub namespace, as text.
async fn events_text(hub: &Hub, namespace: &str) -> String {
    let events: Api<Event> = Api::namespaced(hub.client.clone(), namespace);
    serde_json::to_string(&events.list(&ListParams::default()).await.unwrap().items).unwrap()
}

/// Controller `name` with `spec`, labelled for the operator of [`Hub::two_teams`].
fn labelled(name: &str, spec: ControllerSpec, id: &str) -> TenancyController {
    let mut c = TenancyController::new(name, spec);
    c.metadata.labels = Some(BTreeMap::from([("credentials-test".into(), id.into())]));
    c
}

/// The phase and message of `release` on `cluster`, once it has one of `phases`.
async fn settled(
    hub: &Hub,
    namespace: &str,
    name: &str,
    cluster: &str,
    release: &str,
    phases: &[&str],
) -> (String, String, ControllerStatus) {
    let api: Api<TenancyController> = Api::namespaced(hub.client.clone(), namespace);
    let status = wait_until(
        &format!("{release} on {cluster} to be {phases:?}"),
        DEADLINE,
        || async {
            let status = api.get(name).await.ok()?.status?;
            let m = message(&status, cluster, release)?;
            phases.contains(&m.phase.as_str()).then(|| status.clone())
        },
    )
    .await;
    let m = message(&status, cluster, release).unwrap();
    (m.phase.clone(), m.error_message.clone(), status)
}

#[tokio::test]
#[ignore = "needs the lab with pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn private_charts_reach_push_and_pull_members_with_the_platforms_credentials_and_nowhere_else()
 {
    let _serial = SERIAL.lock().await;
    let sampler = Sampler::start();
    let lab = Lab::get();
    let sources = Sources::start(&lab, &sampler).await;
    let id = unique("creds");
    let (hub, team_b) =
        Hub::two_teams(&id, "credentials-test", &["--chart-interval", INTERVAL]).await;
    hub.policy(&hub.namespace, sources.policy(&hub.namespace))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let edge = unique("edge");
    let _agent = join(&hub.lab, &edge, "pull-1", dir.path());

    // Team a: both charts, to a push member and a pull member.
    let ns = unique("private");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &["member-1", &edge], sources.charts())],
        ..Default::default()
    };
    hub.apply_in(&hub.namespace, &labelled("private", spec.clone(), &id))
        .await;
    let status = hub
        .status_until("private", "both private charts deployed everywhere", ready)
        .await;
    for cluster in ["member-1", edge.as_str()] {
        for release in ["oci", "repo"] {
            let m = message(&status, cluster, release).unwrap();
            assert_eq!(m.chart_version, "0.1.0", "{cluster}/{release}: {m:?}");
        }
    }
    hub.releases_become("member-1", &ns, &[("oci", 1), ("repo", 1)])
        .await;
    for release in ["oci", "repo"] {
        wait_until("the pull member's release", DEADLINE, || async {
            (deployed_revision(&hub.lab, "pull-1", &ns, release) == Some(1)).then_some(())
        })
        .await;
    }

    // Team b: the same Controller, where no policy gives the credentials. Its policy lists the
    // registry without a Secret and not the repository at all.
    let mut policy_b = allow_all(&team_b, &[&sources.registry.prefix()]);
    policy_b.sources = vec![SourceAccess {
        url: sources.registry.prefix(),
        secret_ref: None,
        tenant_secrets: vec![TenantSecretRule {
            names: vec!["team-b-own".into()],
            ..Default::default()
        }],
        verify: None,
        git: None,
    }];
    hub.policy(&team_b, policy_b).await;
    let ns_b = unique("private-b");
    let mut charts_b = sources.charts();
    let mut borrowing = chart(
        &sources.registry.reference("deployment-example"),
        "borrow",
        &[],
    );
    borrowing.source_secret_ref = Some(SecretReference {
        name: sources.secrets.0.clone(),
    });
    charts_b.push(borrowing);
    let spec_b = ControllerSpec {
        tenancies: vec![tenancy(&ns_b, &["member-1"], charts_b)],
        ..Default::default()
    };
    hub.apply_in(&team_b, &labelled("private", spec_b, &id))
        .await;
    let (phase, why, _) =
        settled(&hub, &team_b, "private", "member-1", "repo", &["Forbidden"]).await;
    // Refused for its loopback address first, as no policy of team b lists the repository.
    assert!(
        why.contains("lists its prefix in chartSources") || why.contains("is not in chartSources"),
        "{phase}: {why}"
    );
    let (_, why, _) = settled(
        &hub,
        &team_b,
        "private",
        "member-1",
        "borrow",
        &["Forbidden"],
    )
    .await;
    assert!(
        why.contains(&format!(
            "names sourceSecretRef {}, which no tenantSecrets rule allows",
            sources.secrets.0
        )) && why.contains("adds {names: ["),
        "{why}"
    );
    let (_, why, status_b) = settled(
        &hub,
        &team_b,
        "private",
        "member-1",
        "oci",
        &["Invalid", "Failed"],
    )
    .await;
    assert!(
        why.contains("the source asks for credentials and none were given")
            || why.contains("signed by a CA the hub does not trust"),
        "{why}"
    );
    assert!(hub.lab.releases("member-1", &ns_b).is_empty());

    // The preview reads the same Secrets, renders both charts, and shows none of their content.
    let preview = ControllerSpec {
        tenancies: vec![tenancy(&unique("preview"), &["member-1"], sources.charts())],
        ..Default::default()
    };
    let diff = hub.diff(&hub.lab.clusters_path(), "preview", &preview, &[]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr),
    );
    let entries: Vec<serde_json::Value> = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("diff printed no JSON ({e}): {stdout}\n{stderr}"));
    for release in ["oci", "repo"] {
        let e = entries
            .iter()
            .find(|e| e["release"] == release)
            .unwrap_or_else(|| panic!("{release} in {entries:?}"));
        assert_eq!(e["action"], "install", "{e}");
        assert!(
            e["diff"]
                .as_str()
                .is_some_and(|d| d.contains("+kind: Deployment")),
            "{e}"
        );
    }
    shows_none(
        "tenancy-hub diff",
        &format!("{stdout}{stderr}"),
        &sources.passwords(),
    );

    // Nothing else shows the passwords: status, Events, the operator's and agent's logs, the
    // pull member's hub namespace, any process's command line.
    shows_none(
        "team a's status",
        &serde_json::to_string(&status).unwrap(),
        &sources.passwords(),
    );
    shows_none(
        "team b's status",
        &serde_json::to_string(&status_b).unwrap(),
        &sources.passwords(),
    );
    for namespace in [&hub.namespace, &team_b] {
        shows_none(
            "Events",
            &events_text(&hub, namespace).await,
            &sources.passwords(),
        );
    }
    shows_none("the operator's log", &hub.log(), &sources.passwords());
    shows_none("the agent's log", &_agent.logged(), &sources.passwords());
    let member_namespace = pull_namespace(&edge.parse().unwrap());
    let text = namespace_text(&hub.lab, &member_namespace).await;
    assert!(
        text.contains("deployment-example"),
        "the pull member's work is there"
    );
    shows_none(
        "the pull member's hub namespace",
        &text,
        &sources.passwords(),
    );
    sampler.finish();
    // The member leaves the hub, so no later test's operator finds it registered with its agent
    // gone.
    hub_cli(&hub.lab, &["cluster", "remove", &edge]);
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_changed_password_takes_effect_without_a_restart_and_a_tenants_own_secret_replaces_the_platforms()
 {
    let _serial = SERIAL.lock().await;
    let sampler = Sampler::start();
    let lab = Lab::get();
    let mut sources = Sources::start(&lab, &sampler).await;
    let hub = Hub::with_args(
        "creds-rotate",
        &["--tenancy-policy", "enforce", "--chart-interval", INTERVAL],
    )
    .await;
    let mut policy = sources.policy(&hub.namespace);
    policy.sources[0].tenant_secrets = vec![TenantSecretRule {
        names: vec!["own-pull".into()],
        ..Default::default()
    }];
    hub.policy(&hub.namespace, policy).await;
    let ns = unique("rotated");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &["member-1"], sources.charts())],
        ..Default::default()
    };
    hub.apply("rotated", spec).await;
    hub.status_until("rotated", "both private charts deployed", ready)
        .await;
    hub.releases_become("member-1", &ns, &[("oci", 1), ("repo", 1)])
        .await;

    // The sources change their passwords and publish 0.2.0: the old Secrets are refused...
    let new = (password("registry-2"), password("repo-2"));
    sampler.watch(&new.0);
    sampler.watch(&new.1);
    sources
        .registry
        .set_password(&lab, REGISTRY_USER, &new.0)
        .await;
    sources.repo.set_password(REPO_USER, &new.1);
    sources.registry.push(&lab, &example_chart(), "0.2.0").await;
    sources.repo.publish(&lab, "0.2.0");
    for secret in [&sources.secrets.0, &sources.secrets.1] {
        let refused =
            format!("the source refused the credentials of Secret {OPERATOR_NAMESPACE}/{secret}");
        wait_until("the old credentials refused", DEADLINE, || async {
            hub.log().contains(&refused).then_some(())
        })
        .await;
    }
    // ...and the new ones, once in the Secrets, deliver 0.2.0 without a restart.
    let old = std::mem::replace(&mut sources.passwords, new);
    sources.write_secrets(&lab).await;
    hub.releases_become("member-1", &ns, &[("oci", 2), ("repo", 2)])
        .await;
    let status = hub
        .status_until("rotated", "0.2.0 everywhere", |s| {
            ["oci", "repo"]
                .iter()
                .all(|r| message(s, "member-1", r).is_some_and(|m| m.chart_version == "0.2.0"))
        })
        .await;

    // A tenant's own Secret, which its policy allows, replaces the platform's for its chart.
    let tenant_pw = sources.passwords.0.clone();
    put_secret(
        &lab,
        &hub.namespace,
        "own-pull",
        &[
            ("username", REGISTRY_USER),
            ("password", &tenant_pw),
            ("ca.crt", &sources.ca.pem()),
        ],
    )
    .await;
    let mut own = chart(
        &sources.registry.reference("deployment-example"),
        "own",
        &[],
    );
    own.source_secret_ref = Some(SecretReference {
        name: "own-pull".into(),
    });
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &["member-1"], vec![own])],
        ..Default::default()
    };
    hub.apply("own", spec).await;
    hub.status_until("own", "the chart fetched with the tenant's Secret", ready)
        .await;

    let every: Vec<&str> = [&old.0, &old.1, &sources.passwords.0, &sources.passwords.1]
        .map(String::as_str)
        .to_vec();
    shows_none(
        "the status",
        &serde_json::to_string(&status).unwrap(),
        &every,
    );
    shows_none("Events", &events_text(&hub, &hub.namespace).await, &every);
    shows_none("the operator's log", &hub.log(), &every);
    sampler.finish();
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_registry_redirecting_to_another_host_or_answering_an_endless_token_gets_no_credentials_off_its_host_and_delays_no_other_chart()
 {
    let _serial = SERIAL.lock().await;
    let sampler = Sampler::start();
    let lab = Lab::get();
    let ca = PrivateCa::new();
    let pw = password("hostile");
    sampler.watch(&pw);
    // A registry whose blobs are served from another host (127.0.0.2), as object storage behind
    // a signed URL would be: distribution's own redirect middleware, over its own storage.
    let stranger = Stranger::serve();
    let redirect = format!(
        "middleware:\n  storage:\n    - name: redirect\n      options: {{baseurl: \"http://{}/\"}}\n",
        stranger.addr
    );
    let redirecting =
        OciRegistry::serve_private_with(&lab, &ca, REGISTRY_USER, &pw, &redirect).await;
    stranger.serve_files(redirecting.storage());
    redirecting.push(&lab, &example_chart(), "0.1.0").await;
    // A registry whose token service answers with a token that never ends.
    let tokens = EndlessTokens::serve(&ca);
    let endless = OciRegistry::serve_token(&lab, &ca, &tokens.realm(), &ca.cert(), None).await;
    let secret = unique("hostile-pull");
    login_secret(&lab, &secret, &pw, &ca).await;
    let hub = Hub::with_args(
        "creds-hostile",
        &["--tenancy-policy", "enforce", "--chart-interval", INTERVAL],
    )
    .await;
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.sources = [redirecting.prefix(), endless.prefix()]
        .map(|url| platform_source(url, &secret))
        .to_vec();
    hub.policy(&hub.namespace, policy).await;
    let ns = unique("hostile");
    let from = |registry: &OciRegistry, release: &str| {
        let mut c = chart(&registry.reference("deployment-example"), release, &[]);
        c.version = Some(">=0.1.0 <1.0.0".into());
        c
    };
    let charts = vec![
        from(&redirecting, "redirected"),
        from(&endless, "endless"),
        chart("deployment-example", "local", &[]),
    ];
    let started = tokio::time::Instant::now();
    hub.apply(
        "hostile",
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1"], charts)],
            ..Default::default()
        },
    )
    .await;

    // The endless token is cut off and reported for its chart alone, soon; the others deploy.
    let (phase, why, status) = settled(
        &hub,
        &hub.namespace,
        "hostile",
        "member-1",
        "endless",
        &["Invalid", "Failed"],
    )
    .await;
    let failed_after = started.elapsed();
    assert!(
        why.contains(&endless.reference("deployment-example")),
        "{phase}: {why}"
    );
    hub.releases_become("member-1", &ns, &[("redirected", 1), ("local", 1)])
        .await;
    assert!(
        failed_after < std::time::Duration::from_secs(60),
        "the endless token was reported after {failed_after:?}"
    );
    assert!(tokens.asked() > 0, "helm asked the token service");
    assert!(
        tokens.sent() < 64 << 20,
        "helm read {} bytes of one token before it gave up",
        tokens.sent()
    );

    // The blobs came from the other host, and no credential went with them.
    let seen = stranger.seen();
    assert!(
        seen.iter()
            .any(|r| r.line.starts_with("GET ") && r.line.contains("/blobs/")),
        "the registry's redirect was followed: {seen:?}"
    );
    for request in &seen {
        assert!(
            request.header("authorization").is_none(),
            "{} reached the other host with credentials",
            request.line
        );
    }
    for (what, text) in [
        ("the status", serde_json::to_string(&status).unwrap()),
        ("the operator's log", hub.log()),
        ("Events", events_text(&hub, &hub.namespace).await),
    ] {
        shows_none(what, &text, &[&pw]);
    }
    sampler.finish();
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_registry_behind_a_token_service_takes_the_platforms_login_through_the_exchange_and_a_registry_token_as_it_is()
 {
    let _serial = SERIAL.lock().await;
    let sampler = Sampler::start();
    let lab = Lab::get();
    let ca = PrivateCa::new();
    let pw = password("token-login");
    sampler.watch(&pw);
    let service = TokenService::serve(&ca, REGISTRY_USER, &pw);
    let registry = OciRegistry::serve_token(
        &lab,
        &ca,
        &service.realm,
        &service.issuer_cert(),
        Some((REGISTRY_USER, &pw)),
    )
    .await;
    registry.push(&lab, &example_chart(), "0.1.0").await;
    let token = service.pull_token("charts/deployment-example");
    sampler.watch(&token);
    // Team a's source logs in (username and password, exchanged for a token at each pull);
    // team b's holds a registry token the platform minted.
    let (login, bearer) = (unique("token-login"), unique("token-bearer"));
    login_secret(&lab, &login, &pw, &ca).await;
    put_secret(
        &lab,
        OPERATOR_NAMESPACE,
        &bearer,
        &[("token", &token), ("ca.crt", &ca.pem())],
    )
    .await;
    let id = unique("tokens");
    let (hub, team_b) =
        Hub::two_teams(&id, "credentials-test", &["--chart-interval", INTERVAL]).await;
    for (namespace, secret) in [(&hub.namespace, &login), (&team_b, &bearer)] {
        let mut policy = allow_all(namespace, &[]);
        policy.sources = vec![platform_source(registry.prefix(), secret)];
        hub.policy(namespace, policy).await;
    }
    let exchanged = service.issued();
    let mut oci = chart(&registry.reference("deployment-example"), "oci", &[]);
    oci.version = Some(">=0.1.0 <1.0.0".into());
    let (ns_a, ns_b) = (unique("token-a"), unique("token-b"));
    for (hub_namespace, ns) in [(&hub.namespace, &ns_a), (&team_b, &ns_b)] {
        let spec = ControllerSpec {
            tenancies: vec![tenancy(ns, &["member-1"], vec![oci.clone()])],
            ..Default::default()
        };
        hub.apply_in(hub_namespace, &labelled("tokens", spec, &id))
            .await;
    }
    hub.releases_become("member-1", &ns_a, &[("oci", 1)]).await;
    hub.releases_become("member-1", &ns_b, &[("oci", 1)]).await;
    assert!(
        service.issued() > exchanged,
        "team a's login was exchanged at the token service"
    );
    for namespace in [&hub.namespace, &team_b] {
        let api: Api<TenancyController> = Api::namespaced(hub.client.clone(), namespace);
        let status = api.get("tokens").await.unwrap().status;
        shows_none(
            "the status",
            &serde_json::to_string(&status).unwrap(),
            &[&pw, &token],
        );
        shows_none(
            "Events",
            &events_text(&hub, namespace).await,
            &[&pw, &token],
        );
    }
    shows_none("the operator's log", &hub.log(), &[&pw, &token]);
    sampler.finish();
}
