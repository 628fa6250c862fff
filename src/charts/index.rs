//! Repository indexes: parsed within bounds, their URLs and the archive URLs they name held to the repository's prefix, digests in normal form.

use std::collections::HashMap;

use reqwest::Url;
use serde::Deserialize;

use crate::policy::source::{self, SourceUrl, redact};

use crate::charts::common::*;

/// One version of a chart as a repository index lists it.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct IndexEntry {
    pub(crate) version: String,
    #[serde(default)]
    pub(crate) urls: Vec<String>,
    #[serde(default)]
    pub(crate) digest: Option<String>,
}

/// The part of a repository index the cache reads: every chart's versions.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Index {
    #[serde(default)]
    pub(crate) entries: HashMap<String, Vec<IndexEntry>>,
}

/// Parses an index (YAML or JSON), keeping only what the cache reads. A failure says where
/// the YAML breaks, never what it holds (serde's messages quote the offending value).
pub(crate) fn parse_index(url: &Url, bytes: &[u8]) -> Result<Index> {
    serde_yaml::from_slice(bytes).map_err(|e| Error::Index {
        url: redact(url.as_str()),
        reason: yaml_error(&e),
    })
}

/// Where a YAML document breaks, without its content.
pub(crate) fn yaml_error(error: &serde_yaml::Error) -> String {
    match error.location() {
        Some(at) => format!("YAML error at line {}, column {}", at.line(), at.column()),
        None => "YAML error".to_owned(),
    }
}

/// The index URL of a repository (in normal form): `URL/index.yaml`.
pub(crate) fn index_url(repository: &SourceUrl) -> Result<Url> {
    let mut url = parse_url(repository.as_str())?;
    let path = format!("{}/index.yaml", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok(url)
}

/// The repository as a directory, against which an index's relative archive URLs are taken,
/// as helm takes them.
pub(crate) fn archive_base(repository: &SourceUrl) -> Result<Url> {
    let mut base = parse_url(repository.as_str())?;
    let path = format!("{}/", base.path().trim_end_matches('/'));
    base.set_path(&path);
    Ok(base)
}

/// Where an index entry's archive is (its first URL, taken relative to the repository, which
/// must lie under `scope`) and the sha256 it must have, when the index gives one.
pub(crate) fn archive_of(
    repository: &SourceUrl,
    chart: &str,
    entry: &IndexEntry,
    scope: &SourceUrl,
) -> Result<(Url, Option<String>)> {
    let (chart, version, url) = (
        chart.to_owned(),
        entry.version.clone(),
        repository.to_string(),
    );
    let expected = match entry.digest.as_deref().map(normal_digest) {
        Some(None) => {
            return Err(Error::BadDigest {
                chart,
                version,
                url,
            });
        }
        Some(Some(digest)) => Some(digest),
        None => None,
    };
    let Some(reference) = entry.urls.first() else {
        return Err(Error::NoArchive {
            chart,
            version,
            url,
        });
    };
    match source::follow(&archive_base(repository)?, reference, scope) {
        Ok(location) => Ok((location, expected)),
        Err(reason) => Err(Error::ArchiveRefused {
            chart,
            version,
            url,
            reason,
        }),
    }
}

pub(crate) fn parse_url(url: &str) -> Result<Url> {
    Url::parse(url).map_err(|e| Error::Url {
        url: redact(url),
        reason: e.to_string(),
    })
}

/// An index digest as lowercase hex, without a `sha256:` prefix; None unless 64 hex digits.
pub(crate) fn normal_digest(digest: &str) -> Option<String> {
    let digest = digest.trim();
    let hex = digest
        .strip_prefix("sha256:")
        .unwrap_or(digest)
        .to_ascii_lowercase();
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

/// Whether a file name is a cached archive's: 64 lowercase hex digits and `.tgz`.
pub(crate) fn digest_of_name(name: &str) -> Option<&str> {
    let digest = name.strip_suffix(".tgz")?;
    (digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    .then_some(digest)
}
