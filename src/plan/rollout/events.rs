//! What a rollout step tells in Events: rollouts and waves started and completed, halts,
//! resumes, and the words for each (pure).

use crate::api::crd::RolloutHalt;

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
