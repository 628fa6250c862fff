//! The fleet matrix page (pure): one row per visible cluster, one column per visible
//! Controller, each cell the state of the Controller's releases in that cluster; filterable by
//! tenant, cluster label and state.

use std::fmt::Write as _;

use kube::ResourceExt as _;

use crate::{
    observe::model::Model,
    runtime::web::{
        html::{Page, esc, id, query, seg},
        view::{ByCluster, Cell, CellState, Filters, Seen},
    },
};

/// The filter form above the matrix, keeping the values of `filters` (escaped) and offering
/// the tenants of `seen`.
pub(crate) fn filter_form(seen: &Seen, filters: &Filters) -> String {
    let mut tenants: Vec<String> = seen
        .controllers
        .iter()
        .filter_map(|c| c.namespace())
        .collect();
    tenants.dedup();
    let mut out = String::from(
        "<form class=filters method=get action=\"/ui/\" role=search aria-label=\"filter the fleet\">\
         <label>Tenant <select name=tenant><option value=\"\">all</option>",
    );
    for t in &tenants {
        let selected = if *t == filters.tenant {
            " selected"
        } else {
            ""
        };
        let _ = write!(out, "<option{selected}>{}</option>", esc(t));
    }
    let _ = write!(
        out,
        "</select></label><label>Cluster label <input name=label placeholder=\"key=value\" value=\"{}\"></label>\
         <label>State <select name=state><option value=\"\">any</option>",
        esc(&filters.label)
    );
    for s in CellState::ALL {
        let selected = if s.slug() == filters.state {
            " selected"
        } else {
            ""
        };
        let _ = write!(out, "<option value={}{selected}>{s}</option>", s.slug());
    }
    out.push_str("</select></label><button type=submit>Filter</button></form>");
    out
}

/// The query string of `filters` (empty when none is set), for the live stream's URL.
pub(crate) fn filter_query(filters: &Filters) -> String {
    let pairs = [
        ("tenant", &filters.tenant),
        ("label", &filters.label),
        ("state", &filters.state),
    ];
    let set: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", query(v)))
        .collect();
    if set.is_empty() {
        String::new()
    } else {
        format!("?{}", set.join("&"))
    }
}

/// The matrix of `seen`, as `filters` narrow it, from the statuses and `model`.
pub(crate) fn page(seen: &Seen, model: &Model, filters: &Filters) -> Page {
    let columns: Vec<_> = seen
        .controllers
        .iter()
        .filter(|c| filters.shows_controller(c))
        .collect();
    let indexes: Vec<ByCluster> = columns.iter().map(|c| ByCluster::of(c)).collect();
    let mut rows = Vec::new();
    let mut counts = [0usize; CellState::ALL.len()];
    for cluster in seen.clusters.iter().filter(|c| filters.shows_labels(c)) {
        let cells: Vec<Option<Cell>> = indexes
            .iter()
            .map(|index| index.cell(&cluster.name, model))
            .collect();
        if !filters.shows_cells(&cells) {
            continue;
        }
        for c in cells.iter().flatten() {
            counts[c.state as usize] += 1;
        }
        rows.push((cluster, cells));
    }
    let mut page = Page::new("Fleet");
    page.fixed("<h1>Fleet</h1>");
    page.section("summary".into(), summary(rows.len(), &counts));
    let mut head = String::from(
        "<div class=scroll><table class=matrix aria-describedby=summary><thead><tr><th scope=col>Cluster</th>",
    );
    for c in &columns {
        let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
        let _ = write!(
            head,
            "<th scope=col><a href=\"/ui/controllers/{}/{}\"><span class=ns>{}/</span>{}</a></th>",
            esc(&seg(&ns)),
            esc(&seg(&name)),
            esc(&ns),
            esc(&name)
        );
    }
    head.push_str("</tr></thead><tbody>");
    page.fixed(head);
    for (cluster, cells) in rows {
        let mut row = format!(
            "<tr id=\"{}\"><th scope=row><a href=\"/ui/clusters/{}\">{}</a>{}</th>",
            esc(&id("row", &cluster.name)),
            esc(&seg(&cluster.name)),
            esc(&cluster.name),
            if cluster.pull {
                " <span class=mode>pull</span>"
            } else {
                ""
            }
        );
        for cell in &cells {
            cell_html(&mut row, cell.as_ref());
        }
        row.push_str("</tr>");
        page.section(id("row", &cluster.name), row);
    }
    page.fixed("</tbody></table></div>");
    page
}

/// The line saying how many clusters are shown and how many cells are in each state.
fn summary(clusters: usize, counts: &[usize; CellState::ALL.len()]) -> String {
    let mut out = format!("<p id=summary class=summary>{clusters} clusters");
    for s in CellState::ALL {
        let n = counts[s as usize];
        if n > 0 {
            let _ = write!(
                out,
                " · <span class=\"c s-{}\">{}</span> {n} {s}",
                s.slug(),
                s.sign()
            );
        }
    }
    out.push_str("</p>");
    out
}

/// One cell: the state's sign and colour and the pods ready; the details in its title where
/// something is not ready (a ready cell says all there is to say, and the matrix stays light).
fn cell_html(out: &mut String, cell: Option<&Cell>) {
    let Some(c) = cell else {
        out.push_str("<td></td>");
        return;
    };
    let slug = c.state.slug();
    let (sign, ready, total) = (c.state.sign(), c.pods.ready, c.pods.total);
    if c.state == CellState::Ready {
        let _ = write!(out, "<td class=\"c s-{slug}\">{sign} {ready}/{total}</td>");
        return;
    }
    let mut title = format!(
        "{}: {}/{} releases deployed, {ready}/{total} pods ready",
        c.state, c.releases.ready, c.releases.total
    );
    if let Some(error) = &c.error {
        let short: String = error.chars().take(200).collect();
        let _ = write!(title, "; {short}");
    }
    let _ = write!(
        out,
        "<td class=\"c s-{slug}\" title=\"{}\">{sign} {ready}/{total}</td>",
        esc(&title)
    );
}
