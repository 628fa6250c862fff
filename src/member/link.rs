//! The interface of one member cluster as the hub reaches it ([`MemberLink`]) and the typed work it takes.

use std::collections::HashMap;

use futures::future::BoxFuture;

use crate::{
    api::crd::{DriftIgnore, HealthCheckExpr},
    api::key::{ClusterName, ReleaseKey},
    api::policy::Impersonation,
    clusters::registry::Health,
    helm::args::RenderFor,
    member::error,
    observe::drift,
    observe::records::RecordEvents,
    observe::release_check::Checked,
    observe::watch::ClusterWatch,
    plan::{Applied, Job},
    queue::{Outcome, Started},
};

/// One check the hub asks of a member: compare a release's revision with the live objects, and
/// judge their health.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct DriftCheck {
    /// The release.
    pub(crate) key: ReleaseKey,
    /// The revision whose manifest is compared.
    pub(crate) revision: i64,
    /// Who reads the live objects (the policy's identity), or the operator itself.
    pub(crate) identity: Option<Impersonation>,
    /// Fields left out of the comparison.
    pub(crate) ignore: Vec<DriftIgnore>,
    /// Compare the objects with the manifest (drift detection is not disabled); when false,
    /// only the objects of kinds `health` names are read, to judge them.
    #[serde(default = "yes")]
    pub(crate) compare: bool,
    /// The chart's health expressions: every object read is judged, by them or by kstatus's rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) health: Vec<HealthCheckExpr>,
}

fn yes() -> bool {
    true
}

/// One member cluster as the hub reaches it. Every method returns an owned future or stream, so a
/// link can be a set of clients or a channel to an agent alike.
pub(crate) trait MemberLink: Send + Sync {
    /// The member's registered name.
    fn cluster(&self) -> &ClusterName;
    /// Carries out one Helm job there and tells how it went.
    fn execute(&self, job: Job) -> BoxFuture<'static, Outcome>;
    /// Starts one Helm job there: a member that answers later (a pull member's agent) hands
    /// back its answer to await; by default the whole job runs now.
    fn start(&self, job: Job) -> BoxFuture<'static, Started> {
        use futures::FutureExt as _;
        let run = self.execute(job);
        async move { Started::Finished(run.await) }.boxed()
    }
    /// The events of its release records matching a label selector.
    fn release_records(&self, selector: &str) -> RecordEvents;
    /// The task that watches its pods and workloads as `watch` asks.
    fn watch_workloads(&self, watch: ClusterWatch) -> BoxFuture<'static, ()>;
    /// Compares a release's manifest with what runs, and judges the health of what runs.
    fn check_drift(&self, check: DriftCheck) -> BoxFuture<'static, drift::Result<Checked>>;
    /// Whether its API server answers, and its version.
    fn probe(&self) -> BoxFuture<'static, Health>;
    /// Its releases, the newest record of each, read once: for a look that acts on nothing (the
    /// CLI's `diff`), which takes owners as the records' labels claim them.
    fn list_releases(&self) -> BoxFuture<'static, error::Result<HashMap<ReleaseKey, Applied>>>;
    /// The manifest and values of a release's `revision`, when its record is there.
    fn manifest(
        &self,
        key: ReleaseKey,
        revision: i64,
    ) -> BoxFuture<'static, error::Result<Option<crate::observe::records::Deployed>>>;
    /// What rendering offline as for this cluster needs: its version and the API versions it
    /// serves (what it does not say is left out).
    fn capabilities(&self) -> BoxFuture<'static, RenderFor>;
}
