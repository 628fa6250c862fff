//! The judgements of `doctor`, pure: what each check's observations mean, as one finding with its fix.

use std::{collections::BTreeMap, path::Path};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde_json::Value;

use crate::{api::policy::Impersonation, cli::args::ExecutorKind, helm::protocol::Hello};

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    /// As it should be.
    Pass,
    /// Works, but may not do what is meant; does not fail the run.
    Warn,
    /// Delivery fails, or fails for some, until it is fixed.
    Fail,
    /// Not checked, because a check it depends on failed.
    Skip,
}

/// One line of the report: what was checked, on what, how it came out, and what to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Finding {
    /// The check: `hub`, `crd`, `hub-rbac`, `hub-rbac-width`, `clusters-file`, `member`, `member-rbac`, `helm`,
    /// `executor`, `chart-home` or `policy`.
    pub(crate) check: &'static str,
    /// What it was checked on: a cluster, a CRD, a path, a hub namespace.
    pub(crate) subject: String,
    /// How it came out.
    pub(crate) verdict: Verdict,
    /// What was found.
    pub(crate) detail: String,
    /// What to do; only when the verdict is not `pass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fix: Option<String>,
}

impl Finding {
    /// A check that passed.
    pub(crate) fn pass(check: &'static str, subject: impl Into<String>, detail: String) -> Self {
        Self::new(check, subject, Verdict::Pass, detail, None)
    }

    /// A check that did not pass, with its fix.
    pub(crate) fn not_passed(
        check: &'static str,
        subject: impl Into<String>,
        verdict: Verdict,
        detail: String,
        fix: String,
    ) -> Self {
        Self::new(check, subject, verdict, detail, Some(fix))
    }

    fn new(
        check: &'static str,
        subject: impl Into<String>,
        verdict: Verdict,
        detail: String,
        fix: Option<String>,
    ) -> Self {
        Self {
            check,
            subject: subject.into(),
            verdict,
            detail,
            fix,
        }
    }
}

/// The whole report, as `-o json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Report {
    /// Whether no check failed (warnings and skips aside).
    pub(crate) ok: bool,
    /// Every check, in the order they were made.
    pub(crate) checks: Vec<Finding>,
}

impl Report {
    /// The report of `checks`.
    pub(crate) fn of(checks: Vec<Finding>) -> Self {
        Self {
            ok: checks.iter().all(|c| c.verdict != Verdict::Fail),
            checks,
        }
    }
}

/// How to install or refresh the CRDs.
const APPLY_CRDS: &str = "tenancy-hub crd | kubectl apply --server-side -f -";

/// Fields the API server fills in a CRD's spec when they are left out.
const SERVER_DEFAULTS: [&[&str]; 3] = [
    &["conversion"],
    &["names", "listKind"],
    &["names", "singular"],
];

/// Compares a CRD on the hub with the one this binary generates: `live` is None when the hub
/// has none of that name, Err when it could not be read.
pub(crate) fn crd(
    generated: &CustomResourceDefinition,
    live: Result<Option<&CustomResourceDefinition>, (bool, String)>,
) -> Finding {
    let name = generated.metadata.name.clone().unwrap_or_default();
    let fail = |detail: String| {
        Finding::not_passed("crd", &name, Verdict::Fail, detail, APPLY_CRDS.into())
    };
    match live {
        Ok(None) => fail("not installed on the hub".into()),
        Ok(Some(live)) => match spec_difference(generated, live) {
            None => Finding::pass("crd", &name, "installed and current".into()),
            Some(path) => fail(format!(
                "differs from this binary's at spec.{path}: installed by another version"
            )),
        },
        Err((true, _)) => Finding::not_passed(
            "crd",
            &name,
            Verdict::Warn,
            "this identity may not read CustomResourceDefinitions, so whether it is installed \
             and current is unknown (the operator itself needs no such right)"
                .into(),
            format!(
                "run doctor as a hub admin to compare them, or apply them anyway: {APPLY_CRDS}"
            ),
        ),
        Err((false, error)) => fail(format!("cannot be read: {error}")),
    }
}

/// The first path where the live CRD's spec differs from the generated one, fields the API
/// server defaults aside; None when they are the same.
pub(crate) fn spec_difference(
    generated: &CustomResourceDefinition,
    live: &CustomResourceDefinition,
) -> Option<String> {
    let want = serde_json::to_value(&generated.spec).unwrap_or_default();
    let mut have = serde_json::to_value(&live.spec).unwrap_or_default();
    for path in SERVER_DEFAULTS {
        if pointer(&want, path).is_none() {
            remove(&mut have, path);
        }
    }
    first_difference(&want, &have, String::new())
}

fn pointer<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

fn remove(value: &mut Value, path: &[&str]) {
    let (last, parents) = path.split_last().expect("a path has a key");
    let mut at = value;
    for key in parents {
        match at.get_mut(key) {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Some(map) = at.as_object_mut() {
        map.remove(*last);
    }
}

fn first_difference(want: &Value, have: &Value, at: String) -> Option<String> {
    let join = |key: &str| {
        if at.is_empty() {
            key.to_owned()
        } else {
            format!("{at}.{key}")
        }
    };
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            let keys: std::collections::BTreeSet<&String> = w.keys().chain(h.keys()).collect();
            keys.into_iter().find_map(|k| match (w.get(k), h.get(k)) {
                (Some(a), Some(b)) => first_difference(a, b, join(k)),
                _ => Some(join(k)),
            })
        }
        (Value::Array(w), Value::Array(h)) if w.len() == h.len() => w
            .iter()
            .zip(h)
            .enumerate()
            .find_map(|(i, (a, b))| first_difference(a, b, format!("{at}[{i}]"))),
        _ => (want != have).then_some(at),
    }
}

/// One right to ask the API server about (a SelfSubjectAccessReview's resource attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    /// API group; empty for the core group.
    pub(crate) group: String,
    /// Resource, plural.
    pub(crate) resource: String,
    /// Subresource (`status`), if any.
    pub(crate) subresource: Option<String>,
    /// The verb.
    pub(crate) verb: String,
    /// One object's name, when the rule is limited to names.
    pub(crate) name: Option<String>,
    /// Namespace; None: every namespace, or a cluster-scoped resource.
    pub(crate) namespace: Option<String>,
    /// Whether lacking it fails the check, rather than warns.
    pub(crate) required: bool,
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(sub) = &self.subresource {
            write!(f, "/{sub}")?;
        }
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        Ok(())
    }
}

/// The RBAC the operator is deployed with: its ClusterRoles and Role, read here so the rights
/// doctor asks about are the ones deploy/ grants, never a second list.
const DEPLOYED_RBAC: &str = include_str!("../../../deploy/rbac.yaml");

/// The rules of the ClusterRole or Role `name` of `kind` in `rbac` (a YAML stream), with the
/// Role's namespace.
fn rules_of(
    rbac: &str,
    kind: &str,
    name: &str,
) -> Vec<(k8s_openapi::api::rbac::v1::PolicyRule, Option<String>)> {
    use serde::Deserialize as _;
    serde_yaml::Deserializer::from_str(rbac)
        .filter_map(|doc| serde_yaml::Value::deserialize(doc).ok())
        .filter(|doc| {
            doc["kind"].as_str() == Some(kind) && doc["metadata"]["name"].as_str() == Some(name)
        })
        .flat_map(|doc| {
            let namespace = doc["metadata"]["namespace"].as_str().map(str::to_owned);
            let rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
                serde_yaml::from_value(doc["rules"].clone()).unwrap_or_default();
            rules.into_iter().map(move |r| (r, namespace.clone()))
        })
        .collect()
}

/// Each verb, resource and name of `rules`, in `namespace` (None: cluster-wide).
fn accesses(
    rules: &[(k8s_openapi::api::rbac::v1::PolicyRule, Option<String>)],
    namespace: impl Fn(&Option<String>) -> Option<String>,
    required: impl Fn(&str, &str) -> bool,
) -> Vec<Access> {
    let mut out = Vec::new();
    for (rule, ns) in rules {
        let groups = rule.api_groups.clone().unwrap_or_default();
        let names: Vec<Option<String>> = match &rule.resource_names {
            Some(names) if !names.is_empty() => names.iter().cloned().map(Some).collect(),
            _ => vec![None],
        };
        for group in &groups {
            for full in rule.resources.iter().flatten() {
                let (resource, subresource) = match full.split_once('/') {
                    Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
                    None => (full.clone(), None),
                };
                for verb in &rule.verbs {
                    for name in &names {
                        out.push(Access {
                            group: group.clone(),
                            resource: resource.clone(),
                            subresource: subresource.clone(),
                            verb: verb.clone(),
                            name: name.clone(),
                            namespace: namespace(ns),
                            required: required(verb, &resource),
                        });
                    }
                }
            }
        }
    }
    out
}

/// The identities the TenancyPolicies impersonate: what the operator's `impersonate` rights on
/// the hub should name, and no more.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Identities {
    /// Users, ServiceAccounts (`system:serviceaccount:NS:NAME`) included.
    pub(crate) users: std::collections::BTreeSet<String>,
    /// Groups.
    pub(crate) groups: std::collections::BTreeSet<String>,
}

impl Identities {
    /// The identities of `policies`' `impersonate`.
    pub(crate) fn of<'a>(policies: impl IntoIterator<Item = &'a Impersonation>) -> Self {
        let mut out = Self::default();
        for who in policies {
            out.users.insert(who.user.clone());
            out.groups.extend(who.groups.iter().cloned());
        }
        out
    }

    /// The `impersonate` accesses Kubernetes checks for these identities: a ServiceAccount user
    /// as `serviceaccounts` of its name in its namespace, any other user as `users`, each group
    /// as `groups`.
    fn accesses(&self) -> Vec<Access> {
        let one = |resource: &str, name: &str, namespace: Option<&str>| Access {
            group: String::new(),
            resource: resource.into(),
            subresource: None,
            verb: "impersonate".into(),
            name: Some(name.into()),
            namespace: namespace.map(str::to_owned),
            required: true,
        };
        let users = self.users.iter().map(|user| {
            match user
                .strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.split_once(':'))
            {
                Some((namespace, name)) => one("serviceaccounts", name, Some(namespace)),
                None => one("users", user, None),
            }
        });
        let groups = self.groups.iter().map(|group| one("groups", group, None));
        users.chain(groups).collect()
    }
}

/// What the operator's identity on the hub must be allowed, from deploy/rbac.yaml: the rules
/// of ClusterRole tenancy-hub cluster-wide, and those of Role tenancy-hub in `lease_namespace`,
/// with `leases` (the Lease names, None for any name; none without leader election) in place of
/// the Role's Lease name. The `impersonate` rules name the identities the policies name
/// (`identities`), whatever names the file's example gives.
pub(crate) fn hub_rights(
    lease_namespace: &str,
    leases: &[Option<String>],
    identities: &Identities,
) -> Vec<Access> {
    let cluster = rules_of(DEPLOYED_RBAC, "ClusterRole", "tenancy-hub");
    let mut out: Vec<Access> = accesses(&cluster, |_| None, |_, _| true)
        .into_iter()
        .filter(|a| a.verb != "impersonate")
        .collect();
    out.extend(identities.accesses());
    let role = rules_of(DEPLOYED_RBAC, "Role", "tenancy-hub");
    for access in accesses(&role, |_| Some(lease_namespace.to_owned()), |_, _| true) {
        match (access.resource.as_str(), &access.name) {
            ("leases", Some(_)) => out.extend(leases.iter().map(|lease| Access {
                name: lease.clone(),
                ..access.clone()
            })),
            ("leases", None) if leases.is_empty() => {}
            _ => out.push(access),
        }
    }
    out
}

/// The kinds the operator watches in every member (observe/releases.rs, observe/watch.rs), as
/// named in ClusterRole tenancy-hub, whose verbs are taken from there.
const WATCHED_IN_MEMBERS: [&str; 5] = [
    "secrets",
    "pods",
    "deployments",
    "statefulsets",
    "daemonsets",
];

/// What the identity of a member's registration entry must be allowed there (deploy/rbac.yaml's
/// note on members): the watches of ClusterRole tenancy-hub and creating namespaces, required;
/// the rules of ClusterRole tenancy-hub-tenant cluster-wide, wanted (a warning without them:
/// granting them per tenant namespace, or impersonating the tenant, also works).
pub(crate) fn member_rights() -> Vec<Access> {
    let cluster = rules_of(DEPLOYED_RBAC, "ClusterRole", "tenancy-hub");
    let mut out: Vec<Access> = accesses(&cluster, |_| None, |_, _| true)
        .into_iter()
        .filter(|a| {
            (WATCHED_IN_MEMBERS.contains(&a.resource.as_str()) && a.name.is_none())
                || (a.resource == "namespaces" && a.verb == "create")
        })
        .collect();
    let tenant = rules_of(DEPLOYED_RBAC, "ClusterRole", "tenancy-hub-tenant");
    out.extend(accesses(&tenant, |_| None, |_, _| false));
    out
}

/// Judges the answers of the access reviews of `subject`: missing required rights fail, missing
/// wanted ones warn, saying `wanted_when` (when the wanted ones are needed).
pub(crate) fn rights(
    check: &'static str,
    subject: &str,
    answers: &[(Access, Result<bool, String>)],
    fix: &str,
    wanted_when: &str,
) -> Finding {
    let list = |required: bool| -> Vec<String> {
        answers
            .iter()
            .filter(|(a, allowed)| a.required == required && !matches!(allowed, Ok(true)))
            .map(|(a, allowed)| match allowed {
                Err(e) => format!("{a} (not asked: {e})"),
                _ => a.to_string(),
            })
            .collect()
    };
    let (missing, wanted) = (list(true), list(false));
    if !missing.is_empty() {
        return Finding::not_passed(
            check,
            subject,
            Verdict::Fail,
            format!("missing {}: {}", missing.len(), missing.join(", ")),
            fix.into(),
        );
    }
    if !wanted.is_empty() {
        return Finding::not_passed(
            check,
            subject,
            Verdict::Warn,
            format!("lacks {}, {wanted_when}", wanted.join(", ")),
            fix.into(),
        );
    }
    Finding::pass(check, subject, format!("all {} rights held", answers.len()))
}

/// Judges the long-lived Helm executor: how it is asked for (`kind`), where it was looked for
/// (`located`, None when not found), and what starting it said (None when not started).
pub(crate) fn executor(
    kind: ExecutorKind,
    located: Option<&Path>,
    hello: Option<Result<Hello, String>>,
) -> Finding {
    let subject = located.map_or_else(
        || crate::helm::sdk::BINARY.to_owned(),
        |p| p.display().to_string(),
    );
    let install = "put tenancy-hub-helm beside --helm or on PATH, or pass --helm-executor PATH (kind/executor.sh builds it)";
    match (kind, hello) {
        (ExecutorKind::Cli, _) => Finding::pass(
            "executor",
            "helm",
            "not used (--executor cli): one helm process per job".into(),
        ),
        (_, Some(Ok(hello))) => Finding::pass(
            "executor",
            subject,
            format!(
                "speaks protocol {} (Helm SDK {})",
                hello.protocol, hello.helm
            ),
        ),
        (_, Some(Err(error))) => {
            Finding::not_passed("executor", subject, Verdict::Fail, error, install.into())
        }
        (ExecutorKind::Auto, None) => Finding::not_passed(
            "executor",
            subject,
            Verdict::Warn,
            "not found: jobs run as helm processes, about five times dearer per release".into(),
            install.into(),
        ),
        (ExecutorKind::Sdk, None) => Finding::not_passed(
            "executor",
            subject,
            Verdict::Fail,
            "not found, and --executor sdk needs it".into(),
            format!("{install}; or pass --executor auto"),
        ),
    }
}

/// Judges the chart home: the charts in it (directories), or why it cannot be read.
pub(crate) fn chart_home(path: &Path, charts: Result<usize, String>) -> Finding {
    let subject = path.display().to_string();
    match charts {
        Ok(0) => Finding::not_passed(
            "chart-home",
            subject,
            Verdict::Warn,
            "readable, but holds no chart".into(),
            "put chart directories in it, unless every Controller names a repository or OCI chart"
                .into(),
        ),
        Ok(n) => Finding::pass("chart-home", subject, format!("readable, {n} charts")),
        Err(error) => Finding::not_passed(
            "chart-home",
            subject,
            Verdict::Fail,
            format!("cannot be read: {error}"),
            "pass --chart-home (or set CHART_HOME) to a readable directory of charts".into(),
        ),
    }
}

/// Judges, for each hub namespace holding Controllers (with how many), whether a TenancyPolicy
/// governs it (`policies`: name → its hubNamespaces). Under `permissive` nothing is refused, so
/// an ungoverned namespace warns; under `enforce` it fails.
pub(crate) fn policies(
    enforce: bool,
    controllers: &BTreeMap<String, usize>,
    policies: &BTreeMap<String, Vec<String>>,
) -> Vec<Finding> {
    if controllers.is_empty() {
        return vec![Finding::pass("policy", "hub", "no Controller yet".into())];
    }
    controllers
        .iter()
        .map(|(namespace, count)| {
            let governing: Vec<&str> = policies
                .iter()
                .filter(|(_, namespaces)| namespaces.contains(namespace))
                .map(|(name, _)| name.as_str())
                .collect();
            if !governing.is_empty() {
                return Finding::pass(
                    "policy",
                    namespace,
                    format!("{count} Controllers, governed by {}", governing.join(", ")),
                );
            }
            let (verdict, effect) = if enforce {
                (Verdict::Fail, "every release of theirs is Forbidden")
            } else {
                (Verdict::Warn, "delivered only because --tenancy-policy is permissive")
            };
            Finding::not_passed(
                "policy",
                namespace,
                verdict,
                format!("{count} Controllers and no TenancyPolicy governs the namespace: {effect}"),
                format!(
                    "apply a TenancyPolicy with hubNamespaces: [{namespace}] (config/admin-policy.yaml is an example)"
                ),
            )
        })
        .collect()
}
