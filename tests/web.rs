//! End-to-end tests of the fleet view in a real headless browser: two tenants on one operator,
//! each token shown its own Controllers and nothing of the other's (in the page and in what the
//! browser is sent), a pod deleted on a member shown gone without a reload, tenant-written markup
//! inert, one tenant's token refused on the other's pages and the event stream refused without
//! one. Screenshots of each view go to the lab's `screenshots/` folder.

mod common;

use std::time::{Duration, Instant};

use common::{
    agent::join,
    browser::Browser,
    fixtures::{DEADLINE, chart, tenancy, unique, wait_until},
    hub::{EDITOR, Hub, create_namespace, editor_token, reader_token},
    lab::Lab,
    operator::{Operator, http_get},
};
use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::util::intstr::IntOrString};
use kube::{
    Api, ResourceExt as _,
    api::{DeleteParams, ListParams},
};
use tenancy_hub::api::crd::{ControllerSpec, TenancyController};

/// The label the test's operator selects its Controllers by.
const LABEL: &str = "web-view.tenancy-hub.test/run";
/// What a tenant writes where markup could hide: a chart name and values.
const EVIL_CHART: &str = "<img src=x onerror=window.xssed=1>";
const EVIL_VALUE: &str = "</pre><script>window.xssed=2</script><svg onload=window.xssed=3>";

/// Controller `name` in hub namespace `hub_ns`, labelled for the test's operator, delivering
/// `deployment-example` as `web` (two replicas) into `namespace` of `clusters`, plus `extra` charts.
fn controller(
    id: &str,
    hub_ns: &str,
    name: &str,
    namespace: &str,
    clusters: &[&str],
    extra: Vec<tenancy_hub::api::crd::Chart>,
) -> TenancyController {
    let mut web = chart("deployment-example", "web", &[("replicaCount", "2")]);
    web.values = Some(serde_json::json!({ "note": EVIL_VALUE }));
    let charts = [vec![web], extra].concat();
    let mut c = TenancyController::new(
        name,
        ControllerSpec {
            tenancies: vec![tenancy(namespace, clusters, charts)],
            ..ControllerSpec::default()
        },
    );
    c.metadata.namespace = Some(hub_ns.into());
    c.metadata.labels = Some([(LABEL.to_owned(), id.to_owned())].into());
    c
}

/// Signs `browser` in to the view at `base` with `token`.
async fn sign_in(browser: &Browser, base: &str, token: &str) {
    browser.goto(&format!("{base}/ui/login")).await;
    browser.type_into("#token", token).await;
    browser.click("#signin").await;
}

/// Waits until the page's text satisfies `check`, within `timeout`; returns the text.
async fn text_until(
    browser: &Browser,
    what: &str,
    timeout: Duration,
    check: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let text = browser.text().await;
        if check(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the page says:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the browser is sent for `path` (its status and body), fetched in the page with its cookie;
/// a live stream is read until its first event.
async fn fetched(browser: &Browser, path: &str) -> String {
    let script = format!(
        "const done = arguments[0];
         fetch({path:?}).then(async r => {{
           const reader = r.body.getReader();
           let text = '';
           while (true) {{
             const {{value, done: end}} = await reader.read();
             if (end) break;
             text += new TextDecoder().decode(value);
             if (r.headers.get('content-type') === 'text/event-stream' && text.includes('\\n\\n')) {{ reader.cancel(); break; }}
           }}
           done(r.status + ' ' + text);
         }}).catch(e => done('error ' + e));"
    );
    browser
        .run_async(&script)
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Opens the fleet's live stream at `addr` with `token`: its status, and the connection, held
/// open until dropped.
fn open_stream(addr: std::net::SocketAddr, token: &str) -> (u16, std::net::TcpStream) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET /ui/live/fleet HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    let code = String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0);
    (code, stream)
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn each_tenant_sees_its_own_fleet_live_and_nothing_of_the_other() {
    let id = unique("webview");
    let (ns_a, ns_b) = (format!("{id}-a"), format!("{id}-b"));
    let hub = Hub::without_operator(Lab::get(), ns_a.clone()).await;
    create_namespace(&hub.client, &ns_b).await;
    let lab = &hub.lab;
    let selector = format!("{LABEL}={id}");
    let operator =
        Operator::start_with(lab, &ns_a, &["--selector", &selector, "--lease-name", &id]);
    let base = format!("http://{}", operator.http);
    let (apps_a, apps_b) = (format!("{id}-apps-a"), format!("{id}-apps-b"));
    // A pull member, whose agent's version shows on its cluster page.
    let agent_dir = tempfile::tempdir().unwrap();
    let edge = unique("edge-w");
    let _agent = join(lab, &edge, "pull-1", agent_dir.path());
    hub.apply_in(
        &ns_a,
        &controller(&id, &ns_a, "shop", &apps_a, &["member-1", &edge], vec![]),
    )
    .await;
    // A chart name no chart has: reported (as a release that cannot be delivered) with its name.
    let mut odd = controller(
        &id,
        &ns_a,
        "odd",
        &format!("{apps_a}-odd"),
        &["member-1"],
        vec![],
    );
    odd.spec.tenancies[0].charts = vec![chart(EVIL_CHART, "odd", &[])];
    hub.apply_in(&ns_a, &odd).await;
    hub.apply_in(
        &ns_b,
        &controller(
            &id,
            &ns_b,
            "bank",
            &apps_b,
            &["member-1", "member-2"],
            vec![],
        ),
    )
    .await;
    let (token_a, token_b) = (
        reader_token(lab, &hub.client, &ns_a).await,
        reader_token(lab, &hub.client, &ns_b).await,
    );
    let shots = lab.dir.join("screenshots");

    // Tenant A: its Controller in the matrix, nothing of B's, in the page and in what it is sent.
    let a = Browser::start().await;
    sign_in(&a, &base, &token_a).await;
    let fleet = text_until(&a, "A's Controller in the matrix", DEADLINE, |t| {
        t.contains(&format!("{ns_a}/shop"))
    })
    .await;
    a.screenshot(&shots.join("fleet-tenant-a.png")).await;
    for sent in [
        a.run("return document.documentElement.outerHTML;")
            .await
            .to_string(),
        fetched(&a, "/ui/").await,
        fetched(&a, "/ui/live/fleet").await,
        fetched(&a, "/ui/clusters/member-1").await,
    ] {
        for other in [ns_b.as_str(), apps_b.as_str(), "bank", "member-2"] {
            assert!(
                !sent.contains(other),
                "{other} was sent to tenant A: {sent}\n(page: {fleet})"
            );
        }
    }

    // A's token replayed on B's pages and stream: answered as pages that are not there.
    let b_page = format!("/ui/controllers/{ns_b}/bank");
    assert!(fetched(&a, &b_page).await.starts_with("404 "));
    assert_eq!(http_get(operator.http, &b_page, Some(&token_a)).0, 404);
    assert_eq!(
        http_get(
            operator.http,
            &format!("/ui/live/controllers/{ns_b}/bank"),
            Some(&token_a)
        )
        .0,
        404
    );
    assert_eq!(
        http_get(operator.http, "/ui/clusters/member-2", Some(&token_a)).0,
        404
    );
    // The stream without a token, or with one the hub rejects: refused.
    assert_eq!(http_get(operator.http, "/ui/live/fleet", None).0, 401);
    assert_eq!(
        http_get(operator.http, "/ui/live/fleet", Some("not-a-token")).0,
        401
    );
    assert_eq!(
        http_get(operator.http, "/ui/", None).0,
        303,
        "pages send the browser to sign in"
    );

    // The Controller page: A's pods, live. A pod deleted on the member is gone from the page
    // within 2 s, without a reload.
    a.goto(&format!("{base}/ui/controllers/{ns_a}/shop")).await;
    let member = lab.client("member-1").await;
    let pods: Api<Pod> = Api::namespaced(member, &apps_a);
    let names = wait_until("web's two pods to run on member-1", DEADLINE, || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        let names: Vec<String> = list
            .items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        (names.len() == 2).then_some(names)
    })
    .await;
    text_until(&a, "both pods on the page", DEADLINE, |t| {
        names.iter().all(|n| t.contains(n.as_str()))
    })
    .await;
    // Below the releases: what the planner does next, and the operator's Events.
    text_until(&a, "the Next and Last Events sections", DEADLINE, |t| {
        t.contains("Next") && t.contains("Last Events") && t.contains("Installed")
    })
    .await;
    a.screenshot(&shots.join("controller-tenant-a.png")).await;
    a.run("window.notReloaded = true;").await;
    pods.delete(&names[0], &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let deleted = Instant::now();
    text_until(
        &a,
        "the deleted pod gone from the page",
        Duration::from_secs(2),
        |t| !t.contains(names[0].as_str()),
    )
    .await;
    let shown_after = deleted.elapsed();
    println!("a pod deleted on member-1 left the open page after {shown_after:?}");
    assert_eq!(
        a.run("return window.notReloaded === true;").await,
        true,
        "the page reloaded"
    );

    // Tenant-written markup is shown as text and runs nothing: values, and a chart's name.
    a.run("document.querySelectorAll('details').forEach(d => d.open = true);")
        .await;
    text_until(&a, "the values shown as text", DEADLINE, |t| {
        t.contains(EVIL_VALUE)
    })
    .await;
    let planted = "return [typeof window.xssed, document.querySelectorAll('main img, main svg, main script').length];";
    assert_eq!(a.run(planted).await, serde_json::json!(["undefined", 0]));
    a.screenshot(&shots.join("controller-hostile-values.png"))
        .await;
    a.goto(&format!("{base}/ui/controllers/{ns_a}/odd")).await;
    text_until(&a, "the hostile chart's release reported", DEADLINE, |t| {
        t.contains(EVIL_CHART)
    })
    .await;
    assert_eq!(a.run(planted).await, serde_json::json!(["undefined", 0]));
    a.screenshot(&shots.join("controller-hostile-chart-name.png"))
        .await;
    a.goto(&format!("{base}/ui/clusters/member-1")).await;
    text_until(&a, "the cluster page", DEADLINE, |t| {
        t.contains(&format!("{ns_a}/shop"))
    })
    .await;
    a.screenshot(&shots.join("cluster-member-1-tenant-a.png"))
        .await;
    // The pull member's page: its agent's version, as the agent reports it.
    a.goto(&format!("{base}/ui/clusters/{edge}")).await;
    let shown_version = "return [...document.querySelectorAll('#health dt')].find(d => d.textContent == 'Agent version')?.nextElementSibling?.textContent ?? '';";
    let deadline = Instant::now() + DEADLINE;
    loop {
        let version = a.run(shown_version).await;
        if version == env!("CARGO_PKG_VERSION") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent's version was not shown on {edge}'s page: {version}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        a.goto(&format!("{base}/ui/clusters/{edge}")).await;
    }
    a.screenshot(&shots.join("cluster-pull-member-tenant-a.png"))
        .await;
    // Accessibility: axe-core finds nothing against WCAG 2 A and AA on the three views.
    for page in [
        "/ui/".to_owned(),
        format!("/ui/controllers/{ns_a}/shop"),
        "/ui/clusters/member-1".to_owned(),
    ] {
        a.goto(&format!("{base}{page}")).await;
        let found = a.accessibility_violations().await;
        assert!(
            found.is_empty(),
            "{page} breaks WCAG 2 A/AA rules: {found:#?}"
        );
    }
    // Keyboard: the first link of the header is reached with Tab.
    a.goto(&format!("{base}/ui/")).await;
    a.keys("\u{E004}").await;
    let focused = a
        .run("return document.activeElement.getAttribute('href');")
        .await;
    assert_eq!(focused, "/ui/");

    // Tenant B: its own, nothing of A's.
    let b = Browser::start().await;
    sign_in(&b, &base, &token_b).await;
    text_until(&b, "B's Controller in the matrix", DEADLINE, |t| {
        t.contains(&format!("{ns_b}/bank"))
    })
    .await;
    b.screenshot(&shots.join("fleet-tenant-b.png")).await;
    let sent = [
        b.run("return document.documentElement.outerHTML;")
            .await
            .to_string(),
        fetched(&b, "/ui/live/fleet").await,
    ]
    .concat();
    for other in [ns_a.as_str(), apps_a.as_str(), "shop", "odd"] {
        assert!(
            !sent.contains(other),
            "{other} was sent to tenant B: {sent}"
        );
    }
    let a_page = format!("/ui/controllers/{ns_a}/shop");
    assert!(fetched(&b, &a_page).await.starts_with("404 "));

    // Live streams are bounded per viewer: with B's browser holding one (or two, while the one
    // fetched above is let go), B's further streams are refused past eight in all, and A, another
    // identity, is still served.
    let mut held = Vec::new();
    let refused = loop {
        let (code, stream) = open_stream(operator.http, &token_b);
        if code != 200 || held.len() == 10 {
            break code;
        }
        held.push(stream);
    };
    assert_eq!(refused, 429);
    assert!(
        (6..=7).contains(&held.len()),
        "{} streams opened",
        held.len()
    );
    assert_eq!(open_stream(operator.http, &token_a).0, 200);
    drop(held);
    assert!(
        !operator.logged().contains(&token_a),
        "a token reached the log"
    );

    drop((a, b));
    for (ns, name) in [(&ns_a, "shop"), (&ns_a, "odd"), (&ns_b, "bank")] {
        Api::<TenancyController>::namespaced(hub.client.clone(), ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    common::hub::all_gone(&Api::namespaced(hub.client.clone(), &ns_a), DEADLINE).await;
    common::hub::all_gone(&Api::namespaced(hub.client.clone(), &ns_b), DEADLINE).await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_viewer_who_may_patch_suspends_resumes_and_asks_for_a_drift_check_as_itself() {
    let id = unique("webact");
    let hub = Hub::without_operator(Lab::get(), id.clone()).await;
    let lab = &hub.lab;
    let selector = format!("{LABEL}={id}");
    let operator = Operator::start_with(lab, &id, &["--selector", &selector, "--lease-name", &id]);
    let base = format!("http://{}", operator.http);
    let apps = format!("{id}-apps");
    // Two waves, member-1 then member-2, each given 15 s to become ready.
    let shop = |replicas: (&str, &str)| {
        let mut c = controller(&id, &id, "shop", &apps, &["member-1", "member-2"], vec![]);
        c.spec.tenancies[0].charts[0]
            .settings
            .push(tenancy_hub::api::crd::Setting {
                key: replicas.0.into(),
                value: replicas.1.into(),
            });
        c.spec.rollout = Some(tenancy_hub::api::crd::Rollout {
            max_unavailable: Some(IntOrString::Int(1)),
            progress_deadline: Some("15s".into()),
            waves: ["1", "2"]
                .map(|n| tenancy_hub::api::crd::Wave {
                    cluster_selector: tenancy_hub::api::crd::ClusterSelector {
                        match_labels: [("index".to_owned(), n.to_owned())].into(),
                    },
                })
                .into(),
            ..Default::default()
        });
        c
    };
    let rollout = |s: &tenancy_hub::api::crd::ControllerStatus, generation, phase: &str| {
        s.rollout
            .as_ref()
            .is_some_and(|r| r.generation == generation && r.phase == phase)
    };
    hub.apply_in(&id, &shop(("podAnnotations.try", "1"))).await;
    hub.status_until("shop", "the first rollout to complete", |s| {
        rollout(s, 1, "Complete")
    })
    .await;
    let controllers: Api<TenancyController> = Api::namespaced(hub.client.clone(), &id);
    let page = format!("{base}/ui/controllers/{id}/shop");

    // A reader is offered nothing to do.
    let reader = reader_token(lab, &hub.client, &id).await;
    let r = Browser::start().await;
    sign_in(&r, &base, &reader).await;
    r.goto(&page).await;
    text_until(&r, "the reader's Controller page", DEADLINE, |t| {
        t.contains("Last Events")
    })
    .await;
    assert!(
        !r.text().await.contains("Actions"),
        "a reader was offered actions"
    );
    // Posted anyway, from the view's own page: refused, and nothing changes.
    let posted = r
        .run_async(&format!(
            "fetch('/ui/controllers/{id}/shop/actions/suspend', {{method: 'POST'}})
               .then(a => arguments[0](a.status));"
        ))
        .await;
    assert_eq!(posted, 403);
    assert!(!controllers.get("shop").await.unwrap().spec.suspend);

    // An editor suspends, resumes and asks for a drift check, each as itself.
    let editor = editor_token(lab, &hub.client, &id).await;
    let e = Browser::start().await;
    sign_in(&e, &base, &editor).await;
    e.goto(&page).await;
    text_until(&e, "the editor's actions", DEADLINE, |t| {
        t.contains("Check drift now") && t.contains("Suspend")
    })
    .await;
    // A change whose pods never become ready halts the rollout at member-1: the matrix shows
    // member-2's cell held, the page the halt, and the editor may resume the rollout.
    hub.apply_in(&id, &shop(("nodeSelector.nowhere", "never")))
        .await;
    hub.status_until("shop", "the rollout to halt", |s| rollout(s, 2, "Halted"))
        .await;
    e.goto(&format!("{base}/ui/")).await;
    let cell = |cluster: &str| {
        format!("return document.querySelector('#row-{cluster} td.c')?.className ?? '';")
    };
    let deadline = Instant::now() + DEADLINE;
    while e.run(&cell("member-2")).await != "c s-held" {
        assert!(
            Instant::now() < deadline,
            "member-2's cell is not shown held"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_ne!(e.run(&cell("member-1")).await, "c s-ready");
    e.screenshot(&lab.dir.join("screenshots/fleet-rollout-halted.png"))
        .await;
    e.goto(&page).await;
    text_until(&e, "the halt and its action", DEADLINE, |t| {
        t.contains("Halted at") && t.contains("Resume the rollout")
    })
    .await;
    e.click("form[action$='/actions/resume-rollout'] button")
        .await;
    text_until(&e, "the resume asked", DEADLINE, |t| {
        t.contains("Asked the rollout to resume")
    })
    .await;
    let asked = controllers.get("shop").await.unwrap();
    assert!(
        asked
            .annotations()
            .get("multitenancy.dev/rollout")
            .is_some_and(|v| v.starts_with("resume-")),
        "{:?}",
        asked.annotations()
    );
    // Back to a good change: the rollout completes, and then the suspend and resume.
    hub.apply_in(&id, &shop(("podAnnotations.try", "3"))).await;
    hub.status_until("shop", "the good change to roll out", |s| {
        rollout(s, 3, "Complete")
    })
    .await;
    e.goto(&page).await;
    text_until(&e, "Suspend offered again", DEADLINE, |t| {
        t.contains("Suspend")
    })
    .await;
    e.click("form[action$='/actions/suspend'] button").await;
    text_until(&e, "the page back, saying so", DEADLINE, |t| {
        t.contains("Suspended: no Helm call is made")
    })
    .await;
    let suspended = controllers.get("shop").await.unwrap();
    assert!(suspended.spec.suspend, "the Controller was not suspended");
    text_until(&e, "Resume offered", DEADLINE, |t| t.contains("Resume")).await;
    e.screenshot(&lab.dir.join("screenshots/controller-actions-suspended.png"))
        .await;
    e.click("form[action$='/actions/resume'] button").await;
    text_until(&e, "resumed", DEADLINE, |t| t.contains("Resumed:")).await;
    assert!(!controllers.get("shop").await.unwrap().spec.suspend);
    e.click("form[action$='/actions/check-drift'] button").await;
    text_until(&e, "the drift check asked", DEADLINE, |t| {
        t.contains("Asked for a drift check")
    })
    .await;
    wait_until("the operator to check drift as asked", DEADLINE, || async {
        operator
            .logged()
            .contains("a drift check was asked for; checking now")
            .then_some(())
    })
    .await;
    // The hub's audit would name the editor: the operator's log does too, and never its token.
    let logged = operator.logged();
    assert!(logged.contains(&format!("system:serviceaccount:{id}:{EDITOR}")));
    assert!(!logged.contains(&editor) && !logged.contains(&reader));

    drop((r, e));
    controllers
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    common::hub::all_gone(&controllers, DEADLINE).await;
}

/// A chart home with chart `vault-web`: `deployment-example`'s Deployment, a Secret holding
/// `LITERAL` (written in the chart) beside the replica count and a token, and a ConfigMap
/// showing the token (which the Controller takes from a hub Secret) beside the replica count.
fn vault_chart_home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let chart = home.path().join("vault-web");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts/deployment-example");
    for file in ["values.yaml", "templates/deployment.yaml"] {
        std::fs::copy(example.join(file), chart.join(file)).unwrap();
    }
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: vault-web\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/secret.yaml"),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{{{ .Release.Name }}}}-vault\nstringData:\n  password: {LITERAL:?}\n  replicas: {{{{ .Values.replicaCount | quote }}}}\n  token: {{{{ .Values.token | quote }}}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        chart.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-shown\ndata:\n  token: {{ .Values.token | quote }}\n  replicas: {{ .Values.replicaCount | quote }}\n",
    )
    .unwrap();
    home
}

/// The password `vault-web` renders into its Secret.
const LITERAL: &str = "l1teral-pw-from-the-chart";

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_held_change_shows_its_manifest_diff_with_no_secret_in_the_page_or_what_the_browser_is_sent()
 {
    use tenancy_hub::api::{
        crd::{Rollout, ValuesKind, ValuesReference, Wave},
        policy::ValuesRule,
    };
    let started = Instant::now();
    let id = unique("webdiff");
    let hub = Hub::without_operator(Lab::get(), id.clone()).await;
    let lab = &hub.lab;
    let home = vault_chart_home();
    let mut policy = common::hub::allow_all(&id, &[]);
    policy.values_from = vec![ValuesRule {
        kind: Some(ValuesKind::Secret),
        names: vec!["vault".into()],
        ..Default::default()
    }];
    hub.policy(&id, policy).await;
    let operator = Operator::start_with(
        lab,
        &id,
        &[
            "--chart-home",
            home.path().to_str().unwrap(),
            "--lease-name",
            &id,
        ],
    );
    let base = format!("http://{}", operator.http);
    let apps = format!("{id}-apps");
    // A pull member: the hub renders its chart and asks its agent for the deployed manifest.
    let agent_dir = tempfile::tempdir().unwrap();
    let edge = unique("edge-d");
    let _agent = join(lab, &edge, "pull-2", agent_dir.path());
    // Three waves, member-1, member-2, then the pull member; the token comes from hub Secret
    // `vault`.
    let shop = |settings: &[(&str, &str)]| {
        let mut chart = chart("vault-web", "web", settings);
        chart.values_from = vec![ValuesReference {
            kind: ValuesKind::Secret,
            name: "vault".into(),
            values_key: Some("token".into()),
            target_path: Some("token".into()),
            ..Default::default()
        }];
        let mut c = TenancyController::new(
            "shop",
            ControllerSpec {
                tenancies: vec![tenancy(
                    &apps,
                    &["member-1", "member-2", &edge],
                    vec![chart],
                )],
                rollout: Some(Rollout {
                    max_unavailable: Some(IntOrString::Int(1)),
                    progress_deadline: Some("15s".into()),
                    waves: [("index", "1"), ("index", "2"), ("kind", "edge")]
                        .map(|(k, v)| Wave {
                            cluster_selector: tenancy_hub::api::crd::ClusterSelector {
                                match_labels: [(k.to_owned(), v.to_owned())].into(),
                            },
                        })
                        .into(),
                    ..Default::default()
                }),
                ..ControllerSpec::default()
            },
        );
        c.metadata.namespace = Some(id.clone());
        c
    };
    let (token1, token2) = (unique("hub-s3cr3t-one"), unique("hub-s3cr3t-two"));
    common::fixtures::put_secret(lab, &id, "vault", &[("token", &token1)]).await;
    hub.apply_in(&id, &shop(&[("replicaCount", "1")])).await;
    hub.status_until("shop", "the first rollout to complete", |s| {
        s.rollout
            .as_ref()
            .is_some_and(|r| r.generation == 1 && r.phase == "Complete")
    })
    .await;
    // A new token and two replicas, on nodes that never come: member-1 never becomes ready, so
    // the upgrades of member-2 and of the pull member are held by the rollout.
    common::fixtures::put_secret(lab, &id, "vault", &[("token", &token2)]).await;
    hub.apply_in(
        &id,
        &shop(&[("replicaCount", "2"), ("nodeSelector.nowhere", "never")]),
    )
    .await;

    let reader = reader_token(lab, &hub.client, &id).await;
    let b = Browser::start().await;
    sign_in(&b, &base, &reader).await;
    b.goto(&format!("{base}/ui/controllers/{id}/shop")).await;
    text_until(
        &b,
        "member-2's held upgrade with its diff link",
        DEADLINE,
        |t| t.contains("held back by the rollout") && t.contains("Show the manifest diff"),
    )
    .await;
    let link = format!("a[href$='/diff/member-2/{apps}/web']");
    b.click(&link).await;
    let shown = text_until(&b, "the diff", DEADLINE, |t| {
        t.contains("+  replicas: 2") || t.contains("The diff is not shown")
    })
    .await;
    assert!(shown.contains("-  replicas: 1"), "{shown}");
    // Revision 2 or 3: the new token alone may have upgraded member-2 before the new spec came.
    assert!(
        shown.contains("upgrade (revision ") && shown.contains("held back by the rollout"),
        "{shown}"
    );
    b.screenshot(&lab.dir.join("screenshots/controller-manifest-diff.png"))
        .await;
    let found = b.accessibility_violations().await;
    assert!(
        found.is_empty(),
        "the diff page breaks WCAG 2 A/AA rules: {found:#?}"
    );
    // The pull member's diff: its deployed manifest from its agent.
    b.goto(&format!(
        "{base}/ui/controllers/{id}/shop/diff/{edge}/{apps}/web"
    ))
    .await;
    let pulled = text_until(&b, "the pull member's diff", DEADLINE, |t| {
        t.contains("+  replicas: 2") || t.contains("The diff is not shown")
    })
    .await;
    assert!(pulled.contains("-  replicas: 1"), "{pulled}");
    let pulled_dom = b
        .run("return document.documentElement.outerHTML;")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let dom = b
        .run("return document.documentElement.outerHTML;")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = format!("/ui/controllers/{id}/shop/diff/member-2/{apps}/web");
    let sent = fetched(&b, &path).await;
    assert!(sent.starts_with("200 "), "{sent}");
    // The Secret's values show masked, the token read from the hub Secret as ******.
    assert!(dom.contains("*** (") && dom.contains("******"), "{dom}");
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(hub.client.clone(), &id)
        .list(&ListParams::default())
        .await
        .unwrap();
    let events = serde_json::to_string(&events.items).unwrap();
    for secret in [LITERAL, &token1, &token2] {
        for (what, text) in [
            ("page", &dom),
            ("pull member's page", &pulled_dom),
            ("response", &sent),
            ("operator's log", &operator.logged()),
            ("Events", &events),
        ] {
            assert!(!text.contains(secret), "{secret} is in the {what}");
        }
    }
    eprintln!(
        "the diff page: {} bytes; the test took {:.1} s",
        sent.len(),
        started.elapsed().as_secs_f64()
    );
    drop(b);
    let controllers: Api<TenancyController> = Api::namespaced(hub.client.clone(), &id);
    controllers
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    common::hub::all_gone(&controllers, DEADLINE).await;
}
