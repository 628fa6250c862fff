//! What the chart cache's rooms share: the resolved version of a remote chart, the cache's bounds, its errors.

use std::{path::PathBuf, time::Duration};

use crate::{
    charts::{constraint, fetch},
    policy::source::{Refused, SourceUrl},
};

/// The exact version a remote chart resolved to, its OCI manifest digest and its archive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The chart's version, passed to helm as `--version`.
    pub(crate) version: String,
    /// The OCI manifest digest (`sha256:…`); None for repository charts.
    pub(crate) digest: Option<String>,
    /// The sha256 (hex) of the archive the cache keeps of it.
    pub(crate) archive: Option<String>,
    /// Where a repository chart's provenance file (`.prov`) would be: beside its archive.
    pub(crate) provenance: Option<String>,
    /// A Git chart's commit, ref and signatures.
    pub(crate) git: Option<GitFound>,
}

/// What was resolved of a Git chart besides what every remote chart has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct GitFound {
    /// The commit, 40 hex digits.
    pub(crate) commit: String,
    /// The ref's full name (`refs/heads/main`), empty for a commit.
    pub(crate) reference: String,
    /// Who signed the commit, per signature rule, when rules ask.
    pub(crate) signed_by: Vec<String>,
    /// Why a signature rule refused the commit, when one did: nothing of it is packed.
    pub(crate) refused: Option<String>,
    /// The dependencies of repositories or registries added to the archive, as
    /// `name version sha256:…`, in `Chart.yaml` order.
    pub(crate) dependencies: Vec<String>,
}

/// A program the operator runs beside helm: `given`, else `name` beside `helm`, else on PATH.
pub(crate) fn locate_tool(
    given: Option<&std::path::Path>,
    helm: &std::path::Path,
    name: &str,
) -> Option<PathBuf> {
    if let Some(given) = given {
        return Some(given.to_path_buf());
    }
    let beside = helm
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name));
    beside.filter(|p| p.is_file()).or_else(|| {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
    })
}

/// Largest repository index fetched, unless set otherwise (`run --chart-index-limit`).
pub(crate) const DEFAULT_INDEX_LIMIT: u64 = 32 << 20;
/// Longest version an index may list; longer ones are passed over, so an index cannot fill a
/// status with text of its own.
pub(crate) const MAX_VERSION: usize = 128;
/// Largest chart archive fetched.
pub(crate) const ARCHIVE_LIMIT: u64 = 64 << 20;
/// Default bound of the archives kept.
pub(crate) const DEFAULT_SIZE: u64 = 1 << 30;
/// How long one `helm pull` may take before it is stopped.
pub(crate) const PULL_TIMEOUT: Duration = Duration::from_secs(120);
/// Prefix of the files and directories being written; removed at start.
pub(crate) const PARTIAL: &str = ".partial-";

/// Why a chart could not be fetched or kept. URLs in it carry no credentials.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The HTTP fetch failed or was refused.
    #[error(transparent)]
    Fetch(fetch::Error),
    /// A URL that does not parse.
    #[error("{url} is not a valid URL: {reason}")]
    Url { url: String, reason: String },
    /// A repository URL the chart sources rules refuse.
    #[error("the repository {url} {reason}")]
    Source { url: String, reason: Refused },
    /// A repository outside the prefix its fetches must stay under.
    #[error("the repository {url} is outside the chartSources prefix {scope}; refused")]
    Outside { url: String, scope: SourceUrl },
    /// The index does not parse; where, never what it holds.
    #[error("{url} is not a Helm repository index: {reason}")]
    Index { url: String, reason: String },
    /// The index has no such chart.
    #[error("chart {chart} not found in the repository {url}")]
    NoChart { chart: String, url: String },
    /// No version of the chart satisfies the constraint.
    #[error("no version of chart {chart} in the repository {url} matches {constraint}")]
    NoVersion {
        chart: String,
        url: String,
        constraint: String,
    },
    /// The constraint does not parse.
    #[error(transparent)]
    Constraint(#[from] constraint::Invalid),
    /// The index lists no archive for the version.
    #[error("chart {chart} version {version} in the repository {url} lists no archive URL")]
    NoArchive {
        chart: String,
        version: String,
        url: String,
    },
    /// The index lists the archive outside the prefix, or at a URL that does not parse.
    #[error(
        "chart {chart} version {version}: the index of {url} lists its archive at {reason}; refused: archives are fetched only under the chartSources prefix that allows the repository"
    )]
    ArchiveRefused {
        chart: String,
        version: String,
        url: String,
        reason: String,
    },
    /// The index lists a digest that is no sha256.
    #[error(
        "chart {chart} version {version} in the repository {url}: the index's digest is not a sha256 (64 hex digits); refused"
    )]
    BadDigest {
        chart: String,
        version: String,
        url: String,
    },
    /// The archive is not the one the index describes.
    #[error(
        "chart {chart} version {version} from {url}: digest mismatch, expected {expected}, got {got}; the repository changed the archive"
    )]
    Mismatch {
        chart: String,
        version: String,
        url: String,
        expected: String,
        got: String,
    },
    /// A source's credentials cannot be read or used.
    #[error("the credentials of source {prefix}: {reason}")]
    Credentials { prefix: String, reason: String },
    /// A failure and what to do about it.
    #[error("{error}; {hint}")]
    Hinted { error: Box<Error>, hint: String },
    /// A Git source could not be resolved or fetched.
    #[error("Git repository {url}: {message}")]
    Git { url: String, message: String },
    /// `helm pull` failed.
    #[error("helm pull {reference}: {message}")]
    Pull { reference: String, message: String },
    /// The archive holds no readable `Chart.yaml`.
    #[error("the chart archive from {origin} has no readable Chart.yaml: {reason}")]
    Archive { origin: String, reason: String },
    /// The cache directory cannot be read or written.
    #[error("the chart cache {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The chart cache's result.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;
