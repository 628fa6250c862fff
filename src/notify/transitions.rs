//! Which notices a status change makes: the previous conditions against the new ones, one notice per transition, none when nothing changed (pure).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::alert::AlertEvent;

/// One transition worth a notice.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Transition {
    /// What happened.
    pub(crate) event: AlertEvent,
    /// The condition's reason.
    pub(crate) reason: String,
    /// The condition's message.
    pub(crate) message: String,
}

fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// True when a condition of `type_` is True in `next` and was not, or was for another reason.
fn turned_true<'a>(
    previous: &[Condition],
    next: &'a [Condition],
    type_: &str,
) -> Option<&'a Condition> {
    let now = find(next, type_).filter(|c| c.status == "True")?;
    let before = find(previous, type_).filter(|c| c.status == "True");
    (before.is_none_or(|b| b.reason != now.reason)).then_some(now)
}

/// Whether conditions say something has failed (stalled or degraded): a later `Ready` is a
/// recovery.
pub(crate) fn failing(conditions: &[Condition]) -> bool {
    is_true(conditions, "Stalled") || is_true(conditions, "Degraded")
}

/// The transitions from `previous` to `next`, and whether the resource is failing since it was
/// last Ready (`was_failing`: what the last call returned, or [`failing`] of the conditions
/// stored when there was none).
///
/// - `Stalled` turning True (or its reason changing) is `Forbidden` for reason `Forbidden`,
///   nothing for `RolloutHalted` (the rollout gate tells the halt), `Stalled` otherwise;
/// - `Degraded` turning True while nothing stalls is `Degraded`;
/// - `Ready` turning True after a failure is `Recovered`.
pub(crate) fn transitions(
    previous: &[Condition],
    next: &[Condition],
    was_failing: bool,
) -> (Vec<Transition>, bool) {
    let mut out = Vec::new();
    let told = |event, c: &Condition| Transition {
        event,
        reason: c.reason.clone(),
        message: c.message.clone(),
    };
    if let Some(c) = turned_true(previous, next, "Stalled") {
        match c.reason.as_str() {
            "RolloutHalted" => {}
            "Forbidden" => out.push(told(AlertEvent::Forbidden, c)),
            _ => out.push(told(AlertEvent::Stalled, c)),
        }
    }
    if !is_true(next, "Stalled")
        && let Some(c) = turned_true(previous, next, "Degraded")
    {
        out.push(told(AlertEvent::Degraded, c));
    }
    let ready_now = is_true(next, "Ready");
    if ready_now
        && !is_true(previous, "Ready")
        && (was_failing || failing(previous))
        && let Some(c) = find(next, "Ready")
    {
        out.push(told(AlertEvent::Recovered, c));
    }
    let still = !ready_now && (was_failing || failing(next));
    (out, still)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn c(type_: &str, status: bool, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: if status { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: format!("{type_} {reason}"),
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    fn state(ready: bool, stalled: Option<&str>, degraded: Option<&str>) -> Vec<Condition> {
        vec![
            c("Ready", ready, if ready { "Ready" } else { "Progressing" }),
            c(
                "Stalled",
                stalled.is_some(),
                stalled.unwrap_or("AsExpected"),
            ),
            c(
                "Degraded",
                degraded.is_some() || stalled.is_some(),
                degraded.or(stalled).unwrap_or("AsExpected"),
            ),
        ]
    }

    fn events(t: &[Transition]) -> Vec<AlertEvent> {
        t.iter().map(|t| t.event).collect()
    }

    #[test]
    fn a_failure_then_a_recovery_make_one_notice_each_and_unchanged_statuses_none() {
        let ready = state(true, None, None);
        let failed = state(false, Some("ReleaseFailed"), None);
        let progressing = state(false, None, None);
        let (t, failing) = transitions(&ready, &failed, false);
        assert_eq!(events(&t), [AlertEvent::Stalled]);
        assert_eq!(t[0].reason, "ReleaseFailed");
        assert!(failing);
        let (t, failing) = transitions(&failed, &failed, failing);
        assert!(t.is_empty(), "an unchanged status tells nothing");
        let (t, failing) = transitions(&failed, &progressing, failing);
        assert!(t.is_empty() && failing, "progressing is no recovery yet");
        let (t, failing) = transitions(&progressing, &ready, failing);
        assert_eq!(events(&t), [AlertEvent::Recovered]);
        assert!(!failing);
        let (t, _) = transitions(&ready, &ready, failing);
        assert!(t.is_empty());
    }

    #[test]
    fn a_first_install_becoming_ready_is_no_recovery() {
        let (t, failing) = transitions(&[], &state(false, None, None), false);
        assert!(t.is_empty() && !failing);
        let (t, _) = transitions(&state(false, None, None), &state(true, None, None), failing);
        assert!(t.is_empty());
    }

    #[test]
    fn forbidden_and_halts_are_told_by_their_own_names_and_a_new_reason_is_a_new_notice() {
        let (t, _) = transitions(&[], &state(false, Some("Forbidden"), None), false);
        assert_eq!(events(&t), [AlertEvent::Forbidden]);
        let (t, failing) = transitions(&[], &state(false, Some("RolloutHalted"), None), false);
        assert!(t.is_empty(), "the rollout gate tells a halt");
        assert!(failing, "a halt is a failure a later Ready recovers from");
        let (t, _) = transitions(
            &state(false, Some("Forbidden"), None),
            &state(false, Some("ReleaseFailed"), None),
            true,
        );
        assert_eq!(events(&t), [AlertEvent::Stalled]);
    }

    #[test]
    fn degraded_is_told_only_while_nothing_stalls() {
        let (t, failing) = transitions(
            &state(true, None, None),
            &state(false, None, Some("PodsFailing")),
            false,
        );
        assert_eq!(events(&t), [AlertEvent::Degraded]);
        let (t, _) = transitions(
            &state(false, None, Some("PodsFailing")),
            &state(true, None, None),
            failing,
        );
        assert_eq!(events(&t), [AlertEvent::Recovered]);
        let (t, _) = transitions(&[], &state(false, Some("Conflict"), None), false);
        assert_eq!(events(&t), [AlertEvent::Stalled], "not Degraded as well");
    }
}
