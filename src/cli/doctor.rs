//! `tenancy-hub doctor`: checks what a new install gets wrong and prints one line per check with its fix; the looks at the hub, the members and the disk are here, their judgements in `judge`.

pub(crate) mod judge;
pub(crate) mod width;

use std::{collections::BTreeMap, path::Path, process::ExitCode, time::Duration};

use clap::Args;
use futures::StreamExt as _;
use k8s_openapi::{
    api::{
        authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
            SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
        },
        rbac::v1::RoleBinding,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, CustomResourceExt as _, ResourceExt as _,
    api::{ListParams, PostParams},
};

use crate::{
    api::{
        alert::Alert, crd::TenancyController, member_cluster::MemberCluster, policy::TenancyPolicy,
    },
    cli::{
        args::{ExecutorKind, PolicyMode, RunArgs},
        table::{self, Output},
    },
    clusters::registry::{self, ClusterEntry, ClusterRegistry, HubSource, RegistrationFile},
    helm::args::HelmOptions,
};
use judge::{Access, Finding, Report, Verdict};

/// How long one question to a cluster, or `helm version`, may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// Access reviews asked of one cluster at once.
const REVIEWS_AT_ONCE: usize = 8;

/// Options of `doctor`: `run`'s own, so the command line of a `run` is checked as it is, and the
/// output format.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The operator's options, as `run` takes them.
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub(crate) output: Output,
}

/// Runs every check and prints the report: exit 0 when none failed, 1 when one did; an error
/// (exit 2) when the hub's configuration cannot be loaded at all.
pub(crate) async fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let report = Report::of(examine(&args.run).await?);
    print!("{}", render(&report, args.output)?);
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Every finding: the hub's, the members', then this machine's.
async fn examine(args: &RunArgs) -> anyhow::Result<Vec<Finding>> {
    let hub_source = args.clusters.hub();
    let registry = ClusterRegistry::connect(&hub_source, &RegistrationFile::default()).await?;
    let hub = registry.iter().next().expect("a registry holds the hub");
    let mut findings = on_hub(args, hub).await;
    findings.extend(members(&hub_source, args.clusters.clusters.as_deref()).await);
    findings.push(helm(&args.helm).await);
    findings.push(executor(args).await);
    findings.push(judge::chart_home(
        &args.chart_home,
        charts_in(&args.chart_home),
    ));
    Ok(findings)
}

/// The hub's checks: reachable, the CRDs, the operator's rights, the policies.
async fn on_hub(args: &RunArgs, hub: &registry::Member) -> Vec<Finding> {
    let health = registry::probe(hub).await;
    if !health.reachable {
        let error = health.error.unwrap_or_default();
        return vec![
            Finding::not_passed(
                "hub",
                format!("context {}", health.context),
                Verdict::Fail,
                format!("unreachable: {error}"),
                "check --kubeconfig and --context, and that the hub's API server answers".into(),
            ),
            skipped("crd", "hub"),
            skipped("hub-rbac", "hub"),
            skipped("hub-rbac-width", "hub"),
            skipped("policy", "hub"),
        ];
    }
    let client = &hub.client;
    let mut findings = vec![Finding::pass(
        "hub",
        format!("context {}", health.context),
        format!("reachable, {}", health.version.unwrap_or_default()),
    )];
    findings.extend(crds(client).await);
    let tenancy = tenancy(client, args).await;
    let identities = judge::Identities::of(
        tenancy
            .iter()
            .flat_map(|(_, policies)| policies.iter().filter_map(|p| p.spec.impersonate.as_ref())),
    );
    let wanted = judge::hub_rights(&args.lease_namespace, &args.lease_names(), &identities);
    findings.push(judge::rights(
        "hub-rbac",
        "hub",
        &review(client, wanted).await,
        "apply deploy/rbac.yaml (kubectl apply -f deploy/rbac.yaml) and run doctor with the \
         operator's identity",
        "needed only when a TenancyPolicy impersonates",
    ));
    findings.push(width(client, &identities).await);
    findings.extend(match tenancy {
        Ok((controllers, policies)) => judge::policies(
            args.tenancy_policy == PolicyMode::Enforce,
            &per_namespace(&controllers),
            &policies
                .iter()
                .map(|p| (p.name_any(), p.spec.hub_namespaces.clone()))
                .collect(),
        ),
        Err(error) => vec![Finding::not_passed(
            "policy",
            "hub",
            Verdict::Fail,
            error,
            "let the operator's identity list Controllers and TenancyPolicies (deploy/rbac.yaml), \
             and install the CRDs"
                .into(),
        )],
    });
    findings
}

/// A namespace no one binds anything in: what the identity may do there, it may do in every
/// namespace.
const UNBOUND_NAMESPACE: &str = "tenancy-hub-doctor-unbound";

/// Whether the identity's rights on the hub are wider than deploy/rbac.yaml documents: its
/// rules in every namespace (a SelfSubjectRulesReview of [`UNBOUND_NAMESPACE`]), and whether a
/// RoleBinding in namespace `default`, which the operator did not create, would be accepted
/// (asked with a dry run, so admission, the ValidatingAdmissionPolicy included, answers).
async fn width(client: &Client, identities: &judge::Identities) -> Finding {
    let rules: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(UNBOUND_NAMESPACE.into()),
        },
        ..Default::default()
    };
    let held = match bounded(rules.create(&PostParams::default(), &review)).await {
        Ok(answer) => answer.status.map(|s| s.resource_rules).unwrap_or_default(),
        Err(Asked::Forbidden(e) | Asked::Failed(e)) => {
            return Finding::not_passed(
                "hub-rbac-width",
                "hub",
                Verdict::Warn,
                format!("not known: the hub did not say what the identity may do: {e}"),
                "run doctor with the operator's identity on a hub with RBAC".into(),
            );
        }
    };
    width::wider_rights(&held, identities, rolebinding_anywhere(client).await)
}

/// Whether the hub would accept from the identity a RoleBinding of the ClusterRole the operator
/// binds itself, in namespace `default` (a dry run: nothing is stored). None when the answer
/// says neither (the hub unreachable, say).
async fn rolebinding_anywhere(client: &Client) -> Option<bool> {
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tenancy-hub-doctor-probe"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "tenancy-hub-member-namespace",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "tenancy-hub-doctor-probe", "namespace": "default"}],
    }))
    .expect("a valid RoleBinding");
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match bounded(bindings.create(&params, &binding)).await {
        Ok(_) => Some(true),
        Err(Asked::Forbidden(_)) => Some(false),
        Err(Asked::Failed(_)) => None,
    }
}

fn skipped(check: &'static str, subject: &str) -> Finding {
    Finding::not_passed(
        check,
        subject,
        Verdict::Skip,
        "not checked: the cluster is unreachable".into(),
        "fix the check above first".into(),
    )
}

/// Each CRD of this binary against the hub's.
async fn crds(client: &Client) -> Vec<Finding> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = Vec::new();
    for generated in [
        Alert::crd(),
        crate::api::crd::controller_crd(),
        TenancyPolicy::crd(),
        MemberCluster::crd(),
    ] {
        let name = generated.metadata.name.clone().unwrap_or_default();
        let live = match bounded(api.get_opt(&name)).await {
            Ok(live) => Ok(live),
            Err(Asked::Forbidden(e)) => Err((true, e)),
            Err(Asked::Failed(e)) => Err((false, e)),
        };
        out.push(judge::crd(
            &generated,
            live.as_ref().map(Option::as_ref).map_err(Clone::clone),
        ));
    }
    out
}

/// Why a question to a cluster got no answer.
enum Asked {
    /// The identity may not ask it.
    Forbidden(String),
    /// Any other failure, the time running out included.
    Failed(String),
}

/// `call`, within [`ASK_TIMEOUT`].
async fn bounded<T>(call: impl Future<Output = kube::Result<T>>) -> Result<T, Asked> {
    match tokio::time::timeout(ASK_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(kube::Error::Api(e))) if e.code == 403 => Err(Asked::Forbidden(e.message)),
        Ok(Err(e)) => Err(Asked::Failed(e.to_string())),
        Err(_) => Err(Asked::Failed(format!(
            "no answer within {}s",
            ASK_TIMEOUT.as_secs()
        ))),
    }
}

/// The Controllers the operator would reconcile (its namespace and selector) and every
/// TenancyPolicy; Err says which could not be listed.
async fn tenancy(
    client: &Client,
    args: &RunArgs,
) -> Result<(Vec<TenancyController>, Vec<TenancyPolicy>), String> {
    let controllers: Api<TenancyController> = match &args.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut params = ListParams::default();
    if let Some(selector) = &args.selector {
        params = params.labels(selector);
    }
    let reason = |what: &str, asked: Asked| match asked {
        Asked::Forbidden(e) | Asked::Failed(e) => format!("cannot list {what}: {e}"),
    };
    let controllers = bounded(controllers.list(&params))
        .await
        .map_err(|e| reason("Controllers", e))?;
    let policies = bounded(Api::<TenancyPolicy>::all(client.clone()).list(&ListParams::default()))
        .await
        .map_err(|e| reason("TenancyPolicies", e))?;
    Ok((controllers.items, policies.items))
}

/// How many Controllers each hub namespace holds.
fn per_namespace(controllers: &[TenancyController]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for c in controllers {
        *out.entry(c.namespace().unwrap_or_default()).or_default() += 1;
    }
    out
}

/// Asks the cluster of `client`, for each access, whether the client's identity has it.
async fn review(client: &Client, accesses: Vec<Access>) -> Vec<(Access, Result<bool, String>)> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    futures::stream::iter(accesses)
        .map(|access| {
            let api = api.clone();
            async move {
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(attributes(&access)),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let answer = match bounded(api.create(&PostParams::default(), &review)).await {
                    Ok(r) => Ok(r.status.is_some_and(|s| s.allowed)),
                    Err(Asked::Forbidden(e) | Asked::Failed(e)) => Err(e),
                };
                (access, answer)
            }
        })
        .buffered(REVIEWS_AT_ONCE)
        .collect()
        .await
}

fn attributes(access: &Access) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(access.group.clone()),
        resource: Some(access.resource.clone()),
        subresource: access.subresource.clone(),
        verb: Some(access.verb.clone()),
        name: access.name.clone(),
        namespace: access.namespace.clone(),
        ..Default::default()
    }
}

/// Each member of the registration file: reachable, with the rights delivery needs.
async fn members(hub: &HubSource, file: Option<&Path>) -> Vec<Finding> {
    let Some(path) = file else {
        return vec![Finding::pass(
            "clusters-file",
            "none",
            "no --clusters: the hub alone (and joined pull members)".into(),
        )];
    };
    let file = match RegistrationFile::load(path) {
        Ok(file) => file,
        Err(e) => {
            return vec![Finding::not_passed(
                "clusters-file",
                "registration file",
                Verdict::Fail,
                e.to_string(),
                "pass --clusters (or set TENANCY_HUB_CLUSTERS) to a readable registration file"
                    .into(),
            )];
        }
    };
    let mut out = vec![Finding::pass(
        "clusters-file",
        path.display().to_string(),
        format!("{} members", file.clusters.len()),
    )];
    let each = futures::future::join_all(file.clusters.iter().map(|e| member(hub, e))).await;
    out.extend(each.into_iter().flatten());
    out
}

/// One member's checks.
async fn member(hub: &HubSource, entry: &ClusterEntry) -> Vec<Finding> {
    let name = entry.name.to_string();
    let fix = "check the entry's kubeconfig and context, and that its API server answers \
               (kubectl --kubeconfig KUBECONFIG --context CONTEXT version)";
    let alone = RegistrationFile {
        clusters: vec![entry.clone()],
    };
    let registry = match ClusterRegistry::connect(hub, &alone).await {
        Ok(registry) => registry,
        Err(e) => {
            return vec![
                Finding::not_passed("member", &name, Verdict::Fail, e.to_string(), fix.into()),
                skipped("member-rbac", &name),
            ];
        }
    };
    let member = registry
        .get(&entry.name)
        .expect("the member was registered");
    let health = registry::probe(member).await;
    if !health.reachable {
        let error = health.error.unwrap_or_default();
        return vec![
            Finding::not_passed(
                "member",
                &name,
                Verdict::Fail,
                format!("context {}: unreachable: {error}", entry.context),
                fix.into(),
            ),
            skipped("member-rbac", &name),
        ];
    }
    vec![
        Finding::pass(
            "member",
            &name,
            format!(
                "context {}: reachable, {}",
                entry.context,
                health.version.unwrap_or_default()
            ),
        ),
        judge::rights(
            "member-rbac",
            &name,
            &review(&member.client, judge::member_rights()).await,
            "grant the entry's identity in the member what deploy/rbac.yaml's note on members \
             lists (its watches, namespaces create, and ClusterRole tenancy-hub-tenant)",
            "needed in each tenant namespace unless its policy impersonates the tenant",
        ),
    ]
}

/// The helm binary answers `helm version`.
async fn helm(binary: &Path) -> Finding {
    let options = HelmOptions {
        binary: binary.to_path_buf(),
        timeout: ASK_TIMEOUT,
        ..HelmOptions::default()
    };
    let subject = binary.display().to_string();
    match crate::helm::process::run_helm(
        &options,
        vec!["version".into(), "--short".into()],
        options.timeout,
    )
    .await
    {
        Ok(version) => Finding::pass("helm", subject, format!("runs, {}", version.trim())),
        Err((error, _)) => Finding::not_passed(
            "helm",
            subject,
            Verdict::Fail,
            error,
            "install helm, or pass --helm (or set TENANCY_HUB_HELM) to its path".into(),
        ),
    }
}

/// The long-lived executor `run` would use: found, and speaking this binary's protocol.
async fn executor(args: &RunArgs) -> Finding {
    let located = match args.executor {
        ExecutorKind::Cli => None,
        _ => args
            .sdk()
            .filter(|p| p.is_file() || args.executor == ExecutorKind::Sdk),
    };
    let hello = match &located {
        Some(path) => Some(
            crate::helm::pipe::probe(path)
                .await
                .map_err(|e| e.to_string()),
        ),
        None => None,
    };
    judge::executor(args.executor, located.as_deref(), hello)
}

/// How many charts (directories) the chart home holds, or why it cannot be read.
fn charts_in(home: &Path) -> Result<usize, String> {
    let entries = std::fs::read_dir(home).map_err(|e| e.to_string())?;
    Ok(entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .count())
}

/// The report as a table of one line per check, or as JSON or YAML.
fn render(report: &Report, output: Output) -> anyhow::Result<String> {
    Ok(match output {
        Output::Json => serde_json::to_string_pretty(report)? + "\n",
        Output::Yaml => serde_yaml::to_string(report)?,
        Output::Table => {
            let rows: Vec<[String; 4]> = report
                .checks
                .iter()
                .map(|f| {
                    let detail = match &f.fix {
                        Some(fix) => format!("{}; fix: {fix}", f.detail),
                        None => f.detail.clone(),
                    };
                    [
                        verdict_word(f.verdict).into(),
                        f.check.into(),
                        f.subject.clone(),
                        detail,
                    ]
                })
                .collect();
            table::table(&["RESULT", "CHECK", "SUBJECT", "DETAIL"], &rows)
        }
    })
}

fn verdict_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Pass => "ok",
        Verdict::Warn => "warn",
        Verdict::Fail => "FAIL",
        Verdict::Skip => "skip",
    }
}

#[cfg(test)]
mod tests;
