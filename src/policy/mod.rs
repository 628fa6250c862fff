//! Admission: which releases the tenancy policies allow, as whom Helm acts for them, and the chart-source rules every mode keeps (pure).

pub mod access;
mod chart_source;
pub(crate) mod git;
mod helm;
pub(crate) mod post_render;
mod reads;
pub(crate) mod source;
mod verdict;

use crate::{
    api::crd::Chart,
    api::policy::{Impersonation, TenancyPolicySpec},
    policy::access::{Credentials, Trust},
    policy::source::SourceUrl,
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

    /// The policies governing a hub namespace, as their names and specs.
    fn governing_specs(&self, hub_namespace: &str) -> Vec<access::Governing<'_>> {
        self.governing(hub_namespace)
            .into_iter()
            .map(|p| (p.name.as_str(), &p.spec))
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
    /// [`access::trust`]), and the tags its Git semver range may pick (see [`git::tags`]).
    pub(crate) fn trust(&self, hub_namespace: &str, chart: &Chart) -> Trust {
        let governing: Vec<access::Governing<'_>> = self
            .governing(hub_namespace)
            .into_iter()
            .map(|p| (p.name.as_str(), &p.spec))
            .collect();
        let mut trust = access::trust(&governing, chart);
        trust.tags = chart
            .git
            .as_ref()
            .and_then(|git| git::tags(&governing, git.into()));
        trust
    }
}

#[cfg(test)]
mod tests;
