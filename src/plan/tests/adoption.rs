//! Tests of adoption in the planner: taking over a release tenancy-hub does not own, only when the chart asks and the acting policy allows it.

use super::*;

/// A release `web` in member-1/shop installed by hand: no owner a seal vouches for.
fn by_hand() -> Applied {
    Applied {
        key: "member-1/shop/shop".parse().unwrap(),
        owner: None,
        spec_hash: None,
        revision: 1,
        status: String::new(),
        modified_at: None,
    }
}

/// The spec of Controller default/a: chart `web` in shop on member-1, adopting when `adopt`.
fn shop(adopt: bool) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy(
            "shop",
            &["member-1"],
            vec![Chart {
                adopt,
                ..chart("web", None, &[])
            }],
        )],
        ..Default::default()
    }
}

/// A world holding `applied` in member-1/shop under the team's policy, allowing adoption when
/// `allow`.
fn world(applied: Applied, allow: bool) -> World {
    let mut w = World::new();
    let mut p = policy(&["shop"], &["member-1"]);
    p.spec.allow_adoption = allow;
    w.admission = enforcing(vec![p]);
    w.applied.insert(applied.key.clone(), applied);
    w
}

fn conflicts(plan: &Plan) -> Vec<String> {
    plan.problems
        .iter()
        .filter(|p| p.reason() == "Conflict")
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_hand_installed_release_is_adopted_by_an_upgrade_as_the_policys_identity_when_both_agree() {
    let plan = world(by_hand(), true).plan(&owner("a"), &shop(true));
    assert_eq!(keys(&plan.jobs), ["apply member-1/shop/shop"]);
    let Job::Apply { release, adopt, .. } = &plan.jobs[0] else {
        unreachable!()
    };
    assert!(adopt, "the job says it takes the release over");
    assert_eq!(release.identity.as_ref().unwrap().user, "team-deployer");
    assert!(plan.problems.is_empty(), "{:?}", plan.problems);
}

#[test]
fn without_adopt_a_hand_installed_release_is_a_conflict_that_says_how_to_adopt_it() {
    let plan = world(by_hand(), true).plan(&owner("a"), &shop(false));
    assert!(plan.jobs.is_empty());
    let conflicts = conflicts(&plan);
    assert_eq!(conflicts.len(), 1);
    assert!(
        conflicts[0].contains("not managed by tenancy-hub")
            && conflicts[0].contains("set adopt: true")
            && conflicts[0].contains("allowAdoption"),
        "{}",
        conflicts[0]
    );
}

#[test]
fn adopt_under_a_policy_without_allow_adoption_is_a_conflict_naming_the_policy() {
    let plan = world(by_hand(), false).plan(&owner("a"), &shop(true));
    assert!(plan.jobs.is_empty());
    let conflicts = conflicts(&plan);
    assert!(
        conflicts[0].contains("TenancyPolicy team") && conflicts[0].contains("allowAdoption"),
        "{}",
        conflicts[0]
    );
}

#[test]
fn adopt_is_refused_in_permissive_mode_when_no_policy_allows_it() {
    let mut w = world(by_hand(), true);
    w.admission = Admission::permissive();
    let plan = w.plan(&owner("a"), &shop(true));
    assert!(plan.jobs.is_empty());
    assert!(conflicts(&plan)[0].contains("no TenancyPolicy governing hub namespace default"));
}

#[test]
fn another_controllers_sealed_release_is_never_adopted() {
    let sealed = Applied {
        owner: Some(owner("b")),
        spec_hash: Some("0123456789abcdef".into()),
        status: "deployed".into(),
        ..by_hand()
    };
    let plan = world(sealed, true).plan(&owner("a"), &shop(true));
    assert!(plan.jobs.is_empty());
    assert!(conflicts(&plan)[0].contains("held by Controller default/b"));
}

#[test]
fn a_tenant_adopting_in_a_namespace_its_policy_does_not_allow_is_forbidden_and_claims_nothing() {
    let w = world(by_hand(), true);
    let intruder = OwnerId {
        namespace: "intruder".into(),
        name: "grab".into(),
    };
    let plan = w.plan(&intruder, &shop(true));
    assert!(plan.jobs.is_empty());
    assert!(plan.problems.iter().all(|p| p.reason() == "Forbidden"));
    let (_, _, claimed) = claimant(
        intruder,
        0,
        &shop(true),
        &w.clusters,
        Path::new("/charts"),
        &w.admission,
    );
    assert!(claimed.is_empty(), "a refused key claims nothing");
}

#[test]
fn once_adopted_the_release_is_planned_as_any_other_of_this_controller() {
    let mut w = world(by_hand(), true);
    let first = w.plan(&owner("a"), &shop(true));
    w.apply(&first);
    assert_eq!(
        w.applied[&by_hand().key].revision,
        2,
        "an upgrade, not an install"
    );
    let again = w.plan(&owner("a"), &shop(true));
    assert!(again.jobs.is_empty() && again.problems.is_empty());
    let changed = w.plan(&owner("a"), &shop(false));
    assert!(
        changed.jobs.is_empty(),
        "adopt no longer matters once it is ours"
    );
}
