//! `spec.rollout` read: how many clusters change at once, the progress deadline, the pause
//! between waves, and durations such as "10m" (pure).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::crd::Rollout;

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
