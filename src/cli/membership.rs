//! Joining pull members: `cluster add --pull` on the hub (the MemberCluster and a short-lived bootstrap token, printed as what to apply in the member), `join` in the member, `cluster remove`.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use clap::{Args, Subcommand, ValueEnum};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::{Namespace, Secret, ServiceAccount},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
    config::Kubeconfig,
};

use crate::{
    api::key::ClusterName,
    api::member_cluster::{BOOTSTRAP_ACCOUNT, MemberCluster, MemberClusterSpec, pull_namespace},
    clusters::registry::HubSource,
    member::pull::agent::login::CREDENTIALS_SECRET,
};

/// The member namespace the agent and its `hub-credentials` live in, as deploy/agent/ has it.
const AGENT_NAMESPACE: &str = "tenancy-hub-agent";
/// How long the commands wait for the operator.
const WAIT: Duration = Duration::from_secs(120);

/// `tenancy-hub cluster …`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Register a pull member on the hub and print what joins it: a MemberCluster, and a
    /// short-lived bootstrap token for its agent.
    #[command(
        after_help = "Examples:\n  tenancy-hub cluster add --pull edge-1 --label region=east -o yaml > join.yaml   # then in the member: kubectl apply -f join.yaml && kubectl apply -k deploy/agent/\n  tenancy-hub cluster add --pull edge-1 -o command"
    )]
    Add(AddArgs),
    /// Remove a pull member: its MemberCluster, its hub namespace and with them every token of
    /// its agent.
    Remove(RemoveArgs),
}

/// What printing the join gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum JoinOutput {
    /// The Namespace and Secret to `kubectl apply` in the member.
    Yaml,
    /// The `tenancy-hub join` command to run against the member.
    Command,
}

/// `cluster add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The member's name on the hub (a DNS label), as Controllers name it.
    pub(crate) name: String,
    /// Register it as a pull member (its agent connects out to the hub); the registration file
    /// registers push members.
    #[arg(long, required = true)]
    pub(crate) pull: bool,
    /// A label for clusterSelector and `${cluster.labels.KEY}`, as KEY=VALUE; repeatable.
    #[arg(long = "label", value_parser = key_value)]
    pub(crate) labels: Vec<(String, String)>,
    /// A variable for `${cluster.variables.KEY}`, as KEY=JSON (a bare word is a string); repeatable.
    #[arg(long = "variable", value_parser = key_value)]
    pub(crate) variables: Vec<(String, String)>,
    /// How long the bootstrap token is good for, in minutes (at least 10).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(i64).range(10..=1440))]
    pub(crate) token_minutes: i64,
    /// The hub API server's URL as the member reaches it; default: the kubeconfig context's.
    #[arg(long)]
    pub(crate) hub_server: Option<String>,
    /// The CA of the hub API server (PEM); default: the kubeconfig context's.
    #[arg(long)]
    pub(crate) hub_ca_file: Option<PathBuf>,
    /// What to print.
    #[arg(short, long, value_enum, default_value_t = JoinOutput::Yaml)]
    pub(crate) output: JoinOutput,
    /// Kubeconfig of the hub; default: KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context of the hub in that kubeconfig; default: its current context.
    #[arg(long)]
    pub(crate) context: Option<String>,
}

/// `cluster remove`.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The pull member's name.
    pub(crate) name: String,
    /// Kubeconfig of the hub.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context of the hub.
    #[arg(long)]
    pub(crate) context: Option<String>,
}

/// `join`: writes the hub login into the member, for its agent.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  TENANCY_HUB_BOOTSTRAP_TOKEN=… tenancy-hub join --name edge-1 --hub-server https://hub:6443 --hub-ca-file hub-ca.crt --kubeconfig member.kubeconfig"
)]
pub struct JoinArgs {
    /// The member's name on the hub, as `cluster add --pull` registered it.
    #[arg(long)]
    pub(crate) name: String,
    /// The hub API server's URL.
    #[arg(long)]
    pub(crate) hub_server: String,
    /// The hub API server's CA (PEM file).
    #[arg(long, conflicts_with = "hub_ca_data")]
    pub(crate) hub_ca_file: Option<PathBuf>,
    /// The hub API server's CA, base64 of its PEM.
    #[arg(long)]
    pub(crate) hub_ca_data: Option<String>,
    /// A file holding the bootstrap token (never give a token as an argument).
    #[arg(long)]
    pub(crate) token_file: Option<PathBuf>,
    /// Kubeconfig of the member; default: KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context of the member in that kubeconfig.
    #[arg(long)]
    pub(crate) context: Option<String>,
    /// Member namespace of the agent.
    #[arg(long, default_value = AGENT_NAMESPACE)]
    pub(crate) namespace: String,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    let (k, v) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    if k.is_empty() {
        return Err(format!("{text:?} has an empty key"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// A client of the cluster `kubeconfig` and `context` name (the hub, or for `join` the member).
async fn client_of(
    kubeconfig: &Option<PathBuf>,
    context: &Option<String>,
) -> anyhow::Result<Client> {
    let source = HubSource {
        kubeconfig: kubeconfig.clone(),
        context: context.clone(),
    };
    Ok(source.client().await?)
}

/// Runs a `cluster` command.
pub(crate) async fn cluster(command: ClusterCommand) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Add(args) => add(args).await,
        ClusterCommand::Remove(args) => remove(args).await,
    }
}

async fn add(args: AddArgs) -> anyhow::Result<()> {
    let name: ClusterName = args.name.parse().context("the member's name")?;
    let hub = client_of(&args.kubeconfig, &args.context).await?;
    let (server, ca) = hub_address(&args)?;
    let variables = args
        .variables
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.clone())),
            )
        })
        .collect();
    let member = MemberCluster::new(
        name.as_str(),
        MemberClusterSpec {
            labels: args.labels.iter().cloned().collect(),
            variables,
        },
    );
    let members: Api<MemberCluster> = Api::all(hub.clone());
    members
        .patch(
            name.as_str(),
            &PatchParams::apply("tenancy-hub-cli").force(),
            &Patch::Apply(&member),
        )
        .await
        .with_context(|| format!("registering MemberCluster {name} on the hub"))?;
    eprintln!(
        "MemberCluster {name} registered; waiting for the operator to enroll it (hub namespace {})",
        pull_namespace(&name)
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), &pull_namespace(&name));
    let deadline = tokio::time::Instant::now() + WAIT;
    while accounts
        .get_opt(BOOTSTRAP_ACCOUNT)
        .await
        .ok()
        .flatten()
        .is_none()
    {
        if tokio::time::Instant::now() > deadline {
            bail!(
                "the operator did not enroll member {name} within {} s: is it running on this hub?",
                WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(args.token_minutes * 60),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(BOOTSTRAP_ACCOUNT, &PostParams::default(), &request)
        .await
        .with_context(|| format!("making a bootstrap token for member {name}"))?
        .status
        .and_then(|s| s.token)
        .context("the hub gave no token")?;
    eprintln!(
        "bootstrap token made, good for {} minutes",
        args.token_minutes
    );
    match args.output {
        JoinOutput::Yaml => print!(
            "{}",
            join_yaml(&name, &server, &ca, &token, AGENT_NAMESPACE)?
        ),
        JoinOutput::Command => println!(
            "TENANCY_HUB_BOOTSTRAP_TOKEN={token} tenancy-hub join --name {name} --hub-server {server} --hub-ca-data {}",
            base64::engine::general_purpose::STANDARD.encode(&ca)
        ),
    }
    Ok(())
}

/// The hub's URL and CA (PEM) as the member is to reach it.
fn hub_address(args: &AddArgs) -> anyhow::Result<(String, String)> {
    let kubeconfig = match &args.kubeconfig {
        Some(path) => Kubeconfig::read_from(path)?,
        None => Kubeconfig::read()?,
    };
    let context = args
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
        .context("the kubeconfig has no current context; give --context")?;
    let cluster = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .with_context(|| format!("no context {context} in the kubeconfig"))?;
    let found = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == cluster)
        .and_then(|c| c.cluster.clone())
        .with_context(|| format!("no cluster {cluster} in the kubeconfig"))?;
    let server = match &args.hub_server {
        Some(s) => s.clone(),
        None => found
            .server
            .clone()
            .context("the hub's cluster has no server; give --hub-server")?,
    };
    let ca = match (
        &args.hub_ca_file,
        &found.certificate_authority_data,
        &found.certificate_authority,
    ) {
        (Some(file), _, _) => {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        }
        (None, Some(data), _) => {
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data)?)?
        }
        (None, None, Some(file)) => {
            std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?
        }
        (None, None, None) => {
            bail!("the hub's cluster has no CA in the kubeconfig; give --hub-ca-file")
        }
    };
    Ok((server, ca))
}

/// The Namespace and `hub-credentials` Secret that join a member, as YAML.
fn join_yaml(
    name: &ClusterName,
    server: &str,
    ca: &str,
    token: &str,
    namespace: &str,
) -> anyhow::Result<String> {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let secret = credentials(name, server, ca, token, namespace);
    let mut ns = serde_json::to_value(ns)?;
    ns["apiVersion"] = "v1".into();
    ns["kind"] = "Namespace".into();
    let mut secret = serde_json::to_value(secret)?;
    secret["apiVersion"] = "v1".into();
    secret["kind"] = "Secret".into();
    Ok(format!(
        "{}---\n{}",
        serde_yaml::to_string(&ns)?,
        serde_yaml::to_string(&secret)?
    ))
}

fn credentials(name: &ClusterName, server: &str, ca: &str, token: &str, namespace: &str) -> Secret {
    let data: BTreeMap<String, String> = [
        ("server", server),
        ("caData", ca),
        ("cluster", name.as_str()),
        ("bootstrapToken", token),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(CREDENTIALS_SECRET.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        string_data: Some(data),
        ..Default::default()
    }
}

async fn remove(args: RemoveArgs) -> anyhow::Result<()> {
    let name: ClusterName = args.name.parse().context("the member's name")?;
    let hub = client_of(&args.kubeconfig, &args.context).await?;
    let members: Api<MemberCluster> = Api::all(hub.clone());
    match members
        .delete(name.as_str(), &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => bail!("no MemberCluster {name} on the hub"),
        Err(e) => return Err(e).context(format!("deleting MemberCluster {name}")),
    }
    eprintln!(
        "MemberCluster {name} deleted; waiting for its hub namespace {} to go",
        pull_namespace(&name)
    );
    let namespaces: Api<Namespace> = Api::all(hub);
    let deadline = tokio::time::Instant::now() + WAIT;
    while namespaces.get_opt(&pull_namespace(&name)).await?.is_some() {
        if tokio::time::Instant::now() > deadline {
            bail!(
                "the hub namespace {} of member {name} is still there after {} s",
                pull_namespace(&name),
                WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("member {name} removed: its agent's tokens no longer work");
    Ok(())
}

/// Runs `join`.
pub(crate) async fn join(args: JoinArgs) -> anyhow::Result<()> {
    let name: ClusterName = args.name.parse().context("the member's name")?;
    let token = match (
        &args.token_file,
        std::env::var("TENANCY_HUB_BOOTSTRAP_TOKEN"),
    ) {
        (Some(file), _) => {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        }
        (None, Ok(token)) => token,
        (None, Err(_)) => bail!(
            "give the bootstrap token in TENANCY_HUB_BOOTSTRAP_TOKEN or --token-file (tenancy-hub cluster add --pull {name} prints it)"
        ),
    };
    let ca = match (&args.hub_ca_file, &args.hub_ca_data) {
        (Some(file), _) => {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        }
        (None, Some(data)) => {
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data.trim())?)?
        }
        (None, None) => bail!("give the hub's CA with --hub-ca-file or --hub-ca-data"),
    };
    let member = client_of(&args.kubeconfig, &args.context).await?;
    let params = PatchParams::apply("tenancy-hub-join").force();
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(args.namespace.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(member.clone())
        .patch(&args.namespace, &params, &Patch::Apply(&ns))
        .await
        .with_context(|| format!("creating namespace {} in the member", args.namespace))?;
    let secret = credentials(&name, &args.hub_server, &ca, token.trim(), &args.namespace);
    Api::<Secret>::namespaced(member, &args.namespace)
        .patch(CREDENTIALS_SECRET, &params, &Patch::Apply(&secret))
        .await
        .with_context(|| {
            format!(
                "writing {}/{CREDENTIALS_SECRET} in the member",
                args.namespace
            )
        })?;
    eprintln!(
        "member joined as {name}: start its agent (kubectl apply -k deploy/agent/, or tenancy-hub agent)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_yaml_holds_the_namespace_and_the_login_for_the_agent() {
        let name: ClusterName = "edge-1".parse().unwrap();
        let yaml = join_yaml(
            &name,
            "https://hub:6443",
            "-----BEGIN CERTIFICATE-----\nx\n",
            "tok",
            AGENT_NAMESPACE,
        )
        .unwrap();
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&yaml)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        assert_eq!(docs[0]["kind"], "Namespace");
        assert_eq!(docs[1]["kind"], "Secret");
        assert_eq!(docs[1]["metadata"]["namespace"], AGENT_NAMESPACE);
        assert_eq!(docs[1]["stringData"]["cluster"], "edge-1");
        assert_eq!(docs[1]["stringData"]["bootstrapToken"], "tok");
    }

    #[test]
    fn labels_are_key_value_pairs() {
        assert_eq!(key_value("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(key_value("nokey").is_err());
        assert!(key_value("=v").is_err());
    }
}
