//! The Controller page and the cluster page (pure): one Controller's releases per cluster and
//! namespace, its conditions and rollout; one cluster's health and what every visible
//! Controller delivers there.

use std::fmt::Write as _;

use kube::ResourceExt as _;

use crate::{
    api::crd::{ChartMessage, RolloutStatus, TenancyController, TenancyStatus},
    api::key::ReleaseKey,
    observe::model::Model,
    runtime::web::{
        html::{Page, esc, id, seg},
        view::{ClusterInfo, Live, Seen, cell, live, release_state, watched},
    },
    status::next::{Action, Next},
};

/// What the hub knows of a pull member's agent, for the cluster page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Agent {
    /// Whether the agent has joined.
    pub(crate) joined: bool,
    /// When it last renewed its Lease (RFC 3339).
    pub(crate) last_seen: Option<String>,
    /// Its `Ready` condition, as "True: reason: message".
    pub(crate) ready: Option<String>,
    /// The version the agent last reported of itself, if it has.
    pub(crate) version: Option<String>,
    /// Its cluster's Kubernetes version, as the agent last reported it.
    pub(crate) kube_version: Option<String>,
}

/// A link to Controller `c`'s page, showing `namespace/name`.
fn controller_link(c: &TenancyController) -> String {
    let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
    format!(
        "<a href=\"/ui/controllers/{}/{}\">{}/{}</a>",
        esc(&seg(&ns)),
        esc(&seg(&name)),
        esc(&ns),
        esc(&name)
    )
}

/// Controller `c`'s page: conditions, rollout, and a section per cluster/namespace it delivers to.
pub(crate) fn controller(c: &TenancyController, model: &Model) -> Page {
    let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
    let mut page = Page::new(format!("{ns}/{name}"));
    page.fixed(format!(
        "<h1><span class=ns>{}/</span>{}</h1>",
        esc(&ns),
        esc(&name)
    ));
    let status = c.status.clone().unwrap_or_default();
    let mut overview = String::from("<section id=overview><h2>Conditions</h2>");
    if c.spec.suspend {
        overview.push_str("<p class=\"c s-held\">Suspended: no Helm call is made.</p>");
    }
    overview.push_str("<table><thead><tr><th scope=col>Type</th><th scope=col>Status</th><th scope=col>Reason</th><th scope=col>Message</th><th scope=col>Since</th></tr></thead><tbody>");
    for k in &status.conditions {
        let _ = write!(
            overview,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&k.type_),
            esc(&k.status),
            esc(&k.reason),
            esc(&k.message),
            esc(&k.last_transition_time.0.to_string())
        );
    }
    overview.push_str("</tbody></table></section>");
    page.section("overview".into(), overview);
    if let Some(rollout) = &status.rollout {
        page.section("rollout".into(), rollout_html(rollout));
    }
    for t in &status.updated_tenancies {
        let key = format!("{}/{}", t.cluster, t.namespace);
        page.section(id("t", &key), tenancy_html(t, &live(model, t)));
    }
    if status.updated_tenancies.is_empty() {
        page.fixed("<p>No release is reported yet.</p>");
    }
    page
}

/// What Controller `namespace/name`'s newest plan does next, as `diff` would say it: each Helm
/// action planned, let through or held back by a gate (with what holds it), and a link to its
/// manifest diff.
pub(crate) fn next_html(namespace: &str, name: &str, next: &[Next]) -> String {
    let mut out = String::from("<section id=next><h2>Next</h2>");
    if next.is_empty() {
        out.push_str("<p>Nothing to do: every release is as planned.</p></section>");
        return out;
    }
    let _ = write!(
        out,
        "<p>{} Helm action{} planned, from the planner <code>tenancy-hub diff</code> runs; each manifest diff is made when asked.</p>",
        next.len(),
        if next.len() == 1 { "" } else { "s" }
    );
    out.push_str("<table><thead><tr><th scope=col>Cluster</th><th scope=col>Namespace</th><th scope=col>Release</th><th scope=col>Action</th><th scope=col>State</th><th scope=col>Manifest</th></tr></thead><tbody>");
    for n in next.iter().take(SHOWN_NEXT) {
        let (class, state) = match &n.held {
            Some(why) => ("held", why.as_str()),
            None => ("progressing", "queued or running"),
        };
        let diff = match offered(n) {
            true => format!(
                "<a href=\"{}\" aria-label=\"Show the manifest diff of {}\">Show the manifest diff</a>",
                esc(&diff_path(namespace, name, &n.key)),
                esc(&n.key.to_string())
            ),
            false => String::new(),
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"c s-{class}\">{}</td><td>{diff}</td></tr>",
            esc(n.key.scope.cluster.as_str()),
            esc(&n.key.scope.namespace),
            esc(&n.key.release),
            n.action.word(),
            esc(state)
        );
    }
    out.push_str("</tbody></table>");
    if next.len() > SHOWN_NEXT {
        let _ = write!(out, "<p>and {} more.</p>", next.len() - SHOWN_NEXT);
    }
    out.push_str("</section>");
    out
}

/// Planned actions listed on a Controller's page, at most.
const SHOWN_NEXT: usize = 200;

/// The rollout's waves and where it stands.
fn rollout_html(r: &RolloutStatus) -> String {
    let mut out = format!(
        "<section id=rollout><h2>Rollout</h2><p>Generation {}: <strong>{}</strong>, wave {}/{}, {} healthy",
        r.generation,
        esc(&r.phase),
        r.wave,
        r.waves,
        esc(&r.progress)
    );
    if let Some(h) = &r.halted {
        let _ = write!(
            out,
            "</p><p class=\"c s-failed\" role=alert>Halted at {} (cluster {}, release {}): {}",
            esc(&h.at),
            esc(&h.cluster),
            esc(&h.release),
            esc(&h.reason)
        );
    }
    out.push_str("</p><ol class=waves>");
    for wave in 1..=r.waves {
        let _ = write!(out, "<li>Wave {wave}:");
        for c in r.clusters.iter().filter(|c| c.wave == wave) {
            let class = match c.state.as_str() {
                "Healthy" => "ready",
                "Failed" => "failed",
                "Pending" => "held",
                _ => "progressing",
            };
            let _ = write!(
                out,
                " <span class=\"c s-{class}\">{} {}</span>",
                esc(&c.name),
                esc(&c.state)
            );
        }
        out.push_str("</li>");
    }
    out.push_str("</ol></section>");
    out
}

/// One cluster/namespace of a Controller: its releases, drift, values, workloads and pods.
fn tenancy_html(t: &TenancyStatus, live: &Live) -> String {
    let key = format!("{}/{}", t.cluster, t.namespace);
    let freshness = match live.live {
        Some(true) => "live".to_owned(),
        Some(false) => format!(
            "not live: {}",
            live.problem
                .as_deref()
                .unwrap_or("the watch is not connected")
        ),
        None if t.fresh => "as last reported".to_owned(),
        None if !watched(t) => "not watched: no release here is delivered".to_owned(),
        None => "cluster unreachable".to_owned(),
    };
    let mut out = format!(
        "<section id=\"{}\" class=tenancy><h2><a href=\"/ui/clusters/{}\">{}</a> / {}</h2><p class=fresh>{}{}</p>",
        esc(&id("t", &key)),
        esc(&seg(&t.cluster)),
        esc(&t.cluster),
        esc(&t.namespace),
        esc(&freshness),
        live.last_seen
            .as_ref()
            .or(t.last_seen.as_ref())
            .map(|s| format!(", last seen {}", esc(s)))
            .unwrap_or_default()
    );
    out.push_str("<table><thead><tr><th scope=col>Release</th><th scope=col>Chart</th><th scope=col>Version</th><th scope=col>Revision</th><th scope=col>State</th><th scope=col>Message</th></tr></thead><tbody>");
    for m in &t.chart_messages {
        release_row(&mut out, m);
    }
    out.push_str("</tbody></table>");
    workloads_html(&mut out, live);
    out.push_str("</section>");
    out
}

/// One release: what runs, its state, and its drift and values below it.
fn release_row(out: &mut String, m: &ChartMessage) {
    let state = release_state(m);
    let _ = write!(
        out,
        "<tr><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td class=\"c s-{}\">{} {}</td><td class=msg>{}</td></tr>",
        esc(&m.release_name),
        esc(&m.chart_name),
        if m.chart_digest.is_empty() {
            String::new()
        } else {
            format!(" <code class=digest>{}</code>", esc(&m.chart_digest))
        },
        esc(&m.chart_version),
        m.revision.map(|r| r.to_string()).unwrap_or_default(),
        state.slug(),
        state.sign(),
        esc(&m.phase),
        esc(&m.error_message)
    );
    if let Some(d) = &m.drift {
        let _ = write!(
            out,
            "<tr class=drift><td></td><td colspan=5>Drift from revision {} ({}, since {}):<ul>",
            d.revision,
            esc(&d.action),
            esc(&d.detected_at)
        );
        for o in &d.objects {
            let _ = write!(
                out,
                "<li>{} {}{}: {}</li>",
                esc(&o.kind),
                esc(&o.name),
                if o.missing { " (missing)" } else { "" },
                esc(&o.paths.join(", "))
            );
        }
        out.push_str("</ul></td></tr>");
    }
    if !m.values.is_empty() {
        let _ = write!(
            out,
            "<tr class=values><td></td><td colspan=5><details><summary>Values (secrets masked)</summary><pre>{}</pre></details></td></tr>",
            esc(&m.values)
        );
    }
}

/// The workloads and pods of a tenancy's releases, live.
fn workloads_html(out: &mut String, live: &Live) {
    if live.live.is_none() {
        return;
    }
    out.push_str("<h3>Workloads</h3><ul class=workloads>");
    for w in &live.workloads {
        let _ = write!(
            out,
            "<li>{} {}: {}/{} ready{}</li>",
            w.id.kind,
            esc(&w.id.name),
            w.ready,
            w.desired,
            if w.rolled_out { ", rolled out" } else { "" }
        );
    }
    out.push_str("</ul><h3>Pods</h3><table class=pods><thead><tr><th scope=col>Pod</th><th scope=col>Phase</th><th scope=col>Ready</th><th scope=col>Restarts</th><th scope=col>Reason</th></tr></thead><tbody>");
    for p in &live.pods {
        let _ = write!(
            out,
            "<tr class=pod><td>{}</td><td>{}</td><td class=\"c s-{}\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.name),
            esc(&p.phase),
            if p.ready { "ready" } else { "progressing" },
            if p.ready { "yes" } else { "no" },
            p.restarts,
            esc(&p.reason)
        );
    }
    out.push_str("</tbody></table>");
}

/// Cluster `cluster`'s page: its health, and per visible Controller what it delivers there.
pub(crate) fn cluster(
    seen: &Seen,
    cluster: &ClusterInfo,
    agent: Option<&Agent>,
    model: &Model,
) -> Page {
    let mut page = Page::new(cluster.name.clone());
    page.fixed(format!("<h1>Cluster {}</h1>", esc(&cluster.name)));
    let tenancies: Vec<(&TenancyController, &TenancyStatus)> = seen
        .controllers
        .iter()
        .flat_map(|c| {
            c.status
                .iter()
                .flat_map(|s| &s.updated_tenancies)
                .filter(|t| t.cluster == cluster.name)
                .map(move |t| (&**c, t))
        })
        .collect();
    let lives: Vec<Live> = tenancies.iter().map(|(_, t)| live(model, t)).collect();
    let watched: Vec<bool> = lives.iter().filter_map(|l| l.live).collect();
    let reachable = if watched.is_empty() {
        "not watched for any Controller you may read".to_owned()
    } else if watched.iter().any(|l| *l) {
        "reachable".to_owned()
    } else {
        "unreachable".to_owned()
    };
    let last_seen = lives.iter().filter_map(|l| l.last_seen.clone()).max();
    let mut health = format!(
        "<section id=health><h2>Health</h2><dl><dt>Reachability</dt><dd>{}</dd><dt>Delivery</dt><dd>{}</dd><dt>Last seen</dt><dd>{}</dd>",
        esc(&reachable),
        if cluster.pull {
            "pull (an agent in the cluster fetches its work)"
        } else {
            "push (the hub installs)"
        },
        esc(last_seen.as_deref().unwrap_or("never"))
    );
    if let Some(a) = agent {
        let _ = write!(
            health,
            "<dt>Agent</dt><dd>{}; Lease renewed {}; Ready: {}</dd><dt>Agent version</dt><dd>{}</dd><dt>Kubernetes</dt><dd>{}</dd>",
            if a.joined { "joined" } else { "not joined" },
            esc(a.last_seen.as_deref().unwrap_or("never")),
            esc(a.ready.as_deref().unwrap_or("unknown")),
            esc(a.version.as_deref().unwrap_or("not reported yet")),
            esc(a.kube_version.as_deref().unwrap_or("not reported yet"))
        );
    }
    health.push_str("<dt>Labels</dt><dd>");
    for (k, v) in &cluster.labels {
        let _ = write!(health, "<code>{}={}</code> ", esc(k), esc(v));
    }
    health.push_str("</dd></dl></section>");
    page.section("health".into(), health);
    let mut delivered = String::from(
        "<section id=delivered><h2>Delivered here</h2><table><thead><tr><th scope=col>Controller</th><th scope=col>State</th><th scope=col>Namespace</th><th scope=col>Release</th><th scope=col>Chart</th><th scope=col>Version</th><th scope=col>Phase</th><th scope=col>Pods ready</th></tr></thead><tbody>",
    );
    for ((c, t), l) in tenancies.iter().zip(&lives) {
        let state = cell(c, &cluster.name, model).map(|x| x.state);
        for m in &t.chart_messages {
            let pods = l.pods.iter().filter(|p| p.ready).count();
            let _ = write!(
                delivered,
                "<tr><td>{}</td><td class=\"c s-{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{pods}/{}</td></tr>",
                controller_link(c),
                state.map(|s| s.slug()).unwrap_or("none"),
                state.map(|s| s.to_string()).unwrap_or_default(),
                esc(&t.namespace),
                esc(&m.release_name),
                esc(&m.chart_name),
                esc(&m.chart_version),
                esc(&m.phase),
                l.pods.len()
            );
        }
    }
    delivered.push_str("</tbody></table></section>");
    page.section("delivered".into(), delivered);
    page
}

/// The path of the diff page of `key`, planned for Controller `namespace/name`.
pub(crate) fn diff_path(namespace: &str, name: &str, key: &ReleaseKey) -> String {
    format!(
        "/ui/controllers/{}/{}/diff/{}/{}/{}",
        seg(namespace),
        seg(name),
        seg(key.scope.cluster.as_str()),
        seg(&key.scope.namespace),
        seg(&key.release)
    )
}

/// Whether the view offers a diff of `next`: an install or upgrade it plans a release for, or
/// an uninstall (a rollback renders no chart).
pub(crate) fn offered(next: &Next) -> bool {
    match next.action {
        Action::Install | Action::Upgrade => next.release.is_some(),
        Action::Uninstall => true,
        _ => false,
    }
}
