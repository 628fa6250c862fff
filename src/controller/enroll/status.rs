//! What a pull member's status says (pure): its hub namespace, whether its agent has joined, when it was last seen, and the Ready and Stale conditions, from the agent's Lease and whether the member could be enrolled.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::Lease,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::{SignedDuration, Timestamp},
};

use crate::api::{key::ClusterName, member_cluster::MemberClusterStatus};

/// While the agent's Lease holds, `lastSeen` moves in steps of at least this much, so an agent
/// renewing its Lease every 20 s costs the hub a status write only this often (at 1,000 members,
/// about 3 a second); the Lease itself says the exact time. Once the Lease has run out, `lastSeen`
/// is the exact time of the last renewal.
pub(crate) const LAST_SEEN_STEP: SignedDuration = SignedDuration::from_secs(300);
/// How long a Lease that names no duration counts as held.
const DEFAULT_LEASE_SECONDS: i64 = 60;
/// The longest a member's status waits for another look, so `lastSeen` and `Stale` stay current
/// even where no Lease event names the member.
pub(crate) const LOOK_AGAIN_AT_MOST: Duration = Duration::from_secs(60);

/// Where a member stands with enrollment.
#[derive(Debug)]
pub(crate) enum Standing<'a> {
    /// Enrolled; its agent's Lease as found, if any.
    Enrolled(Option<&'a Lease>),
    /// The registration file names the cluster too: it is the file's, and not enrolled.
    InRegistrationFile,
    /// Enrolling failed, for this reason (tried again).
    Failed(String),
}

/// When the agent last renewed its Lease, and until when that renewal holds.
fn renewal(lease: &Lease) -> Option<(Timestamp, Timestamp)> {
    let spec = lease.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let seconds = spec
        .lease_duration_seconds
        .map_or(DEFAULT_LEASE_SECONDS, i64::from);
    Some((renewed, renewed + SignedDuration::from_secs(seconds)))
}

/// How long until the member's status should be looked at again: just after its Lease would
/// expire, and at most [`LOOK_AGAIN_AT_MOST`].
pub(crate) fn look_again(lease: Option<&Lease>, now: Timestamp) -> Duration {
    lease
        .and_then(renewal)
        .and_then(|(_, until)| Duration::try_from(until.duration_since(now)).ok())
        .map(|left| (left + Duration::from_secs(1)).min(LOOK_AGAIN_AT_MOST))
        .unwrap_or(LOOK_AGAIN_AT_MOST)
}

/// The status of `cluster` (hub namespace `namespace`) standing as `standing` at `now`, given its
/// `previous` status: condition transition times and a `lastSeen` within [`LAST_SEEN_STEP`] are
/// kept, so a status that says nothing new equals the previous one.
pub(crate) fn status(
    cluster: &ClusterName,
    namespace: &str,
    standing: &Standing<'_>,
    generation: Option<i64>,
    previous: Option<&MemberClusterStatus>,
    now: Timestamp,
) -> MemberClusterStatus {
    let lease = match standing {
        Standing::Enrolled(lease) => *lease,
        _ => None,
    };
    let renewed = lease.and_then(renewal);
    let stale = renewed.is_some_and(|(_, until)| until < now);
    let last_seen = renewed.map(|(at, _)| {
        if stale {
            at.to_string()
        } else {
            stepped(at, previous)
        }
    });
    let joined = lease.is_some() || previous.is_some_and(|p| p.joined);
    let seen = last_seen.clone().unwrap_or_default();
    let (ready, reason, message): (bool, &str, String) = match standing {
        Standing::InRegistrationFile => (
            false,
            "NameInRegistrationFile",
            format!(
                "cluster {cluster} is registered in the registration file, which wins: this MemberCluster is not enrolled and Controllers reach {cluster} as the file says; remove the file's entry, or delete this MemberCluster and join the cluster under another name"
            ),
        ),
        Standing::Failed(why) => (
            false,
            "EnrollFailed",
            format!(
                "enrolling cluster {cluster} in hub namespace {namespace} failed: {why}; the operator tries again"
            ),
        ),
        Standing::Enrolled(None) if !joined => (
            false,
            "WaitingForAgent",
            format!(
                "cluster {cluster} is enrolled in hub namespace {namespace}; its agent has not joined yet: run `tenancy-hub cluster add --pull {cluster}` on the hub for a join command, and run it in the member"
            ),
        ),
        Standing::Enrolled(None) => (
            false,
            "AgentLeaseMissing",
            format!(
                "the agent of cluster {cluster} joined, but its Lease is gone from hub namespace {namespace}: is the agent running in the member?"
            ),
        ),
        Standing::Enrolled(Some(_)) if stale => (
            false,
            "AgentStale",
            format!(
                "the agent of cluster {cluster} last renewed its Lease at {seen}, and the Lease has expired: is it running in the member, and can it reach the hub?"
            ),
        ),
        Standing::Enrolled(Some(_)) => (
            true,
            "AgentSeen",
            format!("the agent of cluster {cluster} renews its Lease"),
        ),
    };
    let (stale_reason, stale_message) = match (lease, stale) {
        (Some(_), true) => (
            "LeaseExpired",
            format!("the agent's Lease has expired; last seen {seen}"),
        ),
        (Some(_), false) => ("LeaseCurrent", "the agent's Lease is current".to_owned()),
        (None, _) => ("NoLease", "the agent holds no Lease".to_owned()),
    };
    let before = previous
        .map(|p| p.conditions.as_slice())
        .unwrap_or_default();
    let condition = |type_: &str, holds: bool, reason: &str, message: String| {
        let status = if holds { "True" } else { "False" };
        let since = before
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or(Time(now), |c| c.last_transition_time.clone());
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time: since,
        }
    };
    MemberClusterStatus {
        namespace: (!matches!(standing, Standing::InRegistrationFile)).then(|| namespace.into()),
        joined,
        last_seen,
        conditions: vec![
            condition("Ready", ready, reason, message),
            condition("Stale", stale, stale_reason, stale_message),
        ],
        observed_generation: generation,
    }
}

/// The condition saying whether the hub takes every report of the member's agent.
pub(crate) const REPORTS_TAKEN: &str = "ReportsTaken";
/// The most refused reports a status names.
const NAMED_AT_MOST: usize = 8;

/// The [`REPORTS_TAKEN`] condition of `cluster`, from what the hub could not take of its reports
/// (`problems`), beside the conditions of `fresh`; its transition time kept from `previous`.
pub(crate) fn reports_taken(
    cluster: &ClusterName,
    problems: &[String],
    fresh: &MemberClusterStatus,
    previous: Option<&MemberClusterStatus>,
) -> Condition {
    let (status, reason, message) = if problems.is_empty() {
        (
            "True",
            "AllTaken",
            format!("the hub takes every report of cluster {cluster}'s agent"),
        )
    } else {
        let named: Vec<&str> = problems
            .iter()
            .take(NAMED_AT_MOST)
            .map(String::as_str)
            .collect();
        let more = problems.len().saturating_sub(NAMED_AT_MOST);
        let more = if more > 0 {
            format!(" (and {more} more)")
        } else {
            String::new()
        };
        (
            "False",
            "ReportsRefused",
            format!(
                "the hub could not take some of cluster {cluster}'s reports; a namespace it names is reported by its sealed records alone, or held as last taken when its piece cannot be read: {}{more}",
                named.join("; ")
            ),
        )
    };
    let since = previous
        .and_then(|p| {
            p.conditions
                .iter()
                .find(|c| c.type_ == REPORTS_TAKEN && c.status == status)
        })
        .map_or(Time(Timestamp::now()), |c| c.last_transition_time.clone());
    Condition {
        type_: REPORTS_TAKEN.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: fresh.observed_generation,
        last_transition_time: since,
    }
}

/// `at` as `lastSeen`, or the previous `lastSeen` when `at` is less than [`LAST_SEEN_STEP`] later.
fn stepped(at: Timestamp, previous: Option<&MemberClusterStatus>) -> String {
    let kept = previous.and_then(|p| p.last_seen.as_ref()).filter(|seen| {
        seen.parse::<Timestamp>()
            .is_ok_and(|seen| seen <= at && at.duration_since(seen) < LAST_SEEN_STEP)
    });
    kept.cloned().unwrap_or_else(|| at.to_string())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::coordination::v1::LeaseSpec, apimachinery::pkg::apis::meta::v1::MicroTime,
    };

    use super::*;

    fn lease(renewed: Timestamp, seconds: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    fn edge() -> ClusterName {
        "edge-1".parse().unwrap()
    }

    fn ready(s: &MemberClusterStatus) -> (&str, &str) {
        let c = s.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    fn stale(s: &MemberClusterStatus) -> &str {
        let c = s.conditions.iter().find(|c| c.type_ == "Stale").unwrap();
        c.status.as_str()
    }

    const NS: &str = "tenancy-hub-member-edge-1";

    /// The status of edge-1, enrolled, with `lease` and `previous` at `now`.
    fn enrolled(
        lease: Option<&Lease>,
        previous: Option<&MemberClusterStatus>,
        now: Timestamp,
    ) -> MemberClusterStatus {
        status(
            &edge(),
            NS,
            &Standing::Enrolled(lease),
            Some(1),
            previous,
            now,
        )
    }

    #[test]
    fn an_enrolled_member_waits_for_its_agent_then_is_ready_then_stale() {
        let t0 = Timestamp::from_second(1_800_000_000).unwrap();
        let waiting = enrolled(None, None, t0);
        assert_eq!(ready(&waiting), ("False", "WaitingForAgent"));
        assert!(!waiting.joined && waiting.last_seen.is_none());
        assert_eq!(waiting.namespace.as_deref(), Some(NS));
        assert!(
            waiting.conditions[0]
                .message
                .contains("cluster add --pull edge-1")
        );

        let held = lease(t0, 40);
        let seen = enrolled(
            Some(&held),
            Some(&waiting),
            t0 + SignedDuration::from_secs(5),
        );
        assert_eq!(ready(&seen), ("True", "AgentSeen"));
        assert_eq!(stale(&seen), "False");
        assert!(seen.joined);
        assert_eq!(seen.last_seen.as_deref(), Some(t0.to_string().as_str()));

        let late = t0 + SignedDuration::from_secs(41);
        let gone_quiet = enrolled(Some(&held), Some(&seen), late);
        assert_eq!(ready(&gone_quiet), ("False", "AgentStale"));
        assert_eq!(stale(&gone_quiet), "True");
        assert_eq!(gone_quiet.conditions[1].last_transition_time, Time(late));
        assert!(gone_quiet.joined, "joined stays true");
    }

    #[test]
    fn once_the_lease_runs_out_last_seen_is_the_exact_last_renewal() {
        let t0 = Timestamp::from_second(1_800_000_000).unwrap();
        let first = enrolled(Some(&lease(t0, 60)), None, t0);
        let renewed_at = t0 + SignedDuration::from_secs(100);
        let renewed = lease(renewed_at, 60);
        let held = enrolled(
            Some(&renewed),
            Some(&first),
            renewed_at + SignedDuration::from_secs(5),
        );
        assert_eq!(
            held.last_seen, first.last_seen,
            "within the step, a held Lease moves nothing"
        );
        let gone = enrolled(
            Some(&renewed),
            Some(&held),
            renewed_at + SignedDuration::from_secs(61),
        );
        assert_eq!(stale(&gone), "True");
        assert_eq!(
            gone.last_seen.as_deref(),
            Some(renewed_at.to_string().as_str())
        );
        assert!(gone.conditions[0].message.contains(&renewed_at.to_string()));
    }

    #[test]
    fn a_status_that_says_nothing_new_equals_the_previous_one() {
        let t0 = Timestamp::from_second(1_800_000_000).unwrap();
        let first = enrolled(Some(&lease(t0, 40)), None, t0);
        let renewed = lease(t0 + SignedDuration::from_secs(10), 40);
        let later = t0 + SignedDuration::from_secs(12);
        let again = enrolled(Some(&renewed), Some(&first), later);
        assert_eq!(again, first, "a renewal within the step writes nothing");
        let much_later = t0 + LAST_SEEN_STEP + SignedDuration::from_secs(1);
        let moved = enrolled(Some(&lease(much_later, 40)), Some(&first), much_later);
        assert_ne!(moved.last_seen, first.last_seen);
        assert_eq!(
            moved.conditions, first.conditions,
            "same conditions, same transition times"
        );
    }

    #[test]
    fn a_name_of_the_registration_file_is_refused_and_says_so() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let s = status(
            &edge(),
            NS,
            &Standing::InRegistrationFile,
            Some(1),
            None,
            now,
        );
        assert_eq!(ready(&s), ("False", "NameInRegistrationFile"));
        assert!(s.namespace.is_none());
        assert!(
            s.conditions[0]
                .message
                .contains("registration file, which wins")
        );
        let failed = status(
            &edge(),
            NS,
            &Standing::Failed("forbidden".into()),
            Some(1),
            None,
            now,
        );
        assert_eq!(ready(&failed), ("False", "EnrollFailed"));
        assert!(failed.conditions[0].message.contains("forbidden"));
    }

    #[test]
    fn the_next_look_is_just_after_the_lease_would_expire_and_within_a_minute() {
        let t0 = Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(
            look_again(Some(&lease(t0, 40)), t0 + SignedDuration::from_secs(30)),
            Duration::from_secs(11)
        );
        assert_eq!(look_again(Some(&lease(t0, 600)), t0), LOOK_AGAIN_AT_MOST);
        assert_eq!(
            look_again(Some(&lease(t0, 40)), t0 + SignedDuration::from_secs(90)),
            LOOK_AGAIN_AT_MOST
        );
        assert_eq!(look_again(None, t0), LOOK_AGAIN_AT_MOST);
    }
}
