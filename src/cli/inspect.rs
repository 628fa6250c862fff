//! Renders Controller status for `tenancy-hub status`: per cluster and namespace, releases, workloads and pods.

use std::ffi::OsStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Api, Client, ResourceExt, api::ListParams};
use serde::Serialize;

use crate::{
    api::crd::{ClusterStatus, ControllerStatus, Summary, TenancyController, TenancyStatus},
    cli::table::{Output, table},
};

/// Longest release message shown in a table, in characters.
pub(crate) const MESSAGE_WIDTH: usize = 80;

/// Result alias for this module.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong reading or rendering Controller status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The named resource does not exist.
    #[error(
        "no Controller {name:?} in namespace {namespace:?}; list them with `kubectl get controllers -A`"
    )]
    NotFound {
        /// The namespace searched.
        namespace: String,
        /// The name asked for.
        name: String,
    },
    /// The hub does not know the Controller resource type.
    #[error(
        "the hub has no Controller resource type (CRD controllers.multitenancy.dev); install it with `tenancy-hub crd | kubectl apply --server-side -f -`"
    )]
    NoCrd,
    /// A call to the hub failed.
    #[error("cannot read Controller resources ({selection}) from the hub: {source}")]
    Hub {
        /// What was being read.
        selection: Selection,
        /// The error.
        source: Box<kube::Error>,
    },
    /// Status could not be written as JSON.
    #[error("cannot render status as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Status could not be written as YAML.
    #[error("cannot render status as YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
}

/// Which Controller resources to read from the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selection {
    /// One resource, by namespace and name.
    One {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Every resource in one namespace.
    Namespace(String),
    /// Every resource in every namespace.
    All,
}

impl std::fmt::Display for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selection::One { namespace, name } => write!(f, "{namespace}/{name}"),
            Selection::Namespace(ns) => write!(f, "namespace {ns}"),
            Selection::All => f.write_str("all namespaces"),
        }
    }
}

/// Reads the selected resources from the hub, ordered by namespace and name.
pub(crate) async fn fetch(hub: Client, selection: &Selection) -> Result<Vec<TenancyController>> {
    let failed = |source: kube::Error| match source {
        kube::Error::Api(s) if s.code == 404 => Error::NoCrd,
        source => Error::Hub {
            selection: selection.clone(),
            source: Box::new(source),
        },
    };
    let mut controllers = match selection {
        Selection::One { namespace, name } => {
            let api = Api::<TenancyController>::namespaced(hub, namespace);
            let found = api.get_opt(name).await.map_err(failed)?;
            vec![found.ok_or_else(|| Error::NotFound {
                namespace: namespace.clone(),
                name: name.clone(),
            })?]
        }
        Selection::Namespace(ns) => {
            Api::<TenancyController>::namespaced(hub, ns)
                .list(&ListParams::default())
                .await
                .map_err(failed)?
                .items
        }
        Selection::All => {
            Api::<TenancyController>::all(hub)
                .list(&ListParams::default())
                .await
                .map_err(failed)?
                .items
        }
    };
    controllers.sort_by_key(|c| (c.namespace(), c.name_any()));
    Ok(controllers)
}

/// Whether to color a table: only on a terminal, and not when `NO_COLOR` is set to something.
pub(crate) fn color_wanted(output: Output, is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    output == Output::Table && is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// True when the resource's Ready condition is True and its status describes the current spec.
pub(crate) fn is_ready(controller: &TenancyController) -> bool {
    controller.status.as_ref().is_some_and(|status| {
        observed_current(controller, status)
            && ready_condition(status).is_some_and(|c| c.status == "True")
    })
}

/// Renders the resources' status; `cluster` keeps only that cluster's entries; `color` adds ANSI colors to tables.
///
/// JSON and YAML give, per resource, `namespace`, `name`, `summary` (the resource's totals),
/// `conditions`, `clusters` and `tenancies`, the last two filtered by `cluster`.
pub(crate) fn render(
    controllers: &[TenancyController],
    cluster: Option<&str>,
    output: Output,
    color: bool,
) -> Result<String> {
    Ok(match output {
        Output::Table => controllers
            .iter()
            .map(|c| resource_table(c, cluster, color))
            .collect::<Vec<_>>()
            .join("\n"),
        Output::Json => serde_json::to_string_pretty(&entries(controllers, cluster))? + "\n",
        Output::Yaml => serde_yaml::to_string(&entries(controllers, cluster))?,
    })
}

/// One resource in JSON and YAML output.
#[derive(Serialize)]
struct Entry<'a> {
    namespace: String,
    name: String,
    summary: Option<&'a Summary>,
    conditions: &'a [Condition],
    clusters: Vec<&'a ClusterStatus>,
    tenancies: Vec<&'a TenancyStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout: Option<&'a crate::api::crd::RolloutStatus>,
}

fn entries<'a>(controllers: &'a [TenancyController], cluster: Option<&str>) -> Vec<Entry<'a>> {
    let keep = |name: &str| cluster.is_none_or(|c| c == name);
    controllers
        .iter()
        .map(|c| {
            let status = c.status.as_ref();
            Entry {
                namespace: c.namespace().unwrap_or_default(),
                name: c.name_any(),
                summary: status.and_then(|s| s.summary.as_ref()),
                conditions: status.map_or(&[][..], |s| s.conditions.as_slice()),
                clusters: status
                    .into_iter()
                    .flat_map(|s| &s.clusters)
                    .filter(|s| keep(&s.name))
                    .collect(),
                tenancies: status
                    .into_iter()
                    .flat_map(|s| &s.updated_tenancies)
                    .filter(|t| keep(&t.cluster))
                    .collect(),
                rollout: status.and_then(|s| s.rollout.as_ref()),
            }
        })
        .collect()
}

fn ready_condition(status: &ControllerStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == "Ready")
}

// `None < Some(_)`: a status without a generation is behind a spec that has one.
fn observed_current(controller: &TenancyController, status: &ControllerStatus) -> bool {
    status.observed_generation >= controller.metadata.generation
}

fn resource_table(controller: &TenancyController, cluster: Option<&str>, color: bool) -> String {
    let id = format!(
        "{}/{}",
        controller.namespace().unwrap_or_default(),
        controller.name_any()
    );
    let Some(status) = &controller.status else {
        return format!("Controller {id}  no status yet (is `tenancy-hub run` running?)\n");
    };
    let mut out = format!("Controller {id}  {}", ready_text(status, color));
    if let Some(s) = &status.summary {
        out += &format!(
            "  clusters {}  releases {}  pods {}",
            s.clusters, s.releases, s.pods
        );
    }
    out.push('\n');
    if !observed_current(controller, status) {
        let seen = status
            .observed_generation
            .map_or("none".to_owned(), |g| g.to_string());
        let spec = controller.metadata.generation.unwrap_or_default();
        out += &format!("  status is behind the spec: generation {spec}, observed {seen}\n");
    }
    if let Some(ready) =
        ready_condition(status).filter(|c| c.status != "True" && !c.message.is_empty())
    {
        out += &format!("  {}\n", ready.message);
    }
    if let Some(r) = &status.rollout {
        out += &rollout_lines(r);
    }
    let tenancies: Vec<&TenancyStatus> = status
        .updated_tenancies
        .iter()
        .filter(|t| cluster.is_none_or(|c| c == t.cluster))
        .collect();
    if tenancies.is_empty() {
        out += &match cluster {
            Some(c) => format!("  no entries for cluster {c}\n"),
            None => "  no cluster/namespace entries yet\n".into(),
        };
    }
    for t in tenancies {
        out.push('\n');
        out += &tenancy_block(t, color);
    }
    out
}

/// The rollout in two lines: where it stands, then each cluster in the order it is reached.
fn rollout_lines(r: &crate::api::crd::RolloutStatus) -> String {
    let mut out = format!(
        "  rollout of generation {}: {} wave {}/{}, {} clusters healthy (updated {}, pending {}, failed {}), started {}",
        r.generation,
        r.phase,
        r.wave,
        r.waves,
        r.progress,
        r.updated,
        r.pending,
        r.failed,
        r.started_at
    );
    if let Some(done) = &r.finished_at {
        out += &format!(", finished {done}");
    }
    out.push('\n');
    let clusters: Vec<String> = r
        .clusters
        .iter()
        .map(|c| format!("{} (wave {}) {}", c.name, c.wave, c.state))
        .collect();
    if !clusters.is_empty() {
        out += &format!("    {}\n", clusters.join(", "));
    }
    if let Some(h) = &r.halted {
        out += &format!("    {}\n", crate::plan::rollout::halt_message(h));
    }
    out
}

fn ready_text(status: &ControllerStatus, color: bool) -> String {
    match ready_condition(status) {
        Some(c) => {
            let tone = match (c.status.as_str(), c.reason.as_str()) {
                ("True", _) => Tone::Good,
                (_, "InvalidSpec" | "Conflict" | "ReleaseFailed") => Tone::Bad,
                _ => Tone::Other,
            };
            let text = format!("Ready={} ({})", c.status, c.reason);
            paint(&text, tone, color)
        }
        None => paint("Ready=Unknown", Tone::Other, color),
    }
}

fn tenancy_block(t: &TenancyStatus, color: bool) -> String {
    let freshness = if t.fresh {
        paint("(fresh)", Tone::Good, color)
    } else {
        let seen = t
            .last_seen
            .as_deref()
            .map_or("never seen".to_owned(), |s| format!("last seen {s}"));
        paint(&format!("(STALE, {seen})"), Tone::Other, color)
    };
    let mut out = format!("  {}/{} {freshness}\n", t.cluster, t.namespace);
    out += &releases_section(t, color);
    out += &workloads_section(t, color);
    out += &pods_section(t, color);
    out
}

fn releases_section(t: &TenancyStatus, color: bool) -> String {
    let releases: Vec<[String; 6]> = t
        .chart_messages
        .iter()
        .map(|m| {
            [
                m.release_name.clone(),
                m.chart_name.clone(),
                m.phase.clone(),
                m.revision.map_or("-".into(), |r| r.to_string()),
                dash_if_empty(&m.chart_version),
                trim_message(&m.error_message, MESSAGE_WIDTH),
            ]
        })
        .collect();
    section(
        "no releases",
        &[
            "RELEASE", "CHART", "PHASE", "REVISION", "VERSION", "MESSAGE",
        ],
        &releases,
        &[(2, word_tone)],
        color,
    )
}

fn workloads_section(t: &TenancyStatus, color: bool) -> String {
    let workloads: Vec<[String; 3]> = t
        .replication_controller_status
        .iter()
        .map(|w| {
            [
                w.kind.clone(),
                w.replication_controller_name.clone(),
                w.ready.clone(),
            ]
        })
        .collect();
    section(
        "no workloads",
        &["KIND", "NAME", "READY"],
        &workloads,
        &[(2, ratio_tone)],
        color,
    )
}

fn pods_section(t: &TenancyStatus, color: bool) -> String {
    let mut pods: Vec<_> = t.pod_status.iter().collect();
    pods.sort_by_key(|p| p.ready);
    let pod_rows: Vec<[String; 5]> = pods
        .iter()
        .map(|p| {
            [
                p.pod_name.clone(),
                p.phase.clone(),
                if p.ready { "yes" } else { "no" }.into(),
                p.restarts.to_string(),
                p.reason.clone(),
            ]
        })
        .collect();
    let total = usize::try_from(t.pods_total).unwrap_or(0);
    let mut out = if pods.is_empty() && total > 0 {
        String::new()
    } else {
        section(
            "no pods",
            &["NAME", "PHASE", "READY", "RESTARTS", "REASON"],
            &pod_rows,
            &[(1, word_tone), (2, yes_tone)],
            color,
        )
    };
    if pods.len() < total {
        out += &format!(
            "    showing {} of {total} pods (not-ready first)\n",
            pods.len()
        );
    }
    out
}

/// A column index and how to color its cells.
type Painter = (usize, fn(&str) -> Tone);

fn section<const N: usize>(
    empty: &str,
    header: &[&str; N],
    rows: &[[String; N]],
    painters: &[Painter],
    color: bool,
) -> String {
    if rows.is_empty() {
        return format!("    {empty}\n");
    }
    let plain = table(header, rows);
    let mut lines = plain.lines();
    let head = lines.next().unwrap_or_default();
    let starts = column_starts(head, header);
    let mut out = format!("    {head}\n");
    for (line, row) in lines.zip(rows) {
        let mut line = line.to_owned();
        if color {
            let mut painters = painters.to_vec();
            // Right to left, so painting a cell leaves the positions of those before it alone.
            painters.sort_by_key(|(column, _)| std::cmp::Reverse(*column));
            for (column, tone) in painters {
                let cell = &row[column];
                let at = line.char_indices().nth(starts[column]).map(|(at, _)| at);
                if let Some(at) =
                    at.filter(|&at| !cell.is_empty() && line[at..].starts_with(cell.as_str()))
                {
                    line.replace_range(at..at + cell.len(), &paint(cell, tone(cell), true));
                }
            }
        }
        out += &format!("    {line}\n");
    }
    out
}

/// Character positions where each column starts, read off the header line.
fn column_starts<const N: usize>(head: &str, header: &[&str; N]) -> [usize; N] {
    let mut starts = [0; N];
    let mut from = 0;
    for (start, name) in starts.iter_mut().zip(header) {
        *start = head[from..].find(name).map_or(from, |at| from + at);
        from = *start + name.len();
    }
    starts
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tone {
    Good,
    Bad,
    Other,
}

fn word_tone(word: &str) -> Tone {
    match word {
        "Deployed" | "Ready" | "Running" | "Succeeded" => Tone::Good,
        "Failed" | "Conflict" | "Invalid" => Tone::Bad,
        _ => Tone::Other,
    }
}

fn ratio_tone(ratio: &str) -> Tone {
    match ratio.split_once('/') {
        Some((ready, desired)) if ready == desired => Tone::Good,
        _ => Tone::Other,
    }
}

fn yes_tone(word: &str) -> Tone {
    if word == "yes" {
        Tone::Good
    } else {
        Tone::Other
    }
}

fn paint(text: &str, tone: Tone, color: bool) -> String {
    if !color {
        return text.to_owned();
    }
    let code = match tone {
        Tone::Good => 32,
        Tone::Bad => 31,
        Tone::Other => 33,
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

fn dash_if_empty(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_owned()
    }
}

/// One line of at most `max` characters, ending in `…` when cut.
fn trim_message(message: &str, max: usize) -> String {
    let line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max {
        return line;
    }
    line.chars().take(max - 1).chain(['…']).collect()
}

#[cfg(test)]
mod tests;
