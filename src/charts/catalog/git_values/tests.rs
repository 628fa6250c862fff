//! Tests of Git values files and Git charts in the catalog: loaded once, looked up by the planner, their readers woken when a push changes them, a hook making sources due.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::{
    api::crd::RefKind,
    charts::{
        cache::Resolved,
        catalog::{ChartCatalog, GitFiles, RemoteKey, Resolve},
        common::GitFound,
    },
    plan::{ChartLookup, ChartSource, GitFileLookup, GitFileSource, OwnerId},
    policy::access::{Credentials, Trust},
    policy::source::SourceUrl,
};

use crate::charts::cache::git::files::FileGroup;

/// A repository whose `main` is at `commit` holding `files`; counts the requests, and how many
/// repositories hooks made due.
#[derive(Default)]
struct Repo {
    commit: Mutex<String>,
    files: Mutex<BTreeMap<String, String>>,
    asked: Mutex<Vec<Vec<String>>>,
    due: Mutex<Vec<SourceUrl>>,
}

impl Resolve for Arc<Repo> {
    fn resolve<'a>(
        &'a self,
        _: &'a RemoteKey,
        _: &'a SourceUrl,
        _: Option<Instant>,
    ) -> BoxFuture<'a, Result<Resolved, String>> {
        let commit = self.commit.lock().unwrap().clone();
        Box::pin(async move {
            Ok(Resolved {
                version: "0.1.0".into(),
                digest: Some(format!("sha256:{}", "a".repeat(64))),
                archive: Some("a".repeat(64)),
                provenance: None,
                git: Some(GitFound {
                    commit,
                    reference: "refs/heads/main".into(),
                    ..GitFound::default()
                }),
            })
        })
    }

    fn git_files<'a>(&'a self, group: &'a FileGroup<'a>) -> BoxFuture<'a, GitFiles> {
        self.asked.lock().unwrap().push(group.paths.clone());
        let commit = self.commit.lock().unwrap().clone();
        let files = self.files.lock().unwrap().clone();
        let out = group
            .paths
            .iter()
            .map(|p| (p.clone(), files.get(p).cloned()))
            .collect();
        Box::pin(async move { Ok((commit, out)) })
    }

    fn make_due(&self, repositories: &[SourceUrl]) -> usize {
        self.due
            .lock()
            .unwrap()
            .extend(repositories.iter().cloned());
        repositories.len()
    }
}

fn file(path: &str) -> GitFileSource {
    GitFileSource {
        url: "https://git.example.com/team-a/fleet.git".into(),
        reference: RefKind::Branch("main".into()),
        path: path.into(),
        interval_secs: 60,
        credentials: Credentials::None,
        trust: Trust::default(),
    }
}

fn owner(name: &str) -> OwnerId {
    OwnerId {
        namespace: "team-a".into(),
        name: name.into(),
    }
}

fn catalog() -> (Arc<Repo>, ChartCatalog) {
    let repo = Arc::new(Repo::default());
    *repo.commit.lock().unwrap() = "1".repeat(40);
    repo.files
        .lock()
        .unwrap()
        .insert("values/member-1.yaml".into(), "replicas: 2\n".into());
    let catalog = ChartCatalog::with_resolver(Box::new(repo.clone()), Duration::from_secs(300));
    (repo, catalog)
}

#[tokio::test]
async fn files_are_loaded_once_in_one_request_per_repository_and_looked_up_after() {
    let (repo, catalog) = catalog();
    let wanted = [file("values/member-1.yaml"), file("values/member-2.yaml")].into();
    assert_eq!(
        catalog.git_file(&file("values/member-1.yaml")),
        GitFileLookup::Unreadable("not read yet".into())
    );
    assert!(catalog.load_git_files(&owner("a"), &wanted).await);
    assert!(!catalog.load_git_files(&owner("a"), &wanted).await);
    assert_eq!(
        repo.asked.lock().unwrap().len(),
        1,
        "one request for both files"
    );
    assert_eq!(
        catalog.git_file(&file("values/member-1.yaml")),
        GitFileLookup::Found {
            commit: "1".repeat(40),
            content: "replicas: 2\n".into()
        }
    );
    assert_eq!(
        catalog.git_file(&file("values/member-2.yaml")),
        GitFileLookup::Missing {
            commit: "1".repeat(40)
        }
    );
}

#[tokio::test]
async fn a_push_wakes_exactly_the_controllers_reading_a_changed_file() {
    let (repo, catalog) = catalog();
    catalog
        .load_git_files(&owner("a"), &[file("values/member-1.yaml")].into())
        .await;
    catalog
        .load_git_files(&owner("b"), &[file("values/member-2.yaml")].into())
        .await;
    assert!(
        catalog.refresh_git_files().await.is_empty(),
        "nothing changed"
    );
    *repo.commit.lock().unwrap() = "2".repeat(40);
    repo.files
        .lock()
        .unwrap()
        .insert("values/member-1.yaml".into(), "replicas: 5\n".into());
    let woken = catalog.refresh_git_files().await;
    // b's file is still missing, at another commit: its lookup changed too.
    assert_eq!(woken, [owner("a"), owner("b")].into());
    // A Controller that no longer reads a file is not woken for it, and the file is forgotten.
    catalog
        .load_git_files(&owner("b"), &Default::default())
        .await;
    *repo.commit.lock().unwrap() = "3".repeat(40);
    let woken = catalog.refresh_git_files().await;
    assert_eq!(woken, [owner("a")].into());
}

#[tokio::test]
async fn a_hook_making_sources_due_wakes_the_git_loop() {
    let (repo, catalog) = catalog();
    let name = SourceUrl::git("https://git.example.com/team-a/fleet")
        .unwrap()
        .0;
    assert_eq!(catalog.make_due(std::slice::from_ref(&name)), 1);
    tokio::time::timeout(Duration::from_secs(1), catalog.git_woken())
        .await
        .expect("woken");
    assert_eq!(*repo.due.lock().unwrap(), [name]);
    assert_eq!(catalog.make_due(&[]), 0);
}

#[tokio::test]
async fn a_git_chart_is_found_with_its_commit_and_digest() {
    let (_, catalog) = catalog();
    let source = ChartSource::Git {
        url: "https://git.example.com/team-a/charts.git".into(),
        path: "charts/web".into(),
        reference: RefKind::Branch("main".into()),
        chart: "web".into(),
        interval_secs: 60,
    };
    let chart = crate::api::crd::Chart {
        chart_name: "web".into(),
        git: Some(crate::api::crd::GitSource {
            url: "https://git.example.com/team-a/charts.git".into(),
            reference: crate::api::crd::GitRef {
                branch: Some("main".into()),
                ..Default::default()
            },
            path: "charts/web".into(),
            interval: None,
        }),
        ..Default::default()
    };
    let spec = crate::api::crd::ControllerSpec {
        tenancies: vec![crate::api::crd::Tenancy {
            namespace: "a".into(),
            charts: vec![chart],
            ..Default::default()
        }],
        ..Default::default()
    };
    let scope = |_: &crate::api::crd::Chart| {
        Some(crate::policy::Scope::Under(
            SourceUrl::git("https://git.example.com/team-a/charts")
                .unwrap()
                .0,
            Credentials::None,
            Trust::default(),
        ))
    };
    catalog
        .prepare("", &spec, std::path::Path::new("/charts"), &scope)
        .await;
    assert_eq!(
        catalog.lookup("", &source, &Credentials::None, &Trust::default(), None),
        ChartLookup::Found {
            version: Some("0.1.0".into()),
            digest: Some(format!("sha256:{}", "a".repeat(64))),
            verified: None,
            commit: Some("1".repeat(40)),
        }
    );
}
