//! End-to-end tests of hostile chart sources: a repo that climbs out of its policy's prefix, an index or a redirect that points elsewhere, a body that must not be echoed; and the example charts' quoting.

mod common;

use std::{collections::BTreeMap, path::Path};

use common::{
    fixtures::{DEADLINE, chart, message, ready, tenancy, unique, wait_until},
    hub::{Hub, allow_all},
    lab::Lab,
    repo::ChartRepo,
};
use k8s_openapi::api::core::v1::Event;
use kube::{Api, api::ListParams};
use tenancy_hub::api::crd::{Chart, ControllerSpec, ControllerStatus};

/// Charts are looked at again this often (seconds) in these tests.
const INTERVAL: &str = "2";

/// Text of a fetched body that no status, Event or log line may show.
const SECRET: &str = "body-text-never-echoed";

/// A repository server holding three teams' repositories: `team-e` (the tenant under test),
/// `team-f` (a neighbour) and `team-x` (another team's, which team-e must never reach); and
/// what team-e makes of its own directory: an index whose archive lies in team-x
/// (`team-e/abs`), a redirect into team-x (`team-e/moved`), and an index that is no YAML
/// (`team-e/garbage`).
async fn teams(lab: &Lab) -> ChartRepo {
    let repo = ChartRepo::serve(lab, &["0.1.0"]);
    for team in ["team-e", "team-f", "team-x"] {
        repo.publish_in(lab, team, "0.1.0");
    }
    let write = |file: &str, text: String| {
        let path = repo.path(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    // team-x's index lists its archive by absolute URL (`helm repo index --url`).
    write(
        "team-e/abs/index.yaml",
        std::fs::read_to_string(repo.path("team-x/index.yaml")).unwrap(),
    );
    write("team-e/garbage/index.yaml", format!("{SECRET}: [\n"));
    let team_x = format!("{}/team-x/index.yaml", repo.url);
    repo.redirect("/team-e/moved/index.yaml", &team_x);
    repo.wait_ready().await;
    repo
}

/// The example chart from the repository `url` as release `release`, with `settings`.
fn from(url: &str, release: &str, settings: &[(&str, &str)]) -> Chart {
    let mut c = chart("deployment-example", release, settings);
    c.repo = Some(url.into());
    c
}

/// A spec of `charts` in namespace `ns` of member-1.
fn spec(ns: &str, charts: Vec<Chart>) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy(ns, &["member-1"], charts)],
        ..Default::default()
    }
}

/// A hub namespace of its own (operator enforcing the policies) whose one policy lists the
/// repository's `team/` directory as its only repository prefix.
async fn tenant(prefix: &str, repo: &ChartRepo, team: &str) -> Hub {
    let enforce = ["--tenancy-policy", "enforce", "--chart-interval", INTERVAL];
    let hub = Hub::with_args(prefix, &enforce).await;
    let allowed = format!("{}/{team}/", repo.url);
    hub.policy(&hub.namespace, allow_all(&hub.namespace, &[&allowed]))
        .await;
    hub
}

/// The tenant under test (a hub namespace whose policy lists `team-e/`) beside a neighbour
/// (another hub namespace, listing `team-f/`), over one repository server.
struct Scene {
    repo: ChartRepo,
    /// The tenant's hub namespace and its operator.
    hub: Hub,
    /// The tenant's target namespace.
    ns: String,
    neighbour: Hub,
    neighbour_ns: String,
}

impl Scene {
    /// The repository, the neighbour delivering release `web` from team-f (running at revision
    /// 1), and the tenant delivering release `own` from its own repository, team-e.
    async fn set() -> Self {
        let repo = teams(&Lab::get()).await;
        let neighbour = tenant("sources-f", &repo, "team-f").await;
        let neighbour_ns = unique("sources-f-tenant");
        let team_f = format!("{}/team-f", repo.url);
        let web = from(&team_f, "web", &[]);
        neighbour
            .apply("steady", spec(&neighbour_ns, vec![web]))
            .await;
        neighbour
            .status_until("steady", "the neighbour to deliver", ready)
            .await;
        neighbour
            .releases_become("member-1", &neighbour_ns, &[("web", 1)])
            .await;
        let hub = tenant("sources-e", &repo, "team-e").await;
        let ns = unique("sources-e-tenant");
        let own = from(&format!("{}/team-e", repo.url), "own", &[]);
        hub.apply("own", spec(&ns, vec![own])).await;
        Self {
            repo,
            hub,
            ns,
            neighbour,
            neighbour_ns,
        }
    }

    /// Nothing but the attack was refused: the tenant's own repository delivered, nothing of
    /// team-x was requested, and the neighbour still delivers (a change rolls out as revision 2).
    async fn nothing_else_harmed(&self) {
        self.hub
            .status_until("own", "team-e's own repository to deliver", ready)
            .await;
        self.hub
            .releases_become("member-1", &self.ns, &[("own", 1)])
            .await;
        let requested = self.repo.requested();
        assert!(
            requested.iter().all(|p| !p.contains("team-x")),
            "team-x was requested: {requested:?}"
        );
        let team_f = format!("{}/team-f", self.repo.url);
        let web = from(&team_f, "web", &[("replicaCount", "2")]);
        let ns = &self.neighbour_ns;
        self.neighbour.apply("steady", spec(ns, vec![web])).await;
        self.neighbour
            .releases_become("member-1", ns, &[("web", 2)])
            .await;
    }
}

/// What each of `releases` of Controller `name` came to (phase, message), once each has an
/// outcome: delivered, failed or refused.
async fn outcomes(hub: &Hub, name: &str, releases: &[&str]) -> BTreeMap<String, (String, String)> {
    const OUTCOMES: [&str; 4] = ["Deployed", "Failed", "Invalid", "Forbidden"];
    let settled = |s: &ControllerStatus, release: &str| {
        message(s, "member-1", release).is_some_and(|m| OUTCOMES.contains(&m.phase.as_str()))
    };
    let status = hub
        .status_until(name, "an outcome of every release", |s| {
            releases.iter().all(|r| settled(s, r))
        })
        .await;
    let shown = serde_json::to_string(&status).unwrap();
    assert!(!shown.contains(SECRET), "the status echoes a body: {shown}");
    releases
        .iter()
        .map(|r| {
            let m = message(&status, "member-1", r).unwrap();
            (r.to_string(), (m.phase.clone(), m.error_message.clone()))
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_repository_that_climbs_out_of_its_prefix_is_refused_and_never_fetched() {
    let scene = Scene::set().await;
    let (repo, hub) = (&scene.repo, &scene.hub);
    let port = repo.url.rsplit(':').next().unwrap();
    let climbs = [
        ("up", format!("{}/team-e/../team-x", repo.url)),
        ("encoded", format!("{}/team-e/%2e%2e/team-x", repo.url)),
        ("slash", format!("{}/team-e/..%2fteam-x", repo.url)),
        ("query", format!("{}/team-e/?x=1", repo.url)),
        ("by-name", format!("http://localhost:{port}/team-e/")),
        ("metadata", "http://169.254.169.254/team-e/".to_owned()),
    ];
    let charts = climbs.iter().map(|(r, url)| from(url, r, &[])).collect();
    hub.apply("climb", spec(&scene.ns, charts)).await;

    let releases: Vec<&str> = climbs.iter().map(|(r, _)| *r).collect();
    let came = outcomes(hub, "climb", &releases).await;
    for (release, url) in &climbs {
        let (phase, why) = &came[*release];
        assert_eq!(phase, "Forbidden", "{release}: {why}");
        assert!(why.starts_with("release member-1/"), "{why}");
        assert!(
            why.contains(&format!("/{release} is forbidden: repo ")),
            "{why}"
        );
        assert!(why.contains(url.as_str()), "{why}");
    }
    let up = &came["up"].1;
    let normal = format!("(normalised: {}/team-x)", repo.url);
    assert!(up.contains(&normal), "{up}");
    let metadata = &came["metadata"].1;
    assert!(metadata.contains("a link-local address"), "{metadata}");
    scene.nothing_else_harmed().await;
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn an_index_or_a_redirect_off_the_prefix_is_refused_and_no_body_is_echoed() {
    let scene = Scene::set().await;
    let (repo, hub) = (&scene.repo, &scene.hub);
    let under = |dir: &str| format!("{}/team-e/{dir}", repo.url);
    let charts = ["abs", "moved", "garbage"]
        .iter()
        .map(|r| from(&under(r), r, &[]))
        .collect();
    hub.apply("elsewhere", spec(&scene.ns, charts)).await;

    let came = outcomes(hub, "elsewhere", &["abs", "moved", "garbage"]).await;
    let team_e = format!("outside the chartSources prefix {}/team-e;", repo.url);
    for (release, (phase, why)) in &came {
        assert_eq!(phase, "Invalid", "{release}: {why}");
        assert!(why.starts_with("release member-1/"), "{why}");
        assert!(why.contains(&format!("/{release}: chart ")), "{why}");
    }
    let abs = &came["abs"].1;
    let archive = format!(
        "lists its archive at {}/team-x/deployment-example-0.1.0.tgz, {team_e}",
        repo.url
    );
    assert!(abs.contains(&archive), "{abs}");
    let moved = &came["moved"].1;
    let redirect = format!(
        "{}/team-e/moved/index.yaml redirects to {}/team-x/index.yaml, {team_e}",
        repo.url, repo.url
    );
    assert!(moved.contains(&redirect), "{moved}");
    let garbage = &came["garbage"].1;
    let where_ = "/team-e/garbage/index.yaml is not a Helm repository index: YAML error at line ";
    assert!(garbage.contains(where_), "{garbage}");
    let events: Api<Event> = Api::namespaced(hub.client.clone(), &hub.namespace);
    let messages = wait_until("Events of the refused charts", DEADLINE, || async {
        let messages: Vec<String> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("elsewhere"))
            .filter_map(|e| e.message)
            .collect();
        (!messages.is_empty()).then_some(messages)
    })
    .await;
    assert!(
        messages.iter().all(|m| !m.contains(SECRET)),
        "an Event echoes the body: {messages:?}"
    );
    assert!(!hub.log().contains(SECRET), "the log echoes the body");
    for asked in ["/team-e/abs/index.yaml", "/team-e/moved/index.yaml"] {
        assert!(repo.requests(asked) > 0, "{asked} was never asked for");
    }
    scene.nothing_else_harmed().await;
}

/// Every action of the shipped example charts' templates that prints something a setting can
/// reach (`.Values…`, a `$variable`, the dot inside `range`/`with`) ends in `| quote` or
/// `| int`, or renders YAML with `toYaml … | nindent N`: a setting's value then stays one
/// scalar, and cannot add a field or a document. Reads the templates; renders nothing.
#[test]
fn the_example_charts_quote_every_value_they_print() {
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/charts");
    let mut checked = 0;
    for chart in std::fs::read_dir(&charts).unwrap().flatten() {
        for template in std::fs::read_dir(chart.path().join("templates"))
            .unwrap()
            .flatten()
        {
            let path = template.path();
            let text = std::fs::read_to_string(&path).unwrap();
            for action in text
                .split("{{")
                .skip(1)
                .map(|a| a.split("}}").next().unwrap())
            {
                let action = action.trim_matches('-').trim();
                checked += 1;
                assert!(
                    safe_action(action),
                    "{}: {{{{ {action} }}}} prints a value as it is: end it with `| quote` or `| int`, or render it with `toYaml . | nindent N`",
                    path.display()
                );
            }
        }
    }
    assert!(checked > 20, "only {checked} template actions found");
}

/// Whether a template action prints nothing a setting can reach, or prints it quoted, as a
/// number, or as YAML.
fn safe_action(action: &str) -> bool {
    const CONTROL: [&str; 8] = [
        "if", "else", "end", "range", "with", "define", "template", "/*",
    ];
    const BUILT_IN: [&str; 3] = [".Release.", ".Chart.", ".Capabilities."];
    let words: Vec<&str> = action
        .split(|c: char| c.is_whitespace() || "|()".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    if words
        .first()
        .is_none_or(|w| CONTROL.iter().any(|c| w.starts_with(c)))
    {
        return true;
    }
    let input = words.iter().any(|w| {
        (w.starts_with('.') && !BUILT_IN.iter().any(|b| w.starts_with(b))) || w.starts_with('$')
    });
    let last = action.rsplit('|').next().unwrap_or_default().trim();
    !input
        || last == "quote"
        || last == "int"
        || (words.contains(&"toYaml") && last.starts_with("nindent"))
}

#[test]
fn the_quoting_check_tells_a_printed_value_from_a_quoted_one() {
    for unsafe_action in [
        ".Values.image.tag",
        "$v",
        ".",
        "printf \"%s\" .Values.x",
        "toYaml .Values.x",
    ] {
        assert!(!safe_action(unsafe_action), "{unsafe_action}");
    }
    for fine in [
        ".Values.x | quote",
        ".Values.replicas | int",
        "toYaml . | nindent 8",
        ".Release.Name",
        "range $k, $v := .Values.podAnnotations",
        "with .Values.nodeSelector",
        "end",
    ] {
        assert!(safe_action(fine), "{fine}");
    }
}
