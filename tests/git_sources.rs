//! End-to-end tests of charts and values files from Git: a chart from a path of the lab's Git server delivered to a push and a pull member and upgraded by a push, the newest tag of a semver range, per-cluster values files that differ per member and show in `diff`, a push hook bringing a push in at once, a repository outside the policy refused unfetched, and the Git password nowhere.

mod common;

use std::time::Duration;

use common::{
    agent::{deployed_revision, join},
    fixtures::{DEADLINE, chart, message, put_secret, ready, tenancy, unique, wait_until},
    git::{CHART_PATH, GitRepo, GitServer, ssh_signing_key, work_tree},
    hub::{Hub, allow_all},
};
use k8s_openapi::api::core::v1::Event;
use kube::{Api, api::ListParams};
use tenancy_hub::api::{
    crd::{
        Chart, ControllerSpec, GitRef, GitSource, GitValuesFile, GitValuesSource, SecretReference,
        TenancyController,
    },
    policy::{
        GitAccess, GitWebhook, SourceAccess, SourceVerify, TenancyPolicy, TenancyPolicySpec,
        VerifyProvider,
    },
};

/// One test at a time: each joins a pull member or starts an operator of its own.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The namespace the operator keeps its platform Secrets in (its `--lease-namespace`).
const OPERATOR_NAMESPACE: &str = "tenancy-hub";

/// The lab's Git server, its password in a platform Secret, and a policy of the test's hub
/// namespace allowing `team/` of it over plain http (`insecure`, the lab's server), paths
/// `charts` and `values`, branch main, tags `v1.0.*` and `v1.2.*`,
/// with that Secret and a push hook secret.
struct Setup {
    server: GitServer,
    secret: String,
    hook_secret: String,
}

impl Setup {
    async fn new(hub: &Hub) -> Self {
        let server = GitServer::get(&hub.lab);
        let secret = server.pull_secret(&hub.lab, OPERATOR_NAMESPACE).await;
        let hook_secret = unique("git-hook");
        put_secret(
            &hub.lab,
            OPERATOR_NAMESPACE,
            &hook_secret,
            &[("token", "hook-secret-of-the-lab")],
        )
        .await;
        let setup = Self {
            server,
            secret,
            hook_secret,
        };
        hub.policy(&hub.namespace, setup.policy(&hub.namespace))
            .await;
        setup
    }

    fn policy(&self, namespace: &str) -> TenancyPolicySpec {
        let mut policy = allow_all(namespace, &[]);
        policy.sources = vec![SourceAccess {
            url: format!("{}/team/", self.server.http),
            secret_ref: Some(SecretReference {
                name: self.secret.clone(),
            }),
            git: Some(GitAccess {
                paths: vec!["charts".into(), "values".into()],
                branches: vec!["main".into()],
                tags: vec!["v1.0.*".into(), "v1.2.*".into()],
                allow_commits: false,
                // The lab's server speaks plain http on loopback.
                insecure: true,
                webhook: Some(GitWebhook {
                    secret_ref: SecretReference {
                        name: self.hook_secret.clone(),
                    },
                }),
            }),
            ..SourceAccess::default()
        }];
        policy
    }

    fn repo(&self) -> GitRepo {
        self.server.create_repo(&unique("team/charts"))
    }
}

/// The operator's arguments: charts looked at often, enforced policies, the lab's fetcher.
fn operator_args(server: &GitServer) -> Vec<String> {
    vec![
        "--chart-interval".into(),
        "60".into(),
        "--tenancy-policy".into(),
        "enforce".into(),
        "--git-fetcher".into(),
        server.fetcher.to_string_lossy().into_owned(),
    ]
}

async fn hub_for(prefix: &str) -> Hub {
    let lab = common::lab::Lab::get();
    let server = GitServer::get(&lab);
    let args = operator_args(&server);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Hub::with_args(prefix, &args).await
}

fn git_chart(repo: &GitRepo, release: &str, reference: GitRef) -> Chart {
    Chart {
        git: Some(GitSource {
            url: repo.http_url.clone(),
            reference,
            path: CHART_PATH.into(),
            interval: Some("10s".into()),
        }),
        ..chart("deployment-example", release, &[])
    }
}

fn branch(name: &str) -> GitRef {
    GitRef {
        branch: Some(name.into()),
        ..GitRef::default()
    }
}

/// The status once `check` holds for it.
async fn status_until(
    hub: &Hub,
    name: &str,
    what: &str,
    check: impl Fn(&tenancy_hub::api::crd::ControllerStatus) -> bool,
) -> tenancy_hub::api::crd::ControllerStatus {
    let api: Api<TenancyController> = hub.api();
    wait_until(what, DEADLINE, || async {
        let status = api.get(name).await.ok()?.status?;
        check(&status).then_some(status)
    })
    .await
}

fn shows_commit(
    status: &tenancy_hub::api::crd::ControllerStatus,
    cluster: &str,
    release: &str,
    commit: &str,
) -> bool {
    message(status, cluster, release)
        .is_some_and(|m| m.source.contains(commit) && m.phase == "Deployed")
}

#[tokio::test]
#[ignore = "needs the lab with its Git server and pull members: kind/up.sh --pull-members 2, then --include-ignored"]
async fn a_chart_from_git_reaches_push_and_pull_members_and_a_push_upgrades_them_without_showing_the_password()
 {
    let _serial = SERIAL.lock().await;
    let hub = hub_for("git").await;
    let setup = Setup::new(&hub).await;
    let repo = setup.repo();
    let first = repo.push_dir(work_tree("0.1.0", 1, &[]).path(), "main", "first");
    let dir = tempfile::tempdir().unwrap();
    let edge = unique("edge");
    let agent = join(&hub.lab, &edge, "pull-1", dir.path());
    let ns = unique("git");
    let spec = ControllerSpec {
        tenancies: vec![tenancy(
            &ns,
            &["member-1", &edge],
            vec![git_chart(&repo, "web", branch("main"))],
        )],
        ..Default::default()
    };
    hub.apply("web", spec).await;
    let status = status_until(
        &hub,
        "web",
        "the chart of the first commit deployed on both members",
        |s| {
            ready(s)
                && shows_commit(s, "member-1", "web", &first)
                && shows_commit(s, &edge, "web", &first)
        },
    )
    .await;
    let m = message(&status, "member-1", "web").unwrap();
    assert_eq!(m.chart_version, "0.1.0");
    assert!(m.chart_digest.starts_with("sha256:"), "{m:?}");
    let digest = m.chart_digest.clone();
    assert_eq!(
        message(&status, &edge, "web").unwrap().chart_digest,
        digest,
        "the pull member got the same archive"
    );

    // A push to the branch upgrades both, within the source's interval.
    let started = std::time::Instant::now();
    let second = repo.push_dir(work_tree("0.1.1", 2, &[]).path(), "main", "second");
    let status = status_until(
        &hub,
        "web",
        "the second commit deployed on both members",
        |s| shows_commit(s, "member-1", "web", &second) && shows_commit(s, &edge, "web", &second),
    )
    .await;
    eprintln!(
        "push to deployed on both members (poll, 10s interval): {:?}",
        started.elapsed()
    );
    assert_eq!(
        message(&status, "member-1", "web").unwrap().chart_version,
        "0.1.1"
    );
    hub.releases_become("member-1", &ns, &[("web", 2)]).await;
    wait_until("revision 2 on the pull member", DEADLINE, || async {
        (deployed_revision(&hub.lab, "pull-1", &ns, "web") == Some(2)).then_some(())
    })
    .await;

    // A push announced by the server's hook comes in at once, long before the interval.
    let mut slow = git_chart(&repo, "web", branch("main"));
    slow.git.as_mut().unwrap().interval = Some("24h".into());
    hub.apply(
        "web",
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1", &edge], vec![slow])],
            ..Default::default()
        },
    )
    .await;
    let operator = hub.operator.as_ref().unwrap();
    repo.set_webhook(
        &format!("http://{}/hooks/git/{}", operator.http, hub.namespace),
        "hook-secret-of-the-lab",
    );
    let started = std::time::Instant::now();
    let third = repo.push_dir(work_tree("0.1.2", 3, &[]).path(), "main", "third");
    status_until(
        &hub,
        "web",
        "the third commit deployed after the hook",
        |s| shows_commit(s, "member-1", "web", &third) && shows_commit(s, &edge, "web", &third),
    )
    .await;
    let hooked = started.elapsed();
    eprintln!("push to deployed on both members (hook, 24h interval): {hooked:?}");
    assert!(
        hooked < Duration::from_secs(90),
        "the hook brought the push in: {hooked:?}"
    );

    // The password is in no status, Event or log.
    let password = setup.server.password.clone();
    let status = hub.api().get("web").await.unwrap().status.unwrap();
    assert!(
        !serde_json::to_string(&status).unwrap().contains(&password),
        "the status shows the password"
    );
    let events: Api<Event> = Api::namespaced(hub.client.clone(), &hub.namespace);
    let events =
        serde_json::to_string(&events.list(&ListParams::default()).await.unwrap().items).unwrap();
    assert!(!events.contains(&password), "an Event shows the password");
    assert!(
        !hub.log().contains(&password),
        "the operator's log shows the password"
    );
    assert!(
        !agent.logged().contains(&password),
        "the agent's log shows the password"
    );
    // Deleted while the pull member's agent still runs, so it uninstalls there too.
    hub.delete_and_wait_gone("web").await;
    drop(agent);
}

#[tokio::test]
#[ignore = "needs the lab with its Git server: kind/up.sh, then --include-ignored"]
async fn a_semver_range_takes_the_newest_tag_the_policy_allows_plain_http_needs_insecure_and_a_repository_outside_the_policy_is_refused_unfetched()
 {
    let _serial = SERIAL.lock().await;
    let hub = hub_for("git-tags").await;
    let setup = Setup::new(&hub).await;
    // Plain http without insecure: the API server refuses the policy, saying what to do.
    let mut plain = setup.policy(&hub.namespace);
    plain.sources[0].git.as_mut().unwrap().insecure = false;
    let refused = Api::<TenancyPolicy>::all(hub.client.clone())
        .create(
            &Default::default(),
            &TenancyPolicy::new(&unique("plain-http"), plain),
        )
        .await
        .expect_err("a plain http Git entry without insecure is refused");
    assert!(
        refused.to_string().contains("git.insecure: true"),
        "{refused}"
    );
    let repo = setup.repo();
    let one = repo.push_dir(work_tree("1.0.0", 1, &[]).path(), "main", "1.0.0");
    repo.tag(&one, "v1.0.0");
    let two = repo.push_dir(work_tree("1.2.0", 1, &[]).path(), "main", "1.2.0");
    repo.tag(&two, "v1.2.0");
    // Newer, in the range, but matching none of the policy's tag patterns: never picked.
    let three = repo.push_dir(work_tree("1.3.0", 1, &[]).path(), "main", "1.3.0");
    repo.tag(&three, "v1.3.0");
    let four = repo.push_dir(work_tree("2.0.0", 1, &[]).path(), "main", "2.0.0");
    repo.tag(&four, "v2.0.0");
    let outside = setup.server.create_repo(&unique("other/charts"));
    outside.push_dir(work_tree("0.1.0", 1, &[]).path(), "main", "elsewhere");
    let ns = unique("tags");
    let tagged = git_chart(
        &repo,
        "tagged",
        GitRef {
            semver: Some(">=1.0.0".into()),
            ..GitRef::default()
        },
    );
    let foreign = git_chart(&outside, "foreign", branch("main"));
    hub.apply(
        "tags",
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1"], vec![tagged, foreign])],
            ..Default::default()
        },
    )
    .await;
    let status = status_until(
        &hub,
        "tags",
        "the tagged chart deployed and the foreign one refused",
        |s| {
            shows_commit(s, "member-1", "tagged", &two)
                && message(s, "member-1", "foreign").is_some_and(|m| m.phase == "Forbidden")
        },
    )
    .await;
    assert_eq!(
        message(&status, "member-1", "tagged")
            .unwrap()
            .chart_version,
        "1.2.0"
    );
    let refused = &message(&status, "member-1", "foreign")
        .unwrap()
        .error_message;
    assert!(
        // On the lab's loopback server the address rule speaks first: only a Git prefix a
        // policy lists may lead there, and none holds other/.
        refused.contains("other/charts")
            && refused.contains("lists its prefix in a Git sources entry"),
        "{refused}"
    );
    assert!(
        !hub.log().contains("other/charts.git: packed"),
        "the foreign repository was fetched"
    );
    assert!(
        hub.lab
            .try_helm("member-1", &["status", "foreign", "-n", &ns])
            .is_err()
    );
    hub.delete_and_wait_gone("tags").await;
}

#[tokio::test]
#[ignore = "needs the lab with its Git server: kind/up.sh, then --include-ignored"]
async fn per_cluster_values_files_from_git_differ_per_member_and_show_in_diff() {
    let _serial = SERIAL.lock().await;
    let hub = hub_for("git-values").await;
    let setup = Setup::new(&hub).await;
    let repo = setup.repo();
    repo.push_dir(
        work_tree(
            "0.1.0",
            1,
            &[
                ("values/member-1.yaml", "podAnnotations: {fleet: one}\n"),
                ("values/member-2.yaml", "podAnnotations: {fleet: two}\n"),
            ],
        )
        .path(),
        "main",
        "values",
    );
    let ns = unique("values");
    let file = |path: &str, optional: bool| GitValuesFile {
        git: GitValuesSource {
            url: repo.http_url.clone(),
            reference: branch("main"),
            interval: Some("10s".into()),
        },
        path: path.into(),
        optional,
    };
    let mut web = chart("deployment-example", "web", &[]);
    web.values_files = vec![file("values/${cluster.name}.yaml", false)];
    let spec = ControllerSpec {
        tenancies: vec![tenancy(&ns, &["member-1", "member-2"], vec![web.clone()])],
        ..Default::default()
    };
    hub.apply("values", spec.clone()).await;
    status_until(&hub, "values", "both members deployed", ready).await;
    assert_eq!(
        hub.lab.values("member-1", &ns, "web")["podAnnotations"]["fleet"],
        "one"
    );
    assert_eq!(
        hub.lab.values("member-2", &ns, "web")["podAnnotations"]["fleet"],
        "two"
    );

    // A push changing member-2's file upgrades member-2 only.
    repo.push_dir(
        work_tree(
            "0.1.0",
            1,
            &[
                ("values/member-1.yaml", "podAnnotations: {fleet: one}\n"),
                ("values/member-2.yaml", "podAnnotations: {fleet: deux}\n"),
            ],
        )
        .path(),
        "main",
        "member-2 changes",
    );
    wait_until("member-2 upgraded with its new file", DEADLINE, || async {
        (hub.lab.values("member-2", &ns, "web")["podAnnotations"]["fleet"] == "deux").then_some(())
    })
    .await;
    hub.releases_become("member-1", &ns, &[("web", 1)]).await;
    hub.releases_become("member-2", &ns, &[("web", 2)]).await;

    // diff shows what a third cluster's file (missing) and the values made would be.
    let mut preview = spec.clone();
    preview.tenancies[0].charts[0]
        .values_files
        .push(file("values/extra-${cluster.name}.yaml", true));
    let server = GitServer::get(&hub.lab);
    let out = hub.diff(
        &hub.lab.clusters_path(),
        "values",
        &preview,
        &["--git-fetcher", server.fetcher.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "diff failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("deux") && text.contains("one"),
        "diff shows the files' values: {text}"
    );
    assert!(!text.contains(&setup.server.password));

    // A missing file that is not optional holds the release, naming the cluster and the path.
    let mut strict = spec.clone();
    strict.tenancies[0].charts[0].values_files =
        vec![file("values/only-${cluster.name}.yaml", false)];
    hub.apply("values", strict).await;
    let status = status_until(&hub, "values", "the missing file reported", |s| {
        message(s, "member-1", "web").is_some_and(|m| m.phase == "Invalid")
    })
    .await;
    let said = &message(&status, "member-1", "web").unwrap().error_message;
    assert!(
        said.contains("values/only-member-1.yaml") && said.contains("cluster member-1"),
        "{said}"
    );
    hub.delete_and_wait_gone("values").await;
}

#[tokio::test]
#[ignore = "needs the lab with its Git server: kind/up.sh, then --include-ignored"]
async fn where_a_policy_asks_signed_commits_an_unsigned_push_is_unverified_and_what_runs_stays() {
    let _serial = SERIAL.lock().await;
    let hub = hub_for("git-signed").await;
    let setup = Setup::new(&hub).await;
    let (_keys, signing, public) = ssh_signing_key();
    let (_other_keys, stranger, _) = ssh_signing_key();
    let signers = unique("git-signers");
    put_secret(
        &hub.lab,
        OPERATOR_NAMESPACE,
        &signers,
        &[("release.pub", &public)],
    )
    .await;
    let mut policy = setup.policy(&hub.namespace);
    policy.sources[0].verify = Some(SourceVerify {
        provider: VerifyProvider::Ssh,
        secret_ref: SecretReference {
            name: signers.clone(),
        },
        trusted_identities: Vec::new(),
        match_oidc_identity: Vec::new(),
        transparency_log: None,
    });
    hub.policy(&hub.namespace, policy).await;
    let repo = setup.repo();
    let signed = repo.push_dir_signed(
        work_tree("0.1.0", 1, &[]).path(),
        "main",
        "signed",
        &signing,
    );
    let ns = unique("signed");
    hub.apply(
        "signed",
        ControllerSpec {
            tenancies: vec![tenancy(
                &ns,
                &["member-1"],
                vec![git_chart(&repo, "web", branch("main"))],
            )],
            ..Default::default()
        },
    )
    .await;
    let status = status_until(&hub, "signed", "the signed commit deployed", |s| {
        shows_commit(s, "member-1", "web", &signed)
    })
    .await;
    let by = &message(&status, "member-1", "web").unwrap().verified_by;
    assert!(by.starts_with("ssh: SHA256:"), "{by}");

    // An unsigned push, then one signed by a key the policy does not trust: neither is installed.
    for what in ["unsigned", "untrusted"] {
        let tree = work_tree("0.2.0", 2, &[]);
        let commit = match what {
            "unsigned" => repo.push_dir(tree.path(), "main", what),
            _ => repo.push_dir_signed(tree.path(), "main", what, &stranger),
        };
        let status = status_until(&hub, "signed", &format!("the {what} commit refused"), |s| {
            message(s, "member-1", "web")
                .is_some_and(|m| m.phase == "Unverified" && m.error_message.contains(&commit))
        })
        .await;
        let said = &message(&status, "member-1", "web").unwrap().error_message;
        assert!(
            said.contains(what) && said.contains("ssh (TenancyPolicy"),
            "{said}"
        );
        hub.releases_become("member-1", &ns, &[("web", 1)]).await;
    }
    hub.delete_and_wait_gone("signed").await;
}
