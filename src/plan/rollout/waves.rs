//! Waves of a rollout: the targeted clusters grouped by the wave selectors, clusters joining and
//! leaving the targets, and the rollout moving from one wave to the next (pure).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;

use crate::{
    api::crd::{Rollout, RolloutCluster, RolloutStatus},
    api::key::ClusterName,
};

use super::{
    events::RolloutEvent,
    settings::Settings,
    states::{Facts, millis, phase, stamp, state},
};

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

/// A rollout of `generation` just started: every cluster pending in its wave, the first wave on.
pub(crate) fn fresh(generation: i64, waves: &[Vec<ClusterName>], now: Timestamp) -> RolloutStatus {
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

/// Membership: clusters no longer targeted (absent from `facts`) leave; clusters of `waves` new
/// to the rollout join its last wave. Clusters are kept by wave, then name.
pub(crate) fn follow_targets(
    s: &mut RolloutStatus,
    waves: &[Vec<ClusterName>],
    facts: &BTreeMap<ClusterName, Facts>,
) {
    s.clusters
        .retain(|c| facts.keys().any(|k| k.as_str() == c.name));
    let last_wave = s.waves.max(1);
    for wave in waves {
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
}

/// Works on the first wave with a cluster not healthy: waits out the pause after the wave before
/// it, then starts its pending clusters up to `maxUnavailable`; finishes when none is left.
pub(crate) fn advance(
    s: &mut RolloutStatus,
    now: Timestamp,
    settings: &Settings,
    facts: &dyn Fn(&str) -> Facts,
    happened: &mut Vec<RolloutEvent>,
) {
    let limit = settings.max_unavailable.of(s.clusters.len());
    loop {
        let Some(wave) = s
            .clusters
            .iter()
            .filter(|c| c.state != state::HEALTHY)
            .map(|c| c.wave)
            .min()
        else {
            finish(s, now, happened);
            return;
        };
        if wave > s.wave {
            if pausing(s, now, settings, happened) {
                return;
            }
            s.wave = wave;
            s.wave_completed_at = None;
        }
        s.phase = phase::PROGRESSING.into();
        let skipped = start_pending(s, wave, now, limit, facts, happened);
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

/// Every cluster is healthy: completes the wave in progress and the rollout.
fn finish(s: &mut RolloutStatus, now: Timestamp, happened: &mut Vec<RolloutEvent>) {
    let now_ms = now.as_millisecond();
    if s.wave >= 1 && s.clusters.iter().any(|c| c.wave == s.wave) {
        happened.push(RolloutEvent::WaveCompleted {
            wave: s.wave as usize,
            of: s.waves as usize,
        });
    }
    s.finished_at = Some(stamp(now));
    s.wave_completed_at = None;
    s.phase = phase::COMPLETE.into();
    let started = millis(&s.started_at).unwrap_or(now_ms);
    happened.push(RolloutEvent::Finished {
        generation: s.generation,
        duration_ms: now_ms - started,
    });
}

/// The wave in progress is healthy: notes when (once), and true while the pause after it has not
/// passed yet (the rollout is then `Paused`).
fn pausing(
    s: &mut RolloutStatus,
    now: Timestamp,
    settings: &Settings,
    happened: &mut Vec<RolloutEvent>,
) -> bool {
    let now_ms = now.as_millisecond();
    if s.wave_completed_at.is_none() {
        if s.clusters.iter().any(|c| c.wave == s.wave) {
            happened.push(RolloutEvent::WaveCompleted {
                wave: s.wave as usize,
                of: s.waves as usize,
            });
        }
        s.wave_completed_at = Some(stamp(now));
    }
    let done = s
        .wave_completed_at
        .as_deref()
        .and_then(millis)
        .unwrap_or(now_ms);
    if now_ms - done < settings.pause_ms {
        s.phase = phase::PAUSED.into();
        return true;
    }
    false
}

/// Starts the pending clusters of `wave`, by name, while fewer than `limit` are progressing; a
/// pending cluster already healthy on the generation needs no step and is healthy at once. True
/// when such a cluster was skipped.
fn start_pending(
    s: &mut RolloutStatus,
    wave: i32,
    now: Timestamp,
    limit: usize,
    facts: &dyn Fn(&str) -> Facts,
    happened: &mut Vec<RolloutEvent>,
) -> bool {
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
            c.started_at = Some(stamp(now));
            c.healthy_at = Some(stamp(now));
            skipped = true;
            continue;
        }
        if progressing >= limit {
            break;
        }
        c.state = state::PROGRESSING.into();
        c.started_at = Some(stamp(now));
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
    skipped
}
