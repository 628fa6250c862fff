//! The release checks' board: which releases are compared with their manifests and judged for health, the drift and health found, and repair limits (the loop that looks is `controller::drift_checks`).

use std::{
    collections::{BTreeSet, HashMap},
    sync::Mutex,
    time::{Duration, Instant},
};

use dashmap::DashMap;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::{
    api::crd::{DriftDetection, DriftMode, DriftStatus, HealthCheckExpr, HealthStatus},
    api::key::{ClusterName, ReleaseKey},
    api::policy::Impersonation,
    observe::drift::{self, ObjectDrift, RepairLimiter, RepairVerdict},
    plan::health::Judged,
    plan::{Applied, Drifted, OwnerId, Release},
};

/// Repairs allowed per release within [`REPAIR_WINDOW`].
pub(crate) const REPAIRS_PER_WINDOW: usize = 3;
/// The window repairs are counted in.
pub(crate) const REPAIR_WINDOW: Duration = Duration::from_secs(600);
/// How long nudges are gathered before the releases they name are checked together.
pub(crate) const GATHER: Duration = Duration::from_millis(500);
/// Releases checked at once.
pub(crate) const CONCURRENT_CHECKS: usize = 4;

/// The annotation of a Controller asking for a drift check of its releases now: each new value
/// asks once (the fleet view sets it to the time; `kubectl annotate … --overwrite` works too).
pub const DRIFT_CHECK_ANNOTATION: &str = "multitenancy.dev/drift-check";

/// What asks for a drift check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DriftCheckRequest {
    /// One release: a workload of it changed, or Helm just applied it.
    Release(ReleaseKey),
    /// Every release in a cluster that is reachable again.
    Cluster(ClusterName),
}

/// Drift found in one release.
#[derive(Clone, Debug)]
struct Found {
    revision: i64,
    objects: Vec<ObjectDrift>,
    since: Timestamp,
    /// A repair was refused by the limiter.
    suppressed: bool,
}

impl Found {
    /// True when an object was found changed or missing, not only not readable.
    fn repairable(&self) -> bool {
        self.objects.iter().any(|o| o.not_readable_by.is_none())
    }
}

/// What changed in what is known of a release's drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DriftChange {
    Found,
    Gone,
    Same,
}

/// A release compared with its manifest: who owns it, its drift settings, and whom Helm acts as
/// for it (its objects are read as that identity too).
#[derive(Clone, Debug)]
pub(crate) struct Watched {
    pub(crate) owner: OwnerId,
    pub(crate) settings: DriftDetection,
    pub(crate) identity: Option<Impersonation>,
    /// The chart's `healthCheckExprs`.
    pub(crate) health: Vec<HealthCheckExpr>,
}

impl Watched {
    /// True when a check reads anything: drift detection is not disabled, or the chart judges
    /// some kind by an expression.
    pub(crate) fn reads(&self) -> bool {
        self.settings.mode != DriftMode::Disabled || !self.health.is_empty()
    }
}

/// Which releases are watched for drift and what was found, shared by the reconciler and the loop.
pub(crate) struct DriftBoard {
    /// Releases compared with their manifests.
    pub(crate) watched: DashMap<ReleaseKey, Watched>,
    found: DashMap<ReleaseKey, Found>,
    /// The health last judged per release, with the revision judged.
    judged: DashMap<ReleaseKey, (i64, Judged)>,
    /// The revision of each release whose record cannot be compared (it does not decode, expands
    /// past the bound, names too many objects): reported once, not read again until it changes.
    pub(crate) unusable: DashMap<ReleaseKey, i64>,
    limiter: Mutex<RepairLimiter>,
    nudges: UnboundedSender<DriftCheckRequest>,
    pub(crate) interval: Duration,
}

/// The drift action of a release whose repair is planned.
const REPAIRING: &str = "Repairing";
/// The drift action of a release whose repair the limiter refuses.
const REPAIR_SUPPRESSED: &str = "RepairSuppressed";

/// Marks a drift status whose repair the limiter just refused as suppressed, as [`DriftBoard::statuses`]
/// reports it once the refusal is recorded.
pub(crate) fn mark_suppressed(status: &mut DriftStatus) {
    if status.action == REPAIRING {
        status.action = REPAIR_SUPPRESSED.into();
    }
}

impl DriftBoard {
    /// A board checking every release at least every `interval`; the receiver goes to `drift_checks::detect`.
    pub(crate) fn new(interval: Duration) -> (Self, UnboundedReceiver<DriftCheckRequest>) {
        let (nudges, receiver) = unbounded_channel();
        let board = Self {
            watched: DashMap::new(),
            found: DashMap::new(),
            judged: DashMap::new(),
            unusable: DashMap::new(),
            limiter: Mutex::new(RepairLimiter::new(REPAIRS_PER_WINDOW, REPAIR_WINDOW)),
            nudges,
            interval,
        };
        (board, receiver)
    }

    /// The releases `owner` now holds: they replace what it held before. A release newly watched
    /// is checked at once.
    pub(crate) fn track(&self, owner: &OwnerId, releases: &[Release]) {
        let keep: BTreeSet<&ReleaseKey> = releases.iter().map(|r| &r.key).collect();
        self.watched
            .retain(|k, w| w.owner != *owner || keep.contains(k));
        for release in releases {
            let entry = Watched {
                owner: owner.clone(),
                settings: release.drift.clone(),
                identity: release.identity.clone(),
                health: release.health.clone(),
            };
            let before = self.watched.insert(release.key.clone(), entry);
            if before.is_none_or(|b| b.health != release.health) {
                self.nudge(DriftCheckRequest::Release(release.key.clone()));
            }
        }
        self.found.retain(|k, _| self.watched.contains_key(k));
        self.judged.retain(|k, _| self.watched.contains_key(k));
        self.unusable.retain(|k, _| self.watched.contains_key(k));
    }

    /// Forgets every release of a resource that is gone.
    pub(crate) fn forget(&self, owner: &OwnerId) {
        self.track(owner, &[]);
        self.limiter
            .lock()
            .expect("the limiter is never poisoned")
            .retain(|k| self.watched.contains_key(k));
    }

    /// Asks for a check soon.
    pub(crate) fn nudge(&self, nudge: DriftCheckRequest) {
        let _ = self.nudges.send(nudge);
    }

    /// True when `key` is watched for drift (in mode warn or enabled).
    pub(crate) fn is_watched(&self, key: &ReleaseKey) -> bool {
        self.watched
            .get(key)
            .is_some_and(|w| w.settings.mode != DriftMode::Disabled)
    }

    /// Drift found in the deployed revision of releases, for planning repairs: only releases with
    /// an object found changed or missing (a repair could not tell objects that are not readable
    /// any better).
    pub(crate) fn drifted(
        &self,
        applied: &HashMap<ReleaseKey, Applied>,
    ) -> HashMap<ReleaseKey, Drifted> {
        self.current(applied)
            .filter(|(_, found)| found.repairable())
            .map(|(key, found)| {
                let summary = drift::summary(&found.objects);
                (
                    key,
                    Drifted {
                        revision: found.revision,
                        summary,
                    },
                )
            })
            .collect()
    }

    /// The drift status of releases whose deployed revision drifted.
    pub(crate) fn statuses(
        &self,
        applied: &HashMap<ReleaseKey, Applied>,
    ) -> HashMap<ReleaseKey, DriftStatus> {
        self.current(applied)
            .map(|(key, found)| {
                let mode = self.watched.get(&key).map(|w| w.settings.mode);
                let action = match mode {
                    _ if !found.repairable() => "Reported",
                    Some(DriftMode::Enabled) if found.suppressed => REPAIR_SUPPRESSED,
                    Some(DriftMode::Enabled) => REPAIRING,
                    _ => "Reported",
                };
                let since = found.since.to_string();
                (
                    key,
                    drift::status(found.revision, since, action, &found.objects),
                )
            })
            .collect()
    }

    fn current<'a>(
        &'a self,
        applied: &'a HashMap<ReleaseKey, Applied>,
    ) -> impl Iterator<Item = (ReleaseKey, Found)> + 'a {
        self.found
            .iter()
            .filter(|f| {
                applied
                    .get(f.key())
                    .is_some_and(|a| a.revision == f.revision)
            })
            .filter(|f| self.is_watched(f.key()))
            .map(|f| (f.key().clone(), f.value().clone()))
    }

    /// Whether a repair of `key`'s drift in `revision` may go ahead; when it may not, the first
    /// refusal per drifted revision is told (true in the second field).
    pub(crate) fn allow_repair(&self, key: &ReleaseKey, revision: i64) -> (RepairVerdict, bool) {
        let verdict = self
            .limiter
            .lock()
            .expect("the limiter is never poisoned")
            .allow(key, revision, Instant::now());
        let mut first = false;
        if let (RepairVerdict::Suppressed(_), Some(mut found)) = (verdict, self.found.get_mut(key))
        {
            first = !found.suppressed;
            found.suppressed = true;
        }
        (verdict, first)
    }

    /// Records the outcome of a check; says whether drift appeared, changed or went away.
    pub(crate) fn record(
        &self,
        key: &ReleaseKey,
        revision: i64,
        objects: Vec<ObjectDrift>,
    ) -> DriftChange {
        if objects.is_empty() {
            return match self.found.remove(key) {
                Some(_) => DriftChange::Gone,
                None => DriftChange::Same,
            };
        }
        if let Some(mut held) = self.found.get_mut(key) {
            if held.revision == revision && held.objects == objects {
                return DriftChange::Same;
            }
            if held.revision != revision {
                held.suppressed = false;
                held.since = Timestamp::now();
            }
            held.revision = revision;
            held.objects = objects;
            return DriftChange::Found;
        }
        self.found.insert(
            key.clone(),
            Found {
                revision,
                objects,
                since: Timestamp::now(),
                suppressed: false,
            },
        );
        DriftChange::Found
    }

    pub(crate) fn forget_found(&self, key: &ReleaseKey) -> bool {
        self.found.remove(key).is_some()
    }

    /// Records the health judged in a release's `revision`; true when it changed what is known.
    pub(crate) fn record_health(&self, key: &ReleaseKey, revision: i64, judged: Judged) -> bool {
        let new = (revision, judged);
        let changed = self.judged.get(key).is_none_or(|held| *held != new);
        if changed {
            self.judged.insert(key.clone(), new);
        }
        changed
    }

    /// Forgets the health judged of a release that is no longer read; true when some was known.
    pub(crate) fn forget_health(&self, key: &ReleaseKey) -> bool {
        self.judged.remove(key).is_some()
    }

    /// The health of the deployed revision of releases where an object is not current, and of
    /// releases whose chart has `healthCheckExprs` while that revision is not judged yet
    /// (`Unknown`: it is not ready until it is; a check of it is asked for).
    pub(crate) fn health(
        &self,
        applied: &HashMap<ReleaseKey, Applied>,
    ) -> HashMap<ReleaseKey, HealthStatus> {
        let mut out = HashMap::new();
        for (key, a) in applied.iter().filter(|(_, a)| a.status == "deployed") {
            let Some(w) = self.watched.get(key).filter(|w| w.reads()) else {
                continue;
            };
            let judged = self.judged.get(key).filter(|j| j.0 == a.revision);
            let status = match judged {
                Some(j) => health_status(a.revision, &j.1),
                None if !w.health.is_empty() => {
                    // The check that follows Helm's apply may have seen the record before it
                    // changed: ask again, so the revision is judged within a second, not at the
                    // next interval (nudges gather, so a release is checked once however often).
                    self.nudge(DriftCheckRequest::Release(key.clone()));
                    Some(HealthStatus {
                        revision: a.revision,
                        state: "Unknown".into(),
                        ..HealthStatus::default()
                    })
                }
                None => None,
            };
            if let Some(status) = status {
                out.insert(key.clone(), status);
            }
        }
        out
    }
}

/// What the status shows of a judged revision: None when every object is current.
fn health_status(revision: i64, judged: &Judged) -> Option<HealthStatus> {
    if judged.objects.is_empty() {
        return None;
    }
    Some(HealthStatus {
        revision,
        state: judged.worst().to_string(),
        objects: judged
            .objects
            .iter()
            .map(|o| crate::api::crd::UnhealthyObject {
                api_version: o.id.api_version.clone(),
                kind: o.id.kind.clone(),
                name: o.id.name.clone(),
                namespace: o.id.namespace.clone().unwrap_or_default(),
                health: o.verdict.health.to_string(),
                reason: o.verdict.reason.clone(),
            })
            .collect(),
        more_objects: i32::try_from(judged.more).unwrap_or(i32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::drift::ObjectId;

    fn drift(path: &str) -> Vec<ObjectDrift> {
        vec![ObjectDrift {
            id: ObjectId {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("team".into()),
                name: "web".into(),
            },
            missing: false,
            paths: vec![path.into()],
            not_readable_by: None,
        }]
    }

    fn applied(key: &ReleaseKey, revision: i64) -> HashMap<ReleaseKey, Applied> {
        HashMap::from([(
            key.clone(),
            Applied {
                key: key.clone(),
                owner: None,
                spec_hash: None,
                revision,
                status: "deployed".into(),
                modified_at: None,
            },
        )])
    }

    fn release(key: &ReleaseKey, mode: DriftMode) -> Release {
        Release {
            health: Vec::new(),
            adoption: Default::default(),
            commit: None,
            masked: Default::default(),
            post_render: None,
            credentials: Default::default(),
            verified: None,
            key: key.clone(),
            owner: owner(),
            chart_name: "web".into(),
            source: crate::plan::ChartSource::Directory("web".into()),
            version: None,
            chart_digest: None,
            settings: vec![],
            values: None,
            rollback_on_failure: false,
            spec_hash: "h".into(),
            identity: None,
            helm: Default::default(),
            drift: DriftDetection {
                mode,
                ignore: vec![],
            },
        }
    }

    fn owner() -> OwnerId {
        OwnerId {
            namespace: "default".into(),
            name: "a".into(),
        }
    }

    #[test]
    fn drift_is_news_when_it_appears_changes_or_goes_and_counts_only_for_its_revision() {
        let (board, mut nudges) = DriftBoard::new(Duration::from_secs(300));
        let key: ReleaseKey = "member-1/team/web".parse().unwrap();
        board.track(&owner(), &[release(&key, DriftMode::Enabled)]);
        assert_eq!(
            nudges.try_recv().unwrap(),
            DriftCheckRequest::Release(key.clone())
        );
        assert_eq!(
            board.record(&key, 2, drift("/spec/replicas")),
            DriftChange::Found
        );
        assert_eq!(
            board.record(&key, 2, drift("/spec/replicas")),
            DriftChange::Same
        );
        assert_eq!(
            board.record(&key, 2, drift("/spec/template")),
            DriftChange::Found
        );
        assert_eq!(board.drifted(&applied(&key, 2))[&key].revision, 2);
        assert!(board.drifted(&applied(&key, 3)).is_empty());
        assert_eq!(board.statuses(&applied(&key, 2))[&key].action, "Repairing");
        assert_eq!(board.record(&key, 2, vec![]), DriftChange::Gone);
        assert!(board.statuses(&applied(&key, 2)).is_empty());
    }

    #[test]
    fn a_suppressed_repair_is_told_once_per_drifted_revision_and_shown_in_status() {
        let (board, _nudges) = DriftBoard::new(Duration::from_secs(300));
        let key: ReleaseKey = "member-1/team/web".parse().unwrap();
        board.track(&owner(), &[release(&key, DriftMode::Enabled)]);
        for revision in 1..=3 {
            board.record(&key, revision, drift("/spec/replicas"));
            assert_eq!(
                board.allow_repair(&key, revision),
                (RepairVerdict::Allowed, false)
            );
        }
        board.record(&key, 4, drift("/spec/replicas"));
        assert!(matches!(
            board.allow_repair(&key, 4),
            (RepairVerdict::Suppressed(_), true)
        ));
        assert!(matches!(
            board.allow_repair(&key, 4),
            (RepairVerdict::Suppressed(_), false)
        ));
        assert_eq!(
            board.statuses(&applied(&key, 4))[&key].action,
            "RepairSuppressed"
        );
    }

    #[test]
    fn objects_the_identity_may_not_read_are_reported_but_never_repaired() {
        let (board, _nudges) = DriftBoard::new(Duration::from_secs(300));
        let key: ReleaseKey = "member-1/team/web".parse().unwrap();
        board.track(&owner(), &[release(&key, DriftMode::Enabled)]);
        let mut unreadable = drift("/spec/replicas");
        unreadable[0].paths.clear();
        unreadable[0].not_readable_by = Some("team-a-deployer".into());
        board.record(&key, 2, unreadable.clone());
        assert!(board.drifted(&applied(&key, 2)).is_empty());
        let status = &board.statuses(&applied(&key, 2))[&key];
        assert_eq!(status.action, "Reported");
        assert_eq!(status.objects[0].not_readable_by, "team-a-deployer");
        unreadable.extend(drift("/spec/replicas"));
        board.record(&key, 2, unreadable);
        assert_eq!(board.drifted(&applied(&key, 2))[&key].revision, 2);
        assert_eq!(board.statuses(&applied(&key, 2))[&key].action, "Repairing");
    }

    #[test]
    fn releases_no_longer_held_or_in_mode_disabled_are_not_reported() {
        let (board, _nudges) = DriftBoard::new(Duration::from_secs(300));
        let key: ReleaseKey = "member-1/team/web".parse().unwrap();
        board.track(&owner(), &[release(&key, DriftMode::Warn)]);
        board.record(&key, 1, drift("/spec/replicas"));
        assert_eq!(board.statuses(&applied(&key, 1))[&key].action, "Reported");
        board.track(&owner(), &[release(&key, DriftMode::Disabled)]);
        assert!(board.statuses(&applied(&key, 1)).is_empty());
        board.forget(&owner());
        assert!(!board.is_watched(&key));
        assert!(board.found.is_empty());
    }

    #[test]
    fn health_counts_for_the_judged_revision_and_a_release_with_expressions_waits_to_be_judged() {
        use crate::plan::health::{Health, Judged, Verdict};
        let (board, mut nudges) = DriftBoard::new(Duration::from_secs(300));
        let key: ReleaseKey = "member-1/team/web".parse().unwrap();
        let mut judged_release = release(&key, DriftMode::Disabled);
        board.track(&owner(), &[judged_release.clone()]);
        assert!(
            board.health(&applied(&key, 2)).is_empty(),
            "nothing read, nothing judged"
        );
        judged_release.health = vec![HealthCheckExpr {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
            current: "true".into(),
            ..Default::default()
        }];
        board.track(&owner(), &[judged_release]);
        while nudges.try_recv().is_ok() {}
        assert_eq!(board.health(&applied(&key, 2))[&key].state, "Unknown");
        let mut found = Judged::default();
        found.add(
            drift("/x")[0].id.clone(),
            Verdict {
                health: Health::Failed,
                reason: "Stalled=True".into(),
            },
        );
        assert!(board.record_health(&key, 2, found.clone().finish()));
        assert!(!board.record_health(&key, 2, found.finish()), "nothing new");
        let status = &board.health(&applied(&key, 2))[&key];
        assert_eq!(
            (status.state.as_str(), status.objects[0].name.as_str()),
            ("Failed", "web")
        );
        assert_eq!(board.health(&applied(&key, 3))[&key].state, "Unknown");
        assert!(board.record_health(&key, 3, Judged::default()));
        assert!(board.health(&applied(&key, 3)).is_empty(), "all current");
        board.forget(&owner());
        assert!(!board.forget_health(&key));
    }
}
