//! The Controller page's sections below its releases: the planner's next actions, the
//! operator's Events (only its own, about that Controller, newest first, bounded and escaped),
//! and the actions offered.

use k8s_openapi::{
    api::core::v1::{Event, EventSeries, EventSource, ObjectReference},
    apimachinery::pkg::apis::meta::v1::{MicroTime, Time},
};

use crate::runtime::web::events::{self, REPORTER, SHOWN};

fn event(uid: &str, reporter: &str, at: &str, reason: &str, message: &str) -> Event {
    Event {
        involved_object: ObjectReference {
            uid: Some(uid.into()),
            ..Default::default()
        },
        reporting_component: Some(reporter.into()),
        last_timestamp: Some(Time(at.parse().unwrap())),
        type_: Some("Normal".into()),
        reason: Some(reason.into()),
        message: Some(message.into()),
        count: Some(1),
        ..Default::default()
    }
}

#[test]
fn only_the_operators_events_about_the_controller_show_newest_first_and_bounded() {
    let mut list = vec![
        event("c1", REPORTER, "2026-01-01T00:00:01Z", "Installed", "old"),
        event(
            "c1",
            "someone-else",
            "2026-01-01T00:00:09Z",
            "Installed",
            "forged",
        ),
        event(
            "c2",
            REPORTER,
            "2026-01-01T00:00:09Z",
            "Installed",
            "another's",
        ),
        event(
            "c1",
            REPORTER,
            "2026-01-01T00:00:05Z",
            "UpgradeFailed",
            "new",
        ),
    ];
    // A series says when it was last seen; an old-style Event says who reported it in `source`.
    let mut series = event("c1", "", "2026-01-01T00:00:00Z", "DriftRepaired", "series");
    series.reporting_component = None;
    series.source = Some(EventSource {
        component: Some(REPORTER.into()),
        ..Default::default()
    });
    series.series = Some(EventSeries {
        count: Some(7),
        last_observed_time: Some(MicroTime("2026-01-01T00:00:07Z".parse().unwrap())),
    });
    list.push(series);
    let rows = events::rows(list, "c1");
    let shown: Vec<(&str, i32)> = rows.iter().map(|r| (r.message.as_str(), r.count)).collect();
    assert_eq!(shown, [("series", 7), ("new", 1), ("old", 1)]);

    let many = (0..50)
        .map(|i| {
            let at = format!("2026-01-01T00:{:02}:00Z", i);
            event("c1", REPORTER, &at, "Installed", &"m".repeat(5000))
        })
        .collect();
    let rows = events::rows(many, "c1");
    assert_eq!(rows.len(), SHOWN);
    assert_eq!(rows[0].at, "2026-01-01T00:49:00Z");
    assert!(rows.iter().all(|r| r.message.chars().count() == 1024));
}

#[test]
fn the_events_section_escapes_and_says_why_when_there_are_none() {
    let evil = "<img src=x onerror=alert(1)>";
    let rows = events::rows(
        vec![event("c1", REPORTER, "2026-01-01T00:00:01Z", evil, evil)],
        "c1",
    );
    let html = events::section(Some(&rows), None);
    assert!(!html.contains("<img"), "{html}");
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(events::section(Some(&[]), None).contains("no Event"));
    let denied = events::section(
        None,
        Some("The Events of hub namespace <t> cannot be read now"),
    );
    assert!(
        denied.contains("hub namespace &lt;t&gt; cannot"),
        "{denied}"
    );
}

#[test]
fn the_next_section_lists_the_planners_actions_with_what_holds_them() {
    use crate::runtime::web::pages::next_html;
    use crate::status::next::{Action, Next};
    assert!(next_html("team", "shop", &[]).contains("Nothing to do"));
    let evil = "<script>alert(1)</script>";
    let next = [
        Next {
            key: "member-1/team-a/web".parse().unwrap(),
            action: Action::Upgrade,
            held: None,
            release: None,
            revision: Some(1),
        },
        Next {
            key: "member-2/team-a/web".parse().unwrap(),
            action: Action::Install,
            held: Some(format!("held back by the rollout: {evil}")),
            release: None,
            revision: None,
        },
    ];
    let html = next_html("team", "shop", &next);
    assert!(html.contains("<td>member-1</td><td>team-a</td><td>web</td><td>upgrade</td><td class=\"c s-progressing\">queued or running</td><td></td>"), "{html}");
    assert!(
        html.contains(
            "<td>install</td><td class=\"c s-held\">held back by the rollout: &lt;script&gt;"
        ),
        "{html}"
    );
    assert!(!html.contains("<script>"));
}

#[test]
fn each_action_is_one_merge_patch_and_only_those_that_apply_are_offered() {
    use crate::runtime::web::actions::{Act, offered, section};
    assert_eq!(
        Act::Suspend.patch(7),
        serde_json::json!({"spec": {"suspend": true}})
    );
    assert_eq!(
        Act::Resume.patch(7),
        serde_json::json!({"spec": {"suspend": false}})
    );
    assert_eq!(
        Act::ResumeRollout.patch(7),
        serde_json::json!({"metadata": {"annotations": {"multitenancy.dev/rollout": "resume-7"}}})
    );
    assert_eq!(
        Act::CheckDrift.patch(7),
        serde_json::json!({"metadata": {"annotations": {"multitenancy.dev/drift-check": "7"}}})
    );
    for act in Act::ALL {
        assert_eq!(Act::parse(act.segment()), Some(act));
    }
    assert_eq!(Act::parse("delete"), None);

    let mut c = crate::api::crd::TenancyController::new("<b>", Default::default());
    c.metadata.namespace = Some("team-a".into());
    assert_eq!(offered(&c), [Act::Suspend, Act::CheckDrift]);
    c.status = Some(crate::api::crd::ControllerStatus {
        rollout: Some(crate::api::crd::RolloutStatus {
            halted: Some(Default::default()),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert_eq!(
        offered(&c),
        [Act::Suspend, Act::ResumeRollout, Act::CheckDrift]
    );
    c.spec.suspend = true;
    assert_eq!(offered(&c), [Act::Resume]);
    let html = section(&c, &offered(&c));
    assert!(
        html.contains("action=\"/ui/controllers/team-a/%3Cb%3E/actions/resume\""),
        "{html}"
    );
}
