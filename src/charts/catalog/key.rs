//! The keys of the chart catalog: a remote chart with its constraint, credentials and signature rules, and which charts a spec wants.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
};

use crate::{
    api::crd::RefKind,
    api::crd::{Chart, ControllerSpec},
    plan::{self, ChartSource},
    policy::Scope,
    policy::access::{Credentials, Trust},
    policy::source::{SourceUrl, redact},
};

/// A chart outside the chart home.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Remote {
    /// A chart in a Helm repository.
    Repository { url: String, chart: String },
    /// An `oci://` reference.
    Oci(String),
    /// A chart directory of a Git repository at a ref.
    Git {
        url: String,
        path: String,
        reference: RefKind,
        chart: String,
        interval_secs: u64,
        /// The namespace of the Controllers it is resolved for: the policies governing it admit
        /// its dependencies.
        tenant: String,
    },
}

/// A remote chart with the version constraint it is asked for with, whose credentials it is
/// fetched with and the signature rules it must pass: what one Controller resolved with
/// credentials is never another's without, nor what one checked under no rule another's under
/// some.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RemoteKey {
    pub(super) remote: Remote,
    pub(super) constraint: Option<String>,
    pub(crate) credentials: Credentials,
    pub(crate) trust: Trust,
}

impl RemoteKey {
    /// The key of a repository, OCI or Git chart (a Git chart's for Controllers of `tenant`);
    /// a chart-home directory's path otherwise.
    pub(super) fn of<'a>(
        tenant: &str,
        source: &'a ChartSource,
        (credentials, trust): (&Credentials, &Trust),
        constraint: Option<&str>,
    ) -> Result<Self, &'a Path> {
        let remote = match source {
            ChartSource::Directory(path) => return Err(path),
            ChartSource::Repository { url, chart } => Remote::Repository {
                url: url.clone(),
                chart: chart.clone(),
            },
            ChartSource::Oci(reference) => Remote::Oci(reference.clone()),
            ChartSource::Git {
                url,
                path,
                reference,
                chart,
                interval_secs,
            } => Remote::Git {
                url: url.clone(),
                path: path.clone(),
                reference: reference.clone(),
                chart: chart.clone(),
                interval_secs: *interval_secs,
                tenant: tenant.to_owned(),
            },
        };
        Ok(Self {
            remote,
            constraint: constraint.map(str::to_owned),
            credentials: credentials.clone(),
            trust: trust.clone(),
        })
    }

    /// The OCI reference (`oci://…`), when it is an OCI chart.
    pub(crate) fn oci(&self) -> Option<&str> {
        match &self.remote {
            Remote::Oci(reference) => Some(reference),
            Remote::Repository { .. } | Remote::Git { .. } => None,
        }
    }

    /// Whether it is a Git chart.
    pub(crate) fn is_git(&self) -> bool {
        matches!(self.remote, Remote::Git { .. })
    }

    /// The chart in words, for messages: name, constraint and where it is looked for, without
    /// credentials.
    pub(super) fn describe(&self) -> String {
        let version = match &self.constraint {
            Some(c) => format!("version {c}"),
            None => "(newest version)".to_owned(),
        };
        redact(&match &self.remote {
            Remote::Repository { url, chart } => format!("chart {chart} {version} from {url}"),
            Remote::Oci(reference) => format!("chart {reference} {version}"),
            Remote::Git {
                url,
                path,
                reference,
                chart,
                ..
            } => format!("chart {chart} from Git {url} path {path} at {reference}"),
        })
    }

    /// Why the chart cannot be used, from helm's error.
    pub(super) fn missing(&self, error: &str) -> String {
        let check = match self.remote {
            Remote::Repository { .. } => "check repo/version",
            Remote::Oci(_) => "check the oci:// reference/version",
            Remote::Git { .. } => "check git (url, ref, path) and the source's Secret",
        };
        redact(&format!(
            "cannot resolve {}: {error}; {check}",
            self.describe()
        ))
    }
}

/// A chart the planner may ask about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Wanted {
    /// A chart-home directory.
    Directory(PathBuf),
    /// A repository or OCI chart with its constraint, and the prefix its fetches stay under.
    Remote(Box<RemoteKey>, SourceUrl),
}

/// Every chart a spec names that `allowed` lets the hub fetch (the tenancy policies' and the
/// chart-source rules' say: a refused chart is never read or fetched), with where its fetches
/// must stay; `tenant` is the namespace of the Controller of `spec`.
pub(crate) fn wanted_by(
    tenant: &str,
    spec: &ControllerSpec,
    chart_home: &Path,
    allowed: &dyn Fn(&Chart) -> Option<Scope>,
) -> HashSet<Wanted> {
    spec.tenancies
        .iter()
        .flat_map(|t| &t.charts)
        .filter_map(|c| {
            let scope = allowed(c)?;
            let source = plan::source_of(c, chart_home);
            let (credentials, trust) = match &scope {
                Scope::Under(_, credentials, trust) => (credentials.clone(), trust.clone()),
                Scope::ChartHome => Default::default(),
            };
            match (
                RemoteKey::of(
                    tenant,
                    &source,
                    (&credentials, &trust),
                    c.version.as_deref(),
                ),
                scope,
            ) {
                (Err(path), _) => (!path
                    .components()
                    .any(|c| c == std::path::Component::ParentDir))
                .then(|| Wanted::Directory(path.to_owned())),
                (Ok(key), Scope::Under(prefix, ..)) => Some(Wanted::Remote(Box::new(key), prefix)),
                (Ok(_), Scope::ChartHome) => None,
            }
        })
        .collect()
}
