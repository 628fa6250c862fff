//! Charts from Git in the chart cache: a ref resolved through the Git fetcher (`tenancy-hub-git`) at most once per source per interval, each new commit fetched once into a scratch directory and packed into a deterministic archive kept by sha256; the source's Secret written only on the fetcher's stdin and masked in whatever it says.
//!
//! The fetcher is a program of its own (Go, go-git), run once per question with one JSON
//! request on its stdin and one answer on its stdout (see `git::protocol`): it bounds
//! the fetch (shallow, `maxBytes`, a deadline), refuses paths that climb out, symlinks out of
//! the chart and submodules, and checks a commit's signature against the keys a policy's
//! `verify` gives. What it exported is packed here, so the same commit gives the same digest on
//! every hub and after every restart, and pull members get digest-named chunks as for any chart.

pub(crate) mod dependencies;
pub(crate) mod files;
mod helmignore;
mod lock;
pub(crate) mod package;
pub(crate) mod protocol;
mod refs;
mod secrets;

pub(crate) use secrets::{access_of, verify_keys};

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use dashmap::DashMap;
use sha2::{Digest, Sha256};
use tokio::{io::AsyncReadExt as _, io::AsyncWriteExt as _, time::Instant};

use crate::{
    api::crd::RefKind,
    charts::{
        cache::ChartCache,
        common::{Error, GitFound, PARTIAL, Resolved, Result},
        store::hex,
    },
    policy::access::{Credentials, Trust, TrustRule},
    policy::source::redact,
};

use protocol::{Access, Answer, Found, PathKind, Request, VerifyKeys, WantedPath};

/// The fetcher's program name, looked for beside helm.
pub(crate) const FETCHER: &str = "tenancy-hub-git";
/// The deadline given to the fetcher for one operation, in seconds.
const TIMEOUT_SECS: u64 = 120;
/// The most a fetch receives and writes.
const MAX_BYTES: u64 = 64 << 20;
/// The most of the fetcher's stderr kept, for an error.
const MAX_STDERR: u64 = 16 << 10;
/// The keys a Git source's Secret may hold, in words, for messages.
pub(crate) const GIT_KEYS: &str = "username and password, bearerToken, identity and known_hosts (and password for the identity's passphrase), ca.crt";

/// A Git chart as the cache resolves it.
#[derive(Clone, Debug)]
pub(crate) struct GitChart<'a> {
    /// The repository, as the spec writes it (in normal form when fetched).
    pub(crate) url: &'a str,
    /// The chart's directory, in normal form.
    pub(crate) path: &'a str,
    /// The ref.
    pub(crate) reference: &'a RefKind,
    /// The chart's name: its Chart.yaml's.
    pub(crate) chart: &'a str,
    /// The namespace of the Controller it is resolved for: its dependencies are admitted by
    /// the policies governing it.
    pub(crate) tenant: &'a str,
    /// How long a resolution of the ref is used.
    pub(crate) interval: Duration,
}

/// What a ref's resolution is kept by: the repository (as fetched), the ref, whose credentials,
/// and the tags a semver range may pick ([`Trust::tags`]).
type RefKey = (String, RefKind, Credentials, Option<Vec<String>>);

/// The Git side of the chart cache: the fetcher and what it answered.
#[derive(Default)]
pub(crate) struct GitState {
    /// The fetcher; None: Git charts cannot be resolved, and say so.
    pub(crate) fetcher: Option<PathBuf>,
    /// Resolutions of refs, by repository (as fetched), ref, whose credentials and the tags a
    /// range may pick.
    refs: DashMap<RefKey, (Instant, Found)>,
    /// What each commit's chart was packed into, by repository, commit, path, chart name, whose
    /// credentials and the signature rules.
    archives: DashMap<(String, String, String, String, Credentials, Trust), Resolved>,
    /// Values files read, by repository, commit, path, whose credentials and the signature
    /// rules (None: not in that commit).
    files: DashMap<(String, String, String, Credentials, Trust), files::FileContent>,
    /// Held while a source is resolved or fetched, so each is asked once at a time.
    flights: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// Admits dependencies of repositories or registries (unset: they are refused).
    pub(crate) admission: std::sync::OnceLock<dependencies::DependencyAdmission>,
    /// The dependencies each packed archive (by sha256) asks for.
    requests: DashMap<String, Arc<Vec<package::DependencyRequest>>>,
    /// Checks dependencies of sources with signature rules (unset: they are refused).
    pub(crate) verification: std::sync::OnceLock<dependencies::DependencyVerification>,
    /// What each dependency resolved to last, by request, scope, whose credentials and the
    /// signature rules.
    dependencies: DashMap<dependencies::MemoKey, dependencies::Memo>,
    /// The archive a packed archive with its dependencies added became: by the packed
    /// archive and the dependencies' paths and archives.
    assembled: DashMap<(String, Vec<(String, String)>), String>,
}

impl GitState {
    /// Makes the refs of these repositories (names in normal form) due: the next look resolves
    /// them again whatever their interval. Returns how many were known.
    pub(crate) fn make_due(&self, repositories: &[crate::policy::source::SourceUrl]) -> usize {
        let before = self.refs.len();
        self.refs.retain(|(url, ..), _| {
            crate::policy::source::SourceUrl::git(url)
                .is_ok_and(|(name, _)| !repositories.contains(&name))
        });
        before - self.refs.len()
    }

    /// Forgets the ref resolutions older than `before`, and the packed commits whose archive
    /// is no longer among `kept` (refusals are kept with their ref's resolution).
    pub(crate) fn forget(&self, before: Instant, kept: &std::collections::HashSet<String>) {
        self.refs.retain(|_, (at, _)| *at >= before);
        let commits: std::collections::HashSet<String> =
            self.refs.iter().map(|r| r.1.commit.clone()).collect();
        self.files
            .retain(|(_, commit, ..), _| commits.contains(commit));
        self.archives
            .retain(|_, r| r.archive.as_ref().is_none_or(|a| kept.contains(a)));
        self.requests.retain(|archive, _| kept.contains(archive));
        self.dependencies
            .retain(|_, memo| memo.at >= before && kept.contains(&memo.archive));
        self.assembled.retain(|_, archive| kept.contains(archive));
    }
}

/// Runs the fetcher on `request` and reads its answer, within the request's deadline and a
/// margin; the fetcher's words are masked of `secrets`.
pub(crate) async fn ask(
    fetcher: &Path,
    request: &Request,
    secrets: &[&str],
) -> std::result::Result<Answer, String> {
    let bytes = request.to_bytes()?;
    let mut child = tokio::process::Command::new(fetcher)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run the Git fetcher {}: {e}; install {FETCHER} beside helm or pass --git-fetcher",
                fetcher.display()
            )
        })?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let talk = async {
        let write = async {
            let written = stdin.write_all(&bytes).await;
            drop(stdin);
            written
        };
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut bounded_out = (&mut stdout).take(protocol::MAX_ANSWER as u64 + 1);
        let mut bounded_err = (&mut stderr).take(MAX_STDERR);
        let read_out = bounded_out.read_to_end(&mut out);
        let read_err = bounded_err.read_to_end(&mut err);
        let (written, _, _) = tokio::join!(write, read_out, read_err);
        let status = child.wait().await;
        (written, out, err, status)
    };
    let deadline = Duration::from_secs(request.timeout_seconds.max(1) + 15);
    let Ok((written, out, err, status)) = tokio::time::timeout(deadline, talk).await else {
        return Err(format!(
            "the Git fetcher did not answer within {}s and was stopped",
            deadline.as_secs()
        ));
    };
    let masked = |text: &str| {
        let mut out = text.to_owned();
        for s in secrets.iter().filter(|s| s.len() >= 4) {
            out = out.replace(s, "***");
        }
        redact(&crate::queue::failure::trim_error(&out))
    };
    match protocol::parse_answer(&out, secrets) {
        Ok(answer) => Ok(answer),
        Err(why) => Err(format!(
            "{why} (exit {}; {}{})",
            status.map_or_else(|e| e.to_string(), |s| s.to_string()),
            masked(&String::from_utf8_lossy(&err)),
            written
                .err()
                .map_or(String::new(), |e| format!("; writing its request: {e}"))
        )),
    }
}

/// Why an answer is not a success, in words naming the repository.
fn failed(url: &str, answer: Answer) -> std::result::Result<Found, String> {
    match answer {
        Answer::Ok(found) => Ok(found),
        Answer::Refused { code, message } => Err(format!("refused ({code}): {message}")),
        Answer::Error { kind, message } => Err(format!("{kind}: {message} ({})", redact(url))),
    }
}

impl ChartCache {
    /// Resolves a Git chart: its ref (again once `chart.interval` has passed since the last
    /// resolution), then, for a commit not packed before, its directory fetched, checked against
    /// every signature rule of `trust`, and packed into an archive kept by sha256. A commit a
    /// rule refuses resolves with the refusal and no archive.
    pub(crate) async fn git(
        &self,
        chart: &GitChart<'_>,
        credentials: &Credentials,
        trust: &Trust,
    ) -> Result<Resolved> {
        let error = |message: String| Error::Git {
            url: redact(chart.url),
            message,
        };
        let Some(fetcher) = self.git.fetcher.clone() else {
            return Err(error(format!(
                "this process has no Git fetcher: install {FETCHER} beside helm or pass --git-fetcher"
            )));
        };
        let (_, url) = crate::policy::source::SourceUrl::git(chart.url)
            .map_err(|refused| error(refused.to_string()))?;
        if let Some(known) = self.known(chart, &url, credentials, trust) {
            return self.finish(chart, known).await.map_err(error);
        }
        let ssh = url.starts_with("ssh://");
        let secret = match &self.secrets {
            Some(secrets) => secrets.read(credentials, GIT_KEYS).await.map_err(error)?,
            None if *credentials == Credentials::None => None,
            None => return Err(error("this process reads no source Secrets".into())),
        };
        let access = access_of(secret.as_ref(), ssh).map_err(|why| {
            let named =
                credentials.secret(self.secrets.as_ref().map_or("", |s| &s.operator_namespace));
            error(format!(
                "{} {why}; its keys: {GIT_KEYS}",
                named.unwrap_or_default()
            ))
        })?;
        let secrets: Vec<&str> = access
            .auth
            .as_ref()
            .map(|a| a.secrets())
            .unwrap_or_default();
        let flight = self.git.flights.entry(url.clone()).or_default().clone();
        let _flight = flight.lock().await;
        let found = self
            .resolve_ref(
                &fetcher,
                chart,
                &url,
                &access,
                (credentials, trust),
                &secrets,
            )
            .await
            .map_err(error)?;
        let key = (
            url.clone(),
            found.commit.clone(),
            chart.path.to_owned(),
            chart.chart.to_owned(),
            credentials.clone(),
            trust.clone(),
        );
        let known = self.git.archives.get(&key).map(|r| r.clone());
        let resolved = match known {
            Some(known) if known.archive.as_ref().is_none_or(|a| self.store.has(a)) => known,
            _ => {
                let resolved = self
                    .fetch_commit(&fetcher, chart, &url, (&access, &secrets), &found, trust)
                    .await
                    .map_err(error)?;
                self.git.archives.insert(key, resolved.clone());
                resolved
            }
        };
        drop(_flight);
        self.finish(chart, resolved).await.map_err(error)
    }

    /// A packed commit with the dependencies of repositories or registries it asks for added
    /// (see `dependencies`); a refused commit or one asking for none as it is. A dependency the
    /// policies or its source's signature rules refuse resolves the chart as refused (no archive, the refusal in `git`), so
    /// what was resolved before is not planned either.
    async fn finish(
        &self,
        chart: &GitChart<'_>,
        packed: Resolved,
    ) -> std::result::Result<Resolved, String> {
        let requests = packed
            .archive
            .as_ref()
            .and_then(|a| self.git.requests.get(a).map(|r| r.clone()));
        match requests {
            Some(requests) if !requests.is_empty() => {
                match self
                    .with_dependencies(chart, packed.clone(), &requests)
                    .await
                {
                    Ok(resolved) => Ok(resolved),
                    Err(dependencies::DependencyError::Failed(why)) => Err(why),
                    Err(dependencies::DependencyError::Refused(why)) => Ok(Resolved {
                        archive: None,
                        digest: None,
                        git: packed.git.map(|g| GitFound {
                            refused: Some(why),
                            ..g
                        }),
                        ..packed
                    }),
                }
            }
            _ => Ok(packed),
        }
    }

    /// Admits the dependencies of Git charts from repositories or registries with `admission`
    /// (the operator's policies), from now on; without it they are refused.
    pub(crate) fn admit_git_dependencies(&self, admission: dependencies::DependencyAdmission) {
        let _ = self.git.admission.set(admission);
    }

    /// What `chart` resolved to last, while that resolution is younger than its interval and
    /// its archive is still kept: nothing is read or asked.
    fn known(
        &self,
        chart: &GitChart<'_>,
        url: &str,
        credentials: &Credentials,
        trust: &Trust,
    ) -> Option<Resolved> {
        let commit = {
            let known = self.git.refs.get(&(
                url.to_owned(),
                chart.reference.clone(),
                credentials.clone(),
                trust.tags.clone(),
            ))?;
            (known.0.elapsed() < chart.interval).then(|| known.1.commit.clone())?
        };
        let key = (
            url.to_owned(),
            commit,
            chart.path.to_owned(),
            chart.chart.to_owned(),
            credentials.clone(),
            trust.clone(),
        );
        let known = self.git.archives.get(&key)?.clone();
        known
            .archive
            .as_ref()
            .is_none_or(|a| self.store.has(a))
            .then_some(known)
    }

    /// Fetches `found.commit`'s chart directory into a scratch directory (checked against the
    /// first signature rule there, each further rule by a fetch of its own), packs it and keeps
    /// the archive.
    async fn fetch_commit(
        &self,
        fetcher: &Path,
        chart: &GitChart<'_>,
        url: &str,
        (access, secrets): (&Access, &[&str]),
        found: &Found,
        trust: &Trust,
    ) -> std::result::Result<Resolved, String> {
        let mut rules = Vec::new();
        for rule in &trust.rules {
            rules.push((rule, self.rule_keys(rule).await?));
        }
        let mut signed_by = Vec::new();
        let mut archive = None;
        let mut version = String::new();
        // Without rules, one fetch; with rules, one per rule, the first packed.
        let passes = rules.len().max(1);
        for pass in 0..passes {
            let rule = rules.get(pass);
            let scratch = tempfile::Builder::new()
                .prefix(PARTIAL)
                .tempdir_in(self.dir())
                .map_err(|e| format!("the chart cache {}: {e}", self.dir().display()))?;
            let request = Request::fetch(
                url,
                chart.reference,
                access,
                TIMEOUT_SECS,
                &found.commit,
                (scratch.path(), MAX_BYTES),
                vec![WantedPath {
                    path: chart.path.to_owned(),
                    kind: PathKind::Dir,
                    optional: false,
                }],
                rule.map(|(_, keys)| keys.clone()),
            );
            match ask(fetcher, &request, secrets).await? {
                Answer::Ok(fetched) => {
                    if fetched.commit != found.commit {
                        return Err(format!(
                            "the fetcher fetched commit {} instead of {}",
                            fetched.commit, found.commit
                        ));
                    }
                    if let Some((rule, _)) = rule {
                        signed_by.push(format!(
                            "{}: {}",
                            rule.verify.provider.as_str(),
                            fetched.signed_by
                        ));
                    }
                }
                Answer::Refused { code, message }
                    if rule.is_some()
                        && matches!(code.as_str(), "unsigned" | "untrusted" | "invalid") =>
                {
                    let (rule, _) = rule.expect("checked");
                    return Ok(Resolved {
                        git: Some(GitFound {
                            commit: found.commit.clone(),
                            reference: found.reference.clone(),
                            signed_by: Vec::new(),
                            refused: Some(format!(
                                "commit {} refused by {} ({code}): {message}",
                                found.commit,
                                rule.describe()
                            )),
                            dependencies: Vec::new(),
                        }),
                        ..Resolved::default()
                    });
                }
                other => {
                    failed(url, other)?;
                }
            }
            if pass == 0 {
                let (root, path, name) = (
                    scratch.path().to_owned(),
                    chart.path.to_owned(),
                    chart.chart.to_owned(),
                );
                let packed = tokio::task::spawn_blocking(move || {
                    package::pack(&root, &path, &name, MAX_BYTES)
                })
                .await
                .map_err(|e| e.to_string())??;
                version = packed.version;
                let kept = self.keep_packed(&packed.bytes).map_err(|e| e.to_string())?;
                if !packed.requests.is_empty() {
                    self.git
                        .requests
                        .insert(kept.clone(), Arc::new(packed.requests));
                }
                archive = Some(kept);
            }
        }
        let archive = archive.expect("the first pass packs");
        tracing::info!(repository = %redact(url), commit = %found.commit, path = %chart.path, archive = %archive, "packed a chart from Git");
        Ok(Resolved {
            version,
            digest: Some(format!("sha256:{archive}")),
            archive: Some(archive),
            provenance: None,
            git: Some(GitFound {
                commit: found.commit.clone(),
                reference: found.reference.clone(),
                signed_by,
                refused: None,
                dependencies: Vec::new(),
            }),
        })
    }

    /// The keys of one Git signature rule, read from its Secret now.
    async fn rule_keys(&self, rule: &TrustRule) -> std::result::Result<VerifyKeys, String> {
        let name = &rule.verify.secret_ref.name;
        let secret = self.trust_secret(name).await?;
        verify_keys(rule.verify.provider, &secret)
            .map_err(|why| format!("Secret {name} of {} {why}", rule.describe()))
    }

    /// Keeps a packed archive under its sha256 (unless there already); returns the sha256.
    fn keep_packed(&self, bytes: &[u8]) -> Result<String> {
        let digest = hex(&Sha256::digest(bytes));
        self.store.metrics.chart_cache(self.store.has(&digest));
        if self.store.has(&digest) {
            return Ok(digest);
        }
        let mut partial = tempfile::Builder::new()
            .prefix(PARTIAL)
            .tempfile_in(&self.store.dir)
            .map_err(|e| self.store.io(e))?;
        partial.write_all(bytes).map_err(|e| self.store.io(e))?;
        let (_, path) = partial.keep().map_err(|e| self.store.io(e.error))?;
        let kept = self.store.keep(&path, &digest, bytes.len() as u64);
        if kept.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        kept.map(|()| digest)
    }
}

#[cfg(test)]
mod tests;
