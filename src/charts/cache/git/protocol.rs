//! The Git fetcher's protocol, version 1 (pure): the JSON request the operator writes on `tenancy-hub-git`'s stdin and the answer it reads back, as `src/charts/git/testdata/protocol` shows them.

use serde::{Deserialize, Serialize};

use crate::api::crd::RefKind;

/// The protocol version both sides speak.
pub(crate) const PROTOCOL: u32 = 1;
/// The largest answer read from the fetcher's stdout.
pub(crate) const MAX_ANSWER: usize = 1 << 20;
/// The largest request the fetcher reads.
pub(crate) const MAX_REQUEST: usize = 4 << 20;

/// What is asked of the fetcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Op {
    /// The commit a ref names now (`git ls-remote`).
    Resolve,
    /// One commit's paths written under a directory.
    Fetch,
}

/// A ref as the protocol writes it: exactly one field.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WireRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    semver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    commit: Option<String>,
    /// With `semver` only: the tag patterns the range picks among (none: every tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tags: Option<Vec<String>>,
}

impl From<&RefKind> for WireRef {
    fn from(reference: &RefKind) -> Self {
        let mut out = Self::default();
        match reference {
            RefKind::Branch(b) => out.branch = Some(b.clone()),
            RefKind::Tag(t) => out.tag = Some(t.clone()),
            RefKind::Semver(s) => out.semver = Some(s.clone()),
            RefKind::Commit(c) => out.commit = Some(c.clone()),
        }
        out
    }
}

/// How the fetcher authenticates: what a source's Secret holds, only ever written on the pipe.
/// Its `Debug` form shows which kind, never the content.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Auth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) username: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) password: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bearer_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ssh_private_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ssh_passphrase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) known_hosts: Option<String>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "***"))
            .field(
                "ssh_private_key",
                &self.ssh_private_key.as_ref().map(|_| "***"),
            )
            .field(
                "ssh_passphrase",
                &self.ssh_passphrase.as_ref().map(|_| "***"),
            )
            .field("known_hosts", &self.known_hosts.is_some())
            .finish()
    }
}

impl Auth {
    /// The secret pieces (passwords, tokens, keys), to be masked in whatever the fetcher says.
    pub(crate) fn secrets(&self) -> Vec<&str> {
        [
            &self.password,
            &self.bearer_token,
            &self.ssh_private_key,
            &self.ssh_passphrase,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
    }
}

/// A path the fetch writes: a `dir` (a chart) or a `file` (a values file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WantedPath {
    /// Relative to the repository's root, in normal form.
    pub(crate) path: String,
    /// `dir` or `file`.
    pub(crate) kind: PathKind,
    /// A file only: its absence is no error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) optional: bool,
}

/// Whether a path is a directory or a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PathKind {
    /// A directory with every file under it.
    Dir,
    /// One regular file.
    File,
}

/// The keys one of which must have signed the commit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VerifyKeys {
    /// Armored PGP public keys.
    #[serde(default, rename = "pgpKeys", skip_serializing_if = "Vec::is_empty")]
    pub(crate) pgp_keys: Vec<String>,
    /// SSH public keys, one `authorized_keys` line each.
    #[serde(default, rename = "sshKeys", skip_serializing_if = "Vec::is_empty")]
    pub(crate) ssh_keys: Vec<String>,
}

/// One request. Its `Debug` form hides the credentials (see [`Auth`]) and the CA bundle.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Request {
    pub(crate) protocol: u32,
    pub(crate) op: Op,
    pub(crate) url: String,
    #[serde(rename = "ref")]
    pub(crate) reference: WireRef,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) timeout_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) auth: Option<Auth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca_bundle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) commit: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) max_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) out: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) paths: Vec<WantedPath>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) verify: Option<VerifyKeys>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("op", &self.op)
            .field("url", &self.url)
            .field("ref", &self.reference)
            .field("auth", &self.auth)
            .field("ca_bundle", &self.ca_bundle.is_some())
            .field("commit", &self.commit)
            .field("paths", &self.paths)
            .field("verify", &self.verify.is_some())
            .finish()
    }
}

/// What a source's Secret and policy give a request: credentials, a CA bundle, trust keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Access {
    /// Credentials, when the source takes any.
    pub(crate) auth: Option<Auth>,
    /// A PEM CA bundle trusted besides the system's roots (https).
    pub(crate) ca_bundle: Option<String>,
}

impl Request {
    /// The request resolving `reference` of the repository `url` to a commit; a semver range
    /// among the tags the patterns `tags` allow only (every tag when None).
    pub(crate) fn resolve(
        url: &str,
        reference: &RefKind,
        tags: Option<&[String]>,
        access: &Access,
        timeout: u64,
    ) -> Self {
        let mut wire = WireRef::from(reference);
        if matches!(reference, RefKind::Semver(_)) {
            wire.tags = tags.map(<[String]>::to_vec);
        }
        Self {
            protocol: PROTOCOL,
            op: Op::Resolve,
            url: url.to_owned(),
            reference: wire,
            timeout_seconds: timeout,
            auth: access.auth.clone(),
            ca_bundle: access.ca_bundle.clone(),
            commit: None,
            max_bytes: 0,
            out: None,
            paths: Vec::new(),
            verify: None,
        }
    }

    /// The request writing `paths` of `commit` (what resolving `reference` answered) under the
    /// empty directory `out`, within `max_bytes`, the commit's signature checked against
    /// `verify` when given.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fetch(
        url: &str,
        reference: &RefKind,
        access: &Access,
        timeout: u64,
        commit: &str,
        (out, max_bytes): (&std::path::Path, u64),
        paths: Vec<WantedPath>,
        verify: Option<VerifyKeys>,
    ) -> Self {
        Self {
            op: Op::Fetch,
            commit: Some(commit.to_owned()),
            max_bytes,
            out: Some(out.to_string_lossy().into_owned()),
            paths,
            verify,
            ..Self::resolve(url, reference, None, access, timeout)
        }
    }

    /// The request as the bytes written on the fetcher's stdin; too large a request (keys
    /// without end) is refused.
    pub(crate) fn to_bytes(&self) -> Result<Vec<u8>, String> {
        let bytes = serde_json::to_vec(self).expect("plain data serializes");
        match bytes.len() > MAX_REQUEST {
            true => Err(format!(
                "the request to the Git fetcher would be larger than {} MiB (credentials or keys too large)",
                MAX_REQUEST >> 20
            )),
            false => Ok(bytes),
        }
    }
}

/// A successful answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Found {
    /// The commit: 40 hex digits.
    pub(crate) commit: String,
    /// The full name of the ref (`refs/heads/main`, `refs/tags/v1.2.0`); empty for a commit.
    #[serde(default, rename = "ref")]
    pub(crate) reference: String,
    /// Fetch: each path asked for, in order, and whether it was written.
    #[serde(default)]
    pub(crate) paths: Vec<WrittenPath>,
    /// Fetch with verify: the key that signed the commit.
    #[serde(default)]
    pub(crate) signed_by: String,
}

/// Whether one path asked for was written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct WrittenPath {
    /// The path, as asked.
    pub(crate) path: String,
    /// False only for an optional file that is not there.
    pub(crate) written: bool,
}

/// A code and a message, as `refused` and `error` carry them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct Said {
    /// `refused`: unsigned, untrusted, invalid, path, symlink, submodule, size.
    #[serde(default)]
    code: String,
    /// `error`: request, auth, network, notfound, limit, unsupported.
    #[serde(default)]
    kind: String,
    /// What happened and what to do.
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct WireAnswer {
    protocol: u32,
    #[serde(default)]
    ok: Option<Found>,
    #[serde(default)]
    refused: Option<Said>,
    #[serde(default)]
    error: Option<Said>,
}

/// The fetcher's answer, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Resolved, or fetched.
    Ok(Found),
    /// Refused for what the repository holds: the code and the fetcher's words.
    Refused { code: String, message: String },
    /// No answer reached: the kind (`auth`, `network`, `notfound`, …) and the fetcher's words.
    Error { kind: String, message: String },
}

/// The longest message of the fetcher's that is kept.
const SHOWN_MESSAGE: usize = 1024;

/// Reads an answer: bounded, of this protocol, exactly one of ok, refused and error, a commit
/// of 40 hex digits, messages cut to printable text of bounded length with `secrets` masked.
pub(crate) fn parse_answer(bytes: &[u8], secrets: &[&str]) -> Result<Answer, String> {
    if bytes.len() > MAX_ANSWER {
        return Err(format!(
            "the Git fetcher answered more than {} KiB",
            MAX_ANSWER >> 10
        ));
    }
    let wire: WireAnswer = serde_json::from_slice(bytes).map_err(|e| {
        format!(
            "the Git fetcher's answer is not protocol JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    if wire.protocol != PROTOCOL {
        return Err(format!(
            "the Git fetcher speaks protocol {}, this operator {PROTOCOL}: install the fetcher of this release",
            wire.protocol
        ));
    }
    let clean = |text: &str| {
        let mut out = text.to_owned();
        for secret in secrets.iter().filter(|s| s.len() >= 4) {
            out = out.replace(secret, "***");
        }
        let mut shown: String = out
            .chars()
            .take(SHOWN_MESSAGE)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if out.chars().count() > SHOWN_MESSAGE {
            shown.push('…');
        }
        crate::policy::source::redact(&shown)
    };
    match (wire.ok, wire.refused, wire.error) {
        (Some(found), None, None) => {
            if found.commit.len() != 40 || !found.commit.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err("the Git fetcher answered a commit that is not 40 hex digits".into());
            }
            Ok(Answer::Ok(Found {
                commit: found.commit.to_ascii_lowercase(),
                reference: clean(&found.reference),
                signed_by: clean(&found.signed_by),
                paths: found.paths,
            }))
        }
        (None, Some(said), None) => Ok(Answer::Refused {
            code: clean(&said.code),
            message: clean(&said.message),
        }),
        (None, None, Some(said)) => Ok(Answer::Error {
            kind: clean(&said.kind),
            message: clean(&said.message),
        }),
        _ => Err("the Git fetcher's answer holds not exactly one of ok, refused and error".into()),
    }
}
