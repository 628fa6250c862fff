//! The rollout gate: which clusters may get a new generation now, wave by wave, gated on health (pure).
//!
//! This file holds one step of the gate and the annotation that resumes or restarts it; its
//! rooms hold `spec.rollout` read (`settings`), the words of the status (`states`), the waves
//! (`waves`), the Events (`events`) and the gate applied to the plan's jobs (`jobs`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;

use crate::{
    api::crd::{RolloutHalt, RolloutStatus},
    api::key::ClusterName,
};

mod events;
mod jobs;
mod settings;
mod states;
mod waves;

pub(crate) use events::{RolloutEvent, describe, halt_message};
pub(crate) use jobs::{hold, note, rollbacks};
pub(crate) use settings::{Settings, parse_duration_ms};
pub(crate) use states::{Facts, state};
pub(crate) use waves::waves;

use states::{count, millis, stamp};
use waves::{advance, follow_targets, fresh};

/// Annotation that resumes a halted rollout (`resume-<anything new>`) or restarts the newest
/// generation's rollout from the first wave (`restart-<anything new>`); each value acts once.
pub(crate) const ROLLOUT_ANNOTATION: &str = "multitenancy.dev/rollout";

/// A resume or restart asked for through the annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Clears a halt: the failed clusters get a new deadline and the rollout goes on.
    Resume(String),
    /// Starts the newest generation's rollout again from the first wave.
    Restart(String),
}

impl Command {
    /// The command an annotation value asks for; None when it asks for nothing known.
    pub(crate) fn parse(value: &str) -> Option<Command> {
        if value.starts_with("resume") {
            Some(Command::Resume(value.to_owned()))
        } else if value.starts_with("restart") {
            Some(Command::Restart(value.to_owned()))
        } else {
            None
        }
    }

    /// The annotation value it came from, kept in the status so each value acts once.
    fn token(&self) -> &str {
        match self {
            Command::Resume(t) | Command::Restart(t) => t,
        }
    }
}

/// Everything one step of the gate looks at.
pub(crate) struct Input<'a> {
    /// The generation to roll out.
    pub(crate) generation: i64,
    /// The targeted clusters in waves, as the spec and registration group them now.
    pub(crate) waves: &'a [Vec<ClusterName>],
    /// What is known of each targeted cluster.
    pub(crate) facts: &'a BTreeMap<ClusterName, Facts>,
    /// The state after the previous step (or as the status last said, after a restart).
    pub(crate) previous: Option<&'a RolloutStatus>,
    /// A resume or restart asked for, acted on once per annotation value.
    pub(crate) command: Option<&'a Command>,
    /// `spec.rollout`, read.
    pub(crate) settings: &'a Settings,
    /// Now.
    pub(crate) now: Timestamp,
}

/// The outcome of one step.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Step {
    /// Clusters that may get the new generation's Helm work (applies, uninstalls, repairs).
    pub(crate) allowed: BTreeSet<ClusterName>,
    /// The new state.
    pub(crate) state: RolloutStatus,
    /// What happened in this step.
    pub(crate) happened: Vec<RolloutEvent>,
}

impl Step {
    /// True while the rollout is waiting for clusters to become healthy or a pause to pass: the
    /// reconciler then looks again soon, since health changes trigger no reconcile.
    pub(crate) fn active(&self) -> bool {
        self.state.finished_at.is_none() && self.state.halted.is_none()
    }
}

/// One step of the rollout gate. A new generation (or a restart) starts a rollout from the first
/// wave. Clusters given the generation become `Healthy` when their facts say so; one that fails,
/// or is not healthy within the deadline, halts the rollout (an unreachable cluster waits, as
/// long as the deadline allows). Then, unless halted, the first wave with a cluster not healthy
/// is worked on: after the pause, its pending clusters start, by name, while fewer than
/// `maxUnavailable` are progressing. A pending cluster that already runs the generation and is
/// healthy needs no step and is healthy at once. Clusters that joined the targets since the
/// start go to the last wave; clusters no longer targeted leave. Once complete, every cluster is
/// allowed (a cluster added later gets the generation at once).
pub(crate) fn step(input: &Input<'_>) -> Step {
    let mut happened = Vec::new();
    let mut s = begin(input, &mut happened);
    obey(&mut s, input, &mut happened);
    follow_targets(&mut s, input.waves, input.facts);
    let facts = |name: &str| {
        input
            .facts
            .iter()
            .find(|(k, _)| k.as_str() == name)
            .map(|(_, f)| f.clone())
            .unwrap_or_default()
    };
    if s.finished_at.is_none() {
        judge_progressing(&mut s, input, &facts, &mut happened);
        if s.halted.is_none() {
            advance(&mut s, input.now, input.settings, &facts, &mut happened);
        }
    }
    let allowed = allowed(&s, input);
    count(&mut s, input.facts);
    Step {
        allowed,
        state: s,
        happened,
    }
}

/// The state the step starts from: the previous one, or a fresh rollout for a new generation
/// or a restart not acted on yet.
fn begin(input: &Input<'_>, happened: &mut Vec<RolloutEvent>) -> RolloutStatus {
    let restart = match input.command {
        Some(Command::Restart(t)) => input.previous.is_none_or(|p| p.command != *t),
        _ => false,
    };
    match input.previous {
        Some(p) if p.generation == input.generation && !restart => p.clone(),
        _ => {
            happened.push(RolloutEvent::Started {
                generation: input.generation,
                waves: input.waves.len().max(1),
                restarted: restart,
            });
            fresh(input.generation, input.waves, input.now)
        }
    }
}

/// Acts once on an annotation value not seen before: a resume clears a halt and gives the
/// failed clusters a new deadline.
fn obey(s: &mut RolloutStatus, input: &Input<'_>, happened: &mut Vec<RolloutEvent>) {
    let Some(command) = input.command else {
        return;
    };
    if s.command == command.token() {
        return;
    }
    if matches!(command, Command::Resume(_)) && s.halted.is_some() {
        s.halted = None;
        for c in &mut s.clusters {
            if c.state == state::FAILED {
                c.state = state::PROGRESSING.into();
                c.started_at = Some(stamp(input.now));
            }
        }
        happened.push(RolloutEvent::Resumed);
    }
    s.command = command.token().to_owned();
}

/// Judges the clusters given the generation: healthy, failed, out of time, or still going. The
/// first failure or missed deadline halts the rollout.
fn judge_progressing(
    s: &mut RolloutStatus,
    input: &Input<'_>,
    facts: &dyn Fn(&str) -> Facts,
    happened: &mut Vec<RolloutEvent>,
) {
    let now_ms = input.now.as_millisecond();
    for c in &mut s.clusters {
        if c.state != state::PROGRESSING {
            continue;
        }
        let f = facts(&c.name);
        if f.healthy {
            c.state = state::HEALTHY.into();
            c.healthy_at = Some(stamp(input.now));
            continue;
        }
        if s.halted.is_some() {
            continue;
        }
        let started = c.started_at.as_deref().and_then(millis).unwrap_or(now_ms);
        if let Some((release, reason)) = halt_reason(f, now_ms - started, input.settings) {
            c.state = state::FAILED.into();
            let halt = RolloutHalt {
                cluster: c.name.clone(),
                release,
                reason,
                at: stamp(input.now),
            };
            happened.push(RolloutEvent::Halted(halt.clone()));
            s.halted = Some(halt);
        }
    }
}

/// Why a cluster given the generation `elapsed_ms` ago halts the rollout, if it does: a release
/// failed, or the progress deadline passed (saying what it waits for). Release and reason.
fn halt_reason(f: Facts, elapsed_ms: i64, settings: &Settings) -> Option<(String, String)> {
    if let Some((release, message)) = f.failed {
        Some((release, format!("release failed: {message}")))
    } else if elapsed_ms > settings.progress_deadline_ms {
        let (release, waiting) = f.waiting.unwrap_or_default();
        let waiting = if f.reachable {
            waiting
        } else {
            "the cluster is unreachable".into()
        };
        Some((
            release,
            format!(
                "not healthy within the progress deadline ({}s): {waiting}",
                settings.progress_deadline_ms / 1000
            ),
        ))
    } else {
        None
    }
}

/// The clusters that may get the new generation's Helm work: every targeted one once complete,
/// otherwise those the rollout reached.
fn allowed(s: &RolloutStatus, input: &Input<'_>) -> BTreeSet<ClusterName> {
    if s.finished_at.is_some() {
        input.facts.keys().cloned().collect()
    } else {
        // With rollbackOnHalt, a failed cluster is rolled back and then held like one not
        // reached: the new generation is not applied there again until the halt is resolved.
        s.clusters
            .iter()
            .filter(|c| c.state != state::PENDING)
            .filter(|c| !(input.settings.rollback_on_halt && c.state == state::FAILED))
            .filter_map(|c| c.name.parse().ok())
            .collect()
    }
}

#[cfg(test)]
mod tests;
