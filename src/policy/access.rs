//! Which credentials the hub fetches a chart with: the `sources` entry of the longest prefix of the policies governing its Controller's hub namespace, or a Secret of that namespace a `tenantSecrets` rule lets it name (pure).
//!
//! The answer is also part of every key under which the chart cache keeps what it fetched
//! (indexes, resolutions, pins), so a chart fetched with one set of credentials is never served
//! to a Controller that has no right to them.

use std::collections::BTreeMap;

use crate::{
    api::crd::Chart,
    api::policy::{SourceAccess, SourceVerify, TenancyPolicySpec},
    policy::source::SourceUrl,
};

/// A policy governing a hub namespace: its name and what it says.
pub(crate) type Governing<'a> = (&'a str, &'a TenancyPolicySpec);

/// Whose credentials the hub fetches a chart with (never the credentials themselves).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Credentials {
    /// None: the source is fetched anonymously, trusting the system's roots.
    #[default]
    None,
    /// A Secret of the operator's own namespace a policy names for a source prefix.
    Platform {
        /// The Secret's name.
        secret: String,
        /// The policy naming it.
        policy: String,
        /// The `sources` prefix it is named for, in normal form.
        prefix: String,
    },
    /// A Secret of the Controller's own hub namespace a `tenantSecrets` rule allows for a source.
    Tenant {
        /// The hub namespace.
        namespace: String,
        /// The Secret's name.
        secret: String,
        /// The policy allowing it.
        policy: String,
        /// The `sources` prefix it is allowed for, in normal form.
        prefix: String,
        /// When only rules on labels allow it, the label sets of which it must carry one;
        /// empty when a rule allows it by name.
        labels: Vec<BTreeMap<String, String>>,
    },
}

impl Credentials {
    /// The policy and source prefix the credentials come with, for messages.
    pub(crate) fn origin(&self) -> Option<(&str, &str)> {
        match self {
            Self::None => None,
            Self::Platform { policy, prefix, .. } | Self::Tenant { policy, prefix, .. } => {
                Some((policy, prefix))
            }
        }
    }

    /// The Secret in words (`Secret tenancy-hub/registry`), or None.
    pub(crate) fn secret(&self, operator_namespace: &str) -> Option<String> {
        match self {
            Self::None => None,
            Self::Platform { secret, .. } => Some(format!("Secret {operator_namespace}/{secret}")),
            Self::Tenant {
                namespace, secret, ..
            } => Some(format!("Secret {namespace}/{secret}")),
        }
    }
}

/// `none`, `platform:<secret>` or `tenant:<hub namespace>/<secret>`.
impl std::fmt::Display for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Platform { secret, .. } => write!(f, "platform:{secret}"),
            Self::Tenant {
                namespace, secret, ..
            } => write!(f, "tenant:{namespace}/{secret}"),
        }
    }
}

/// One signature rule a chart must pass: a `verify` of a `sources` entry holding its source,
/// with the policy and prefix naming it (never the trust material, which is read at each check).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TrustRule {
    /// The policy naming it.
    pub policy: String,
    /// The `sources` prefix it is named for, in normal form.
    pub prefix: String,
    /// What to check.
    pub verify: SourceVerify,
}

impl TrustRule {
    /// The rule in words, for messages: `cosign (TenancyPolicy platform, source oci://…/)`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{} (TenancyPolicy {}, source {})",
            self.verify.provider.as_str(),
            self.policy,
            self.prefix
        )
    }
}

/// What the policies require of what the hub fetches for a chart: the signature rules it must
/// pass, and for a Git semver range the tags the range may pick. Part of every cache key, so
/// what was fetched under one set of rules is never served under another.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Trust {
    /// The signature rules, in order: empty when none is required.
    pub rules: Vec<TrustRule>,
    /// A Git chart or values file at a `semver` range only: the tag patterns (`v1.*`, `*`) of
    /// the Git entries holding its repository and path, the only tags the range is resolved
    /// among; None when no such entry holds it (permissive mode) or the ref is no range.
    pub tags: Option<Vec<String>>,
}

impl Trust {
    /// Whether no signature is required (tag patterns are no signature rule).
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Every signature rule for `chart`: the `verify` of every `sources` entry of every `governing`
/// policy whose prefix holds its source. All apply, so no policy, prefix or Controller setting
/// relaxes another's (a tenant writes none of them). No tag patterns: admission adds those
/// from the Git rules.
pub(crate) fn trust(governing: &[Governing<'_>], chart: &Chart) -> Trust {
    let Some(url) = source_url(chart) else {
        return Trust::default();
    };
    let mut rules: Vec<TrustRule> = holders(governing, &url)
        .into_iter()
        .filter_map(|h| {
            Some(TrustRule {
                policy: h.policy.to_owned(),
                prefix: h.prefix.to_string(),
                verify: h.entry.verify.clone()?,
            })
        })
        .collect();
    rules.sort();
    rules.dedup();
    Trust { rules, tags: None }
}

/// One `sources` entry holding a chart's source, with its policy and prefix in normal form.
struct Holder<'a> {
    policy: &'a str,
    entry: &'a SourceAccess,
    prefix: SourceUrl,
}

impl Holder<'_> {
    /// Longer prefixes first, then policies by name.
    fn rank(&self) -> (std::cmp::Reverse<usize>, &str) {
        (
            std::cmp::Reverse(self.prefix.as_str().trim_end_matches('/').len()),
            self.policy,
        )
    }
}

/// The URL of a chart's repository, OCI reference or Git repository (its name, without a
/// trailing `.git`), in normal form, and whether it is Git; None for a chart-home chart or one
/// that does not parse (the source rules refuse it before).
fn source_url(chart: &Chart) -> Option<(SourceUrl, bool)> {
    if let Some(git) = &chart.git {
        return Some((SourceUrl::git(&git.url).ok()?.0, true));
    }
    let text = match chart.chart_name.starts_with("oci://") {
        true => &chart.chart_name,
        false => chart.repo.as_ref()?,
    };
    Some((SourceUrl::parse(text).ok()?, false))
}

/// The `sources` entries of the `governing` policies whose prefix holds `url` (Git entries for
/// a Git repository, the others otherwise), the one that applies first (longest prefix, then
/// policy name).
fn holders<'a>(governing: &[Governing<'a>], (url, git): &(SourceUrl, bool)) -> Vec<Holder<'a>> {
    let mut out: Vec<Holder<'a>> = governing
        .iter()
        .flat_map(|&(policy, spec)| {
            spec.sources.iter().filter_map(move |entry| {
                if entry.git.is_some() != *git {
                    return None;
                }
                let prefix = match git {
                    true => SourceUrl::git(&entry.url).ok()?.0,
                    false => SourceUrl::parse(&entry.url).ok()?,
                };
                prefix.holds(url).then_some(Holder {
                    policy,
                    entry,
                    prefix,
                })
            })
        })
        .collect();
    out.sort_by(|a, b| a.rank().cmp(&b.rank()));
    out
}

/// Whose credentials the hub fetches `chart` with for a Controller of `hub_namespace`: the
/// Secret the chart names (`sourceSecretRef`) when a `tenantSecrets` rule of an entry holding
/// its source allows it (by name, or by labels checked when it is read); else the
/// `secretRef` of the entry with the longest prefix holding it (ties: the first policy by
/// name); else none. A Secret the chart names that no rule allows is refused, in every mode,
/// with the rule to add; so is one named for a chart-home chart.
pub(crate) fn credentials(
    governing: &[Governing<'_>],
    hub_namespace: &str,
    chart: &Chart,
) -> Result<Credentials, String> {
    let Some(url) = source_url(chart) else {
        return match &chart.source_secret_ref {
            Some(named) => Err(format!(
                "chart {} names sourceSecretRef {}, but it comes from the chart home, which takes no credentials: remove sourceSecretRef",
                chart.chart_name, named.name
            )),
            None => Ok(Credentials::None),
        };
    };
    let holders = holders(governing, &url);
    let Some(named) = &chart.source_secret_ref else {
        let first = holders.first().filter(|h| h.entry.secret_ref.is_some());
        if let Some(h) = first {
            plain_http(
                h,
                &url,
                &h.entry.secret_ref.as_ref().expect("filtered").name,
            )?;
        }
        return Ok(first
            .and_then(|h| {
                h.entry.secret_ref.as_ref().map(|s| Credentials::Platform {
                    secret: s.name.clone(),
                    policy: h.policy.to_owned(),
                    prefix: h.prefix.to_string(),
                })
            })
            .unwrap_or_default());
    };
    let tenant = |h: &Holder<'_>, labels| Credentials::Tenant {
        namespace: hub_namespace.to_owned(),
        secret: named.name.clone(),
        policy: h.policy.to_owned(),
        prefix: h.prefix.to_string(),
        labels,
    };
    if let Some(h) = holders.iter().find(|h| {
        h.entry
            .tenant_secrets
            .iter()
            .any(|r| r.allows_by_name(&named.name))
    }) {
        plain_http(h, &url, &named.name)?;
        return Ok(tenant(h, Vec::new()));
    }
    let by_labels = |h: &Holder<'_>| -> Vec<BTreeMap<String, String>> {
        h.entry
            .tenant_secrets
            .iter()
            .filter(|r| !r.match_labels.is_empty())
            .map(|r| r.match_labels.clone())
            .collect()
    };
    if let Some(h) = holders.iter().find(|h| !by_labels(h).is_empty()) {
        plain_http(h, &url, &named.name)?;
        let mut labels: Vec<_> = holders.iter().flat_map(by_labels).collect();
        labels.sort();
        labels.dedup();
        return Ok(tenant(h, labels));
    }
    Err(tenant_secret_refusal(
        governing,
        hub_namespace,
        chart,
        &named.name,
        &url.0,
    ))
}

/// Refuses to send the credentials of Secret `secret`, given by the entry `h`, to a plain
/// `http://` Git repository unless that entry itself sets `insecure` (labs only).
fn plain_http(h: &Holder<'_>, (url, git): &(SourceUrl, bool), secret: &str) -> Result<(), String> {
    let insecure = h.entry.git.as_ref().is_some_and(|g| g.insecure);
    match *git && url.scheme() == "http" && !insecure {
        true => Err(format!(
            "the credentials of Secret {secret} (Git sources entry {} of TenancyPolicy {}) would go to {url} over plain http, which that entry does not allow: serve the repository over https or ssh, or (for a lab only) set insecure: true on that entry",
            h.prefix, h.policy
        )),
        false => Ok(()),
    }
}

/// Why a chart may not name Secret `secret` for its source `url`, and the rule that would
/// allow it; the same whether or not the Secret exists.
fn tenant_secret_refusal(
    governing: &[Governing<'_>],
    hub_namespace: &str,
    chart: &Chart,
    secret: &str,
    url: &SourceUrl,
) -> String {
    let head = format!(
        "chart {} names sourceSecretRef {secret}, which no tenantSecrets rule allows for its source {url}",
        chart.chart_name
    );
    match governing.first() {
        None => format!(
            "{head}: no TenancyPolicy governs hub namespace {hub_namespace}; a platform admin must list it in a policy's hubNamespaces"
        ),
        Some(first) => {
            let names: Vec<&str> = governing.iter().map(|(name, _)| *name).collect();
            format!(
                "{head} (policies governing hub namespace {hub_namespace}: {}); a platform admin adds {{names: [{secret}]}} to the tenantSecrets of a sources entry whose url holds {url} (in TenancyPolicy {}, for example), or the chart drops sourceSecretRef to use the platform's credentials",
                names.join(", "),
                first.0
            )
        }
    }
}

#[cfg(test)]
mod tests;
