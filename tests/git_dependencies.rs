//! End-to-end tests of a Git chart's dependencies: an umbrella chart in the lab's Git server depending on a chart of the lab's HTTP chart repository, resolved by the hub (the newest version its range allows) and delivered with the dependency's objects, its `.helmignore` applied; and a dependency from a repository outside the policy refused in status with nothing installed.

mod common;

use common::{
    fixtures::{DEADLINE, chart, message, tenancy, unique, wait_until},
    git::{GitRepo, GitServer},
    hub::{Hub, allow_all},
    repo::ChartRepo,
};
use kube::Api;
use tenancy_hub::api::{
    crd::{Chart, ControllerSpec, GitRef, GitSource, SecretReference, TenancyController},
    policy::{GitAccess, SourceAccess, TenancyPolicySpec},
};

/// The namespace the operator keeps its platform Secrets in (its `--lease-namespace`).
const OPERATOR_NAMESPACE: &str = "tenancy-hub";

/// A working copy holding chart `umbrella` at `charts/umbrella`: a ConfigMap of its own and a
/// dependency on the example chart (`>=0.1.0 <1.0.0`) of `repository`; its `.helmignore` leaves
/// out a file that would not render.
fn umbrella(repository: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let to = dir.path().join("charts/umbrella").join(path);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text).unwrap();
    };
    write(
        "Chart.yaml",
        &format!(
            "apiVersion: v2\nname: umbrella\nversion: 1.0.0\ndependencies:\n- name: deployment-example\n  version: \">=0.1.0 <1.0.0\"\n  repository: {repository}\n"
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

/// A policy allowing `team/` of the Git server (path `charts`, branch main; plain http, so
/// `insecure`) with `secret`, and
/// the chart sources `sources`.
fn policy(
    namespace: &str,
    server: &GitServer,
    secret: &str,
    sources: &[&str],
) -> TenancyPolicySpec {
    let mut policy = allow_all(namespace, sources);
    policy.sources = vec![SourceAccess {
        url: format!("{}/team/", server.http),
        secret_ref: Some(SecretReference {
            name: secret.to_owned(),
        }),
        git: Some(GitAccess {
            paths: vec!["charts".into()],
            branches: vec!["main".into()],
            // The lab's Git server speaks plain http.
            insecure: true,
            ..GitAccess::default()
        }),
        ..SourceAccess::default()
    }];
    policy
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
        policy(&hub.namespace, &server, &secret, &[&allowed.url]),
    )
    .await;
    let good = server.create_repo(&unique("team/umbrella"));
    let commit = good.push_dir(umbrella(&allowed.url).path(), "main", "umbrella");
    let bad = server.create_repo(&unique("team/foreign-dep"));
    bad.push_dir(umbrella(&outside.url).path(), "main", "foreign dependency");
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
