//! End-to-end tests of a Git chart's dependencies: an umbrella chart in the lab's Git server depending on a chart of the lab's HTTP chart repository, resolved by the hub (the newest version its range allows) and delivered with the dependency's objects, its `.helmignore` applied; a dependency from a repository outside the policy refused in status with nothing installed; and dependencies from the lab's OCI registry under a cosign rule: the one signed with the trusted key delivered with its signer in status, unsigned or signed by another key refused by name with nothing installed.

mod common;

use common::{
    fixtures::{DEADLINE, chart, message, put_secret, tenancy, unique, wait_until},
    git::{GitRepo, GitServer, git_policy},
    hub::Hub,
    repo::{ChartRepo, OciRegistry, example_chart},
    signing::{cosign, key_pairs, oci_digest, run},
};
use kube::Api;
use tenancy_hub::api::{
    crd::{Chart, ControllerSpec, GitRef, GitSource, SecretReference, TenancyController},
    policy::{SourceAccess, SourceVerify, VerifyProvider},
};

/// The namespace the operator keeps its platform Secrets in (its `--lease-namespace`).
const OPERATOR_NAMESPACE: &str = "tenancy-hub";

/// The range the umbrella asks of the chart repository: 0.2.0 among 0.1.0, 0.2.0 and 1.0.0.
const RANGE: &str = ">=0.1.0 <1.0.0";

/// A working copy holding chart `umbrella` at `charts/umbrella`: a ConfigMap of its own and a
/// dependency on the example chart at `version` (a range or a version) of `repository`; its
/// `.helmignore` leaves out a file that would not render.
fn umbrella(repository: &str, version: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let to = dir.path().join("charts/umbrella").join(path);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text).unwrap();
    };
    write(
        "Chart.yaml",
        &format!(
            "apiVersion: v2\nname: umbrella\nversion: 1.0.0\ndependencies:\n- name: deployment-example\n  version: \"{version}\"\n  repository: {repository}\n"
        ),
    );
    write("values.yaml", "greeting: hello\n");
    write(
        "templates/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-umbrella\ndata:\n  greeting: {{ .Values.greeting }}\n",
    );
    write(".helmignore", "# not part of the chart\n*.draft\n");
    write("templates/broken.draft", "{{ this does not render");
    dir
}

/// The test's hub: an operator of its own, policies enforced, the lab's Git fetcher.
async fn hub_for(prefix: &str) -> (Hub, GitServer) {
    let lab = common::lab::Lab::get();
    let server = GitServer::get(&lab);
    let fetcher = server.fetcher.to_string_lossy().into_owned();
    let args = [
        "--chart-interval",
        "60",
        "--tenancy-policy",
        "enforce",
        "--git-fetcher",
        &fetcher,
    ];
    (Hub::with_args(prefix, &args).await, server)
}

fn git_chart(repo: &GitRepo, release: &str) -> Chart {
    Chart {
        git: Some(GitSource {
            url: repo.http_url.clone(),
            reference: GitRef {
                branch: Some("main".into()),
                ..GitRef::default()
            },
            path: "charts/umbrella".into(),
            interval: Some("10s".into()),
        }),
        ..chart("umbrella", release, &[])
    }
}

#[tokio::test]
#[ignore = "needs the lab with its Git server: kind/up.sh, then --include-ignored"]
async fn a_git_chart_gets_its_dependency_from_an_allowed_repository_and_one_from_outside_is_refused()
 {
    let (hub, server) = hub_for("git-deps").await;
    let secret = server.pull_secret(&hub.lab, OPERATOR_NAMESPACE).await;
    let allowed = ChartRepo::serve(&hub.lab, &["0.1.0", "0.2.0", "1.0.0"]);
    let outside = ChartRepo::serve(&hub.lab, &["0.1.0"]);
    allowed.wait_ready().await;
    hub.policy(
        &hub.namespace,
        git_policy(
            &server,
            &hub.namespace,
            "team",
            &secret,
            None,
            &[&allowed.url],
        ),
    )
    .await;
    let good = server.create_repo(&unique("team/umbrella"));
    let commit = good.push_dir(umbrella(&allowed.url, RANGE).path(), "main", "umbrella");
    let bad = server.create_repo(&unique("team/foreign-dep"));
    bad.push_dir(
        umbrella(&outside.url, RANGE).path(),
        "main",
        "foreign dependency",
    );
    let ns = unique("deps");
    hub.apply(
        "deps",
        ControllerSpec {
            tenancies: vec![tenancy(
                &ns,
                &["member-1"],
                vec![git_chart(&good, "good"), git_chart(&bad, "bad")],
            )],
            ..Default::default()
        },
    )
    .await;
    let api: Api<TenancyController> = hub.api();
    let status = wait_until(
        "the umbrella deployed and the foreign dependency refused",
        DEADLINE,
        || async {
            let status = api.get("deps").await.ok()?.status?;
            let good = message(&status, "member-1", "good")?;
            let bad = message(&status, "member-1", "bad")?;
            (good.phase == "Deployed"
                && good.source.contains(&commit)
                && bad.error_message.contains("is refused"))
            .then_some(status)
        },
    )
    .await;
    let manifest = hub
        .lab
        .helm("member-1", &["get", "manifest", "good", "-n", &ns]);
    assert!(
        manifest.contains("good-umbrella") && manifest.contains("kind: Deployment"),
        "the umbrella's ConfigMap and the dependency's Deployment: {manifest}"
    );
    let chart_list = hub.lab.helm("member-1", &["list", "-n", &ns, "-o", "json"]);
    assert!(chart_list.contains("umbrella-1.0.0"), "{chart_list}");
    // The range took the newest 0.x the repository lists; the hub fetched it, not helm.
    assert!(
        allowed
            .requested()
            .iter()
            .any(|p| p.contains("deployment-example-0.2.0.tgz")),
        "{:?}",
        allowed.requested()
    );
    let refused = &message(&status, "member-1", "bad").unwrap().error_message;
    assert!(
        refused.contains("dependency \"deployment-example\"")
            && refused.contains("charts/umbrella/Chart.yaml")
            && refused.contains("127.0.0.1"),
        "{refused}"
    );
    assert!(
        outside.requested().is_empty(),
        "the repository outside the policy was fetched: {:?}",
        outside.requested()
    );
    assert!(
        hub.lab
            .try_helm("member-1", &["status", "bad", "-n", &ns])
            .is_err(),
        "nothing of the refused chart is installed"
    );
    hub.delete_and_wait_gone("deps").await;
}

/// A `sources` entry of the registry `registry`, fetched with the CA of Secret `ca`, its charts
/// checked by cosign with the public keys of Secret `keys`.
fn cosign_source(registry: &OciRegistry, ca: &str, keys: &str) -> SourceAccess {
    SourceAccess {
        url: registry.prefix(),
        secret_ref: Some(SecretReference { name: ca.into() }),
        verify: Some(SourceVerify {
            provider: VerifyProvider::Cosign,
            secret_ref: SecretReference { name: keys.into() },
            trusted_identities: Vec::new(),
            match_oidc_identity: Vec::new(),
            transparency_log: None,
        }),
        ..SourceAccess::default()
    }
}

#[tokio::test]
#[ignore = "needs the lab with its Git server: kind/up.sh, then --include-ignored"]
async fn a_git_chart_gets_a_registry_dependency_signed_with_the_trusted_key_and_not_one_unsigned_or_signed_by_another()
 {
    let (hub, server) = hub_for("git-oci-deps").await;
    let lab = &hub.lab;
    let secret = server.pull_secret(lab, OPERATOR_NAMESPACE).await;
    let registry = OciRegistry::serve(lab);
    let keys = key_pairs(lab, &registry);
    let sign = |key: &str, version: &str| {
        let digest = oci_digest(lab, &registry, version);
        let target = format!("{}/charts/deployment-example@{digest}", registry.host);
        run(cosign(lab, &registry, keys.path())
            .args(["sign", "--key", key, "--tlog-upload=false", "--yes"])
            .arg(target));
    };
    for version in ["1.0.0", "1.0.1", "1.0.2"] {
        registry.push(lab, &example_chart(), version).await;
    }
    sign("good.key", "1.0.0");
    sign("other.key", "1.0.2");
    let (ca, trust) = (unique("registry-ca"), unique("cosign-keys"));
    let pem = std::fs::read_to_string(&registry.ca).unwrap();
    put_secret(lab, OPERATOR_NAMESPACE, &ca, &[("ca.crt", &pem)]).await;
    let key = std::fs::read_to_string(keys.path().join("good.pub")).unwrap();
    put_secret(lab, OPERATOR_NAMESPACE, &trust, &[("charts.pub", &key)]).await;
    let mut policy = git_policy(&server, &hub.namespace, "team", &secret, None, &[]);
    policy.sources.push(cosign_source(&registry, &ca, &trust));
    hub.policy(&hub.namespace, policy).await;
    // The umbrella's Chart.yaml names the registry (`oci://…/charts`) and the version.
    let prefix = registry.prefix();
    let registry_repository = prefix.trim_end_matches('/');
    let mut charts = Vec::new();
    for (release, version) in [
        ("signed", "1.0.0"),
        ("unsigned", "1.0.1"),
        ("stranger", "1.0.2"),
    ] {
        let repo = server.create_repo(&unique(&format!("team/{release}")));
        repo.push_dir(
            umbrella(registry_repository, version).path(),
            "main",
            release,
        );
        charts.push(git_chart(&repo, release));
    }
    let ns = unique("oci-deps");
    hub.apply(
        "oci-deps",
        ControllerSpec {
            tenancies: vec![tenancy(&ns, &["member-1"], charts)],
            ..Default::default()
        },
    )
    .await;
    let api: Api<TenancyController> = hub.api();
    let status = wait_until(
        "the signed dependency delivered, the others refused",
        DEADLINE,
        || async {
            let status = api.get("oci-deps").await.ok()?.status?;
            let signed = message(&status, "member-1", "signed")?;
            let refused = ["unsigned", "stranger"].iter().all(|release| {
                message(&status, "member-1", release)
                    .is_some_and(|m| m.error_message.contains("is not verified"))
            });
            (signed.phase == "Deployed" && refused).then_some(status)
        },
    )
    .await;
    let signed = message(&status, "member-1", "signed").unwrap();
    assert!(
        signed
            .verified_by
            .starts_with("dependency deployment-example 1.0.0: cosign: key sha256:"),
        "who signed the dependency is shown: {signed:?}"
    );
    let manifest = hub
        .lab
        .helm("member-1", &["get", "manifest", "signed", "-n", &ns]);
    assert!(
        manifest.contains("signed-umbrella") && manifest.contains("kind: Deployment"),
        "the umbrella's ConfigMap and the dependency's Deployment: {manifest}"
    );
    for (release, version) in [("unsigned", "1.0.1"), ("stranger", "1.0.2")] {
        let m = message(&status, "member-1", release).unwrap();
        assert!(
            m.error_message
                .contains("dependency \"deployment-example\"")
                && m.error_message.contains("charts/umbrella/Chart.yaml")
                && m.error_message.contains(&registry.host)
                && m.error_message
                    .contains(&format!("version {version} is not verified"))
                && m.error_message.contains("refused by cosign (TenancyPolicy"),
            "{release}: {m:?}"
        );
        assert!(m.verified_by.is_empty(), "{m:?}");
        assert!(
            hub.lab
                .try_helm("member-1", &["status", release, "-n", &ns])
                .is_err(),
            "nothing of {release} is installed"
        );
    }
    hub.delete_and_wait_gone("oci-deps").await;
}
