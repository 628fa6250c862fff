//! Tests of the seam: [`Links`] routing to the link of a job's cluster (a fake here), the fake's answers, and what [`LinkError`] says.

use std::sync::Arc;

use super::*;
use crate::{
    member::error::LinkError,
    member::fake::{Call, FakeLink, apply},
    observe::records::Deployed,
    plan::Applied,
    queue::FailureKind,
};

fn links(fakes: &[&Arc<FakeLink>]) -> Links {
    Links::fixed(
        fakes
            .iter()
            .map(|f| Arc::clone(f) as Arc<dyn MemberLink>)
            .collect(),
    )
}

#[tokio::test]
async fn links_run_a_job_on_the_link_of_its_cluster_only() {
    let (one, two) = (FakeLink::new("member-1"), FakeLink::new("member-2"));
    let links = links(&[&one, &two]);
    let outcome = Executor::execute(&links, apply("member-2/team-a/web", "h1")).await;
    assert_eq!(
        outcome,
        Outcome::Applied {
            adopted_from: None,
            revision: 1,
            chart_version: "0.1.0".into(),
            tests: Vec::new(),
            crds: None,
        }
    );
    assert!(one.calls().is_empty());
    assert_eq!(two.jobs(), [apply("member-2/team-a/web", "h1")]);
}

#[tokio::test]
async fn a_job_for_a_cluster_with_no_link_fails_as_unregistered() {
    let one = FakeLink::new("member-1");
    let outcome = Executor::execute(&links(&[&one]), apply("gone/team-a/web", "h1")).await;
    let Outcome::Failed { message, kind } = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(kind, FailureKind::Transient);
    assert!(
        message.contains("cluster gone is not registered"),
        "{message}"
    );
    assert!(one.calls().is_empty());
}

#[tokio::test]
async fn what_a_secret_gave_is_masked_in_a_failure_a_link_reports() {
    let one = FakeLink::new("member-1");
    one.script(
        "member-1/team-a/web",
        Outcome::failed("password s3cret refused", FailureKind::Permanent),
    );
    let mut job = apply("member-1/team-a/web", "h1");
    if let Job::Apply { release, .. } = &mut job {
        release.masked = crate::plan::Masked::new(vec!["s3cret".into()]);
    }
    let outcome = Executor::execute(&links(&[&one]), job).await;
    assert!(
        matches!(&outcome, Outcome::Failed { message, .. } if message == "password ****** refused"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn links_know_watch_and_probe_every_fake() {
    let (one, two) = (FakeLink::new("member-1"), FakeLink::new("member-2"));
    two.set_unreachable("connection refused");
    let links = links(&[&one, &two]);
    let names: Vec<String> = links
        .all()
        .iter()
        .map(|l| l.cluster().to_string())
        .collect();
    assert_eq!(names, ["member-1", "member-2"]);
    assert!(links.knows(&"member-1".parse().unwrap()));
    assert!(!links.knows(&"member-3".parse().unwrap()));
    let health = links.probe_all().await;
    assert_eq!(
        health
            .iter()
            .map(|h| (h.cluster.as_str(), h.reachable, h.error.as_deref()))
            .collect::<Vec<_>>(),
        [
            ("member-1", true, None),
            ("member-2", false, Some("connection refused"))
        ]
    );
    assert_eq!(one.calls(), [Call::Probe]);
}

#[tokio::test]
async fn a_fake_lists_releases_and_manifests_or_fails_as_told() {
    let one = FakeLink::new("member-1");
    let key: crate::api::key::ReleaseKey = "member-1/team-a/web".parse().unwrap();
    let applied = Applied {
        key: key.clone(),
        owner: None,
        spec_hash: None,
        revision: 3,
        status: "deployed".into(),
        modified_at: None,
    };
    one.set_releases([applied.clone()]);
    let deployed = Deployed {
        manifest: "kind: ConfigMap\n".into(),
        values: serde_json::Value::Null,
    };
    one.set_manifest("member-1/team-a/web", 3, deployed.clone());
    assert_eq!(one.list_releases().await.unwrap()[&key], applied);
    assert_eq!(one.manifest(key.clone(), 3).await.unwrap(), Some(deployed));
    assert_eq!(one.manifest(key.clone(), 2).await.unwrap(), None);

    one.fail_releases(|cluster| LinkError::NoAgent { cluster });
    one.fail_manifest(|cluster| LinkError::WrongReply { cluster });
    assert!(matches!(
        one.list_releases().await,
        Err(LinkError::NoAgent { .. })
    ));
    let failed = one.manifest(key.clone(), 3).await.unwrap_err();
    assert!(
        failed.to_string().contains("pull member member-1"),
        "{failed}"
    );
    assert_eq!(
        one.capabilities().await.kube_version.as_deref(),
        Some("v1.36.0")
    );
    assert_eq!(
        one.calls(),
        [
            Call::Releases,
            Call::Manifest(key.clone(), 3),
            Call::Manifest(key.clone(), 2),
            Call::Releases,
            Call::Manifest(key, 3),
            Call::Capabilities,
        ]
    );
}

#[test]
fn every_link_error_names_its_cluster_or_release_and_what_to_do() {
    let cluster: crate::api::key::ClusterName = "edge-1".parse().unwrap();
    let said = [
        (
            LinkError::NoAgent {
                cluster: cluster.clone(),
            },
            "tenancy-hub join",
        ),
        (
            LinkError::AgentAway {
                cluster: cluster.clone(),
                since: "2026-01-01T00:00:00Z".into(),
            },
            "waits and runs when it is back",
        ),
        (
            LinkError::NotReported {
                cluster: cluster.clone(),
            },
            "is its agent running?",
        ),
        (
            LinkError::Timeout {
                cluster: cluster.clone(),
                within: std::time::Duration::from_secs(60),
            },
            "within 60 s",
        ),
        (
            LinkError::TooLarge {
                cluster: cluster.clone(),
                kib: 900,
                max_kib: 512,
            },
            "make its values smaller",
        ),
        (
            LinkError::NotSigner {
                cluster: cluster.clone(),
            },
            "only the operator signs",
        ),
        (
            LinkError::Record {
                key: "edge-1/team-a/web".parse().unwrap(),
                reason: "release record r holds no release".into(),
            },
            "holds no release",
        ),
    ];
    for (error, what) in said {
        let message = error.to_string();
        assert!(message.contains("edge-1"), "{message}");
        assert!(message.contains(what), "{what}: {message}");
    }
}

#[test]
fn an_api_server_refusal_is_forbidden_and_says_what_was_refused() {
    let refused = kube::Error::Api(Box::new(kube::core::Status {
        code: 403,
        message: "secrets is forbidden".into(),
        ..Default::default()
    }));
    let error = LinkError::kube("listing the release records of cluster edge-1", refused);
    assert!(matches!(&error, LinkError::Forbidden { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.starts_with("listing the release records of cluster edge-1: forbidden"),
        "{message}"
    );
    assert!(message.contains("secrets is forbidden"), "{message}");

    let missing = kube::Error::Api(Box::new(kube::core::Status {
        code: 404,
        ..Default::default()
    }));
    assert!(matches!(
        LinkError::kube("reading", missing),
        LinkError::Kube { .. }
    ));
}

#[test]
fn an_api_server_that_does_not_answer_is_unreachable() {
    let down = kube::Error::Service("connection refused".into());
    let error = LinkError::kube("listing the release records of cluster edge-1", down);
    assert!(matches!(&error, LinkError::Unreachable { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "listing the release records of cluster edge-1: the API server cannot be reached (ServiceError: connection refused)"
    );
}
