//! A member link for unit tests ([`FakeLink`]): outcomes scripted per release, every call recorded, releases, manifests and probes answered or failed as the test says, and release-record events pushed by the test.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use futures::{FutureExt as _, StreamExt as _, channel::mpsc, future::BoxFuture};
use kube::runtime::watcher;
use tokio::sync::{oneshot, watch};

use crate::{
    api::key::{ClusterName, ReleaseKey},
    clusters::registry::Health,
    helm::args::RenderFor,
    member::error::{self, LinkError},
    member::link::{DriftCheck, MemberLink},
    observe::drift,
    observe::records::{Deployed, Record, RecordEvents},
    observe::release_check::Checked,
    observe::watch::ClusterWatch,
    plan::{Applied, ChartSource, Job, OwnerId, Release},
    queue::{Outcome, Started},
};

/// One call the fake was made, in the order made.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Call {
    /// A Helm job started (or executed).
    Job(Job),
    /// The release records of a label selector opened.
    Records(String),
    /// A workload watch started.
    Watch,
    /// A drift check of a release.
    Drift(ReleaseKey),
    /// A probe.
    Probe,
    /// The releases listed.
    Releases,
    /// The manifest of a release's revision read.
    Manifest(ReleaseKey, i64),
    /// Its capabilities asked.
    Capabilities,
}

/// How the fake answers one job.
enum Script {
    /// At once.
    Now(Outcome),
    /// When the test sends the outcome, holding the worker meanwhile.
    Later(oneshot::Receiver<Outcome>),
    /// Handed over: the worker is freed and the outcome the test sends is awaited.
    HandedOver(oneshot::Receiver<Outcome>),
}

/// A failure the fake gives, made anew each time for its cluster.
type Failure = fn(ClusterName) -> LinkError;

/// What the fake answers, and what it was asked.
#[derive(Default)]
struct Answers {
    calls: Vec<Call>,
    scripts: HashMap<ReleaseKey, VecDeque<Script>>,
    releases: HashMap<ReleaseKey, Applied>,
    releases_fail: Option<Failure>,
    manifests: HashMap<(ReleaseKey, i64), Deployed>,
    manifest_fail: Option<Failure>,
    unreachable: Option<String>,
    records: HashMap<String, RecordChannel>,
}

/// The channel of one selector's record events: its sender, and its receiver until the link
/// opens it.
struct RecordChannel {
    send: mpsc::UnboundedSender<Result<watcher::Event<Record>, watcher::Error>>,
    receive: Option<mpsc::UnboundedReceiver<Result<watcher::Event<Record>, watcher::Error>>>,
}

/// A member cluster as a test scripts it.
pub(crate) struct FakeLink {
    cluster: ClusterName,
    answers: Mutex<Answers>,
    /// The number of calls made, ticking on each.
    made: watch::Sender<usize>,
}

impl FakeLink {
    /// A fake member named `cluster` that applies every job at revision 1 (uninstalls every
    /// uninstall), lists no release, holds no manifest and answers every probe.
    pub(crate) fn new(cluster: &str) -> Arc<Self> {
        Arc::new(Self {
            cluster: cluster.parse().expect("a valid cluster name"),
            answers: Mutex::default(),
            made: watch::Sender::new(0),
        })
    }

    fn answers(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.answers.lock().expect("fake link lock")
    }

    fn record(&self, call: Call) {
        let made = {
            let mut answers = self.answers();
            answers.calls.push(call);
            answers.calls.len()
        };
        self.made.send_replace(made);
    }

    fn push_script(&self, key: &str, script: Script) {
        let key: ReleaseKey = key.parse().expect("a valid release key");
        self.answers()
            .scripts
            .entry(key)
            .or_default()
            .push_back(script);
    }

    /// The next job of release `key` comes to `outcome` at once.
    pub(crate) fn script(&self, key: &str, outcome: Outcome) {
        self.push_script(key, Script::Now(outcome));
    }

    /// The next job of release `key` runs until the test sends its outcome.
    pub(crate) fn answer_later(&self, key: &str) -> oneshot::Sender<Outcome> {
        let (send, receive) = oneshot::channel();
        self.push_script(key, Script::Later(receive));
        send
    }

    /// The next job of release `key` is handed over (as to a pull member's agent) and answered
    /// when the test sends its outcome.
    pub(crate) fn hand_over(&self, key: &str) -> oneshot::Sender<Outcome> {
        let (send, receive) = oneshot::channel();
        self.push_script(key, Script::HandedOver(receive));
        send
    }

    /// Lists `applied` as its releases.
    pub(crate) fn set_releases(&self, applied: impl IntoIterator<Item = Applied>) {
        self.answers().releases = applied.into_iter().map(|a| (a.key.clone(), a)).collect();
    }

    /// Fails every listing of its releases with `failure`.
    pub(crate) fn fail_releases(&self, failure: Failure) {
        self.answers().releases_fail = Some(failure);
    }

    /// Holds `deployed` as the manifest of `key`'s `revision`.
    pub(crate) fn set_manifest(&self, key: &str, revision: i64, deployed: Deployed) {
        let key = key.parse().expect("a valid release key");
        self.answers().manifests.insert((key, revision), deployed);
    }

    /// Fails every manifest read with `failure`.
    pub(crate) fn fail_manifest(&self, failure: Failure) {
        self.answers().manifest_fail = Some(failure);
    }

    /// Answers probes as unreachable, for `why`.
    pub(crate) fn set_unreachable(&self, why: &str) {
        self.answers().unreachable = Some(why.to_owned());
    }

    /// Sends `event` to the watch of release records of `selector`, opened or not yet.
    pub(crate) fn push_record(&self, selector: &str, event: watcher::Event<Record>) {
        let mut answers = self.answers();
        let channel = records_channel(&mut answers, selector);
        channel.send.unbounded_send(Ok(event)).expect("held open");
    }

    /// Every call made so far, in order.
    pub(crate) fn calls(&self) -> Vec<Call> {
        self.answers().calls.clone()
    }

    /// The jobs started so far, in order.
    pub(crate) fn jobs(&self) -> Vec<Job> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Job(job) => Some(job),
                _ => None,
            })
            .collect()
    }

    /// Waits until `n` calls at least were made.
    pub(crate) async fn called(&self, n: usize) {
        let mut made = self.made.subscribe();
        made.wait_for(|made| *made >= n).await.expect("held open");
    }

    /// How the next job of `key` is answered: as scripted, else applied at revision 1 (an
    /// uninstall: uninstalled).
    fn next_script(&self, job: &Job) -> Script {
        let scripted = self
            .answers()
            .scripts
            .get_mut(job.key())
            .and_then(VecDeque::pop_front);
        scripted.unwrap_or_else(|| {
            Script::Now(match job {
                Job::Uninstall { .. } => Outcome::Uninstalled,
                _ => Outcome::Applied {
                    adopted_from: None,
                    revision: 1,
                    chart_version: "0.1.0".into(),
                    tests: Vec::new(),
                    crds: None,
                },
            })
        })
    }
}

/// A job applying chart `web` (from a chart-home directory) as release `key` of owner
/// `default/a`, from a spec that hashes to `spec_hash`.
pub(crate) fn apply(key: &str, spec_hash: &str) -> Job {
    Job::Apply {
        adopt: false,
        release: Box::new(Release {
            health: Vec::new(),
            adoption: Default::default(),
            commit: None,
            masked: Default::default(),
            post_render: None,
            credentials: Default::default(),
            verified: None,
            key: key.parse().expect("a valid release key"),
            owner: OwnerId {
                namespace: "default".into(),
                name: "a".into(),
            },
            chart_name: "web".into(),
            source: ChartSource::Directory("web".into()),
            version: None,
            chart_digest: None,
            settings: vec![],
            values: None,
            rollback_on_failure: false,
            spec_hash: spec_hash.into(),
            identity: None,
            drift: Default::default(),
            helm: Default::default(),
        }),
        stale_pending: None,
        repair: None,
        installing: false,
        attempt: 0,
    }
}

/// The record channel of `selector`, made at its first use.
fn records_channel<'a>(answers: &'a mut Answers, selector: &str) -> &'a mut RecordChannel {
    answers
        .records
        .entry(selector.to_owned())
        .or_insert_with(|| {
            let (send, receive) = mpsc::unbounded();
            RecordChannel {
                send,
                receive: Some(receive),
            }
        })
}

/// An answer that never comes: the test dropped its sender.
fn unanswered() -> Outcome {
    Outcome::failed(
        "the test sent no outcome",
        crate::queue::FailureKind::Transient,
    )
}

impl MemberLink for FakeLink {
    fn cluster(&self) -> &ClusterName {
        &self.cluster
    }

    fn execute(&self, job: Job) -> BoxFuture<'static, Outcome> {
        let start = self.start(job);
        async move { start.await.outcome().await }.boxed()
    }

    fn start(&self, job: Job) -> BoxFuture<'static, Started> {
        let script = self.next_script(&job);
        // Recorded as planned, which try it is aside, so tests compare it with what they queued.
        self.record(Call::Job(job.at_try(0)));
        async move {
            match script {
                Script::Now(outcome) => Started::Finished(outcome),
                Script::Later(answer) => {
                    Started::Finished(answer.await.unwrap_or_else(|_| unanswered()))
                }
                Script::HandedOver(answer) => Started::Awaiting(
                    async move { answer.await.unwrap_or_else(|_| unanswered()) }.boxed(),
                ),
            }
        }
        .boxed()
    }

    fn release_records(&self, selector: &str) -> RecordEvents {
        self.record(Call::Records(selector.to_owned()));
        let mut answers = self.answers();
        let receive = records_channel(&mut answers, selector).receive.take();
        receive
            .expect("each selector's records are opened once")
            .boxed()
    }

    fn watch_workloads(&self, watch: ClusterWatch) -> BoxFuture<'static, ()> {
        self.record(Call::Watch);
        async move { watch.stop.cancelled().await }.boxed()
    }

    fn check_drift(&self, check: DriftCheck) -> BoxFuture<'static, drift::Result<Checked>> {
        self.record(Call::Drift(check.key));
        futures::future::ready(Ok(Checked::default())).boxed()
    }

    fn probe(&self) -> BoxFuture<'static, Health> {
        self.record(Call::Probe);
        let error = self.answers().unreachable.clone();
        futures::future::ready(Health {
            cluster: self.cluster.to_string(),
            context: "fake".into(),
            reachable: error.is_none(),
            version: error.is_none().then(|| "v1.36.0".into()),
            error,
        })
        .boxed()
    }

    fn list_releases(&self) -> BoxFuture<'static, error::Result<HashMap<ReleaseKey, Applied>>> {
        self.record(Call::Releases);
        let answers = self.answers();
        let listed = match answers.releases_fail {
            Some(fail) => Err(fail(self.cluster.clone())),
            None => Ok(answers.releases.clone()),
        };
        futures::future::ready(listed).boxed()
    }

    fn manifest(
        &self,
        key: ReleaseKey,
        revision: i64,
    ) -> BoxFuture<'static, error::Result<Option<Deployed>>> {
        self.record(Call::Manifest(key.clone(), revision));
        let answers = self.answers();
        let found = match answers.manifest_fail {
            Some(fail) => Err(fail(self.cluster.clone())),
            None => Ok(answers.manifests.get(&(key, revision)).cloned()),
        };
        futures::future::ready(found).boxed()
    }

    fn capabilities(&self) -> BoxFuture<'static, RenderFor> {
        self.record(Call::Capabilities);
        futures::future::ready(RenderFor {
            kube_version: Some("v1.36.0".into()),
            api_versions: vec!["v1".into(), "apps/v1".into()],
            is_upgrade: false,
        })
        .boxed()
    }
}
