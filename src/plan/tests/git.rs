//! Tests of Git charts in the planner: one source only, the commit shown and fingerprinted through the archive's digest, the interval left out of the fingerprint.

use super::*;

fn git_chart(interval: Option<&str>) -> Chart {
    Chart {
        git: Some(crate::api::crd::GitSource {
            url: "https://git.example.com/team/charts.git".into(),
            reference: crate::api::crd::GitRef {
                branch: Some("main".into()),
                ..Default::default()
            },
            path: "./charts//web/".into(),
            interval: interval.map(str::to_owned),
        }),
        ..chart("web", None, &[])
    }
}

fn spec(chart: Chart) -> ControllerSpec {
    ControllerSpec {
        tenancies: vec![tenancy("team", &["member-1"], vec![chart])],
        ..Default::default()
    }
}

/// A planner whose Git chart resolves to the archive of `commit`.
fn planned(world: &World, spec: &ControllerSpec, commit: &str) -> Plan {
    let digest = format!("sha256:{}", commit.repeat(64));
    let lookup = |source: &ChartSource, _: &_, _: &_, _: Option<&str>| match source {
        ChartSource::Git { path, .. } => {
            assert_eq!(path, "charts/web", "the path in normal form");
            ChartLookup::Found {
                version: Some("0.1.0".into()),
                digest: Some(digest.clone()),
                verified: None,
                commit: Some(commit.repeat(40)),
            }
        }
        other => panic!("{other:?} looked up"),
    };
    plan(&Inputs {
        fleet: &crate::plan::fleet::Fleet::none(),
        owner: &owner("a"),
        spec,
        clusters: &world.clusters,
        synced: &world.synced,
        applied: &world.applied,
        claims: &world.claims,
        admission: &world.admission,
        chart_home: Path::new("/charts"),
        chart_lookup: &lookup,
        now: 10_000,
        pending_timeout_secs: 600,
        drifted: &world.drifted,
    })
}

#[test]
fn a_chart_naming_both_repo_and_git_is_invalid_naming_the_release() {
    let mut both = git_chart(None);
    both.repo = Some("https://charts.example.com".into());
    let plan = World::new().plan(&owner("a"), &spec(both));
    assert!(plan.jobs.is_empty());
    let said = plan.problems[0].to_string();
    assert!(
        said.contains("member-1/team/team") && said.contains("both repo and git"),
        "{said}"
    );
    assert_eq!(plan.problems[0].reason(), "ChartNotFound");
}

#[test]
fn a_new_commit_changes_the_fingerprint_and_the_interval_does_not() {
    let world = World::new();
    let one = planned(&world, &spec(git_chart(None)), "1");
    let release = &one.desired[0];
    assert_eq!(release.commit.as_deref(), Some("1".repeat(40).as_str()));
    let slower = planned(&world, &spec(git_chart(Some("10m"))), "1");
    assert_eq!(slower.desired[0].spec_hash, release.spec_hash);
    let pushed = planned(&world, &spec(git_chart(None)), "2");
    assert_ne!(pushed.desired[0].spec_hash, release.spec_hash);
    // The archive the release must be installed from is the one its digest names.
    assert_eq!(release.exact_archive(), Some("1".repeat(64).as_str()));
    assert_eq!(
        crate::status::report::shown_source(&release.source, release.commit.as_deref()),
        format!(
            "git https://git.example.com/team/charts.git charts/web @ branch main commit {}",
            "1".repeat(40)
        )
    );
}
