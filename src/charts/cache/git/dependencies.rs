//! Dependencies of a Git chart from Helm repositories or OCI registries: each admitted by the acting tenant's policies as a chart entry of that source would be, resolved through the chart cache (index and constraint, or `helm pull`), never by helm at install, and added to the packed archive as `charts/<name>-<version>.tgz`, as `helm dependency build` saves it.
//!
//! The admission is the operator's (see [`DependencyAdmission`]): the same normalisation,
//! prefix rules and credentials Secrets as for a chart entry whose `repo` (or `oci://`
//! chartName) is the dependency's repository, taken for the Controller's namespace, read anew
//! at each resolution so a changed policy applies at the next one. A dependency of a source
//! with signature rules is checked against them as a chart entry of that source is (see
//! [`DependencyVerification`]), once per resolution: a refusal refuses the chart, and who
//! signed it is recorded beside the commit's signers.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::{
    api::crd::Chart,
    charts::{
        cache::git::{
            GitChart,
            package::{self, DependencyRequest},
        },
        cache::{ChartCache, Resolved},
    },
    policy::{
        Scope,
        access::{Credentials, Trust},
        source::{SourceUrl, redact},
    },
};

/// Where a chart entry may be fetched from for a Controller of a namespace: the operator's
/// policies (`Admission::fetch_scope`), or why not.
pub(crate) type DependencyAdmission =
    Arc<dyn Fn(&str, &Chart) -> Result<Scope, String> + Send + Sync>;

/// Where `chart` may be fetched from for a Controller of `tenant` under `admission`: the
/// source rules every mode keeps, then the policies' (as for a chart entry).
pub(crate) fn scope_under(
    admission: &crate::policy::Admission,
    tenant: &str,
    chart: &Chart,
) -> Result<Scope, String> {
    admission.check_source(tenant, chart)?;
    admission.fetch_scope(tenant, chart).ok_or_else(|| {
        format!("no TenancyPolicy governing namespace {tenant} lists a chart source holding it")
    })
}

/// A dependency resolved from a source with signature rules, to be checked against them as a
/// chart entry of that source is.
pub(crate) struct DependencyCheck {
    /// Its `oci://` reference when it comes from a registry; None: a Helm repository.
    pub(crate) oci: Option<String>,
    /// The prefix its fetches stay under (a `.prov` file is fetched under it too).
    pub(crate) scope: SourceUrl,
    /// Whose credentials fetch it.
    pub(crate) credentials: Credentials,
    /// The signature rules of the policies, not empty.
    pub(crate) trust: Trust,
    /// What it resolved to: the version, manifest digest, archive and `.prov` location.
    pub(crate) resolved: Resolved,
}

/// What the signature rules found of a dependency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DependencyVerdict {
    /// Every rule passed: who signed it, per rule (`cosign: key sha256:…`).
    Signed(String),
    /// A rule refused it: which, and why.
    Refused(String),
}

/// Checks a dependency against the signature rules of its source, with the verifier and the
/// platform's trust material as for chart entries (the operator's `signed::Sources`); an error
/// when no verdict could be reached (a rule that cannot be used, the verifier or registry
/// failing): the chart's resolution is tried again at the next look.
pub(crate) type DependencyVerification =
    Arc<dyn Fn(DependencyCheck) -> VerdictFuture + Send + Sync>;

/// The answer of a [`DependencyVerification`], to come.
pub(crate) type VerdictFuture = BoxFuture<'static, Result<DependencyVerdict, String>>;

/// What a dependency is kept by: the request, the scope, whose credentials and the signature
/// rules (new rules resolve and check it again).
pub(super) type MemoKey = (DependencyRequest, SourceUrl, Credentials, Trust);

/// What one dependency resolved to, kept for a Git interval.
#[derive(Clone, Debug)]
pub(super) struct Memo {
    /// When it was resolved.
    pub(super) at: Instant,
    /// The version.
    pub(super) version: String,
    /// The archive's sha256 in the cache.
    pub(super) archive: String,
    /// The signature rules' verdict on that archive; None when no rule asks.
    pub(super) verdict: Option<DependencyVerdict>,
}

/// Why a Git chart's dependencies could not be added.
#[derive(Debug)]
pub(crate) enum DependencyError {
    /// The policies refuse one: the chart is refused until they change (what was resolved
    /// before no longer counts).
    Refused(String),
    /// A fetch or the cache failed: tried again at the next look.
    Failed(String),
}

/// The chart entry a dependency would be: `repo` and the chart's name, or an `oci://`
/// chartName under the registry path, at the pinned version or the constraint.
pub(crate) fn as_chart(request: &DependencyRequest) -> Chart {
    match request.repository.starts_with("oci://") {
        true => Chart {
            chart_name: format!(
                "{}/{}",
                request.repository.trim_end_matches('/'),
                request.name
            ),
            version: request.version.clone(),
            ..Default::default()
        },
        false => Chart {
            chart_name: request.name.clone(),
            repo: Some(request.repository.clone()),
            version: request.version.clone(),
            ..Default::default()
        },
    }
}

/// The dependency in words, for messages: the chart, the dependency, where it is asked for
/// and its repository (redacted).
fn named(chart: &str, request: &DependencyRequest) -> String {
    format!(
        "chart {chart}: dependency {:?} of {}/Chart.yaml from {}",
        request.name,
        request.chart,
        redact(&request.repository)
    )
}

/// Where `request` (a dependency of Git chart `chart`) may be fetched from for a Controller of
/// `tenant`, with whose credentials and under which signature rules (`verifies`: whether this
/// process can check them; if not, a source with rules is refused); a refusal names the
/// chart, the dependency, its repository (redacted) and what to do.
pub(crate) fn admit(
    admission: Option<&DependencyAdmission>,
    verifies: bool,
    tenant: &str,
    chart: &str,
    request: &DependencyRequest,
) -> Result<(SourceUrl, Credentials, Trust), String> {
    let named = named(chart, request);
    let vendor = "or commit the dependency's archive under charts/";
    let Some(admission) = admission else {
        return Err(format!(
            "{named}: this process admits no dependency from a repository; {vendor}"
        ));
    };
    match admission(tenant, &as_chart(request)) {
        Ok(Scope::Under(scope, credentials, trust)) if trust.is_empty() || verifies => {
            Ok((scope, credentials, trust))
        }
        Ok(Scope::Under(_, _, trust)) => Err(format!(
            "{named}: its source falls under signature rules ({}), and this process checks no signatures: run it with the verifier (--verifier), {vendor}",
            trust
                .rules
                .iter()
                .map(|r| r.describe())
                .collect::<Vec<_>>()
                .join("; ")
        )),
        Ok(Scope::ChartHome) => Err(format!("{named}: names no repository; {vendor}")),
        Err(why) => Err(format!(
            "{named} is refused: {why}; a platform admin adds its repository (or a prefix holding it) to the chartSources or sources of a TenancyPolicy governing namespace {tenant}, {vendor}"
        )),
    }
}

/// A kept resolution as [`ChartCache::resolve_dependency`] answers: its version, archive and
/// signers, or the refusal of a signature rule, naming the chart, the dependency, its
/// repository (redacted) and what to do.
fn found(
    chart: &GitChart<'_>,
    request: &DependencyRequest,
    memo: Memo,
) -> Result<(String, String, Option<String>), DependencyError> {
    match memo.verdict {
        None => Ok((memo.version, memo.archive, None)),
        Some(DependencyVerdict::Signed(by)) => Ok((memo.version, memo.archive, Some(by))),
        Some(DependencyVerdict::Refused(why)) => Err(DependencyError::Refused(redact(&format!(
            "{} version {} is not verified: {why}; nothing of chart {} is installed until the dependency is published signed as the rule asks (or a platform admin changes the rule), or commit the dependency's verified archive under charts/",
            named(chart.chart, request),
            memo.version,
            chart.chart
        )))),
    }
}

/// The path of a resolved dependency's archive inside the chart's.
pub(crate) fn archive_path(request: &DependencyRequest, version: &str) -> String {
    format!("{}/charts/{}-{version}.tgz", request.at, request.name)
}

impl ChartCache {
    /// Makes the archive of Git chart `chart` (`base`, packed without them) with the
    /// dependencies it asks for, each admitted for the chart's namespace and resolved through
    /// the cache (an index fetched at most once per the chart's interval); the archive holding
    /// them is kept by sha256, so the same commit with the same dependencies gives the same
    /// digest, and a new version a range picks gives a new one.
    pub(super) async fn with_dependencies(
        &self,
        chart: &GitChart<'_>,
        base: Resolved,
        requests: &[DependencyRequest],
    ) -> Result<Resolved, DependencyError> {
        let base_archive = base.archive.clone().expect("a packed chart has an archive");
        let mut archives: Vec<(String, String)> = Vec::new();
        let (mut shown, mut signed_by) = (Vec::new(), Vec::new());
        for request in requests {
            let (version, sha, signed) = self.resolve_dependency(chart, request).await?;
            shown.push(format!("{} {version} sha256:{}", request.name, &sha[..12]));
            if let Some(by) = signed {
                signed_by.push(format!("dependency {} {version}: {by}", request.name));
            }
            let path = archive_path(request, &version);
            if !archives.iter().any(|(p, _)| *p == path) {
                archives.push((path, sha));
            }
        }
        let key = (base_archive.clone(), archives.clone());
        let known = self.git.assembled.get(&key).map(|a| a.clone());
        let archive = match known {
            Some(archive) if self.store.has(&archive) => archive,
            _ => {
                let archive = self
                    .assemble(&base_archive, &archives)
                    .await
                    .map_err(DependencyError::Failed)?;
                tracing::info!(chart = %chart.chart, commit = base.git.as_ref().map_or("", |g| g.commit.as_str()), dependencies = %shown.join(", "), %archive, "packed a Git chart with its dependencies");
                self.git.assembled.insert(key, archive.clone());
                archive
            }
        };
        tracing::debug!(chart = %chart.chart, dependencies = %shown.join(", "), "resolved the dependencies of a Git chart");
        Ok(Resolved {
            digest: Some(format!("sha256:{archive}")),
            archive: Some(archive),
            git: base.git.map(|g| crate::charts::common::GitFound {
                dependencies: shown,
                signed_by: g.signed_by.into_iter().chain(signed_by).collect(),
                ..g
            }),
            ..base
        })
    }

    /// One dependency's version, archive and who signed it (when rules ask): the one resolved
    /// within the chart's interval, or a resolution through the cache under the scope its
    /// admission gives, checked against its source's signature rules.
    async fn resolve_dependency(
        &self,
        chart: &GitChart<'_>,
        request: &DependencyRequest,
    ) -> Result<(String, String, Option<String>), DependencyError> {
        let verification = self.git.verification.get();
        let admission = self.git.admission.get();
        let (scope, credentials, trust) = admit(
            admission,
            verification.is_some(),
            chart.tenant,
            chart.chart,
            request,
        )
        .map_err(DependencyError::Refused)?;
        let key = (request.clone(), scope.clone(), credentials.clone(), trust);
        if let Some(memo) = self.git.dependencies.get(&key).map(|m| m.clone())
            && memo.at.elapsed() < chart.interval.max(Duration::from_secs(1))
            && self.store.has(&memo.archive)
        {
            return found(chart, request, memo);
        }
        let failed = |e: String| {
            DependencyError::Failed(redact(&format!("{}: {e}", named(chart.chart, request))))
        };
        let version = request.version.as_deref();
        let resolved = match request.repository.starts_with("oci://") {
            true => {
                let reference = as_chart(request).chart_name;
                self.oci(&reference, version, &credentials).await
            }
            false => {
                let since = Instant::now().checked_sub(chart.interval);
                self.repository(
                    &request.repository,
                    &request.name,
                    version,
                    &scope,
                    &credentials,
                    since,
                )
                .await
            }
        }
        .map_err(|e| failed(e.to_string()))?;
        if request.locked && Some(resolved.version.as_str()) != version {
            return Err(failed(format!(
                "Chart.lock pins {}, the source gave {}",
                version.unwrap_or(""),
                resolved.version
            )));
        }
        let archive = resolved
            .archive
            .clone()
            .ok_or_else(|| failed("the cache kept no archive".into()))?;
        // Rules without a verifier were refused by `admit`.
        let verdict = match verification {
            None => None,
            Some(_) if key.3.is_empty() => None,
            Some(verify) => Some(
                verify(DependencyCheck {
                    oci: request
                        .repository
                        .starts_with("oci://")
                        .then(|| as_chart(request).chart_name),
                    scope,
                    credentials,
                    trust: key.3.clone(),
                    resolved: resolved.clone(),
                })
                .await
                .map_err(|e| failed(format!("its signatures cannot be checked: {e}")))?,
            ),
        };
        let memo = Memo {
            at: Instant::now(),
            version: resolved.version,
            archive,
            verdict,
        };
        self.git.dependencies.insert(key, memo.clone());
        found(chart, request, memo)
    }

    /// Checks the signatures of Git charts' dependencies from sources with signature rules
    /// with `verification`, from now on; without it they are refused.
    pub(crate) fn verify_git_dependencies(&self, verification: DependencyVerification) {
        let _ = self.git.verification.set(verification);
    }

    /// The base archive with `archives` (path inside it, sha256 in the cache) added, kept;
    /// returns its sha256.
    async fn assemble(&self, base: &str, archives: &[(String, String)]) -> Result<String, String> {
        let read = |digest: &str| -> Result<Vec<u8>, String> {
            let held = self.hold(digest).ok_or_else(|| {
                format!("archive {digest} left the chart cache while in use; it is fetched again at the next look")
            })?;
            std::fs::read(&held.path).map_err(|e| format!("reading archive {digest}: {e}"))
        };
        let base_bytes = read(base)?;
        let mut added = Vec::new();
        for (path, digest) in archives {
            added.push((path.clone(), read(digest)?));
        }
        let bytes = tokio::task::spawn_blocking(move || {
            package::add_archives(&base_bytes, &added, super::MAX_BYTES)
        })
        .await
        .map_err(|e| e.to_string())??;
        self.keep_packed(&bytes).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests;
