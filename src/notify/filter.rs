//! Which Alerts a notice goes to: those of the Controller's own hub namespace, not suspended, naming its event and its Controller or leaving them open (pure).

use crate::{api::alert::AlertSpec, notify::Notice};

/// True when an Alert of `alert_namespace` with `spec` sends `notice`. An Alert never sees a
/// Controller of another namespace, whatever it names.
pub(crate) fn accepts(alert_namespace: &str, spec: &AlertSpec, notice: &Notice) -> bool {
    alert_namespace == notice.namespace
        && !spec.suspend
        && (spec.events.is_empty() || spec.events.contains(&notice.event))
        && (spec.controllers.is_empty() || spec.controllers.contains(&notice.controller))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::alert::{AlertEvent, AlertProvider};

    fn notice(namespace: &str, controller: &str, event: AlertEvent) -> Notice {
        Notice {
            controller: controller.into(),
            namespace: namespace.into(),
            cluster: None,
            release: None,
            event,
            reason: "ReleaseFailed".into(),
            message: "m".into(),
            time: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        }
    }

    fn spec(events: &[AlertEvent], controllers: &[&str]) -> AlertSpec {
        AlertSpec {
            provider: AlertProvider::default(),
            events: events.to_vec(),
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
            suspend: false,
        }
    }

    #[test]
    fn an_alert_sees_only_its_own_namespace_and_what_it_names() {
        let all = spec(&[], &[]);
        assert!(accepts(
            "team-a",
            &all,
            &notice("team-a", "web", AlertEvent::Stalled)
        ));
        assert!(
            !accepts(
                "team-a",
                &all,
                &notice("team-b", "web", AlertEvent::Stalled)
            ),
            "another tenant's Controller is never seen"
        );
        let some = spec(&[AlertEvent::Recovered], &["web"]);
        assert!(accepts(
            "team-a",
            &some,
            &notice("team-a", "web", AlertEvent::Recovered)
        ));
        assert!(!accepts(
            "team-a",
            &some,
            &notice("team-a", "web", AlertEvent::Stalled)
        ));
        assert!(!accepts(
            "team-a",
            &some,
            &notice("team-a", "db", AlertEvent::Recovered)
        ));
        let suspended = AlertSpec {
            suspend: true,
            ..all
        };
        assert!(!accepts(
            "team-a",
            &suspended,
            &notice("team-a", "web", AlertEvent::Stalled)
        ));
    }
}
