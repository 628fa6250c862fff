//! The manifest diff page of one release a Controller's newest plan acts on: shown to the viewers
//! its Controller's page is shown to, made on demand through `diffs` (bounded, shared, cached),
//! every line escaped, added and removed lines told apart by their `+`/`-` and by `ins`/`del`,
//! colour only on top.

use std::{fmt::Write as _, net::IpAddr, time::Duration};

use crate::{
    api::key::ReleaseKey,
    runtime::{
        http::serving,
        web::{
            diffs::{self, Got, Made},
            html::{Page, esc, seg},
            pages::offered,
            state::{WebError, WebState},
        },
    },
    status::next::{Action, Next},
};

/// How long a page request waits for a diff being made before it answers "being made".
const WAIT: Duration = Duration::from_secs(10);

impl WebState {
    /// The diff page of release `key` of Controller `namespace/name`, for the viewer with `token`
    /// (sent from `from`), and who the viewer is.
    ///
    /// # Errors
    /// As [`WebState::reader_of`]; [`WebError::NotServing`] while this replica works no
    /// Controller; [`WebError::NotFound`] when the Controller's newest plan does nothing to `key`.
    pub(crate) async fn diff(
        &self,
        token: &str,
        from: Option<IpAddr>,
        (namespace, name): (&str, &str),
        key: &ReleaseKey,
    ) -> Result<(Page, String), WebError> {
        let identity = self.reader_of(token, from, namespace, name).await?;
        serving(&self.api).map_err(|e| WebError::NotServing(e.to_string()))?;
        let planned = self.api.fleet.next_of(namespace, name);
        let next = planned.iter().find(|n| &n.key == key).ok_or_else(|| {
            WebError::NotFound(format!(
                "Controller {namespace}/{name} plans no Helm action for release {key} now; its page lists those it does"
            ))
        })?;
        let got = match self.api.fleet.diff_maker() {
            Some(make) if offered(next) => {
                self.diffs
                    .get(
                        &identity.username,
                        next,
                        &make,
                        (&self.tasks, &self.cancel),
                        WAIT,
                    )
                    .await
            }
            Some(_) => {
                Got::Ready(Made::Unmade(crate::preview::Unmade::Rollback.to_string()).into())
            }
            None => {
                Got::Ready(Made::Unmade("this operator makes no manifest diffs yet".into()).into())
            }
        };
        Ok((page(namespace, name, next, &got), identity.username.clone()))
    }
}

/// The diff page of `next`, planned for Controller `namespace/name`, with what asking got.
pub(crate) fn page(namespace: &str, name: &str, next: &Next, got: &Got) -> Page {
    let key = &next.key;
    let mut page = Page::new(format!("Diff of {key}"));
    page.fixed(format!(
        "<h1><span class=ns>Manifest diff of </span>{}</h1>\
         <p><a href=\"/ui/controllers/{}/{}\">Back to Controller {}/{}</a></p>\
         <p>{}{}, from the planner and the code <code>tenancy-hub diff</code> runs: the manifest deployed now against the one the chart renders, Secrets' values and what came from Secrets masked.</p>",
        esc(&key.to_string()),
        esc(&seg(namespace)),
        esc(&seg(name)),
        esc(namespace),
        esc(name),
        esc(&what(next)),
        next.held
            .as_ref()
            .map(|why| format!("; {}", esc(why)))
            .unwrap_or_default(),
    ));
    page.section("diff".into(), body(next, got));
    page
}

/// The action in words, with the revisions it goes between.
fn what(next: &Next) -> String {
    match (next.action, next.revision) {
        (Action::Install, _) => "install (revision 1)".to_owned(),
        (Action::Upgrade, Some(r)) => format!("upgrade (revision {r} -> {})", r + 1),
        (Action::Uninstall, Some(r)) => format!("uninstall (revision {r})"),
        (action, _) => action.word().to_owned(),
    }
}

/// The section holding the diff, or saying why there is none.
fn body(next: &Next, got: &Got) -> String {
    let mut out = String::from("<section id=diff aria-labelledby=diff-h><h2 id=diff-h>Diff</h2>");
    match got {
        Got::Busy => out.push_str(&format!(
            "<p class=notice role=status>The hub is making as many diffs as it may ({} at most, {} for one viewer); reload this page in a minute.</p>",
            diffs::QUEUED,
            diffs::PER_VIEWER
        )),
        Got::Pending => out.push_str(
            "<p class=notice role=status>The diff is being made (the chart is rendered with Helm); reload this page in a few seconds.</p>",
        ),
        Got::Ready(made) => match &**made {
            Made::Same if next.action == Action::Upgrade => {
                out.push_str("<p>A new revision with the same manifest: only what Helm records changes.</p>")
            }
            Made::Same => out.push_str("<p>Nothing in the manifest changes.</p>"),
            Made::Unmade(why) => {
                let _ = write!(
                    out,
                    "<p class=error role=alert>The diff is not shown: {}.</p>",
                    esc(why)
                );
            }
            Made::Diff { text, left_out } => lines(&mut out, text, *left_out),
        },
    }
    out.push_str("</section>");
    out
}

/// The diff's lines, each escaped; removed lines in `del`, added in `ins`, each keeping its
/// `-` or `+`.
fn lines(out: &mut String, text: &str, left_out: usize) {
    let count = |sign: char, header: &str| {
        text.lines()
            .filter(|l| l.starts_with(sign) && !l.starts_with(header))
            .count()
    };
    let _ = write!(
        out,
        "<p>{} line(s) added (<code>+</code>), {} removed (<code>-</code>); the first two lines name the revisions compared.</p><pre class=diff tabindex=0 aria-label=\"unified diff\"><code>",
        count('+', "+++"),
        count('-', "---")
    );
    for line in text.lines() {
        let (open, close) = if line.starts_with("+++") || line.starts_with("---") {
            ("<span class=d-head>", "</span>")
        } else if line.starts_with('+') {
            ("<ins>", "</ins>")
        } else if line.starts_with('-') {
            ("<del>", "</del>")
        } else if line.starts_with("@@") {
            ("<span class=d-hunk>", "</span>")
        } else {
            ("", "")
        };
        let _ = writeln!(out, "{open}{}{close}", esc(line));
    }
    out.push_str("</code></pre>");
    if left_out > 0 {
        let _ = write!(
            out,
            "<p class=note>The diff is cut at {} KiB: {left_out} more line(s) left out. <code>tenancy-hub diff -f FILE --cluster CLUSTER</code> prints it whole.</p>",
            diffs::SHOWN / 1024
        );
    }
}
