//! End-to-end tests of hostile Git sources beside a second tenant: team a's Controller points at a huge repository, a path with `..`, a symlink out of the chart and a submodule, and floods its policy's push hook with bad signatures; each is refused with a clear message (the flood with 401s, amid which team a's own valid hook is still taken) while team b's Git chart keeps being delivered and upgraded by a push its own hook announces.

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::{
    fixtures::{DEADLINE, chart, message, put_secret, tenancy, unique, wait_until},
    git::{CHART_PATH, GitRepo, GitServer, embedded_repo, git_policy, gitea_signature, work_tree},
    hub::Hub,
};
use tenancy_hub::api::crd::{
    ControllerSpec, ControllerStatus, GitRef, GitSource, TenancyController,
};

/// The namespace the operator keeps its platform Secrets in (its `--lease-namespace`).
const OPERATOR_NAMESPACE: &str = "tenancy-hub";

/// The label the operator of [`Hub::two_teams`] selects Controllers by.
const LABEL: &str = "git-hostile-test";

/// The secret team b's push hooks are signed with.
const HOOK_SECRET: &str = "hook-secret-of-team-b";

/// Past the operator's bound on what one fetch receives and writes (64 MiB).
const HUGE: u64 = 65 << 20;

/// The example chart of `repo` at `path`, branch main, looked at every `interval`.
fn git_chart(
    repo: &GitRepo,
    release: &str,
    path: &str,
    interval: &str,
) -> tenancy_hub::api::crd::Chart {
    tenancy_hub::api::crd::Chart {
        git: Some(GitSource {
            url: repo.http_url.clone(),
            reference: GitRef {
                branch: Some("main".into()),
                ..GitRef::default()
            },
            path: path.into(),
            interval: Some(interval.into()),
        }),
        ..chart("deployment-example", release, &[])
    }
}

/// Controller `name` with `spec`, labelled for the operator of [`Hub::two_teams`].
fn labelled(name: &str, spec: ControllerSpec, id: &str) -> TenancyController {
    let mut c = TenancyController::new(name, spec);
    c.metadata.labels = Some(BTreeMap::from([(LABEL.into(), id.into())]));
    c
}

/// The example chart at `CHART_PATH` plus, beside it, the hostile charts: `charts/huge` holding a
/// file past the fetch bound (zeros: a small pack that inflates past it), `charts/link` with a
/// template that is a symlink out of the chart, `charts/sub` with a submodule pointing elsewhere.
fn hostile_tree() -> tempfile::TempDir {
    let tree = work_tree("0.1.0", 1, &[]);
    let root = tree.path();
    let copy = |to: &str| {
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(root.join(CHART_PATH))
            .arg(root.join(to))
            .status()
            .unwrap();
        assert!(status.success());
    };
    copy("charts/huge");
    let huge = std::fs::File::create(root.join("charts/huge/files.bin")).unwrap();
    huge.set_len(HUGE).unwrap();
    copy("charts/link");
    std::fs::write(root.join("outside.yaml"), "kind: Secret\n").unwrap();
    std::os::unix::fs::symlink(
        "../../../outside.yaml",
        root.join("charts/link/templates/stolen.yaml"),
    )
    .unwrap();
    copy("charts/sub");
    embedded_repo(&root.join("charts/sub/vendor"), "README");
    std::fs::write(
        root.join(".gitmodules"),
        "[submodule \"vendor\"]\n\tpath = charts/sub/vendor\n\turl = https://elsewhere.invalid/x.git\n",
    )
    .unwrap();
    tree
}

/// The status of Controller `name` of `namespace` once `check` holds for it.
async fn status_until(
    hub: &Hub,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&ControllerStatus) -> bool,
) -> ControllerStatus {
    let api: kube::Api<TenancyController> = kube::Api::namespaced(hub.client.clone(), namespace);
    wait_until(what, DEADLINE, || async {
        let status = api.get(name).await.ok()?.status?;
        check(&status).then_some(status)
    })
    .await
}

/// Whether `release` on member-1 is deployed from `commit`.
fn deployed_from(status: &ControllerStatus, release: &str, commit: &str) -> bool {
    message(status, "member-1", release)
        .is_some_and(|m| m.phase == "Deployed" && m.source.contains(commit))
}

/// Posts a push hook to `url` signed with `secret`; its status code.
async fn post_hook(client: &reqwest::Client, url: &str, body: &[u8], secret: &[u8]) -> u16 {
    client
        .post(url)
        .header("x-gitea-event", "push")
        .header("x-gitea-signature", gitea_signature(secret, body))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("every hook is answered")
        .status()
        .as_u16()
}

/// Posts `count` push hooks to `url` at once, signed with a wrong secret; the status codes.
async fn flood(url: &str, body: &[u8], count: usize) -> Vec<u16> {
    let client = reqwest::Client::new();
    let posts = (0..count).map(|_| post_hook(&client, url, body, b"not the secret"));
    futures::future::join_all(posts).await
}

#[tokio::test]
#[ignore = "needs the lab with its Git server: kind/up.sh, then --include-ignored"]
async fn hostile_repositories_and_a_hook_flood_of_one_team_are_refused_while_the_other_teams_git_chart_is_delivered_and_upgraded()
 {
    let started = std::time::Instant::now();
    let lab = common::lab::Lab::get();
    let server = GitServer::get(&lab);
    let id = unique("hostile-git");
    let fetcher = server.fetcher.to_string_lossy().into_owned();
    let (hub, team_b) = Hub::two_teams(&id, LABEL, &["--git-fetcher", &fetcher]).await;
    let team_a = hub.namespace.clone();
    let secret = unique("git-pull");
    let credentials = [
        ("username", server.username.as_str()),
        ("password", server.password.as_str()),
    ];
    put_secret(&lab, OPERATOR_NAMESPACE, &secret, &credentials).await;
    let hook = unique("git-hook");
    put_secret(&lab, OPERATOR_NAMESPACE, &hook, &[("token", HOOK_SECRET)]).await;
    let (prefix_a, prefix_b) = (unique("team-a"), unique("team-b"));
    hub.policy(
        &team_a,
        git_policy(&server, &team_a, &prefix_a, &secret, Some(&hook), &[]),
    )
    .await;
    hub.policy(
        &team_b,
        git_policy(&server, &team_b, &prefix_b, &secret, Some(&hook), &[]),
    )
    .await;

    // Team a's repository holds every hostile chart; team b's, the example chart.
    let hostile = server.create_repo(&format!("{prefix_a}/charts"));
    hostile.push_dir(hostile_tree().path(), "main", "hostile");
    let good = server.create_repo(&format!("{prefix_b}/charts"));
    let first = good.push_dir(work_tree("0.1.0", 1, &[]).path(), "main", "first");
    let operator = hub.operator.as_ref().unwrap();
    good.set_webhook(
        &format!("http://{}/hooks/git/{team_b}", operator.http),
        HOOK_SECRET,
    );

    let ns_a = unique("hostile");
    let charts_a = vec![
        git_chart(&hostile, "huge", "charts/huge", "10s"),
        // `..` written plainly is refused by the API server's schema (below); encoded, by admission.
        git_chart(&hostile, "climb", "charts/%2e%2e/%2e%2e/etc", "10s"),
        git_chart(&hostile, "link", "charts/link", "10s"),
        git_chart(&hostile, "sub", "charts/sub", "10s"),
    ];
    let spec_a = ControllerSpec {
        tenancies: vec![tenancy(&ns_a, &["member-1"], charts_a)],
        ..Default::default()
    };
    let mut plain = spec_a.clone();
    plain.tenancies[0].charts[1].git.as_mut().unwrap().path = "charts/../../etc".into();
    let refused = kube::Api::<TenancyController>::namespaced(hub.client.clone(), &team_a)
        .create(&Default::default(), &labelled("climbing", plain, &id))
        .await
        .expect_err("the API server refuses a path with '..'");
    assert!(refused.to_string().contains("path"), "{refused}");
    hub.apply_in(&team_a, &labelled("hostile", spec_a, &id))
        .await;
    // Team b's chart is looked at once a day: only its hook brings a push in.
    let ns_b = unique("good");
    let spec_b = ControllerSpec {
        tenancies: vec![tenancy(
            &ns_b,
            &["member-1"],
            vec![git_chart(&good, "web", CHART_PATH, "24h")],
        )],
        ..Default::default()
    };
    hub.apply_in(&team_b, &labelled("good", spec_b, &id)).await;

    status_until(&hub, &team_b, "good", "team b's chart deployed", |s| {
        deployed_from(s, "web", &first)
    })
    .await;
    let refused = |release: &str, phase: &str, needles: &'static [&'static str]| {
        let (release, phase) = (release.to_owned(), phase.to_owned());
        move |s: &ControllerStatus| {
            message(s, "member-1", &release).is_some_and(|m| {
                m.phase == phase && needles.iter().all(|n| m.error_message.contains(n))
            })
        }
    };
    let checks: [(&str, &str, &[&str]); 4] = [
        ("huge", "Invalid", &["size", "charts/huge"]),
        ("climb", "Forbidden", &["'..'"]),
        ("link", "Invalid", &["symlink", "stolen.yaml"]),
        ("sub", "Invalid", &["submodule", "vendor"]),
    ];
    for (release, phase, needles) in checks {
        let status = status_until(
            &hub,
            &team_a,
            "hostile",
            &format!("team a's {release} refused ({phase}: {needles:?})"),
            refused(release, phase, needles),
        )
        .await;
        let said = &message(&status, "member-1", release).unwrap().error_message;
        assert!(!said.contains(&server.password), "{said}");
        eprintln!("{release}: {phase}: {said}");
    }
    assert_eq!(
        lab.releases("member-1", &ns_a),
        BTreeMap::new(),
        "nothing of team a's hostile charts was installed"
    );

    // A flood of badly signed hooks at team a's policy, and amid it a valid hook of team a: every
    // bad one answered 401 (the flood is under the policy's failure bound), the valid one taken,
    // the bad ones having taken nothing of the valid hooks' window.
    let body = serde_json::json!({
        "ref": "refs/heads/main",
        "repository": {"clone_url": hostile.http_url},
    })
    .to_string();
    let url_a = format!("http://{}/hooks/git/{team_a}", operator.http);
    let flood_started = std::time::Instant::now();
    let (codes, valid) = tokio::join!(flood(&url_a, body.as_bytes(), 200), async {
        tokio::task::yield_now().await;
        post_hook(
            &reqwest::Client::new(),
            &url_a,
            body.as_bytes(),
            HOOK_SECRET.as_bytes(),
        )
        .await
    });
    let flood_took = flood_started.elapsed();
    let unauthorized = codes.iter().filter(|&&c| c == 401).count();
    eprintln!(
        "flood of 200 badly signed hooks: {unauthorized} answered 401, in {flood_took:?}; team a's valid hook amid it: {valid}"
    );
    assert_eq!(unauthorized, codes.len(), "{codes:?}");
    assert_eq!(valid, 202, "team a's valid hook amid the flood");

    // Meanwhile team b pushes; its own hook, signed with its secret, brings the push in.
    let pushed = std::time::Instant::now();
    let second = good.push_dir(work_tree("0.1.1", 2, &[]).path(), "main", "second");
    let status = status_until(
        &hub,
        &team_b,
        "good",
        "team b's second commit deployed after its hook",
        |s| deployed_from(s, "web", &second),
    )
    .await;
    let upgraded = pushed.elapsed();
    eprintln!("team b's push to deployed during team a's flood (hook, 24h interval): {upgraded:?}");
    assert!(upgraded < Duration::from_secs(60), "{upgraded:?}");
    assert_eq!(
        message(&status, "member-1", "web").unwrap().chart_version,
        "0.1.1"
    );
    hub.releases_become("member-1", &ns_b, &[("web", 2)]).await;
    assert!(
        !hub.log().contains(&server.password),
        "the operator's log shows the password"
    );
    for (namespace, name) in [(&team_a, "hostile"), (&team_b, "good")] {
        let api: kube::Api<TenancyController> =
            kube::Api::namespaced(hub.client.clone(), namespace);
        api.delete(name, &Default::default()).await.unwrap();
        wait_until(&format!("{name} gone"), DEADLINE, || async {
            api.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    eprintln!("the whole test: {:?}", started.elapsed());
}
