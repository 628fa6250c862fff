//! The rollout gate: which clusters may get a new generation now, wave by wave, gated on health (pure).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{apimachinery::pkg::util::intstr::IntOrString, jiff::Timestamp};

use crate::{
    api::crd::{Rollout, RolloutCluster, RolloutHalt, RolloutStatus},
    api::key::ClusterName,
    api::key::ReleaseKey,
    plan::{Applied, Job, Plan, Release},
};
use std::collections::HashMap;

/// Annotation that resumes a halted rollout (`resume-<anything new>`) or restarts the newest
/// generation's rollout from the first wave (`restart-<anything new>`); each value acts once.
pub(crate) const ROLLOUT_ANNOTATION: &str = "multitenancy.dev/rollout";

/// Rollout phases shown in `status.rollout.phase`.
pub(crate) mod phase {
    /// Clusters are being given the new generation.
    pub(crate) const PROGRESSING: &str = "Progressing";
    /// A wave is healthy; the next waits out `pauseBetweenWaves`.
    pub(crate) const PAUSED: &str = "Paused";
    /// A cluster failed or was not healthy in time; nothing more is started.
    pub(crate) const HALTED: &str = "Halted";
    /// Every cluster is healthy on the new generation.
    pub(crate) const COMPLETE: &str = "Complete";
}

/// States of one cluster in `status.rollout.clusters[].state`.
pub(crate) mod state {
    /// Not reached yet: keeps the previous generation.
    pub(crate) const PENDING: &str = "Pending";
    /// Given the new generation; not healthy on it yet.
    pub(crate) const PROGRESSING: &str = "Progressing";
    /// Healthy on the new generation.
    pub(crate) const HEALTHY: &str = "Healthy";
    /// Halted the rollout.
    pub(crate) const FAILED: &str = "Failed";
}

/// What went wrong reading `spec.rollout`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Error {
    /// A duration the schema let through but that cannot be read.
    #[error(
        "spec.rollout.{field}: {value:?} is not a duration such as \"10m\", \"90s\" or \"1h30m\""
    )]
    Duration {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
    },
    /// A `maxUnavailable` that is neither a positive number nor a percentage.
    #[error(
        "spec.rollout.maxUnavailable: {0:?} is neither a number of at least 1 nor a percentage such as \"25%\""
    )]
    MaxUnavailable(String),
}

/// `spec.rollout`, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Clusters changing at once.
    pub(crate) max_unavailable: MaxUnavailable,
    /// Milliseconds a cluster may take to become healthy.
    pub(crate) progress_deadline_ms: i64,
    /// Milliseconds between a wave being healthy and the next starting.
    pub(crate) pause_ms: i64,
    /// Roll the failed cluster's releases back when halting.
    pub(crate) rollback_on_halt: bool,
}

/// Clusters changing at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MaxUnavailable {
    /// This many clusters.
    Count(u32),
    /// This percentage of the clusters, rounded down, at least one.
    Percent(u32),
}

impl MaxUnavailable {
    /// How many of `total` clusters may change at once: at least one, so a rollout always moves.
    pub(crate) fn of(self, total: usize) -> usize {
        match self {
            MaxUnavailable::Count(n) => (n as usize).max(1),
            MaxUnavailable::Percent(p) => (total * p as usize / 100).max(1),
        }
    }
}

/// Default `progressDeadline`.
pub(crate) const DEFAULT_PROGRESS_DEADLINE: &str = "10m";

/// Reads a duration such as "10m", "90s", "1h30m" or "500ms" into milliseconds.
pub(crate) fn parse_duration_ms(text: &str) -> Option<i64> {
    let mut total: i64 = 0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        if digits == 0 {
            return None;
        }
        let n: i64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('s') {
            (1_000, 1)
        } else if rest.starts_with('m') {
            (60_000, 1)
        } else if rest.starts_with('h') {
            (3_600_000, 1)
        } else {
            return None;
        };
        total = total.checked_add(n.checked_mul(unit)?)?;
        rest = &rest[len..];
    }
    Some(total)
}

impl Settings {
    /// Reads `spec.rollout`.
    pub(crate) fn of(rollout: &Rollout) -> Result<Self, Error> {
        let duration = |field: &'static str, value: Option<&str>, default: &str| {
            let value = value.unwrap_or(default);
            parse_duration_ms(value).ok_or_else(|| Error::Duration {
                field,
                value: value.to_owned(),
            })
        };
        let max_unavailable = match &rollout.max_unavailable {
            None => MaxUnavailable::Count(1),
            Some(IntOrString::Int(n)) if *n >= 1 => MaxUnavailable::Count(*n as u32),
            Some(IntOrString::Int(n)) => return Err(Error::MaxUnavailable(n.to_string())),
            Some(IntOrString::String(s)) => match s.strip_suffix('%').map(str::parse::<u32>) {
                Some(Ok(p)) if (1..=100).contains(&p) => MaxUnavailable::Percent(p),
                _ => match s.parse::<u32>() {
                    Ok(n) if n >= 1 => MaxUnavailable::Count(n),
                    _ => return Err(Error::MaxUnavailable(s.clone())),
                },
            },
        };
        Ok(Settings {
            max_unavailable,
            progress_deadline_ms: duration(
                "progressDeadline",
                rollout.progress_deadline.as_deref(),
                DEFAULT_PROGRESS_DEADLINE,
            )?,
            pause_ms: duration(
                "pauseBetweenWaves",
                rollout.pause_between_waves.as_deref(),
                "0s",
            )?,
            rollback_on_halt: rollout.rollback_on_halt,
        })
    }
}

/// The targeted clusters grouped into waves, in order: each cluster in the first wave whose
/// selector matches its labels, the rest in a last wave of their own. Within a wave, by name.
pub(crate) fn waves(
    rollout: &Rollout,
    targeted: &BTreeSet<ClusterName>,
    labels: &BTreeMap<ClusterName, BTreeMap<String, String>>,
) -> Vec<Vec<ClusterName>> {
    let mut out: Vec<Vec<ClusterName>> = vec![Vec::new(); rollout.waves.len() + 1];
    for cluster in targeted {
        let empty = BTreeMap::new();
        let have = labels.get(cluster).unwrap_or(&empty);
        let wave = rollout
            .waves
            .iter()
            .position(|w| {
                w.cluster_selector
                    .match_labels
                    .iter()
                    .all(|(k, v)| have.get(k) == Some(v))
            })
            .unwrap_or(rollout.waves.len());
        out[wave].push(cluster.clone());
    }
    // An empty wave would only delay the rollout by a step; it is not shown either.
    out.retain(|w| !w.is_empty());
    out
}

/// What is known of one targeted cluster now, for the newest generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    /// Every release of the cluster runs the newest spec, and no job for it is queued or running.
    pub(crate) updated: bool,
    /// Updated, and ready by the `Ready` rule: deployed from this generation, watched live,
    /// workloads rolled out, pods ready.
    pub(crate) healthy: bool,
    /// The cluster's API server answers.
    pub(crate) reachable: bool,
    /// A release of the cluster whose Helm job for the newest spec failed: release and message.
    pub(crate) failed: Option<(String, String)>,
    /// Why it is not healthy, in words: release (may be empty) and what it waits for.
    pub(crate) waiting: Option<(String, String)>,
}

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

    fn token(&self) -> &str {
        match self {
            Command::Resume(t) | Command::Restart(t) => t,
        }
    }
}

/// Something worth an Event.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RolloutEvent {
    /// A rollout of a generation started.
    Started {
        /// The generation.
        generation: i64,
        /// Its waves.
        waves: usize,
        /// True when a restart asked for it.
        restarted: bool,
    },
    /// A wave was given its first clusters.
    WaveStarted {
        /// The wave, from 1.
        wave: usize,
        /// Waves in all.
        of: usize,
        /// The clusters started.
        clusters: Vec<String>,
    },
    /// Every cluster of a wave is healthy.
    WaveCompleted {
        /// The wave, from 1.
        wave: usize,
        /// Waves in all.
        of: usize,
    },
    /// The rollout halted.
    Halted(RolloutHalt),
    /// A halted rollout was resumed.
    Resumed,
    /// Every cluster is healthy on the generation.
    Finished {
        /// The generation.
        generation: i64,
        /// Milliseconds from start to finish.
        duration_ms: i64,
    },
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

fn stamp(t: Timestamp) -> String {
    t.round(k8s_openapi::jiff::Unit::Millisecond)
        .unwrap_or(t)
        .to_string()
}

fn millis(text: &str) -> Option<i64> {
    text.parse::<Timestamp>().ok().map(|t| t.as_millisecond())
}

fn fresh(generation: i64, waves: &[Vec<ClusterName>], now: Timestamp) -> RolloutStatus {
    RolloutStatus {
        generation,
        phase: phase::PROGRESSING.into(),
        wave: 1,
        waves: waves.len().max(1) as i32,
        started_at: stamp(now),
        clusters: waves
            .iter()
            .enumerate()
            .flat_map(|(i, w)| {
                w.iter().map(move |c| RolloutCluster {
                    name: c.to_string(),
                    wave: i as i32 + 1,
                    state: state::PENDING.into(),
                    started_at: None,
                    healthy_at: None,
                })
            })
            .collect(),
        ..RolloutStatus::default()
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
    let now_ms = input.now.as_millisecond();
    let mut happened = Vec::new();
    let restart = match input.command {
        Some(Command::Restart(t)) => input.previous.is_none_or(|p| p.command != *t),
        _ => false,
    };
    let mut s = match input.previous {
        Some(p) if p.generation == input.generation && !restart => p.clone(),
        _ => {
            happened.push(RolloutEvent::Started {
                generation: input.generation,
                waves: input.waves.len().max(1),
                restarted: restart,
            });
            fresh(input.generation, input.waves, input.now)
        }
    };
    if let Some(command) = input.command
        && s.command != command.token()
    {
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

    // Membership: clusters no longer targeted leave; new ones join the last wave.
    s.clusters
        .retain(|c| input.facts.keys().any(|k| k.as_str() == c.name));
    let last_wave = s.waves.max(1);
    for wave in input.waves {
        for cluster in wave {
            if !s.clusters.iter().any(|c| c.name == cluster.as_str()) {
                s.clusters.push(RolloutCluster {
                    name: cluster.to_string(),
                    wave: last_wave,
                    state: state::PENDING.into(),
                    started_at: None,
                    healthy_at: None,
                });
            }
        }
    }
    s.clusters
        .sort_by(|a, b| (a.wave, &a.name).cmp(&(b.wave, &b.name)));

    let facts = |name: &str| {
        input
            .facts
            .iter()
            .find(|(k, _)| k.as_str() == name)
            .map(|(_, f)| f.clone())
            .unwrap_or_default()
    };
    if s.finished_at.is_none() {
        // Clusters given the generation: healthy, failed, out of time, or still going.
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
            let halt = if let Some((release, message)) = f.failed {
                Some((release, format!("release failed: {message}")))
            } else if now_ms - started > input.settings.progress_deadline_ms {
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
                        input.settings.progress_deadline_ms / 1000
                    ),
                ))
            } else {
                None
            };
            if let Some((release, reason)) = halt {
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
        if s.halted.is_none() {
            advance(&mut s, input, &facts, &mut happened);
        }
    }

    let allowed: BTreeSet<ClusterName> = if s.finished_at.is_some() {
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
    };
    count(&mut s, input.facts);
    Step {
        allowed,
        state: s,
        happened,
    }
}

/// Works on the first wave with a cluster not healthy: waits out the pause after the wave before
/// it, then starts its pending clusters up to `maxUnavailable`; finishes when none is left.
fn advance(
    s: &mut RolloutStatus,
    input: &Input<'_>,
    facts: &dyn Fn(&str) -> Facts,
    happened: &mut Vec<RolloutEvent>,
) {
    let now_ms = input.now.as_millisecond();
    let limit = input.settings.max_unavailable.of(s.clusters.len());
    loop {
        let Some(wave) = s
            .clusters
            .iter()
            .filter(|c| c.state != state::HEALTHY)
            .map(|c| c.wave)
            .min()
        else {
            if s.wave >= 1 && s.clusters.iter().any(|c| c.wave == s.wave) {
                happened.push(RolloutEvent::WaveCompleted {
                    wave: s.wave as usize,
                    of: s.waves as usize,
                });
            }
            s.finished_at = Some(stamp(input.now));
            s.wave_completed_at = None;
            s.phase = phase::COMPLETE.into();
            let started = millis(&s.started_at).unwrap_or(now_ms);
            happened.push(RolloutEvent::Finished {
                generation: s.generation,
                duration_ms: now_ms - started,
            });
            return;
        };
        if wave > s.wave {
            // The wave in progress is healthy: note when, then wait out the pause.
            if s.wave_completed_at.is_none() {
                if s.clusters.iter().any(|c| c.wave == s.wave) {
                    happened.push(RolloutEvent::WaveCompleted {
                        wave: s.wave as usize,
                        of: s.waves as usize,
                    });
                }
                s.wave_completed_at = Some(stamp(input.now));
            }
            let done = s
                .wave_completed_at
                .as_deref()
                .and_then(millis)
                .unwrap_or(now_ms);
            if now_ms - done < input.settings.pause_ms {
                s.phase = phase::PAUSED.into();
                return;
            }
            s.wave = wave;
            s.wave_completed_at = None;
        }
        s.phase = phase::PROGRESSING.into();
        let mut progressing = s
            .clusters
            .iter()
            .filter(|c| c.state == state::PROGRESSING)
            .count();
        let mut started = Vec::new();
        let mut skipped = false;
        for c in s.clusters.iter_mut().filter(|c| c.wave == wave) {
            if c.state != state::PENDING {
                continue;
            }
            let f = facts(&c.name);
            if f.updated && f.healthy {
                // Already runs the generation, healthy: nothing to gate.
                c.state = state::HEALTHY.into();
                c.started_at = Some(stamp(input.now));
                c.healthy_at = Some(stamp(input.now));
                skipped = true;
                continue;
            }
            if progressing >= limit {
                break;
            }
            c.state = state::PROGRESSING.into();
            c.started_at = Some(stamp(input.now));
            progressing += 1;
            started.push(c.name.clone());
        }
        if !started.is_empty() {
            happened.push(RolloutEvent::WaveStarted {
                wave: wave as usize,
                of: s.waves as usize,
                clusters: started,
            });
        }
        // A wave made healthy by clusters needing no step lets the next one go in this step.
        let wave_done = s
            .clusters
            .iter()
            .filter(|c| c.wave == wave)
            .all(|c| c.state == state::HEALTHY);
        if !(skipped && wave_done) {
            return;
        }
    }
}

fn count(s: &mut RolloutStatus, facts: &BTreeMap<ClusterName, Facts>) {
    let of = |st: &str| s.clusters.iter().filter(|c| c.state == st).count() as i32;
    s.healthy = of(state::HEALTHY);
    s.pending = of(state::PENDING);
    s.failed = of(state::FAILED);
    s.updated = s
        .clusters
        .iter()
        .filter(|c| facts.iter().any(|(k, f)| k.as_str() == c.name && f.updated))
        .count() as i32;
    s.progress = format!("{}/{}", s.healthy, s.clusters.len());
    s.waves = s
        .waves
        .max(s.clusters.iter().map(|c| c.wave).max().unwrap_or(1));
    if s.halted.is_some() {
        s.phase = phase::HALTED.into();
    }
}

/// Holds back the Helm work of clusters the rollout has not reached: their jobs (installs,
/// upgrades, uninstalls, drift repairs) leave the plan and their releases are listed as held, so
/// what runs there stays exactly as it is.
pub(crate) fn hold(plan: &mut Plan, allowed: &BTreeSet<ClusterName>, note: String) {
    let (go, wait): (Vec<Job>, Vec<Job>) = std::mem::take(&mut plan.jobs)
        .into_iter()
        .partition(|j| allowed.contains(&j.key().scope.cluster));
    plan.jobs = go;
    plan.rollout_held = wait.iter().map(|j| j.key().clone()).collect();
    if !plan.rollout_held.is_empty() {
        plan.rollout_note = Some(note);
    }
}

/// With `rollbackOnHalt`, the rollbacks a halted rollout asks for: every release of a failed
/// cluster that runs the new generation (its newest record is from the new spec) goes back to
/// the revision before it. A first install has no revision before it and is left as it is.
/// Asked for on every step while it holds, so the queue keeps it; once rolled back, the record
/// is from the old spec and nothing more is asked.
pub(crate) fn rollbacks(
    state: &RolloutStatus,
    settings: &Settings,
    desired: &[Release],
    applied: &HashMap<ReleaseKey, Applied>,
) -> Vec<Job> {
    if !settings.rollback_on_halt || state.halted.is_none() {
        return Vec::new();
    }
    let failed: BTreeSet<&str> = state
        .clusters
        .iter()
        .filter(|c| c.state == state::FAILED)
        .map(|c| c.name.as_str())
        .collect();
    desired
        .iter()
        .filter(|r| failed.contains(r.key.scope.cluster.as_str()))
        .filter_map(|r| {
            let a = applied.get(&r.key)?;
            (a.spec_hash.as_deref() == Some(&r.spec_hash) && a.revision >= 2 && !a.is_pending())
                .then(|| Job::Rollback {
                    key: r.key.clone(),
                    owner: r.owner.clone(),
                    from: a.revision,
                    identity: r.identity.clone(),
                })
        })
        .collect()
}

/// The line held releases show: where the rollout is, and what it waits for.
pub(crate) fn note(state: &RolloutStatus) -> String {
    match &state.halted {
        Some(h) => format!(
            "held back by the rollout, halted at cluster {}: {}",
            h.cluster, h.reason
        ),
        None => format!(
            "held back by the rollout: waiting for rollout wave {}/{} ({} of {} clusters healthy)",
            state.wave,
            state.waves,
            state.healthy,
            state.clusters.len()
        ),
    }
}

/// The line an Event carries for what happened.
pub(crate) fn describe(h: &RolloutEvent) -> (&'static str, String) {
    match h {
        RolloutEvent::Started {
            generation,
            waves,
            restarted,
        } => (
            "RolloutStarted",
            format!(
                "{} the rollout of generation {generation} in {waves} wave(s)",
                if *restarted { "restarted" } else { "started" }
            ),
        ),
        RolloutEvent::WaveStarted { wave, of, clusters } => (
            "RolloutWaveStarted",
            format!(
                "wave {wave}/{of}: generation given to {}",
                clusters.join(", ")
            ),
        ),
        RolloutEvent::WaveCompleted { wave, of } => (
            "RolloutWaveCompleted",
            format!("wave {wave}/{of}: every cluster healthy"),
        ),
        RolloutEvent::Halted(h) => ("RolloutHalted", halt_message(h)),
        RolloutEvent::Resumed => (
            "RolloutResumed",
            "the halted rollout resumes: the failed clusters get a new deadline".into(),
        ),
        RolloutEvent::Finished {
            generation,
            duration_ms,
        } => (
            "RolloutComplete",
            format!(
                "generation {generation} is healthy on every cluster, after {:.1}s",
                *duration_ms as f64 / 1000.0
            ),
        ),
    }
}

/// A halt, in words.
pub(crate) fn halt_message(h: &RolloutHalt) -> String {
    let release = if h.release.is_empty() {
        String::new()
    } else {
        format!(" release {}", h.release)
    };
    format!(
        "rollout halted at cluster {}{release}: {}; clusters not reached keep the previous generation (change the spec, or resume with `tenancy-hub rollout resume`)",
        h.cluster, h.reason
    )
}

#[cfg(test)]
mod tests;
