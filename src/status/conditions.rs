//! kstatus conditions of a resource (Ready, Reconciling, Stalled, Degraded, Suspended) decided by ordered tables of rules over what its status shows (pure).

use std::collections::BTreeMap;

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

use crate::api::crd::TenancyStatus;

use crate::status::{
    phase::{self, is_managed},
    report::ReleaseReport,
};

/// When a condition was last computed, to keep transition times while it holds.
pub(crate) struct Clock<'a> {
    previous: &'a [Condition],
    now: Timestamp,
    generation: Option<i64>,
}

pub(crate) fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    clock: &Clock<'_>,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let since = clock
        .previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(clock.now));
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
        observed_generation: clock.generation,
    }
}

/// Names a few items and counts the rest: "a, b, c and 4 more".
pub(crate) fn some(items: &[String]) -> String {
    crate::plan::limits::few(items, items.len())
}

/// The first of `problems` and how many more, so a condition stays short whatever the spec.
pub(crate) fn first_of(problems: &[String]) -> String {
    match problems {
        [] => String::new(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    }
}

/// What the conditions are made of, the inputs of their rules: everything that stands between
/// the spec and "it runs".
#[derive(Default)]
pub(crate) struct ConditionInputs<'a> {
    pub(crate) generation: Option<i64>,
    pub(crate) deleting: Option<&'a str>,
    pub(crate) suspended: Option<&'a str>,
    /// Why the rollout halted, while it is halted.
    pub(crate) halted: Option<&'a crate::api::crd::RolloutHalt>,
    pub(crate) general: &'a [String],
    /// Releases (`cluster/namespace/release`) by phase.
    pub(crate) phases: BTreeMap<&'a str, Vec<String>>,
    /// First message of a failed, refused or conflicting release.
    pub(crate) first_error: Option<String>,
    /// Entries with releases to watch that are not watched live.
    pub(crate) stale: Vec<String>,
    /// Workloads not rolled out, as `cluster/namespace Kind/name`.
    pub(crate) rolling: Vec<String>,
    /// Pods not ready, as `cluster/namespace/pod`, and how many.
    pub(crate) pods_not_ready: i32,
    /// Pods that are failing (a waiting or terminated reason such as CrashLoopBackOff).
    pub(crate) failing_pods: Vec<String>,
    /// Releases whose live objects differ from their manifest, as `cluster/namespace/release`.
    pub(crate) drifted: Vec<String>,
    /// Releases with an object judged in progress (or not judged yet), as
    /// `cluster/namespace/release (Kind name)`.
    pub(crate) objects_in_progress: Vec<String>,
    /// Releases with an object judged failed, as `cluster/namespace/release (Kind name: reason)`.
    pub(crate) objects_failed: Vec<String>,
}

impl<'a> ConditionInputs<'a> {
    pub(crate) fn of(tenancies: &'a [TenancyStatus], report: &'a ReleaseReport) -> Self {
        let mut f = ConditionInputs {
            generation: report.generation,
            deleting: report.deleting.as_deref(),
            suspended: report.suspended.as_deref(),
            halted: report.rollout.as_ref().and_then(|r| r.halted.as_ref()),
            general: &report.general,
            phases: BTreeMap::new(),
            first_error: None,
            stale: Vec::new(),
            rolling: Vec::new(),
            pods_not_ready: 0,
            failing_pods: Vec::new(),
            drifted: Vec::new(),
            objects_in_progress: Vec::new(),
            objects_failed: Vec::new(),
        };
        for t in tenancies {
            let here = format!("{}/{}", t.cluster, t.namespace);
            for m in &t.chart_messages {
                f.phases
                    .entry(m.phase.as_str())
                    .or_default()
                    .push(format!("{here}/{}", m.release_name));
                let bad = [
                    phase::FAILED,
                    phase::INVALID,
                    phase::FORBIDDEN,
                    phase::UNVERIFIED,
                    phase::CONFLICT,
                ]
                .contains(&m.phase.as_str());
                if bad && f.first_error.is_none() {
                    f.first_error = Some(format!("{here}/{}: {}", m.release_name, m.error_message));
                }
                if m.drift.is_some() {
                    f.drifted.push(format!("{here}/{}", m.release_name));
                }
                if let Some(h) = &m.health {
                    let first = h.objects.first().map_or_else(
                        || "not judged yet".to_owned(),
                        |o| format!("{} {}: {}", o.kind, o.name, o.reason),
                    );
                    let named = format!("{here}/{} ({first})", m.release_name);
                    match h.state.as_str() {
                        "Failed" => f.objects_failed.push(named),
                        _ => f.objects_in_progress.push(named),
                    }
                }
            }
            if !t.chart_messages.iter().any(|m| is_managed(&m.phase)) {
                continue;
            }
            if !t.fresh {
                f.stale.push(here.clone());
                continue;
            }
            f.rolling.extend(
                t.replication_controller_status
                    .iter()
                    .filter(|w| !w.rolled_out)
                    .map(|w| {
                        format!(
                            "{here} {}/{} ({} ready)",
                            w.kind, w.replication_controller_name, w.ready
                        )
                    }),
            );
            f.pods_not_ready += t.pods_total - t.pods_ready;
            f.failing_pods.extend(
                t.pod_status
                    .iter()
                    .filter(|p| !p.ready && !p.reason.is_empty() && p.phase != "Succeeded")
                    .map(|p| format!("{here}/{} ({})", p.pod_name, p.reason)),
            );
        }
        f
    }

    pub(crate) fn list(&self, phase: &str) -> &[String] {
        self.phases.get(phase).map_or(&[], Vec::as_slice)
    }

    /// Whether any release is in `phase`.
    pub(crate) fn has(&self, phase: &str) -> bool {
        !self.list(phase).is_empty()
    }
}

/// One rule of a condition: when it `holds` over the inputs, the condition takes its `reason`
/// and the `message` it writes. A condition's rules are ordered; the first that holds decides.
pub(crate) struct Rule {
    reason: &'static str,
    holds: fn(&ConditionInputs<'_>) -> bool,
    message: fn(&ConditionInputs<'_>) -> String,
}

/// The reason and message a rule gave a condition.
pub(crate) type Verdict = (&'static str, String);

/// The verdict of the first of `rules` that holds, if one does.
pub(crate) fn decide(rules: &[Rule], f: &ConditionInputs<'_>) -> Option<Verdict> {
    rules
        .iter()
        .find(|rule| (rule.holds)(f))
        .map(|rule| (rule.reason, (rule.message)(f)))
}

/// Why the resource cannot go on without a change (`Stalled`).
pub(crate) const STALLED: &[Rule] = &[
    Rule {
        reason: "RolloutHalted",
        holds: |f| f.halted.is_some(),
        message: |f| {
            f.halted
                .map(crate::plan::rollout::halt_message)
                .unwrap_or_default()
        },
    },
    Rule {
        reason: "InvalidSpec",
        holds: |f| f.has(phase::INVALID) || !f.general.is_empty(),
        message: |f| {
            let invalid = f.list(phase::INVALID);
            format!(
                "{} part(s) of the spec cannot be carried out ({}); what runs is left as it is. {}",
                invalid.len() + f.general.len(),
                some(invalid),
                first_of(f.general)
            )
            .trim_end()
            .to_owned()
        },
    },
    Rule {
        reason: "Forbidden",
        holds: |f| f.has(phase::FORBIDDEN),
        message: |f| {
            format!(
                "release(s) {} are not allowed by the tenancy policies; nothing is done for them and what runs is left as it is",
                some(f.list(phase::FORBIDDEN))
            )
        },
    },
    Rule {
        reason: "Unverified",
        holds: |f| f.has(phase::UNVERIFIED),
        message: |f| {
            format!(
                "release(s) {} have charts whose signatures do not pass the tenancy policies; they reach no member and what runs is left as it is",
                some(f.list(phase::UNVERIFIED))
            )
        },
    },
    Rule {
        reason: "Conflict",
        holds: |f| f.has(phase::CONFLICT),
        message: |f| {
            format!(
                "release(s) {} are held by another owner",
                some(f.list(phase::CONFLICT))
            )
        },
    },
    Rule {
        reason: "ReleaseFailed",
        holds: |f| f.has(phase::FAILED),
        message: |f| {
            format!(
                "release(s) {} failed and wait for a spec change",
                some(f.list(phase::FAILED))
            )
        },
    },
];

/// What the resource waits for (`Reconciling`).
pub(crate) const RECONCILING: &[Rule] = &[
    Rule {
        reason: "Terminating",
        holds: |f| f.deleting.is_some(),
        message: |f| f.deleting.unwrap_or_default().to_owned(),
    },
    Rule {
        reason: "Progressing",
        holds: |f| f.has(phase::PENDING),
        message: |f| {
            format!(
                "waiting for release(s) {} to be installed, upgraded or uninstalled",
                some(f.list(phase::PENDING))
            )
        },
    },
    Rule {
        reason: "ClusterUnavailable",
        holds: |f| f.has(phase::UNKNOWN),
        message: |f| {
            format!(
                "waiting for the clusters of release(s) {} to be reached",
                some(f.list(phase::UNKNOWN))
            )
        },
    },
    Rule {
        reason: "ClusterUnavailable",
        holds: |f| !f.stale.is_empty(),
        message: |f| {
            format!(
                "waiting for {} to be watched live; their pods are Unknown",
                some(&f.stale)
            )
        },
    },
    Rule {
        reason: "WorkloadsRollingOut",
        holds: |f| !f.rolling.is_empty(),
        message: |f| format!("waiting for workload(s) {} to roll out", some(&f.rolling)),
    },
    Rule {
        reason: "ObjectsInProgress",
        holds: |f| !f.objects_in_progress.is_empty(),
        message: |f| {
            format!(
                "waiting for the objects of release(s) {} to be current (see chartMessages[].health)",
                some(&f.objects_in_progress)
            )
        },
    },
    Rule {
        reason: "PodsNotReady",
        holds: |f| f.pods_not_ready > 0,
        message: |f| format!("waiting for {} pod(s) to be ready", f.pods_not_ready),
    },
];

/// Objects of a release judged failed: the resource is degraded, and not ready (nothing else
/// may stall or hold it).
const OBJECTS_FAILED: Rule = Rule {
    reason: "ObjectsFailed",
    holds: |f| !f.objects_failed.is_empty(),
    message: |f| {
        format!(
            "objects of release(s) {} failed (see chartMessages[].health)",
            some(&f.objects_failed)
        )
    },
};

/// What has failed while nothing stalls (`Degraded`); a stalled resource is degraded by what
/// stalls it.
pub(crate) const DEGRADED: &[Rule] = &[
    OBJECTS_FAILED,
    Rule {
        reason: "PodsFailing",
        holds: |f| !f.failing_pods.is_empty(),
        message: |f| format!("pod(s) {} are failing", some(&f.failing_pods)),
    },
    Rule {
        reason: "Orphaned",
        holds: |f| f.has(phase::ORPHANED),
        message: |f| {
            format!(
                "{} release(s) are left in clusters no longer registered",
                f.list(phase::ORPHANED).len()
            )
        },
    },
];

/// Why the resource is not ready although nothing stalls it and it waits for nothing (`Ready`).
pub(crate) const NOT_READY: &[Rule] = &[
    Rule {
        reason: "Suspended",
        holds: |f| f.has(phase::SUSPENDED),
        message: held_back,
    },
    OBJECTS_FAILED,
    // Drift keeps Ready False (what runs is not what was asked for) without being stalled,
    // reconciling or degraded: in mode warn nothing changes it, in mode enabled a repair does.
    Rule {
        reason: "Drifted",
        holds: |f| !f.drifted.is_empty(),
        message: |f| {
            format!(
                "release(s) {} differ from their manifests (see chartMessages[].drift)",
                some(&f.drifted)
            )
        },
    },
];

/// What `suspend` holds back, while it is set (`Suspended`).
pub(crate) const SUSPENDED: &[Rule] = &[
    Rule {
        reason: "Suspended",
        holds: |f| f.suspended.is_some() && !f.has(phase::SUSPENDED),
        message: |f| {
            format!(
                "{}; no change is held back",
                f.suspended.unwrap_or_default()
            )
        },
    },
    Rule {
        reason: "Suspended",
        holds: |f| f.suspended.is_some(),
        message: held_back,
    },
];

/// Why the resource is suspended and the changes that holds back.
pub(crate) fn held_back(f: &ConditionInputs<'_>) -> String {
    let held = f.list(phase::SUSPENDED);
    format!(
        "{}; {} change(s) held back until resumed: {}",
        f.suspended.unwrap_or("suspended"),
        held.len(),
        some(held)
    )
}

/// kstatus-compatible conditions: `Ready` (True only when every release is deployed from this
/// generation and its workloads and pods are ready), `Reconciling` (what it waits for),
/// `Stalled` (what cannot go on without a change), `Degraded` (something that ran has failed)
/// and `Suspended` (what `suspend` holds back), each decided by its rules.
pub(crate) fn conditions(
    f: &ConditionInputs<'_>,
    previous: &[Condition],
    now: Timestamp,
) -> Vec<Condition> {
    let clock = Clock {
        previous,
        now,
        generation: f.generation,
    };
    let stalled = decide(STALLED, f);
    let reconciling = decide(RECONCILING, f);
    let degraded = match &stalled {
        Some((reason, message)) => Some((
            *reason,
            f.first_error.clone().unwrap_or_else(|| message.clone()),
        )),
        None => decide(DEGRADED, f),
    };
    // While the resource is deleted, what the deletion waits for comes before what stalls.
    let not_ready = match f.deleting {
        Some(_) => reconciling.clone(),
        None => stalled.clone().or_else(|| reconciling.clone()),
    }
    .or_else(|| decide(NOT_READY, f));
    let waiting = reconciling.is_some() && (stalled.is_none() || f.deleting.is_some());
    let deployed = f.list(phase::DEPLOYED).len();
    let suspended = decide(SUSPENDED, f);
    vec![
        decided(
            "Ready",
            not_ready.is_none(),
            not_ready,
            (
                "Ready",
                format!("{deployed} release(s) deployed and their workloads ready"),
            ),
            &clock,
        ),
        decided(
            "Reconciling",
            waiting,
            reconciling,
            ("Reconciled", "nothing to wait for".into()),
            &clock,
        ),
        decided(
            "Stalled",
            stalled.is_some(),
            stalled,
            ("AsExpected", "nothing is stalled".into()),
            &clock,
        ),
        decided(
            "Degraded",
            degraded.is_some(),
            degraded,
            ("AsExpected", "no release or pod has failed".into()),
            &clock,
        ),
        decided(
            "Suspended",
            suspended.is_some(),
            suspended,
            (
                "NotSuspended",
                "Helm calls are made as the spec asks".into(),
            ),
            &clock,
        ),
    ]
}

/// A condition with the reason and message of its `verdict`, or of `otherwise` when no rule
/// decided it.
pub(crate) fn decided(
    type_: &str,
    ok: bool,
    verdict: Option<Verdict>,
    otherwise: (&str, String),
    clock: &Clock<'_>,
) -> Condition {
    let (reason, message) = verdict.unwrap_or(otherwise);
    condition(type_, ok, reason, message, clock)
}
