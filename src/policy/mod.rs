//! Admission: which releases the tenancy policies allow, as whom Helm acts for them, and the chart-source rules every mode keeps (pure).

pub mod access;
pub(crate) mod git;
mod helm;
pub(crate) mod post_render;
mod reads;
pub(crate) mod source;

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    api::crd::{Chart, GitSource, HUB_CLUSTER},
    api::key::{ClusterName, ReleaseKey},
    api::policy::{Impersonation, TenancyPolicySpec},
    policy::access::{Credentials, Trust},
    policy::source::{SourceUrl, redact},
};

/// Namespaces matched by a policy only when it names them exactly, never by a pattern.
pub(crate) const PROTECTED_NAMESPACES: [&str; 3] =
    ["kube-system", "kube-public", "kube-node-lease"];

/// The word in `chartSources` that allows the operator's chart home.
pub(crate) const CHART_HOME_SOURCE: &str = "chart-home";

/// How the tenancy policies are applied (`run --tenancy-policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// A release no policy allows gets no Helm call and is reported `Forbidden`.
    #[default]
    Enforce,
    /// A release no policy allows is delivered anyway, and what enforcing would refuse is logged
    /// and published as a warning; the chart-source rules still hold.
    Permissive,
}

/// One policy, by name.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedPolicy {
    /// The policy's name.
    pub(crate) name: String,
    /// What it allows.
    pub(crate) spec: TenancyPolicySpec,
}

impl NamedPolicy {
    /// The policy `name` allowing what `spec` allows (for planning outside the operator: the
    /// benchmarks).
    pub fn new(name: impl Into<String>, spec: TenancyPolicySpec) -> Self {
        Self {
            name: name.into(),
            spec,
        }
    }
}

/// What may be read of a `valuesFrom` object before its content: see [`Admission::values_access`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValuesAccess {
    /// Its content: a rule allows it by name (or any object of its kind).
    Content,
    /// Its labels first, and its content only when they let a rule allow it.
    LabelsFirst,
}

/// Everything admission needs: the mode, the policies (in name order) and the namespaces no
/// pattern may match.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Admission {
    /// Enforce or permissive.
    pub mode: Mode,
    /// Every policy on the hub, sorted by name.
    pub policies: Vec<NamedPolicy>,
    /// The operator's own namespace, protected like `kube-system`.
    pub operator_namespace: String,
}

/// What admission says of one release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Deliver it, as this identity (the operator's own when None).
    Allowed {
        /// Whom Helm impersonates.
        identity: Option<Impersonation>,
        /// In permissive mode, what enforcing would refuse.
        warning: Option<String>,
    },
    /// No Helm call: the rule it breaks, and the policies that govern its hub namespace.
    Refused(String),
}

/// What admission says of an Alert's Secret before it is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AlertSecret {
    /// Allowed by its name: read it.
    Allowed,
    /// Allowed only if its labels match a rule: read its metadata, then ask again.
    ByLabels,
    /// Refused by name: nothing of it is read; the refusal says what to do.
    Refused(String),
}

/// Where the hub's fetches for one chart must stay (see [`Admission::fetch_scope`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Scope {
    /// A chart-home chart: nothing is fetched.
    ChartHome,
    /// Under this prefix: the repository's index, the archives it lists, every redirect; fetched
    /// with these credentials, its signatures checked by these rules.
    Under(SourceUrl, Credentials, Trust),
}

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

/// True when `pattern` (an exact name, `prefix*` or `*`) allows `namespace`; protected namespaces
/// are allowed only by their exact name.
pub(crate) fn namespace_allowed(pattern: &str, namespace: &str, protected: &[&str]) -> bool {
    if pattern == namespace {
        return true;
    }
    if protected.contains(&namespace) {
        return false;
    }
    pattern
        .strip_suffix('*')
        .is_some_and(|prefix| namespace.starts_with(prefix))
}

impl Admission {
    /// Admission that allows everything the chart-source rules allow, as the operator.
    pub fn permissive() -> Self {
        Self {
            mode: Mode::Permissive,
            ..Self::default()
        }
    }

    fn protected(&self) -> Vec<&str> {
        let mut out: Vec<&str> = PROTECTED_NAMESPACES.to_vec();
        if !self.operator_namespace.is_empty() {
            out.push(&self.operator_namespace);
        }
        out
    }

    /// The policies that govern a hub namespace, in name order.
    pub(crate) fn governing(&self, hub_namespace: &str) -> Vec<&NamedPolicy> {
        self.policies
            .iter()
            .filter(|p| p.spec.hub_namespaces.iter().any(|n| n == hub_namespace))
            .collect()
    }

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

    /// The policies governing a hub namespace, as their names and specs.
    fn governing_specs(&self, hub_namespace: &str) -> Vec<access::Governing<'_>> {
        self.governing(hub_namespace)
            .into_iter()
            .map(|p| (p.name.as_str(), &p.spec))
            .collect()
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
    fn source_allowed(policy: &TenancyPolicySpec, chart: &Chart) -> bool {
        match source_of(chart) {
            Source::ChartHome => policy.chart_sources.iter().any(|s| s == CHART_HOME_SOURCE),
            Source::Repository(url) | Source::Oci(url) => {
                SourceUrl::parse(url).is_ok_and(|url| prefixes(policy).any(|p| p.holds(&url)))
            }
            Source::Git(source) => git::rule(policy, source.into()).is_none(),
        }
    }

    /// Whether a policy allows a cluster: by name, or a member by its registration labels.
    fn cluster_allowed(
        policy: &TenancyPolicySpec,
        cluster: &ClusterName,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        if policy.clusters.iter().any(|c| c == cluster.as_str()) {
            return true;
        }
        cluster.as_str() != HUB_CLUSTER
            && policy.cluster_selector.as_ref().is_some_and(|s| {
                labels.is_some_and(|labels| {
                    s.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
                })
            })
    }

    /// The first rule of `policy` the release breaks, or None when the policy allows it.
    fn broken_rule(
        &self,
        policy: &TenancyPolicySpec,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
        chart: Option<&Chart>,
    ) -> Option<String> {
        if let Err(why) = policy.identity() {
            return Some(why.to_owned());
        }
        let cluster = &key.scope.cluster;
        if !Self::cluster_allowed(policy, cluster, labels) {
            return Some(if cluster.as_str() == HUB_CLUSTER {
                "the hub cluster is allowed only when named in clusters".into()
            } else {
                format!("cluster {cluster} is not allowed")
            });
        }
        let namespace = &key.scope.namespace;
        let protected = self.protected();
        if !policy
            .namespaces
            .iter()
            .any(|p| namespace_allowed(p, namespace, &protected))
        {
            return Some(if protected.contains(&namespace.as_str()) {
                format!("namespace {namespace} is protected and not named exactly")
            } else {
                format!("namespace {namespace} is not allowed")
            });
        }
        if let Some(source) = chart.and_then(|c| c.git.as_ref())
            && let Some(rule) = git::rule(policy, source.into())
        {
            return Some(rule);
        }
        if let Some(chart) = chart
            && !Self::source_allowed(policy, chart)
        {
            return Some(format!(
                "chart source {} is not in chartSources",
                describe_source(chart)
            ));
        }
        chart.and_then(|chart| helm::broken_rule(policy, chart))
    }

    /// Whether the post-render of an allowed release may change objects of the sensitive kinds:
    /// as the policy its identity comes from says (see [`Admission::admit`]); true where no
    /// policy allows it and the mode is permissive, which enforces nothing.
    pub(crate) fn post_render_sensitive_allowed(
        &self,
        hub_namespace: &str,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
        chart: &Chart,
    ) -> bool {
        let governing = self.governing(hub_namespace);
        let allowing = governing.iter().copied().filter(|p| {
            self.broken_rule(&p.spec, key, labels, Some(chart))
                .is_none()
        });
        match Self::chosen(allowing) {
            Some(policy) => policy
                .spec
                .helm
                .as_ref()
                .is_some_and(|h| h.allow_post_render_sensitive_kinds),
            None => self.mode == Mode::Permissive,
        }
    }

    /// What the policies say of one release of a `Controller` in `hub_namespace`: allowed (and as
    /// whom: the first allowing policy by name), or refused with the rules it breaks.
    pub(crate) fn admit(
        &self,
        hub_namespace: &str,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
        chart: &Chart,
    ) -> Verdict {
        if let Err(rule) = self.check_source(hub_namespace, chart) {
            return Verdict::Refused(rule);
        }
        if let Err(rule) = self.credentials(hub_namespace, chart) {
            return Verdict::Refused(rule);
        }
        let governing = self.governing(hub_namespace);
        if let Some(allowing) = Self::chosen(governing.iter().copied().filter(|p| {
            self.broken_rule(&p.spec, key, labels, Some(chart))
                .is_none()
        })) {
            return Verdict::Allowed {
                identity: allowing.spec.impersonate.clone(),
                warning: None,
            };
        }
        let why = if governing.is_empty() {
            format!(
                "no TenancyPolicy governs hub namespace {hub_namespace}: a platform admin must list it in a policy's hubNamespaces"
            )
        } else {
            let each: Vec<String> = governing
                .iter()
                .map(|p| {
                    let rule = self
                        .broken_rule(&p.spec, key, labels, Some(chart))
                        .unwrap_or_default();
                    format!("TenancyPolicy {}: {rule}", p.name)
                })
                .collect();
            format!(
                "not allowed by the policies governing hub namespace {hub_namespace} ({})",
                each.join("; ")
            )
        };
        match self.mode {
            Mode::Enforce => Verdict::Refused(why),
            Mode::Permissive => Verdict::Allowed {
                identity: None,
                warning: Some(format!(
                    "would be refused under --tenancy-policy enforce: {why}"
                )),
            },
        }
    }

    /// Whether a Controller of `hub_namespace` may take over the existing release `key` that
    /// tenancy-hub does not own (its chart entry sets `adopt`): the policy whose identity acts for
    /// it (see [`Self::chosen`]) must set `allowAdoption`. In every mode: adoption is never taken
    /// with the operator's own rights for want of a policy. Err says why not and what to do.
    pub(crate) fn adoption(
        &self,
        hub_namespace: &str,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
        chart: &Chart,
    ) -> Result<(), String> {
        let governing = self.governing(hub_namespace);
        let acting = Self::chosen(governing.iter().copied().filter(|p| {
            self.broken_rule(&p.spec, key, labels, Some(chart))
                .is_none()
        }));
        match acting {
            Some(p) if p.spec.allow_adoption => Ok(()),
            Some(p) => Err(format!(
                "TenancyPolicy {}, which allows this release, does not set allowAdoption: a platform admin must allow adoption there to take over a release tenancy-hub does not own",
                p.name
            )),
            None => Err(format!(
                "no TenancyPolicy governing hub namespace {hub_namespace} allows this release: adoption needs one that does and sets allowAdoption"
            )),
        }
    }

    /// The policy whose identity Helm acts as, of those allowing a release: impersonating
    /// policies before trusted ones (the narrower rights win), then the first by name. One rule
    /// for every action, so the identity never depends on which policy the store lists first.
    fn chosen<'a>(allowing: impl Iterator<Item = &'a NamedPolicy>) -> Option<&'a NamedPolicy> {
        allowing.min_by(|a, b| (a.spec.trusted, &a.name).cmp(&(b.spec.trusted, &b.name)))
    }

    /// Whom Helm acts as to uninstall a release: the identity of a governing policy that allows
    /// its cluster and namespace now, chosen by the same rule as for delivery. When none does,
    /// nothing may run (`Err`, the reason): the release is reported and left in place. In
    /// permissive mode such a release is removed with the operator's credentials, as it was
    /// delivered.
    pub(crate) fn identity_for_removal(
        &self,
        hub_namespace: &str,
        key: &ReleaseKey,
        labels: Option<&BTreeMap<String, String>>,
    ) -> Result<Option<Impersonation>, String> {
        let governing = self.governing(hub_namespace);
        if let Some(p) = Self::chosen(
            governing
                .iter()
                .copied()
                .filter(|p| self.broken_rule(&p.spec, key, labels, None).is_none()),
        ) {
            return Ok(p.spec.impersonate.clone());
        }
        match self.mode {
            Mode::Permissive => Ok(None),
            Mode::Enforce => Err(format!(
                "removing it is not allowed by the policies governing hub namespace {hub_namespace} ({}): nothing runs with the operator's own rights on a tenant's behalf; it is left in place until a policy allows its cluster and namespace again",
                if governing.is_empty() {
                    "none governs it".to_owned()
                } else {
                    governing
                        .iter()
                        .map(|p| {
                            format!(
                                "TenancyPolicy {}: {}",
                                p.name,
                                self.broken_rule(&p.spec, key, labels, None)
                                    .unwrap_or_default()
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                }
            )),
        }
    }

    /// Hub namespaces whose governing policies disagree on the identity Helm acts as (trusted
    /// against impersonated, or different users), each with a sentence for the log: which
    /// identity a release both allow gets, by the rule of [`Self::chosen`].
    pub(crate) fn disagreements(&self) -> Vec<String> {
        let namespaces: BTreeSet<&str> = self
            .policies
            .iter()
            .flat_map(|p| p.spec.hub_namespaces.iter().map(String::as_str))
            .collect();
        namespaces
            .into_iter()
            .filter_map(|ns| {
                let governing = self.governing(ns);
                let identities: BTreeSet<String> =
                    governing.iter().map(|p| describe_identity(&p.spec)).collect();
                (identities.len() > 1).then(|| {
                    let each: Vec<String> = governing
                        .iter()
                        .map(|p| format!("{} ({})", p.name, describe_identity(&p.spec)))
                        .collect();
                    format!(
                        "the TenancyPolicies governing hub namespace {ns} disagree on the identity Helm acts as: {}; a release several of them allow goes as an impersonating one before a trusted one, then the first by name",
                        each.join(", ")
                    )
                })
            })
            .collect()
    }

    /// Whose credentials the hub fetches `chart` with for a Controller of `hub_namespace` (see
    /// [`access::credentials`]); a Secret the chart names that no rule allows is refused.
    pub(crate) fn credentials(
        &self,
        hub_namespace: &str,
        chart: &Chart,
    ) -> Result<Credentials, String> {
        let governing: Vec<access::Governing<'_>> = self
            .governing(hub_namespace)
            .into_iter()
            .map(|p| (p.name.as_str(), &p.spec))
            .collect();
        access::credentials(&governing, hub_namespace, chart)
    }

    /// The signatures a chart of a `Controller` of `hub_namespace` must carry (see
    /// [`access::trust`]).
    pub(crate) fn trust(&self, hub_namespace: &str, chart: &Chart) -> Trust {
        let governing: Vec<access::Governing<'_>> = self
            .governing(hub_namespace)
            .into_iter()
            .map(|p| (p.name.as_str(), &p.spec))
            .collect();
        access::trust(&governing, chart)
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

/// A policy's identity in words: `trusted`, `as user U`, or why it names none.
pub(crate) fn describe_identity(policy: &TenancyPolicySpec) -> String {
    match policy.identity() {
        Ok(None) => "trusted: the operator's credentials".to_owned(),
        Ok(Some(who)) => format!("as user {}", who.user),
        Err(_) => "no identity".to_owned(),
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

#[cfg(test)]
mod tests;
