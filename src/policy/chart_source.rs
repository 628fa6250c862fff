//! The chart-source rules of admission: where a chart comes from, the URL rules every mode keeps, and where the hub's fetches for it must stay.

use crate::{
    api::crd::{Chart, GitSource},
    api::policy::TenancyPolicySpec,
    policy::access::{Credentials, Trust},
    policy::source::{SourceUrl, redact},
    policy::{Admission, CHART_HOME_SOURCE, Mode, Scope, git},
};

/// Where a chart comes from, as admission sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source<'a> {
    ChartHome,
    Repository(&'a str),
    Oci(&'a str),
    Git(&'a GitSource),
}

fn source_of(chart: &Chart) -> Source<'_> {
    if let Some(git) = &chart.git {
        Source::Git(git)
    } else if chart.chart_name.starts_with("oci://") {
        Source::Oci(&chart.chart_name)
    } else if let Some(url) = &chart.repo {
        Source::Repository(url)
    } else {
        Source::ChartHome
    }
}

/// The URL prefixes of a policy's `chartSources` and `sources` (Git entries aside), in normal
/// form (one that does not parse holds nothing).
fn prefixes(policy: &TenancyPolicySpec) -> impl Iterator<Item = SourceUrl> + '_ {
    policy
        .chart_sources
        .iter()
        .chain(
            policy
                .sources
                .iter()
                .filter(|s| s.git.is_none())
                .map(|s| &s.url),
        )
        .filter_map(|s| SourceUrl::parse(s).ok())
}

impl Admission {
    /// The rules every mode keeps, whatever the policies list: a chart-home or repository chart
    /// is a plain name; a repository is `https://` (or `http://` under a prefix some governing
    /// policy lists), never `file://`, and carries no credentials, query or fragment; an OCI
    /// reference names a host; a source on a loopback, link-local or metadata host needs a
    /// governing policy listing its prefix. URLs are compared in normal form (see
    /// [`SourceUrl`]), so `..`, `%2e%2e`, letter case and default ports cannot leave a prefix.
    pub(crate) fn check_source(&self, hub_namespace: &str, chart: &Chart) -> Result<(), String> {
        let name = &chart.chart_name;
        let plain = || {
            if name.contains(['/', '\\']) || name.contains("..") || name.starts_with(['.', '-']) {
                return Err(format!(
                    "chartName {name:?} must be a plain chart name (no '/', no '..', not absolute): a chart-home or repository chart is named, never given as a path"
                ));
            }
            Ok(())
        };
        match source_of(chart) {
            Source::ChartHome => plain(),
            Source::Repository(url) => {
                plain()?;
                self.check_url(hub_namespace, "repo", url)
            }
            Source::Oci(reference) => {
                let rest = &reference["oci://".len()..];
                if rest.is_empty() || rest.starts_with('/') || rest.contains("..") {
                    return Err(format!(
                        "OCI reference {reference:?} must name a registry host and a repository"
                    ));
                }
                self.check_url(hub_namespace, "OCI reference", reference)
            }
            Source::Git(source) => {
                plain()?;
                self.check_git(hub_namespace, source)
            }
        }
    }

    /// The rules every mode keeps for a Git chart (see [`git::check`]).
    fn check_git(&self, hub_namespace: &str, source: &GitSource) -> Result<(), String> {
        let governing = self.governing_specs(hub_namespace);
        git::check(&governing, hub_namespace, source.into())
    }

    /// Whether the Git values file `path` (rendered for the cluster) of `file` may be read for a
    /// Controller of `hub_namespace`, and with whose credentials: the URL rules of every mode,
    /// then, enforcing, a governing policy's Git entry holding the repository, the path and the
    /// ref (as for a Git chart); a refusal says which rule and which policies.
    pub(crate) fn values_file(
        &self,
        hub_namespace: &str,
        file: &crate::api::crd::GitValuesFile,
        path: &str,
    ) -> Result<(Credentials, Trust), String> {
        let source = git::Source {
            url: &file.git.url,
            path,
            reference: &file.git.reference,
        };
        let governing = self.governing_specs(hub_namespace);
        git::admit(
            &governing,
            hub_namespace,
            self.mode == Mode::Enforce,
            source,
        )?;
        let chart = Chart {
            chart_name: "values".into(),
            git: Some(GitSource {
                url: file.git.url.clone(),
                reference: file.git.reference.clone(),
                path: path.to_owned(),
                interval: None,
            }),
            ..Chart::default()
        };
        Ok((
            self.credentials(hub_namespace, &chart)?,
            self.trust(hub_namespace, &chart),
        ))
    }

    /// The URL rules of [`Admission::check_source`], on the URL's normal form: `http`, `https`
    /// (`oci` for an OCI reference), no credentials, query, fragment or encoded separator; plain
    /// http and hosts that lead back into the hub (loopback, link-local, metadata) only under a
    /// prefix a governing policy lists.
    fn check_url(&self, hub_namespace: &str, what: &str, text: &str) -> Result<(), String> {
        let shown = redact(text);
        let url =
            SourceUrl::parse(text).map_err(|refused| format!("{what} {shown:?} {refused}"))?;
        let named = if url.as_str() == shown {
            format!("{what} {shown:?}")
        } else {
            format!("{what} {shown:?} (normalised: {url})")
        };
        let listed = || {
            self.governing(hub_namespace)
                .iter()
                .flat_map(|p| prefixes(&p.spec))
                .any(|p| p.holds(&url))
        };
        if let Some(why) = url.internal()
            && !listed()
        {
            return Err(format!(
                "{named}: its host is {why}, which the hub does not fetch from unless a TenancyPolicy governing hub namespace {hub_namespace} lists its prefix in chartSources"
            ));
        }
        if url.scheme() == "http" && !listed() {
            return Err(format!(
                "{named} is plain http and under no chartSources prefix of a TenancyPolicy governing hub namespace {hub_namespace}: use https, or have such a policy list its prefix"
            ));
        }
        Ok(())
    }

    /// Whether a policy's `chartSources` allow a chart (compared in normal form; a prefix's
    /// scheme is its own, so `https://` prefixes hold repositories and `oci://` ones references).
    pub(super) fn source_allowed(policy: &TenancyPolicySpec, chart: &Chart) -> bool {
        match source_of(chart) {
            Source::ChartHome => policy.chart_sources.iter().any(|s| s == CHART_HOME_SOURCE),
            Source::Repository(url) | Source::Oci(url) => {
                SourceUrl::parse(url).is_ok_and(|url| prefixes(policy).any(|p| p.holds(&url)))
            }
            Source::Git(source) => git::rule(policy, source.into()).is_none(),
        }
    }

    /// Whether the hub may fetch a chart for a `Controller` of `hub_namespace` at all (the source
    /// rules hold and, when enforcing, some governing policy lists the source), and where every
    /// fetch for it must stay: under the narrowest `chartSources` prefix of any policy that holds
    /// the source (the prefixes that hold one URL nest, so it lies within each of them, and it is
    /// the same for every hub namespace), else, in permissive mode, under the source itself;
    /// with the credentials [`Admission::credentials`] gives (none when it refuses the chart's
    /// `sourceSecretRef`: then nothing is fetched).
    pub(crate) fn fetch_scope(&self, hub_namespace: &str, chart: &Chart) -> Option<Scope> {
        let listed = || {
            self.governing(hub_namespace)
                .iter()
                .any(|p| Self::source_allowed(&p.spec, chart))
        };
        if self.check_source(hub_namespace, chart).is_err()
            || (self.mode == Mode::Enforce && !listed())
        {
            return None;
        }
        match source_of(chart) {
            Source::ChartHome => Some(Scope::ChartHome),
            Source::Repository(url) | Source::Oci(url) => {
                let url = SourceUrl::parse(url).ok()?;
                let narrowest = self
                    .policies
                    .iter()
                    .flat_map(|p| prefixes(&p.spec))
                    .filter(|p| p.holds(&url))
                    .max_by_key(|p| p.as_str().trim_end_matches('/').len());
                let credentials = self.credentials(hub_namespace, chart).ok()?;
                let trust = self.trust(hub_namespace, chart);
                Some(Scope::Under(narrowest.unwrap_or(url), credentials, trust))
            }
            // The fetcher reaches the repository alone: its scope is the repository's name.
            Source::Git(git) => {
                let (name, _) = SourceUrl::git(&git.url).ok()?;
                let credentials = self.credentials(hub_namespace, chart).ok()?;
                let trust = self.trust(hub_namespace, chart);
                Some(Scope::Under(name, credentials, trust))
            }
        }
    }
}

/// A chart's source in words: `chart-home`, the repository URL or the OCI reference.
pub(crate) fn describe_source(chart: &Chart) -> String {
    match source_of(chart) {
        Source::ChartHome => CHART_HOME_SOURCE.to_owned(),
        Source::Repository(url) => url.to_owned(),
        Source::Oci(reference) => reference.to_owned(),
        Source::Git(git) => format!(
            "git {} path {} at {}",
            redact(&git.url),
            git.path,
            git.reference
                .kind()
                .map_or_else(|why| why.to_owned(), |r| r.to_string())
        ),
    }
}
