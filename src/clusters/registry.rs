//! Member clusters: those of the registration file (push members, one kube client per cluster) and those joined with a `MemberCluster` (pull members, reached by their agent), keyed by name.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::{api::crd::HUB_CLUSTER, api::key::ClusterName};

/// How long to wait for a cluster's API server to accept a connection.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(4);

/// How long a health probe may take in all.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(6);

/// Result alias for this module.
pub(crate) type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// What went wrong loading the registration file or building a cluster's client.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registration file could not be read.
    #[error("cannot read registration file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The registration file is not valid YAML of the expected shape.
    #[error(
        "registration file {path} does not parse: {source}; expected `clusters:` with entries of `name`, `context`, and optional `kubeconfig` and `labels`"
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parse error, with its line and column.
        source: serde_yaml::Error,
    },
    /// Two entries share a name.
    #[error(
        "registration file {path}: cluster {name:?} is registered twice (entries {first} and {second}); give each cluster its own name"
    )]
    DuplicateName {
        /// The file.
        path: PathBuf,
        /// The shared name.
        name: String,
        /// Position of the first entry (from 1).
        first: usize,
        /// Position of the second entry (from 1).
        second: usize,
    },
    /// An entry uses the name reserved for the hub.
    #[error(
        "registration file {path}: entry {index} is named {HUB_CLUSTER:?}, which is reserved for the hub cluster itself; rename it"
    )]
    ReservedName {
        /// The file.
        path: PathBuf,
        /// Position of the entry (from 1).
        index: usize,
    },
    /// A kubeconfig named by an entry could not be loaded.
    #[error("cluster {cluster}: cannot load kubeconfig {kubeconfig}: {source}")]
    Kubeconfig {
        /// The cluster whose entry names it.
        cluster: String,
        /// The kubeconfig file.
        kubeconfig: PathBuf,
        /// The loader's error.
        source: kube::config::KubeconfigError,
    },
    /// An entry names a context its kubeconfig does not have.
    #[error("cluster {cluster}: context {context:?} is not in kubeconfig {kubeconfig}; available contexts: {}", available.join(", "))]
    UnknownContext {
        /// The cluster whose entry names it.
        cluster: String,
        /// The missing context.
        context: String,
        /// The kubeconfig file searched.
        kubeconfig: PathBuf,
        /// Contexts the kubeconfig does have.
        available: Vec<String>,
    },
    /// No kubeconfig was named and none could be found.
    #[error(
        "cluster {cluster}: no kubeconfig given and neither KUBECONFIG nor HOME is set; add `kubeconfig:` to its entry"
    )]
    NoKubeconfig {
        /// The cluster.
        cluster: String,
    },
    /// The hub's own configuration could not be found.
    #[error("hub cluster: {0}; pass --kubeconfig and --context, or run inside a cluster")]
    Hub(String),
    /// A client could not be built from a valid configuration.
    #[error("cluster {cluster}: cannot build a client: {source}")]
    Client {
        /// The cluster.
        cluster: String,
        /// The client error.
        source: kube::Error,
    },
}

/// The registration file: the member clusters tenancies may target.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrationFile {
    /// The registered member clusters.
    #[serde(default)]
    pub clusters: Vec<ClusterEntry>,
}

/// One registered member cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterEntry {
    /// Name used in `spec.tenancies[].clusters` and in status.
    pub name: ClusterName,
    /// Context in the kubeconfig.
    pub context: String,
    /// Kubeconfig file; defaults to `KUBECONFIG` or `~/.kube/config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// Labels matched by `clusterSelector`, and read by values as `${cluster.labels.KEY}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Values of any type read by values as `${cluster.variables.KEY}` (a whole-string
    /// reference keeps the type: `replicas: 3` gives the number 3).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, serde_json::Value>,
}

impl RegistrationFile {
    /// Reads and checks a registration file.
    pub(crate) fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| RegistryError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses and checks registration text; `path` only names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        let file: Self = serde_yaml::from_str(text).map_err(|source| RegistryError::Parse {
            path: path.to_owned(),
            source,
        })?;
        let mut seen: HashMap<&ClusterName, usize> = HashMap::new();
        for (i, entry) in file.clusters.iter().enumerate() {
            if entry.name.as_str() == HUB_CLUSTER {
                return Err(RegistryError::ReservedName {
                    path: path.to_owned(),
                    index: i + 1,
                });
            }
            if let Some(first) = seen.insert(&entry.name, i + 1) {
                return Err(RegistryError::DuplicateName {
                    path: path.to_owned(),
                    name: entry.name.to_string(),
                    first,
                    second: i + 1,
                });
            }
        }
        Ok(file)
    }
}

/// The SHA-256 of a kubeconfig file's bytes.
pub(crate) type Digest = [u8; 32];

/// The digest of a file's content, or `None` when it cannot be read.
pub(crate) fn digest_file(path: &Path) -> Option<Digest> {
    std::fs::read(path)
        .ok()
        .map(|bytes| Sha256::digest(bytes).into())
}

/// A registered cluster with its client.
#[derive(Clone)]
pub(crate) struct Member {
    /// Its registration entry.
    pub(crate) entry: ClusterEntry,
    /// The kubeconfig actually used.
    pub(crate) kubeconfig: PathBuf,
    /// The digest of that kubeconfig's content when the client was built from it (`None` for the
    /// in-cluster hub), so a change of its credentials is noticed even when its path is unchanged.
    pub(crate) kubeconfig_digest: Option<Digest>,
    /// A client for its API server.
    pub(crate) client: Client,
}

/// A member joined with a `MemberCluster`: its agent connects out to the hub, so the hub holds
/// no client of it, only what planning reads of its registration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Joined {
    /// Its name, labels and variables.
    pub(crate) entry: JoinedEntry,
}

/// What a joined member is registered with, as a registration entry without a kubeconfig.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JoinedEntry {
    /// The `MemberCluster`'s name.
    pub(crate) name: ClusterName,
    /// Labels matched by `clusterSelector`.
    pub(crate) labels: BTreeMap<String, String>,
    /// Variables read by values.
    pub(crate) variables: BTreeMap<String, serde_json::Value>,
}

/// Joined members by name.
pub(crate) type JoinedMembers = BTreeMap<ClusterName, Arc<Joined>>;

/// The registry in force, swapped whole when the registration file or the joined members change.
pub(crate) type SharedRegistry = Arc<arc_swap::ArcSwap<ClusterRegistry>>;

/// Every cluster tenancy-hub delivers to, the hub included, keyed by name: the registration
/// file's (with clients) and the joined ones. A name in both is the file's: the joined member of
/// that name is kept but not seen until the file lets the name go.
#[derive(Clone)]
#[cfg_attr(test, derive(Default))]
pub(crate) struct ClusterRegistry {
    members: BTreeMap<ClusterName, Arc<Member>>,
    joined: JoinedMembers,
}

/// Where the hub's own client comes from.
#[derive(Debug, Clone, Default)]
pub(crate) struct HubSource {
    /// Kubeconfig file; default: KUBECONFIG, ~/.kube/config, or the in-cluster config.
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context in that kubeconfig; default: its current context.
    pub(crate) context: Option<String>,
}

impl HubSource {
    /// A client of the hub (or, for `join`, of the cluster this kubeconfig and context name):
    /// the one way every command of the command line gets one, with the same errors.
    pub(crate) async fn client(&self) -> Result<Client> {
        Ok(connect_hub(self, &mut HashMap::new()).await?.client)
    }
}

impl ClusterRegistry {
    /// Builds a client for the hub and for every registered member.
    pub(crate) async fn connect(hub: &HubSource, file: &RegistrationFile) -> Result<Self> {
        let mut kubeconfigs = HashMap::new();
        let mut members = BTreeMap::new();
        let hub_member = connect_hub(hub, &mut kubeconfigs).await?;
        members.insert(hub_member.entry.name.clone(), Arc::new(hub_member));
        for entry in &file.clusters {
            let path = entry_kubeconfig(entry).ok_or_else(|| RegistryError::NoKubeconfig {
                cluster: entry.name.to_string(),
            })?;
            let client =
                client_for(entry.name.as_str(), &path, &entry.context, &mut kubeconfigs).await?;
            members.insert(
                entry.name.clone(),
                Arc::new(Member {
                    entry: entry.clone(),
                    kubeconfig_digest: kubeconfigs[&path].digest,
                    kubeconfig: path,
                    client,
                }),
            );
        }
        Ok(Self {
            members,
            joined: BTreeMap::new(),
        })
    }

    /// This registry, with the members of `old` that `fresh` does not name kept as they were
    /// (same client), and the joined members of `old`: a reload of the file reconnects only the
    /// clusters that changed and never drops a joined member.
    pub(crate) fn keeping(
        mut self,
        old: &ClusterRegistry,
        fresh: impl Fn(&ClusterName) -> bool,
    ) -> Self {
        for (name, member) in &mut self.members {
            if !fresh(name)
                && let Some(kept) = old.members.get(name)
            {
                *member = kept.clone();
            }
        }
        self.joined = old.joined.clone();
        self
    }

    /// This registry with `joined` as its joined members, in place of those it had.
    pub(crate) fn with_joined(mut self, joined: JoinedMembers) -> Self {
        self.joined = joined;
        self
    }

    /// Every joined member, those the file's names hide included.
    pub(crate) fn joined_members(&self) -> &JoinedMembers {
        &self.joined
    }

    /// A registry holding only the hub, reached with `client`: for tests without a kubeconfig.
    #[cfg(test)]
    pub(crate) fn hub_only(client: Client) -> Self {
        let name: ClusterName = HUB_CLUSTER.parse().expect("the hub's name is valid");
        let hub = Member {
            entry: ClusterEntry {
                name: name.clone(),
                context: "test".into(),
                kubeconfig: None,
                labels: BTreeMap::new(),
                variables: BTreeMap::new(),
            },
            kubeconfig: PathBuf::new(),
            kubeconfig_digest: None,
            client,
        };
        Self {
            members: BTreeMap::from([(name, Arc::new(hub))]),
            joined: BTreeMap::new(),
        }
    }

    /// This registry's hub, alone, under the name `name`: what an agent acts on, its own
    /// cluster under the name the hub knows it by.
    pub(crate) fn as_cluster(&self, name: ClusterName) -> Self {
        let mut registry = Self {
            members: BTreeMap::new(),
            joined: JoinedMembers::default(),
        };
        if let Some(hub) = self.iter().next() {
            let mut member = (**hub).clone();
            member.entry.name = name.clone();
            registry.members.insert(name, Arc::new(member));
        }
        registry
    }

    /// The cluster of the registration file (or the hub) registered under `name`, if any: the
    /// clusters the hub holds a client of. Joined members are [`ClusterRegistry::joined`].
    pub(crate) fn get(&self, name: &ClusterName) -> Option<&Arc<Member>> {
        self.members.get(name)
    }

    /// A client of the hub at the operator's own address and TLS settings, whose one credential
    /// is `token`: the fleet view's actions are made with it, so the hub's RBAC judges the viewer,
    /// not the operator. Nothing of the operator's own credentials (certificates, tokens,
    /// impersonation, exec plugins) is kept.
    ///
    /// # Errors
    /// [`RegistryError::Hub`] when the hub's kubeconfig (or in-cluster settings) cannot be read
    /// again, [`RegistryError::Client`] when the client cannot be built.
    pub(crate) async fn hub_as(&self, token: &str) -> Result<Client> {
        let name: ClusterName = HUB_CLUSTER
            .parse()
            .expect("the hub's name is a valid cluster name");
        let hub = self
            .members
            .get(&name)
            .ok_or_else(|| RegistryError::Hub("the hub is not registered".into()))?;
        let mut config = if hub.kubeconfig.as_os_str().is_empty() {
            Config::incluster().map_err(|e| RegistryError::Hub(format!("in-cluster: {e}")))?
        } else {
            let file = Kubeconfig::read_from(&hub.kubeconfig).map_err(|e| {
                RegistryError::Hub(format!("kubeconfig {}: {e}", hub.kubeconfig.display()))
            })?;
            let options = KubeConfigOptions {
                context: Some(hub.entry.context.clone()),
                ..KubeConfigOptions::default()
            };
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| {
                    RegistryError::Hub(format!("kubeconfig {}: {e}", hub.kubeconfig.display()))
                })?
        };
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.to_owned().into()),
            ..kube::config::AuthInfo::default()
        };
        config.headers.clear();
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        Client::try_from(config).map_err(|source| RegistryError::Client {
            cluster: HUB_CLUSTER.into(),
            source,
        })
    }

    /// The member joined under `name`, unless the registration file names it too.
    pub(crate) fn joined(&self, name: &ClusterName) -> Option<&Arc<Joined>> {
        self.joined
            .get(name)
            .filter(|_| !self.members.contains_key(name))
    }

    /// The joined members in force (those the file does not name), by name.
    fn joined_in_force(&self) -> impl Iterator<Item = (&ClusterName, &Arc<Joined>)> {
        self.joined
            .iter()
            .filter(|(name, _)| !self.members.contains_key(*name))
    }

    /// Every cluster's name, the file's, the hub and the joined ones, in order.
    pub(crate) fn names(&self) -> BTreeSet<ClusterName> {
        self.members
            .keys()
            .chain(self.joined_in_force().map(|(name, _)| name))
            .cloned()
            .collect()
    }

    /// Every cluster's name and registration labels (the hub has none), joined members included.
    pub(crate) fn labels(&self) -> BTreeMap<ClusterName, BTreeMap<String, String>> {
        let pushed = self
            .members
            .iter()
            .map(|(name, m)| (name.clone(), m.entry.labels.clone()));
        let joined = self
            .joined_in_force()
            .map(|(name, j)| (name.clone(), j.entry.labels.clone()));
        pushed.chain(joined).collect()
    }

    /// Every cluster's variables, by name, joined members included.
    pub(crate) fn variables(&self) -> BTreeMap<ClusterName, BTreeMap<String, serde_json::Value>> {
        let pushed = self
            .members
            .iter()
            .map(|(name, m)| (name, &m.entry.variables));
        let joined = self
            .joined_in_force()
            .map(|(name, j)| (name, &j.entry.variables));
        pushed
            .chain(joined)
            .filter(|(_, variables)| !variables.is_empty())
            .map(|(name, variables)| (name.clone(), variables.clone()))
            .collect()
    }

    /// Every cluster the hub holds a client of (the file's and the hub), the hub first, then
    /// members by name; joined members are not among them.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Member>> {
        let hub = self
            .members
            .values()
            .filter(|m| m.entry.name.as_str() == HUB_CLUSTER);
        hub.chain(
            self.members
                .values()
                .filter(|m| m.entry.name.as_str() != HUB_CLUSTER),
        )
    }
}

/// What a probe of one cluster found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Health {
    /// Cluster name.
    pub(crate) cluster: String,
    /// Context used.
    pub(crate) context: String,
    /// Whether `/version` answered in time.
    pub(crate) reachable: bool,
    /// The API server's version, when reachable.
    pub(crate) version: Option<String>,
    /// Why it is unreachable.
    pub(crate) error: Option<String>,
}

/// Asks one cluster's API server for its version, within [`PROBE_TIMEOUT`].
pub(crate) async fn probe(member: &Member) -> Health {
    let outcome = tokio::time::timeout(PROBE_TIMEOUT, member.client.apiserver_version()).await;
    let (version, error) = match outcome {
        Ok(Ok(info)) => (Some(info.git_version), None),
        Ok(Err(e)) => (None, Some(e.to_string())),
        Err(_) => (
            None,
            Some(format!("no answer within {}s", PROBE_TIMEOUT.as_secs())),
        ),
    };
    Health {
        cluster: member.entry.name.to_string(),
        context: member.entry.context.clone(),
        reachable: version.is_some(),
        version,
        error,
    }
}

/// Every kubeconfig file the hub (unless in-cluster) and the entries of `file` use.
pub(crate) fn kubeconfig_paths(hub: &HubSource, file: &RegistrationFile) -> BTreeSet<PathBuf> {
    let (kubeconfig, in_cluster) = hub_kubeconfig(hub);
    kubeconfig
        .filter(|_| !in_cluster)
        .into_iter()
        .chain(file.clusters.iter().filter_map(entry_kubeconfig))
        .collect()
}

/// The kubeconfig an entry uses: its own, or the default one.
fn entry_kubeconfig(entry: &ClusterEntry) -> Option<PathBuf> {
    entry.kubeconfig.clone().or_else(default_kubeconfig)
}

/// The hub's kubeconfig, if one is given or found; and whether the hub is reached with the
/// in-cluster configuration instead (nothing given and no kubeconfig file found).
fn hub_kubeconfig(hub: &HubSource) -> (Option<PathBuf>, bool) {
    let kubeconfig = hub.kubeconfig.clone().or_else(default_kubeconfig);
    let in_cluster = hub.kubeconfig.is_none()
        && hub.context.is_none()
        && !kubeconfig.as_ref().is_some_and(|p| p.exists());
    (kubeconfig, in_cluster)
}

fn default_kubeconfig() -> Option<PathBuf> {
    if let Some(first) = std::env::var_os("KUBECONFIG")
        .and_then(|v| std::env::split_paths(&v).find(|p| !p.as_os_str().is_empty()))
    {
        return Some(first);
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".kube/config"))
}

async fn connect_hub(
    hub: &HubSource,
    kubeconfigs: &mut HashMap<PathBuf, Loaded>,
) -> Result<Member> {
    let name: ClusterName = HUB_CLUSTER
        .parse()
        .expect("the hub's name is a valid cluster name");
    let (kubeconfig, in_cluster) = hub_kubeconfig(hub);
    let (client, path, context) = if in_cluster {
        let mut config = Config::incluster().map_err(|e| {
            RegistryError::Hub(format!("no kubeconfig found and not in a cluster ({e})"))
        })?;
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        let client = Client::try_from(config).map_err(|source| RegistryError::Client {
            cluster: HUB_CLUSTER.into(),
            source,
        })?;
        (client, PathBuf::new(), "in-cluster".to_owned())
    } else {
        let path = kubeconfig.ok_or_else(|| RegistryError::Hub("no kubeconfig found".into()))?;
        let loaded = &load_kubeconfig(HUB_CLUSTER, &path, kubeconfigs)?.config;
        let context = match &hub.context {
            Some(c) => c.clone(),
            None => loaded.current_context.clone().ok_or_else(|| {
                RegistryError::Hub(format!(
                    "kubeconfig {} has no current context",
                    path.display()
                ))
            })?,
        };
        let client = client_for(HUB_CLUSTER, &path, &context, kubeconfigs).await?;
        (client, path, context)
    };
    Ok(Member {
        entry: ClusterEntry {
            name,
            context,
            kubeconfig: None,
            labels: BTreeMap::new(),
            variables: BTreeMap::new(),
        },
        kubeconfig_digest: kubeconfigs.get(&path).and_then(|l| l.digest),
        kubeconfig: path,
        client,
    })
}

/// A kubeconfig file as read, with the digest of its content.
struct Loaded {
    config: Kubeconfig,
    digest: Option<Digest>,
}

fn load_kubeconfig<'a>(
    cluster: &str,
    path: &Path,
    cache: &'a mut HashMap<PathBuf, Loaded>,
) -> Result<&'a Loaded> {
    if !cache.contains_key(path) {
        // Digested before it is parsed: should it change in between, the next reload sees a
        // digest that differs and reconnects again, never one that matches a stale parse.
        let digest = digest_file(path);
        let config = Kubeconfig::read_from(path).map_err(|source| RegistryError::Kubeconfig {
            cluster: cluster.to_owned(),
            kubeconfig: path.to_owned(),
            source,
        })?;
        cache.insert(path.to_owned(), Loaded { config, digest });
    }
    Ok(&cache[path])
}

async fn client_for(
    cluster: &str,
    path: &Path,
    context: &str,
    cache: &mut HashMap<PathBuf, Loaded>,
) -> Result<Client> {
    let kubeconfig = load_kubeconfig(cluster, path, cache)?.config.clone();
    let available: BTreeSet<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    if !available.contains(context) {
        return Err(RegistryError::UnknownContext {
            cluster: cluster.to_owned(),
            context: context.to_owned(),
            kubeconfig: path.to_owned(),
            available: available.into_iter().collect(),
        });
    }
    let options = KubeConfigOptions {
        context: Some(context.to_owned()),
        ..Default::default()
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|source| RegistryError::Kubeconfig {
            cluster: cluster.to_owned(),
            kubeconfig: path.to_owned(),
            source,
        })?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Client::try_from(config).map_err(|source| RegistryError::Client {
        cluster: cluster.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RegistrationFile> {
        RegistrationFile::parse(Path::new("clusters.yaml"), text)
    }

    #[test]
    fn a_registration_file_with_labels_parses() {
        let file = parse(
            "clusters:\n  - name: member-1\n    context: member-1\n    kubeconfig: /tmp/kc\n    labels: {region: east}\n  - name: member-2\n    context: ctx-2\n",
        )
        .unwrap();
        assert_eq!(file.clusters.len(), 2);
        assert_eq!(file.clusters[0].labels["region"], "east");
        assert_eq!(file.clusters[1].kubeconfig, None);
    }

    #[test]
    fn a_duplicate_name_is_refused_naming_both_entries() {
        let err =
            parse("clusters:\n  - {name: a, context: x}\n  - {name: a, context: y}\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("clusters.yaml")
                && msg.contains("\"a\"")
                && msg.contains("entries 1 and 2"),
            "{msg}"
        );
    }

    #[test]
    fn the_hub_name_is_reserved() {
        let err = parse("clusters:\n  - {name: hub, context: x}\n").unwrap_err();
        assert!(err.to_string().contains("reserved for the hub"), "{err}");
    }

    #[test]
    fn a_bad_name_or_unknown_field_is_refused_with_its_position() {
        let err = parse("clusters:\n  - {name: Bad_Name, context: x}\n").unwrap_err();
        assert!(err.to_string().contains("Bad_Name"), "{err}");
        let err = parse("clusters:\n  - {name: a, contxt: x}\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("contxt") && msg.contains("line 2"), "{msg}");
    }

    fn joined(name: &str, region: &str) -> (ClusterName, Arc<Joined>) {
        let name: ClusterName = name.parse().unwrap();
        let entry = JoinedEntry {
            name: name.clone(),
            labels: BTreeMap::from([("region".to_owned(), region.to_owned())]),
            variables: BTreeMap::from([("replicas".to_owned(), serde_json::json!(2))]),
        };
        (name, Arc::new(Joined { entry }))
    }

    fn file_member(name: &str, region: &str) -> (ClusterName, Arc<Member>) {
        let client = Client::try_from(Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let name: ClusterName = name.parse().unwrap();
        let entry = ClusterEntry {
            name: name.clone(),
            context: name.to_string(),
            kubeconfig: None,
            labels: BTreeMap::from([("region".to_owned(), region.to_owned())]),
            variables: BTreeMap::new(),
        };
        let member = Member {
            entry,
            kubeconfig: PathBuf::new(),
            kubeconfig_digest: None,
            client,
        };
        (name, Arc::new(member))
    }

    fn registry_of(file: &[(&str, &str)], joined_members: &[(&str, &str)]) -> ClusterRegistry {
        ClusterRegistry {
            members: file.iter().map(|(n, r)| file_member(n, r)).collect(),
            joined: BTreeMap::new(),
        }
        .with_joined(joined_members.iter().map(|(n, r)| joined(n, r)).collect())
    }

    fn name(s: &str) -> ClusterName {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn joined_members_are_planned_for_but_have_no_client() {
        let registry = registry_of(&[("member-1", "east")], &[("edge-1", "west")]);
        assert_eq!(registry.labels()[&name("edge-1")]["region"], "west");
        assert_eq!(registry.labels()[&name("member-1")]["region"], "east");
        assert_eq!(
            registry.variables()[&name("edge-1")]["replicas"],
            serde_json::json!(2)
        );
        assert!(!registry.variables().contains_key(&name("member-1")));
        assert_eq!(
            registry.names(),
            BTreeSet::from([name("edge-1"), name("member-1")])
        );
        assert!(registry.get(&name("edge-1")).is_none(), "no client");
        assert!(registry.joined(&name("edge-1")).is_some());
        assert!(registry.joined(&name("member-1")).is_none());
        assert_eq!(registry.iter().count(), 1, "iter holds clients only");
    }

    #[tokio::test]
    async fn a_name_in_the_file_wins_over_a_member_cluster_of_that_name() {
        let registry = registry_of(&[("edge-1", "east")], &[("edge-1", "west")]);
        assert_eq!(registry.labels()[&name("edge-1")]["region"], "east");
        assert!(registry.joined(&name("edge-1")).is_none());
        assert!(registry.get(&name("edge-1")).is_some());
        assert_eq!(registry.names().len(), 1);

        // The file lets the name go: the joined member is seen again.
        let reloaded = registry_of(&[], &[]).keeping(&registry, |_| true);
        assert_eq!(reloaded.labels()[&name("edge-1")]["region"], "west");
        assert!(reloaded.joined(&name("edge-1")).is_some());
    }

    #[tokio::test]
    async fn a_reload_of_the_file_keeps_every_joined_member() {
        let old = registry_of(
            &[("member-1", "east")],
            &[("edge-1", "west"), ("edge-2", "north")],
        );
        let reloaded = registry_of(&[("member-2", "south")], &[]).keeping(&old, |_| true);
        assert_eq!(
            reloaded.names(),
            BTreeSet::from([name("edge-1"), name("edge-2"), name("member-2")])
        );
        assert!(Arc::ptr_eq(
            reloaded.joined(&name("edge-1")).unwrap(),
            old.joined(&name("edge-1")).unwrap()
        ));
        let replaced = reloaded.with_joined(BTreeMap::from([joined("edge-3", "up")]));
        assert_eq!(
            replaced.names(),
            BTreeSet::from([name("edge-3"), name("member-2")])
        );
    }

    #[tokio::test]
    async fn an_unknown_context_is_refused_listing_the_available_ones() {
        let dir = std::env::temp_dir().join(format!("tenancy-hub-registry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kc = dir.join("kubeconfig");
        std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts:\n  - {name: hub, context: {cluster: c, user: u}}\n  - {name: member-1, context: {cluster: c, user: u}}\ncurrent-context: hub\n",
        )
        .unwrap();
        let file = parse(&format!(
            "clusters:\n  - {{name: member-1, context: member-1, kubeconfig: {k}}}\n  - {{name: member-9, context: member-9, kubeconfig: {k}}}\n",
            k = kc.display()
        ))
        .unwrap();
        let hub = HubSource {
            kubeconfig: Some(kc.clone()),
            context: None,
        };
        let err = ClusterRegistry::connect(&hub, &file).await.err().unwrap();
        let msg = err.to_string();
        assert!(
            msg.contains("cluster member-9")
                && msg.contains("\"member-9\"")
                && msg.contains("available contexts: hub, member-1"),
            "{msg}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
