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
mod tests {
    use super::*;
    use crate::api::crd::{ClusterSelector, Wave};

    fn c(name: &str) -> ClusterName {
        name.parse().unwrap()
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn settings(max: MaxUnavailable) -> Settings {
        Settings {
            max_unavailable: max,
            progress_deadline_ms: 60_000,
            pause_ms: 0,
            rollback_on_halt: false,
        }
    }

    struct World {
        waves: Vec<Vec<ClusterName>>,
        facts: BTreeMap<ClusterName, Facts>,
        state: Option<RolloutStatus>,
        settings: Settings,
        generation: i64,
        command: Option<Command>,
    }

    impl World {
        fn new(waves: &[&[&str]]) -> Self {
            let waves: Vec<Vec<ClusterName>> = waves
                .iter()
                .map(|w| w.iter().map(|n| c(n)).collect())
                .collect();
            let facts = waves
                .iter()
                .flatten()
                .map(|n| {
                    (
                        n.clone(),
                        Facts {
                            reachable: true,
                            ..Facts::default()
                        },
                    )
                })
                .collect();
            World {
                waves,
                facts,
                state: None,
                settings: settings(MaxUnavailable::Count(1)),
                generation: 2,
                command: None,
            }
        }

        fn step(&mut self, secs: i64) -> Step {
            let step = step(&Input {
                generation: self.generation,
                waves: &self.waves,
                facts: &self.facts,
                previous: self.state.as_ref(),
                command: self.command.as_ref(),
                settings: &self.settings,
                now: at(secs),
            });
            self.state = Some(step.state.clone());
            step
        }

        fn healthy(&mut self, name: &str) {
            let f = self.facts.get_mut(&c(name)).unwrap();
            f.updated = true;
            f.healthy = true;
        }

        fn allowed(step: &Step) -> Vec<String> {
            step.allowed.iter().map(ToString::to_string).collect()
        }
    }

    #[test]
    fn durations_read_as_milliseconds_and_nonsense_is_refused() {
        assert_eq!(parse_duration_ms("10m"), Some(600_000));
        assert_eq!(parse_duration_ms("1h30m"), Some(5_400_000));
        assert_eq!(parse_duration_ms("0s"), Some(0));
        assert_eq!(parse_duration_ms("250ms"), Some(250));
        for bad in ["", "m", "10", "10x", "1.5m", "-1s"] {
            assert_eq!(parse_duration_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn max_unavailable_takes_numbers_and_percentages_rounded_down_to_at_least_one() {
        let read = |v: IntOrString| {
            Settings::of(&Rollout {
                max_unavailable: Some(v),
                ..Rollout::default()
            })
            .map(|s| s.max_unavailable)
        };
        assert_eq!(read(IntOrString::Int(2)), Ok(MaxUnavailable::Count(2)));
        assert_eq!(
            read(IntOrString::String("25%".into())),
            Ok(MaxUnavailable::Percent(25))
        );
        assert!(read(IntOrString::Int(0)).is_err());
        assert!(read(IntOrString::String("lots".into())).is_err());
        assert_eq!(MaxUnavailable::Percent(25).of(10), 2);
        assert_eq!(MaxUnavailable::Percent(25).of(3), 1);
        assert_eq!(MaxUnavailable::Percent(100).of(3), 3);
        let defaults = Settings::of(&Rollout::default()).unwrap();
        assert_eq!(defaults.max_unavailable, MaxUnavailable::Count(1));
        assert_eq!(defaults.progress_deadline_ms, 600_000);
        assert_eq!(defaults.pause_ms, 0);
    }

    #[test]
    fn clusters_go_to_the_first_wave_that_selects_them_and_the_rest_go_last() {
        let wave = |ring: &str| Wave {
            cluster_selector: ClusterSelector {
                match_labels: BTreeMap::from([("ring".into(), ring.into())]),
            },
        };
        let rollout = Rollout {
            waves: vec![wave("canary"), wave("early")],
            ..Rollout::default()
        };
        let labels = BTreeMap::from([
            (c("a"), BTreeMap::from([("ring".into(), "early".into())])),
            (c("b"), BTreeMap::from([("ring".into(), "canary".into())])),
            (c("c"), BTreeMap::new()),
            (c("d"), BTreeMap::from([("ring".into(), "early".into())])),
        ]);
        let targeted = labels.keys().cloned().collect();
        assert_eq!(
            waves(&rollout, &targeted, &labels),
            vec![vec![c("b")], vec![c("a"), c("d")], vec![c("c")]]
        );
        let none = waves(&Rollout::default(), &targeted, &labels);
        assert_eq!(none, vec![vec![c("a"), c("b"), c("c"), c("d")]]);
    }

    #[test]
    fn a_good_change_reaches_one_cluster_at_a_time_in_order_each_after_the_previous_is_healthy() {
        let mut w = World::new(&[&["m1", "m2", "m3"]]);
        let s = w.step(0);
        assert_eq!(World::allowed(&s), ["m1"]);
        assert!(matches!(s.happened[0], RolloutEvent::Started { .. }));
        assert_eq!(s.state.progress, "0/3");
        let s = w.step(1);
        assert_eq!(World::allowed(&s), ["m1"], "m1 is not healthy yet");
        w.healthy("m1");
        let s = w.step(2);
        assert_eq!(World::allowed(&s), ["m1", "m2"]);
        assert_eq!(s.state.clusters[0].state, state::HEALTHY);
        assert_eq!(s.state.clusters[1].state, state::PROGRESSING);
        w.healthy("m2");
        w.step(3);
        w.healthy("m3");
        let s = w.step(4);
        assert_eq!(World::allowed(&s), ["m1", "m2", "m3"]);
        assert_eq!(s.state.phase, phase::COMPLETE);
        assert_eq!(s.state.progress, "3/3");
        assert!(s.happened.contains(&RolloutEvent::Finished {
            generation: 2,
            duration_ms: 4000
        }));
        assert!(!s.active());
    }

    #[test]
    fn max_unavailable_lets_that_many_clusters_change_at_once() {
        let mut w = World::new(&[&["m1", "m2", "m3", "m4"]]);
        w.settings.max_unavailable = MaxUnavailable::Percent(50);
        let s = w.step(0);
        assert_eq!(World::allowed(&s), ["m1", "m2"]);
        w.healthy("m2");
        let s = w.step(1);
        assert_eq!(World::allowed(&s), ["m1", "m2", "m3"]);
    }

    #[test]
    fn a_wave_starts_only_when_every_cluster_of_the_waves_before_is_healthy() {
        let mut w = World::new(&[&["canary"], &["e1", "e2"], &["rest"]]);
        w.settings.max_unavailable = MaxUnavailable::Count(5);
        let s = w.step(0);
        assert_eq!(World::allowed(&s), ["canary"]);
        assert_eq!((s.state.wave, s.state.waves), (1, 3));
        w.healthy("canary");
        let s = w.step(1);
        assert_eq!(World::allowed(&s), ["canary", "e1", "e2"]);
        assert!(
            s.happened
                .contains(&RolloutEvent::WaveCompleted { wave: 1, of: 3 })
        );
        assert!(s.happened.contains(&RolloutEvent::WaveStarted {
            wave: 2,
            of: 3,
            clusters: vec!["e1".into(), "e2".into()]
        }));
        w.healthy("e1");
        let s = w.step(2);
        assert_eq!(s.allowed.len(), 3, "e2 is not healthy: the last wave waits");
    }

    #[test]
    fn the_next_wave_waits_out_the_pause_after_the_wave_before_is_healthy() {
        let mut w = World::new(&[&["canary"], &["rest"]]);
        w.settings.pause_ms = 30_000;
        w.step(0);
        w.healthy("canary");
        let s = w.step(10);
        assert_eq!(s.state.phase, phase::PAUSED);
        assert_eq!(World::allowed(&s), ["canary"]);
        assert!(s.active());
        let s = w.step(39);
        assert_eq!(World::allowed(&s), ["canary"]);
        let s = w.step(40);
        assert_eq!(World::allowed(&s), ["canary", "rest"]);
        assert_eq!(s.state.wave, 2);
    }

    #[test]
    fn a_failed_release_halts_and_clusters_not_reached_stay_pending() {
        let mut w = World::new(&[&["m1", "m2", "m3"]]);
        w.step(0);
        w.facts.get_mut(&c("m1")).unwrap().failed =
            Some(("web".into(), "template: bad value".into()));
        let s = w.step(1);
        let halt = s.state.halted.clone().unwrap();
        assert_eq!(
            (halt.cluster.as_str(), halt.release.as_str()),
            ("m1", "web")
        );
        assert!(halt.reason.contains("template: bad value"));
        assert_eq!(s.state.phase, phase::HALTED);
        assert_eq!((s.state.failed, s.state.pending), (1, 2));
        assert_eq!(World::allowed(&s), ["m1"]);
        assert!(matches!(s.happened[..], [RolloutEvent::Halted(_)]));
        let s = w.step(100);
        assert_eq!(World::allowed(&s), ["m1"], "a halt stays until a change");
        assert!(s.happened.is_empty(), "a halt is told once");
        assert!(!s.active());
    }

    #[test]
    fn a_cluster_not_healthy_within_the_deadline_halts_naming_what_it_waits_for() {
        let mut w = World::new(&[&["m1", "m2"]]);
        w.step(0);
        w.facts.get_mut(&c("m1")).unwrap().waiting =
            Some(("web".into(), "1 pod(s) not ready".into()));
        assert!(w.step(60).state.halted.is_none());
        let s = w.step(61);
        let halt = s.state.halted.unwrap();
        assert_eq!(halt.release, "web");
        assert!(
            halt.reason
                .contains("progress deadline (60s): 1 pod(s) not ready")
        );
    }

    #[test]
    fn an_unreachable_cluster_waits_without_halting_before_the_deadline_then_goes_on() {
        let mut w = World::new(&[&["m1", "m2"]]);
        w.step(0);
        w.facts.get_mut(&c("m1")).unwrap().reachable = false;
        for t in 1..=50 {
            let s = w.step(t);
            assert!(s.state.halted.is_none());
            assert_eq!(World::allowed(&s), ["m1"], "not healthy while unreachable");
        }
        w.facts.get_mut(&c("m1")).unwrap().reachable = true;
        w.healthy("m1");
        assert_eq!(World::allowed(&w.step(51)), ["m1", "m2"]);
    }

    #[test]
    fn an_unreachable_cluster_past_the_deadline_halts_saying_so() {
        let mut w = World::new(&[&["m1", "m2"]]);
        w.step(0);
        w.facts.get_mut(&c("m1")).unwrap().reachable = false;
        let halt = w.step(61).state.halted.unwrap();
        assert!(halt.reason.contains("unreachable"), "{}", halt.reason);
    }

    #[test]
    fn a_cluster_registered_mid_rollout_joins_the_last_wave() {
        let mut w = World::new(&[&["canary"], &["rest"]]);
        w.step(0);
        // The new cluster would match the first wave's selector: it still goes last.
        w.waves[0].push(c("new"));
        w.facts.insert(
            c("new"),
            Facts {
                reachable: true,
                ..Facts::default()
            },
        );
        let s = w.step(1);
        let new = s.state.clusters.iter().find(|x| x.name == "new").unwrap();
        assert_eq!((new.wave, new.state.as_str()), (2, state::PENDING));
        assert_eq!(s.state.clusters.last().unwrap().name, "rest");
        assert_eq!(World::allowed(&s), ["canary"]);
    }

    #[test]
    fn a_spec_change_mid_rollout_starts_again_from_the_first_wave() {
        let mut w = World::new(&[&["m1", "m2", "m3"]]);
        w.step(0);
        w.healthy("m1");
        assert_eq!(World::allowed(&w.step(1)), ["m1", "m2"]);
        // The new generation changes every cluster again: nothing runs it yet.
        w.generation = 3;
        w.facts.values_mut().for_each(|f| {
            f.updated = false;
            f.healthy = false;
        });
        let s = w.step(2);
        assert_eq!(World::allowed(&s), ["m1"]);
        assert_eq!(s.state.generation, 3);
        assert!(matches!(
            s.happened[0],
            RolloutEvent::Started { generation: 3, .. }
        ));
    }

    #[test]
    fn clusters_already_healthy_on_the_generation_need_no_step() {
        let mut w = World::new(&[&["canary"], &["m1", "m2"]]);
        for n in ["canary", "m1", "m2"] {
            w.healthy(n);
        }
        let s = w.step(0);
        assert_eq!(s.state.phase, phase::COMPLETE);
        assert_eq!(s.allowed.len(), 3);
    }

    #[test]
    fn a_resume_clears_the_halt_and_gives_the_failed_cluster_a_new_deadline() {
        let mut w = World::new(&[&["m1", "m2"]]);
        w.step(0);
        w.facts.get_mut(&c("m1")).unwrap().failed = Some(("web".into(), "boom".into()));
        w.step(1);
        w.facts.get_mut(&c("m1")).unwrap().failed = None;
        w.command = Some(Command::Resume("resume-1".into()));
        let s = w.step(2);
        assert!(s.state.halted.is_none());
        assert!(s.happened.contains(&RolloutEvent::Resumed));
        assert_eq!(s.state.clusters[0].state, state::PROGRESSING);
        w.healthy("m1");
        assert_eq!(World::allowed(&w.step(3)), ["m1", "m2"]);
        // The same annotation value acts once.
        assert!(!w.step(4).happened.contains(&RolloutEvent::Resumed));
    }

    #[test]
    fn a_restart_starts_the_same_generation_again_from_the_first_wave_once() {
        let mut w = World::new(&[&["m1", "m2"]]);
        w.step(0);
        w.healthy("m1");
        w.step(1);
        w.facts.get_mut(&c("m1")).unwrap().healthy = false;
        w.command = Some(Command::Restart("restart-7".into()));
        let s = w.step(2);
        assert!(matches!(
            s.happened[0],
            RolloutEvent::Started {
                restarted: true,
                ..
            }
        ));
        assert_eq!(World::allowed(&s), ["m1"]);
        assert_eq!(s.state.command, "restart-7");
        let s = w.step(3);
        assert!(s.happened.is_empty(), "{:?}", s.happened);
    }

    #[test]
    fn a_cluster_no_longer_targeted_leaves_the_rollout() {
        let mut w = World::new(&[&["m1", "m2"]]);
        w.step(0);
        w.facts.remove(&c("m1"));
        w.waves[0].retain(|x| x.as_str() != "m1");
        let s = w.step(1);
        assert_eq!(World::allowed(&s), ["m2"]);
        assert_eq!(s.state.clusters.len(), 1);
    }

    #[test]
    fn a_policy_refusal_alone_is_no_failure_a_cluster_with_only_refused_releases_passes() {
        // The reconciler leaves refused releases out of the facts: such a cluster has nothing
        // to update and is healthy.
        let mut w = World::new(&[&["m1", "m2"]]);
        w.healthy("m1");
        let s = w.step(0);
        assert!(s.state.halted.is_none());
        assert_eq!(World::allowed(&s), ["m1", "m2"]);
    }

    #[test]
    fn jobs_of_clusters_not_reached_are_held_and_the_others_kept() {
        use crate::plan::OwnerId;
        let job = |key: &str| Job::Uninstall {
            key: key.parse().unwrap(),
            owner: OwnerId {
                namespace: "default".into(),
                name: "app".into(),
            },
            identity: None,
        };
        let mut plan = Plan {
            jobs: vec![job("m1/team/web"), job("m2/team/web"), job("m3/team/db")],
            ..Plan::default()
        };
        hold(&mut plan, &BTreeSet::from([c("m1")]), "waiting".into());
        assert_eq!(plan.jobs, vec![job("m1/team/web")]);
        let held: Vec<String> = plan.rollout_held.iter().map(ToString::to_string).collect();
        assert_eq!(held, ["m2/team/web", "m3/team/db"]);
        assert_eq!(plan.rollout_note.as_deref(), Some("waiting"));
        let mut all = Plan {
            jobs: vec![job("m1/team/web")],
            ..Plan::default()
        };
        hold(&mut all, &BTreeSet::from([c("m1")]), "waiting".into());
        assert_eq!(all.rollout_note, None, "nothing held, nothing said");
    }

    #[test]
    fn with_rollback_on_halt_the_failed_cluster_is_rolled_back_and_then_held() {
        use crate::plan::{ChartSource, OwnerId};
        let mut w = World::new(&[&["m1", "m2"]]);
        w.settings.rollback_on_halt = true;
        w.step(0);
        w.facts.get_mut(&c("m1")).unwrap().failed = Some(("web".into(), "boom".into()));
        let s = w.step(1);
        assert!(
            s.allowed.is_empty(),
            "the failed cluster gets the new generation no more"
        );
        let release = |key: &str| Release {
            key: key.parse().unwrap(),
            owner: OwnerId {
                namespace: "default".into(),
                name: "app".into(),
            },
            chart_name: "web".into(),
            source: ChartSource::Directory("web".into()),
            version: None,
            chart_digest: None,
            settings: vec![],
            values: None,
            rollback_on_failure: false,
            spec_hash: "new".into(),
            identity: None,
            drift: Default::default(),
        };
        let applied = |key: &str, hash: &str, revision: i64| {
            (
                key.parse::<ReleaseKey>().unwrap(),
                Applied {
                    key: key.parse().unwrap(),
                    owner: None,
                    spec_hash: Some(hash.into()),
                    revision,
                    status: "deployed".into(),
                    modified_at: None,
                },
            )
        };
        let desired = [
            release("m1/team/web"),
            release("m1/team/first"),
            release("m2/team/web"),
        ];
        let on_new = HashMap::from([
            applied("m1/team/web", "new", 3),
            applied("m1/team/first", "new", 1),
            applied("m2/team/web", "old", 2),
        ]);
        let jobs = rollbacks(&s.state, &w.settings, &desired, &on_new);
        assert!(
            matches!(&jobs[..], [Job::Rollback { key, from: 3, .. }] if key.to_string() == "m1/team/web"),
            "{jobs:?}"
        );
        let rolled_back = HashMap::from([applied("m1/team/web", "old", 4)]);
        assert!(rollbacks(&s.state, &w.settings, &desired, &rolled_back).is_empty());
        w.settings.rollback_on_halt = false;
        assert!(rollbacks(&s.state, &w.settings, &desired, &on_new).is_empty());
    }

    #[test]
    fn the_state_read_back_from_the_status_carries_on_where_it_was() {
        let mut w = World::new(&[&["m1", "m2"]]);
        w.step(0);
        let text = serde_json::to_string(w.state.as_ref().unwrap()).unwrap();
        w.state = Some(serde_json::from_str(&text).unwrap());
        w.healthy("m1");
        let s = w.step(1);
        assert!(
            !s.happened
                .iter()
                .any(|h| matches!(h, RolloutEvent::Started { .. }))
        );
        assert_eq!(World::allowed(&s), ["m1", "m2"]);
    }
}
