//! The pull protocol both sides share: the agent's configuration, the calls the hub signs for one cluster, the reports its agent writes back, and where each lives in the member's hub namespace.
//!
//! A call is JSON under the Secret key [`CALL_KEY`], with an Ed25519 signature of those exact
//! bytes under [`SIGNATURE_KEY`]. The signing key is derived from the operator's sealing key and
//! never leaves the operator; an agent holds only the public half (in [`AgentConfig`]), so what
//! it carries out is exactly what the hub decided for its own cluster, whoever else may write
//! Secrets in that namespace.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use ring::signature::{self, Ed25519KeyPair, KeyPair as _};

use crate::{api::key::ClusterName, helm::seal::SealKey};

/// Secret data key of a call's JSON.
pub(crate) const CALL_KEY: &str = "call";
/// Secret data key of a call's signature.
pub(crate) const SIGNATURE_KEY: &str = "signature";
/// Tag signed before a call's bytes, so no other signed message is ever taken for a call.
const CALL_CONTEXT: &[u8] = b"tenancy-hub-call/v1\n";
/// What the work signing key is derived for from the sealing key.
const WORK_KEY_PURPOSE: &str = "tenancy-hub-work/v1";

/// Errors of reading the protocol's objects.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A field is missing or malformed.
    #[error("{what} is missing or malformed: {detail}")]
    Malformed {
        /// Which object or field.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The signature does not verify under the hub's work key.
    #[error("the call {name} is not signed by the hub's work key; it is ignored")]
    Unsigned {
        /// The call's object name.
        name: String,
    },
    /// The call was signed for another cluster.
    #[error("the call {name} was signed for cluster {signed_for}, not {cluster}; it is ignored")]
    OtherCluster {
        /// The call's object name.
        name: String,
        /// The cluster it names.
        signed_for: String,
        /// This agent's cluster.
        cluster: ClusterName,
    },
}

/// What an agent needs to know from the hub: its cluster's name, the key it seals its release
/// records with (derived for that cluster alone) and the hub's public work key. The operator
/// writes it in the member's hub namespace as the Secret
/// [`crate::api::member_cluster::AGENT_CONFIG_SECRET`].
#[derive(Clone)]
pub struct AgentConfig {
    /// The member's registered name.
    pub cluster: ClusterName,
    /// The key its records are sealed with.
    pub seal: SealKey,
    /// The hub's public Ed25519 key, which every call must verify under.
    pub(crate) work_key: Vec<u8>,
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("cluster", &self.cluster)
            .field("work_key", &hex(&self.work_key))
            .finish_non_exhaustive()
    }
}

impl AgentConfig {
    /// The configuration of `cluster`'s agent under the operator's sealing key `master`.
    pub(crate) fn for_cluster(master: &SealKey, cluster: &ClusterName) -> Self {
        Self {
            cluster: cluster.clone(),
            seal: master.for_cluster(cluster),
            work_key: Signer::new(master).public_key(),
        }
    }

    /// As the data of its Secret.
    pub(crate) fn to_data(&self) -> BTreeMap<String, ByteString> {
        BTreeMap::from([
            ("cluster".into(), ByteString(self.cluster.as_str().into())),
            (
                "sealKey".into(),
                ByteString(self.seal.to_hex().into_bytes()),
            ),
            (
                "workKey".into(),
                ByteString(hex(&self.work_key).into_bytes()),
            ),
        ])
    }

    /// Read back from the data of its Secret.
    pub fn from_data(data: &BTreeMap<String, ByteString>) -> Result<Self, WireError> {
        let field = |key: &str| {
            data.get(key)
                .and_then(|v| String::from_utf8(v.0.clone()).ok())
                .ok_or_else(|| malformed(key, "not in the agent's configuration Secret"))
        };
        let cluster = field("cluster")?
            .parse()
            .map_err(|e| malformed("cluster", &format!("{e}")))?;
        let seal = unhex(&field("sealKey")?)
            .and_then(|bytes| SealKey::from_bytes(&bytes))
            .ok_or_else(|| malformed("sealKey", "not 32 to 64 bytes of hex"))?;
        let work_key = unhex(&field("workKey")?)
            .filter(|k| k.len() == 32)
            .ok_or_else(|| malformed("workKey", "not 32 bytes of hex"))?;
        Ok(Self {
            cluster,
            seal,
            work_key,
        })
    }

    /// Opens the call in a Secret's `data` named `name`: its signature must verify under the
    /// hub's work key and it must be for this cluster. Returns its JSON bytes.
    pub(crate) fn open<'a>(
        &self,
        name: &str,
        data: &'a BTreeMap<String, ByteString>,
    ) -> Result<&'a [u8], WireError> {
        let (Some(call), Some(sig)) = (data.get(CALL_KEY), data.get(SIGNATURE_KEY)) else {
            return Err(malformed(name, "holds no call and signature"));
        };
        let message = [CALL_CONTEXT, &call.0].concat();
        signature::UnparsedPublicKey::new(&signature::ED25519, &self.work_key)
            .verify(&message, &sig.0)
            .map_err(|_| WireError::Unsigned { name: name.into() })?;
        Ok(&call.0)
    }

    /// Checks that a call signed for `signed_for` is this agent's.
    pub(crate) fn check_cluster(
        &self,
        name: &str,
        signed_for: &ClusterName,
    ) -> Result<(), WireError> {
        if signed_for == &self.cluster {
            return Ok(());
        }
        Err(WireError::OtherCluster {
            name: name.into(),
            signed_for: signed_for.to_string(),
            cluster: self.cluster.clone(),
        })
    }
}

/// The operator's work signing key, derived from its sealing key so every replica has the same.
pub(crate) struct Signer {
    pair: Ed25519KeyPair,
}

impl Signer {
    /// The signer of the operator whose sealing key is `master`.
    pub(crate) fn new(master: &SealKey) -> Self {
        let seed = master.derive(WORK_KEY_PURPOSE);
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).expect("any 32 bytes make a seed");
        Self { pair }
    }

    /// The public half, which agents verify with.
    pub(crate) fn public_key(&self) -> Vec<u8> {
        self.pair.public_key().as_ref().to_vec()
    }

    /// The Secret data of a call whose JSON is `call`: the bytes and their signature.
    pub(crate) fn sign(&self, call: Vec<u8>) -> BTreeMap<String, ByteString> {
        let message = [CALL_CONTEXT, &call].concat();
        let sig = self.pair.sign(&message).as_ref().to_vec();
        BTreeMap::from([
            (CALL_KEY.into(), ByteString(call)),
            (SIGNATURE_KEY.into(), ByteString(sig)),
        ])
    }
}

fn malformed(what: &str, detail: &str) -> WireError {
    WireError::Malformed {
        what: what.into(),
        detail: detail.into(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master() -> SealKey {
        SealKey::from_bytes(&[7u8; 32]).unwrap()
    }

    fn config(cluster: &str) -> AgentConfig {
        AgentConfig::for_cluster(&master(), &cluster.parse().unwrap())
    }

    #[test]
    fn an_agent_configuration_reads_back_from_its_secret_data() {
        let written = config("edge-1");
        let read = AgentConfig::from_data(&written.to_data()).unwrap();
        assert_eq!(read.cluster, written.cluster);
        assert_eq!(read.work_key, written.work_key);
        assert_eq!(read.seal.to_hex(), written.seal.to_hex());
        assert_ne!(
            read.seal.to_hex(),
            master().to_hex(),
            "never the operator's own key"
        );
    }

    #[test]
    fn a_call_signed_by_the_hub_opens_and_a_changed_one_does_not() {
        let agent = config("edge-1");
        let data = Signer::new(&master()).sign(br#"{"x":1}"#.to_vec());
        assert_eq!(agent.open("work-a", &data).unwrap(), br#"{"x":1}"#);
        let mut forged = data.clone();
        forged.insert(CALL_KEY.into(), ByteString(br#"{"x":2}"#.to_vec()));
        assert!(matches!(
            agent.open("work-a", &forged),
            Err(WireError::Unsigned { .. })
        ));
        let other_hub = Signer::new(&SealKey::from_bytes(&[8u8; 32]).unwrap());
        assert!(
            agent
                .open("work-a", &other_hub.sign(b"{}".to_vec()))
                .is_err()
        );
        assert!(agent.open("work-a", &BTreeMap::new()).is_err());
    }

    #[test]
    fn a_call_for_another_cluster_is_refused() {
        let agent = config("edge-1");
        assert!(agent.check_cluster("w", &"edge-1".parse().unwrap()).is_ok());
        let refused = agent.check_cluster("w", &"edge-2".parse().unwrap());
        assert!(matches!(refused, Err(WireError::OtherCluster { .. })));
    }

    #[test]
    fn an_agents_records_verify_on_the_hub_and_not_under_another_clusters_key() {
        use crate::helm::seal::Sealed;
        let cluster: ClusterName = "edge-1".parse().unwrap();
        let agent = config("edge-1");
        let labels = |seal: &SealKey, cluster: &str| {
            let sealed = Sealed {
                cluster,
                namespace: "team-a",
                release: "web",
                revision: 1,
                owner_namespace: "team-a",
                owner_name: "c",
                spec_hash: "h",
                content: "0123",
            };
            BTreeMap::from([
                ("name".to_string(), "web".to_string()),
                ("version".to_string(), "1".to_string()),
                (
                    crate::plan::OWNER_NAMESPACE_LABEL.to_string(),
                    "team-a".to_string(),
                ),
                (crate::plan::OWNER_NAME_LABEL.to_string(), "c".to_string()),
                (crate::plan::SPEC_HASH_LABEL.to_string(), "h".to_string()),
                (
                    crate::helm::seal::CONTENT_LABEL.to_string(),
                    "0123".to_string(),
                ),
                (
                    crate::helm::seal::SEAL_LABEL.to_string(),
                    seal.seal(&sealed),
                ),
            ])
        };
        let sealed_by_agent = labels(&agent.seal, "edge-1");
        assert!(master().verifies(&cluster, "team-a", &sealed_by_agent));
        let other: ClusterName = "edge-2".parse().unwrap();
        let sealed_by_other = labels(&config("edge-2").seal, "edge-1");
        assert!(!master().verifies(&cluster, "team-a", &sealed_by_other));
        assert!(!master().verifies(&other, "team-a", &sealed_by_agent));
    }
}
