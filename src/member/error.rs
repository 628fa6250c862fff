//! What can go wrong at the hub/member seam ([`LinkError`]): each failure names its cluster (and release, where there is one) and says what to do.

use std::time::Duration;

use crate::api::key::{ClusterName, ReleaseKey};

/// Result alias of the seam.
pub(crate) type Result<T, E = LinkError> = std::result::Result<T, E>;

/// Why a member cluster could not be read, asked or sent something.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// A pull member whose agent never connected.
    #[error(
        "pull member {cluster} has no agent connected yet: join it (tenancy-hub cluster add --pull {cluster}, then tenancy-hub join in the member)"
    )]
    NoAgent {
        /// The member.
        cluster: ClusterName,
    },
    /// A pull member whose agent stopped renewing its Lease.
    #[error(
        "the agent of pull member {cluster} has not renewed its Lease since {since}; what the hub decides for it waits and runs when it is back"
    )]
    AgentAway {
        /// The member.
        cluster: ClusterName,
        /// When the Lease was last renewed.
        since: String,
    },
    /// A pull member whose agent has not reported its release records yet.
    #[error(
        "pull member {cluster} has not reported its release records yet; is its agent running?"
    )]
    NotReported {
        /// The member.
        cluster: ClusterName,
    },
    /// A pull member's agent did not reply to an ask in time.
    #[error("the agent of pull member {cluster} did not reply within {} s", within.as_secs())]
    Timeout {
        /// The member.
        cluster: ClusterName,
        /// How long the reply was waited for.
        within: Duration,
    },
    /// A pull member's agent replied with the answer to another question than it was asked.
    #[error(
        "the agent of pull member {cluster} replied to another question: is it another version than the operator?"
    )]
    WrongReply {
        /// The member.
        cluster: ClusterName,
    },
    /// A pull member's agent replied that it could not do what it was asked.
    #[error("the agent of pull member {cluster}: {reason}")]
    Agent {
        /// The member.
        cluster: ClusterName,
        /// What the agent said.
        reason: String,
    },
    /// A call for a pull member made by a process that holds no signing key (the CLI).
    #[error("cluster {cluster} is a pull member: only the operator signs its calls")]
    NotSigner {
        /// The member.
        cluster: ClusterName,
    },
    /// A call for a pull member larger than the member is sent.
    #[error(
        "the call for cluster {cluster} is {kib} KiB, more than the {max_kib} KiB a pull member is sent; make its values smaller"
    )]
    TooLarge {
        /// The member.
        cluster: ClusterName,
        /// The call's size.
        kib: usize,
        /// The most a call may be.
        max_kib: usize,
    },
    /// A call that could not be encoded.
    #[error("the call for cluster {cluster} cannot be encoded: {source}")]
    Encode {
        /// The member.
        cluster: ClusterName,
        /// The error.
        source: serde_json::Error,
    },
    /// A release record that holds nothing readable.
    #[error("release {key}: {reason}")]
    Record {
        /// The release (naming its cluster).
        key: ReleaseKey,
        /// What is wrong with its record.
        reason: String,
    },
    /// The API server refused the operator's request.
    #[error("{doing}: forbidden ({reason}); the operator's identity needs that right there")]
    Forbidden {
        /// What was refused, naming the cluster.
        doing: String,
        /// The API server's message.
        reason: String,
    },
    /// The API server could not be reached.
    #[error("{doing}: the API server cannot be reached ({source})")]
    Unreachable {
        /// What was tried, naming the cluster.
        doing: String,
        /// The error.
        source: Box<kube::Error>,
    },
    /// The API server answered with an error.
    #[error("{doing}: {source}")]
    Kube {
        /// What was tried, naming the cluster.
        doing: String,
        /// The error.
        source: Box<kube::Error>,
    },
}

impl LinkError {
    /// The failure of `doing` (a phrase naming the cluster) at an API server: refused, not
    /// reached, or another error.
    pub(crate) fn kube(doing: impl Into<String>, error: kube::Error) -> Self {
        let doing = doing.into();
        match error {
            kube::Error::Api(status) if status.code == 403 => LinkError::Forbidden {
                doing,
                reason: status.message,
            },
            error if is_connection(&error) => LinkError::Unreachable {
                doing,
                source: Box::new(error),
            },
            error => LinkError::Kube {
                doing,
                source: Box::new(error),
            },
        }
    }
}

/// Whether `error` is a failure to reach the API server at all (no answer came).
fn is_connection(error: &kube::Error) -> bool {
    matches!(error, kube::Error::HyperError(_) | kube::Error::Service(_))
}
