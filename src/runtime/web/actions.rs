//! The fleet view's actions on one Controller (pure): suspend and resume it, resume its halted
//! rollout, check its releases for drift now. Each is one merge patch of the Controller, made on
//! the hub with the viewer's own token, so the hub's RBAC (`patch` on
//! `controllers.multitenancy.dev`) decides, not the operator's rights; the page offers only the
//! actions that apply, and only to viewers the hub says may patch.

use std::fmt::Write as _;

use kube::ResourceExt as _;
use serde_json::{Value, json};

use crate::{
    api::crd::TenancyController,
    controller::drift::DRIFT_CHECK_ANNOTATION,
    plan::rollout::ROLLOUT_ANNOTATION,
    runtime::web::html::{esc, seg},
};

/// One action of the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Act {
    /// `spec.suspend: true`: no Helm call is made until resumed.
    Suspend,
    /// `spec.suspend: false`.
    Resume,
    /// Clears a rollout's halt (as `tenancy-hub rollout resume`).
    ResumeRollout,
    /// Checks every release for drift now.
    CheckDrift,
}

impl Act {
    /// Every action, in the order the page shows them.
    pub(crate) const ALL: [Act; 4] = [
        Act::Suspend,
        Act::Resume,
        Act::ResumeRollout,
        Act::CheckDrift,
    ];

    /// The action named by its URL segment.
    pub(crate) fn parse(segment: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.segment() == segment)
    }

    /// Its URL segment (`/ui/controllers/NS/NAME/actions/SEGMENT`).
    pub(crate) fn segment(self) -> &'static str {
        match self {
            Act::Suspend => "suspend",
            Act::Resume => "resume",
            Act::ResumeRollout => "resume-rollout",
            Act::CheckDrift => "check-drift",
        }
    }

    /// Its button's words.
    fn label(self) -> &'static str {
        match self {
            Act::Suspend => "Suspend",
            Act::Resume => "Resume",
            Act::ResumeRollout => "Resume the rollout",
            Act::CheckDrift => "Check drift now",
        }
    }

    /// The merge patch of the Controller that asks for it; `stamp` (the time) makes each
    /// annotation new, since the operator acts once per value.
    pub(crate) fn patch(self, stamp: i64) -> Value {
        match self {
            Act::Suspend => json!({ "spec": { "suspend": true } }),
            Act::Resume => json!({ "spec": { "suspend": false } }),
            Act::ResumeRollout => json!({ "metadata": { "annotations": {
                ROLLOUT_ANNOTATION: format!("resume-{stamp}")
            } } }),
            Act::CheckDrift => json!({ "metadata": { "annotations": {
                DRIFT_CHECK_ANNOTATION: stamp.to_string()
            } } }),
        }
    }

    /// What was asked, in words, for the page the viewer is sent back to.
    pub(crate) fn done(self) -> &'static str {
        match self {
            Act::Suspend => "Suspended: no Helm call is made until it is resumed.",
            Act::Resume => "Resumed: the operator applies what the spec asks.",
            Act::ResumeRollout => {
                "Asked the rollout to resume: the halted clusters get a new deadline."
            }
            Act::CheckDrift => "Asked for a drift check: the releases are compared within seconds.",
        }
    }
}

/// The actions that apply to `c` as it stands: suspend or resume, resume the rollout only while
/// it is halted, and a drift check while it is not suspended.
pub(crate) fn offered(c: &TenancyController) -> Vec<Act> {
    let halted = c
        .status
        .as_ref()
        .and_then(|s| s.rollout.as_ref())
        .is_some_and(|r| r.halted.is_some());
    Act::ALL
        .into_iter()
        .filter(|a| match a {
            Act::Suspend => !c.spec.suspend,
            Act::Resume => c.spec.suspend,
            Act::ResumeRollout => halted && !c.spec.suspend,
            Act::CheckDrift => !c.spec.suspend,
        })
        .collect()
}

/// The page's actions section: a form (posted to the view itself) per action in `acts`.
pub(crate) fn section(c: &TenancyController, acts: &[Act]) -> String {
    let (ns, name) = (c.namespace().unwrap_or_default(), c.name_any());
    let mut out = String::from("<section id=actions><h2>Actions</h2><div class=actions>");
    for act in acts {
        let _ = write!(
            out,
            "<form method=post action=\"/ui/controllers/{}/{}/actions/{}\"><button type=submit>{}</button></form>",
            esc(&seg(&ns)),
            esc(&seg(&name)),
            act.segment(),
            act.label()
        );
    }
    out.push_str("</div><p class=note>Made on the hub as you, with your own rights.</p></section>");
    out
}
