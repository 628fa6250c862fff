//! Values files from Git in the chart cache: the ref resolved as a chart's is (at most once per interval), the files a plan asks for fetched once per commit in one request, their content kept by repository, commit and path.

use std::{collections::BTreeMap, path::Path};

use crate::{
    api::crd::RefKind,
    charts::{
        cache::ChartCache,
        common::{Error, PARTIAL, Result},
    },
    policy::access::{Credentials, Trust},
    policy::source::redact,
};

use super::{
    GitChart, access_of, ask, failed,
    protocol::{Answer, PathKind, Request, WantedPath},
};

/// Largest values file kept; a larger one is kept as too large (the planner says so).
pub(crate) const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most a fetch of values files receives and writes.
const MAX_BYTES: u64 = 16 << 20;

/// Some values files of one repository at one ref, fetched with the same credentials.
#[derive(Clone, Debug)]
pub(crate) struct FileGroup<'a> {
    /// The repository, as the spec writes it.
    pub(crate) url: &'a str,
    /// The ref.
    pub(crate) reference: &'a RefKind,
    /// Seconds between resolutions of the ref.
    pub(crate) interval_secs: u64,
    /// Whose credentials fetch them.
    pub(crate) credentials: &'a Credentials,
    /// The signature rules the commit must pass.
    pub(crate) trust: &'a Trust,
    /// The files' paths, in normal form.
    pub(crate) paths: Vec<String>,
}

/// A values file as read: its content, None when the commit holds no such file.
pub(crate) type FileContent = Option<String>;

impl ChartCache {
    /// The commit `group`'s ref names now (resolved again once its interval has passed) and
    /// each of its files at that commit, fetched once per commit (with the ref's signature
    /// rules checked), larger ones refused.
    pub(crate) async fn git_files(
        &self,
        group: &FileGroup<'_>,
    ) -> Result<(String, BTreeMap<String, FileContent>)> {
        let error = |message: String| Error::Git {
            url: redact(group.url),
            message,
        };
        let Some(fetcher) = self.git.fetcher.clone() else {
            return Err(error(format!(
                "this process has no Git fetcher: install {} beside helm or pass --git-fetcher",
                super::FETCHER
            )));
        };
        let (_, url) = crate::policy::source::SourceUrl::git(group.url)
            .map_err(|refused| error(refused.to_string()))?;
        if let Some(known) = self.known_files(group, &url) {
            return Ok(known);
        }
        let secret = match &self.secrets {
            Some(secrets) => secrets
                .read(group.credentials, super::GIT_KEYS)
                .await
                .map_err(error)?,
            None if *group.credentials == Credentials::None => None,
            None => return Err(error("this process reads no source Secrets".into())),
        };
        let access = access_of(secret.as_ref(), url.starts_with("ssh://"))
            .map_err(|why| error(format!("its Secret {why}; its keys: {}", super::GIT_KEYS)))?;
        let secrets: Vec<&str> = access
            .auth
            .as_ref()
            .map(|a| a.secrets())
            .unwrap_or_default();
        let chart = GitChart {
            url: group.url,
            path: "",
            reference: group.reference,
            chart: "",
            tenant: "",
            interval: std::time::Duration::from_secs(group.interval_secs),
        };
        let flight = self.git.flights.entry(url.clone()).or_default().clone();
        let _flight = flight.lock().await;
        let found = self
            .resolve_ref(
                &fetcher,
                &chart,
                &url,
                &access,
                (group.credentials, group.trust),
                &secrets,
            )
            .await
            .map_err(error)?;
        let key = |path: &str| {
            (
                url.clone(),
                found.commit.clone(),
                path.to_owned(),
                group.credentials.clone(),
                group.trust.clone(),
            )
        };
        let missing: Vec<String> = group
            .paths
            .iter()
            .filter(|p| !self.git.files.contains_key(&key(p)))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let read = self
                .fetch_files(
                    &fetcher,
                    &chart,
                    &url,
                    (&access, &secrets),
                    &found.commit,
                    &missing,
                    group.trust,
                )
                .await
                .map_err(error)?;
            for (path, content) in read {
                self.git.files.insert(key(&path), content);
            }
        }
        let out = group
            .paths
            .iter()
            .map(|p| {
                let content = self.git.files.get(&key(p)).and_then(|c| c.clone());
                (p.clone(), content)
            })
            .collect();
        Ok((found.commit, out))
    }

    /// What `group` read last, while its ref's resolution is younger than its interval and
    /// every file of it is known: nothing is read or asked.
    fn known_files(
        &self,
        group: &FileGroup<'_>,
        url: &str,
    ) -> Option<(String, BTreeMap<String, FileContent>)> {
        let commit = {
            let known = self.git.refs.get(&(
                url.to_owned(),
                group.reference.clone(),
                group.credentials.clone(),
                group.trust.tags.clone(),
            ))?;
            (known.0.elapsed().as_secs() < group.interval_secs).then(|| known.1.commit.clone())?
        };
        let mut out = BTreeMap::new();
        for path in &group.paths {
            let key = (
                url.to_owned(),
                commit.clone(),
                path.clone(),
                group.credentials.clone(),
                group.trust.clone(),
            );
            out.insert(path.clone(), self.git.files.get(&key)?.clone());
        }
        Some((commit, out))
    }

    /// Fetches `paths` of `commit` (each optional) into a scratch directory, once per signature
    /// rule (a refusal fails the fetch), and reads what was written.
    #[allow(clippy::too_many_arguments)]
    async fn fetch_files(
        &self,
        fetcher: &Path,
        chart: &GitChart<'_>,
        url: &str,
        (access, secrets): (&super::protocol::Access, &[&str]),
        commit: &str,
        paths: &[String],
        trust: &Trust,
    ) -> std::result::Result<BTreeMap<String, FileContent>, String> {
        let mut rules = vec![None];
        if !trust.is_empty() {
            rules.clear();
            for rule in &trust.rules {
                rules.push(Some((rule, self.rule_keys(rule).await?)));
            }
        }
        let mut out = BTreeMap::new();
        for (pass, rule) in rules.iter().enumerate() {
            let scratch = tempfile::Builder::new()
                .prefix(PARTIAL)
                .tempdir_in(self.dir())
                .map_err(|e| format!("the chart cache {}: {e}", self.dir().display()))?;
            let wanted = paths
                .iter()
                .map(|p| WantedPath {
                    path: p.clone(),
                    kind: PathKind::File,
                    optional: true,
                })
                .collect();
            let request = Request::fetch(
                url,
                chart.reference,
                access,
                super::TIMEOUT_SECS,
                commit,
                (scratch.path(), MAX_BYTES),
                wanted,
                rule.as_ref().map(|(_, keys)| keys.clone()),
            );
            let fetched = match ask(fetcher, &request, secrets).await? {
                Answer::Refused { code, message } if rule.is_some() => {
                    let (rule, _) = rule.as_ref().expect("checked");
                    return Err(format!(
                        "commit {commit} refused by {} ({code}): {message}",
                        rule.describe()
                    ));
                }
                other => failed(url, other)?,
            };
            if fetched.commit != commit {
                return Err(format!(
                    "the fetcher fetched commit {} instead of {commit}",
                    fetched.commit
                ));
            }
            if pass > 0 {
                continue;
            }
            for written in &fetched.paths {
                if !paths.contains(&written.path) {
                    continue;
                }
                let content = match written.written {
                    false => None,
                    true => Some(read_bounded(&scratch.path().join(&written.path))?),
                };
                out.insert(written.path.clone(), content);
            }
        }
        for path in paths {
            out.entry(path.clone()).or_insert(None);
        }
        Ok(out)
    }
}

/// A values file's content: text of at most [`MAX_FILE_BYTES`] (a larger one is kept as a
/// marker the planner refuses for its size), a regular file only.
fn read_bounded(path: &Path) -> std::result::Result<String, String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Ok("x".repeat(MAX_FILE_BYTES as usize + 1));
    }
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "a values file is not UTF-8 text".to_owned())
}
