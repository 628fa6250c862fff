//! Typed keys: `ClusterName`, `ClusterNamespace` (`cluster/namespace`) and `ReleaseKey`.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// Why a key did not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// A cluster or namespace name is not a DNS-1123 label.
    #[error(
        "{what} {value:?} is not a DNS-1123 label: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
    )]
    NotALabel {
        /// What was being named (cluster, namespace).
        what: &'static str,
        /// The rejected text.
        value: String,
    },
    /// A composite key lacks one of its parts.
    #[error("{value:?} is not a {expected} key")]
    Shape {
        /// The rejected text.
        value: String,
        /// The expected form, such as `cluster/namespace`.
        expected: &'static str,
    },
}

/// True when `s` is a DNS-1123 label.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && ok(&b[0])
        && ok(&b[b.len() - 1])
        && b.iter().all(|c| ok(c) || *c == b'-')
}

fn label(what: &'static str, s: &str) -> Result<String, KeyError> {
    if is_dns1123_label(s) {
        Ok(s.to_owned())
    } else {
        Err(KeyError::NotALabel {
            what,
            value: s.to_owned(),
        })
    }
}

/// A registered cluster's name, as used in `spec.tenancies[].clusters` and in status.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ClusterName(String);

impl ClusterName {
    /// The cluster name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ClusterName {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        label("cluster name", s).map(Self)
    }
}

impl TryFrom<String> for ClusterName {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        s.parse()
    }
}

impl From<ClusterName> for String {
    fn from(c: ClusterName) -> String {
        c.0
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A namespace in one cluster, shown and parsed as `cluster/namespace`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterNamespace {
    /// The cluster.
    pub cluster: ClusterName,
    /// The namespace in that cluster.
    pub namespace: String,
}

impl ClusterNamespace {
    /// Builds the key, checking the namespace is a DNS-1123 label.
    pub fn new(cluster: ClusterName, namespace: &str) -> Result<Self, KeyError> {
        Ok(Self {
            cluster,
            namespace: label("namespace", namespace)?,
        })
    }
}

impl FromStr for ClusterNamespace {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        let (cluster, namespace) = s.split_once('/').ok_or_else(|| KeyError::Shape {
            value: s.to_owned(),
            expected: "cluster/namespace",
        })?;
        Self::new(cluster.parse()?, namespace)
    }
}

impl fmt::Display for ClusterNamespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.cluster, self.namespace)
    }
}

/// One Helm release in one namespace of one cluster, shown as `cluster/namespace/release`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ReleaseKey {
    /// Where the release lives.
    pub scope: ClusterNamespace,
    /// The Helm release name.
    pub release: String,
}

impl FromStr for ReleaseKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        let (scope, release) = s.rsplit_once('/').ok_or_else(|| KeyError::Shape {
            value: s.to_owned(),
            expected: "cluster/namespace/release",
        })?;
        if release.is_empty() {
            return Err(KeyError::Shape {
                value: s.to_owned(),
                expected: "cluster/namespace/release",
            });
        }
        Ok(Self {
            scope: scope.parse()?,
            release: release.to_owned(),
        })
    }
}

impl TryFrom<String> for ReleaseKey {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        s.parse()
    }
}

impl From<ReleaseKey> for String {
    fn from(k: ReleaseKey) -> String {
        k.to_string()
    }
}

impl fmt::Display for ReleaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.scope, self.release)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_namespace_round_trips_through_its_text_form() {
        let key: ClusterNamespace = "member-1/foo".parse().unwrap();
        assert_eq!(key.cluster.as_str(), "member-1");
        assert_eq!(key.namespace, "foo");
        assert_eq!(key.to_string(), "member-1/foo");
    }

    #[test]
    fn a_release_key_round_trips_through_its_text_form() {
        let key: ReleaseKey = "hub/foo/nginx".parse().unwrap();
        assert_eq!(key.scope.to_string(), "hub/foo");
        assert_eq!(key.release, "nginx");
        assert_eq!(key.to_string(), "hub/foo/nginx");
    }

    #[test]
    fn malformed_keys_are_refused_with_the_expected_form() {
        let err = "member-1".parse::<ClusterNamespace>().unwrap_err();
        assert!(err.to_string().contains("cluster/namespace"));
        let err = "member-1/foo/".parse::<ReleaseKey>().unwrap_err();
        assert!(err.to_string().contains("cluster/namespace/release"));
        let err = "Member_1/foo".parse::<ClusterNamespace>().unwrap_err();
        assert!(err.to_string().contains("cluster name \"Member_1\""));
    }

    #[test]
    fn dns1123_labels_are_recognised() {
        assert!(is_dns1123_label("a"));
        assert!(is_dns1123_label("member-12"));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label("A"));
        assert!(!is_dns1123_label("a.b"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
    }

    #[test]
    fn cluster_names_deserialize_only_when_valid() {
        assert!(serde_yaml::from_str::<ClusterName>("member-1").is_ok());
        assert!(serde_yaml::from_str::<ClusterName>("bad name").is_err());
    }
}
