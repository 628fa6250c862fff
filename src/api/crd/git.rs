//! A chart's Git source (`git` of a chart entry): the repository, the ref (a branch, a tag, a semver range of tags or a commit), the chart's directory in it, and how often it is looked at.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// The schema's pattern of a path in a repository: relative, segments split by '/', none of
/// them '..', no '\'. A pattern, not a CEL rule: a rule on every path of every chart and
/// override exceeds the API server's CEL cost budget.
const RELATIVE_PATH: &str = r"^([^/\\.][^/\\]*|\.|\.[^/\\.][^/\\]*|\.\.[^/\\]+)(/([^/\\.][^/\\]*|\.|\.[^/\\.][^/\\]*|\.\.[^/\\]+))*/?$";

/// A chart taken from a directory of a Git repository, at a branch, a tag, the newest tag in a
/// semver range, or a commit. The hub fetches it (shallow, bounded, with the credentials a
/// TenancyPolicy's `sources` entry names), packs the directory into a chart archive and plans,
/// fingerprints and ships that archive, as for a repository chart; the commit is shown in the
/// status. Only where a TenancyPolicy governing the hub namespace lists the repository, the path
/// and the ref in a `sources` entry with `git`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// The repository: `https://git.example.com/team/charts.git` or
    /// `ssh://git@git.example.com/team/charts.git` (no password, query or fragment; credentials
    /// come from the policy's Secret); `http://` only under a Git prefix a TenancyPolicy lists.
    #[schemars(
        length(min = 1, max = 2048),
        regex(pattern = r"^(https?|ssh)://[^/?#]+/[^?#]+$")
    )]
    pub url: String,

    /// The ref the chart is taken at: exactly one of `branch`, `tag`, `semver`, `commit`.
    #[serde(rename = "ref")]
    pub reference: GitRef,

    /// The chart's directory in the repository, relative to its root (`charts/web`): no leading
    /// `/`, no `..` segment, no `\`. Its `Chart.yaml` names the chart: it must be `chartName`.
    #[schemars(
        length(min = 1, max = 1024),
        regex(pattern = RELATIVE_PATH)
    )]
    pub path: String,

    /// How often the ref is looked up again (a branch moves, a new tag matches): a duration such
    /// as "1m" or "30s", taken within 10s and 24h. Default: 1m, as Flux's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^([0-9]+(s|m|h))+$"), length(max = 32))]
    pub interval: Option<String>,
}

/// Which commit of a Git repository is taken: exactly one field.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
// Exactly one field, as the schema's property count (a CEL rule on every ref of every chart and
// override exceeds the API server's CEL cost budget).
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct GitRef {
    /// The newest commit of this branch (`main`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), regex(pattern = r"^[^\s~^:?*\[\\]+$"))]
    pub branch: Option<String>,
    /// This tag (`v1.2.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255), regex(pattern = r"^[^\s~^:?*\[\\]+$"))]
    pub tag: Option<String>,
    /// The newest tag whose version (a leading `v` allowed) matches this range (`>=1.0.0 <2.0.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub semver: Option<String>,
    /// This commit: 40 lowercase hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^[0-9a-f]{40}$"))]
    pub commit: Option<String>,
}

/// A Git ref as one value: what [`GitRef`] says once it is known to say exactly one thing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RefKind {
    /// A branch's newest commit.
    Branch(String),
    /// A tag.
    Tag(String),
    /// The newest tag in a semver range.
    Semver(String),
    /// A commit.
    Commit(String),
}

/// Seconds between resolutions of a ref when its source names no `interval`: Flux's minute.
pub const DEFAULT_INTERVAL_SECS: u64 = 60;
/// The shortest and longest intervals taken, in seconds (the schema holds the same bounds).
const INTERVAL_BOUNDS: (u64, u64) = (10, 24 * 3600);

impl GitSource {
    /// Seconds between resolutions of the ref (see [`interval_secs`]).
    pub fn interval_secs(&self) -> u64 {
        interval_secs(self.interval.as_deref())
    }
}

impl GitValuesSource {
    /// Seconds between resolutions of the ref (see [`interval_secs`]).
    pub fn interval_secs(&self) -> u64 {
        interval_secs(self.interval.as_deref())
    }
}

/// Seconds between resolutions of a ref: `interval` (`1m`, `90s`, `1h30m`) within 10s and 24h,
/// else [`DEFAULT_INTERVAL_SECS`].
pub fn interval_secs(interval: Option<&str>) -> u64 {
    let Some(text) = interval else {
        return DEFAULT_INTERVAL_SECS;
    };
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in text.chars() {
        let unit = match c {
            '0'..='9' => {
                digits.push(c);
                continue;
            }
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return DEFAULT_INTERVAL_SECS,
        };
        let Ok(n) = digits.parse::<u64>() else {
            return DEFAULT_INTERVAL_SECS;
        };
        total = total.saturating_add(n.saturating_mul(unit));
        digits.clear();
    }
    match digits.is_empty() {
        true => total.clamp(INTERVAL_BOUNDS.0, INTERVAL_BOUNDS.1),
        false => DEFAULT_INTERVAL_SECS,
    }
}

impl GitRef {
    /// The one ref it names, or why it names none or several.
    pub fn kind(&self) -> Result<RefKind, &'static str> {
        let given = [
            self.branch.clone().map(RefKind::Branch),
            self.tag.clone().map(RefKind::Tag),
            self.semver.clone().map(RefKind::Semver),
            self.commit.clone().map(RefKind::Commit),
        ];
        let mut named = given.into_iter().flatten();
        match (named.next(), named.next()) {
            (Some(one), None) => Ok(one),
            (None, _) => Err("ref names none of branch, tag, semver and commit: give exactly one"),
            (Some(_), Some(_)) => {
                Err("ref names more than one of branch, tag, semver and commit: give exactly one")
            }
        }
    }
}

impl std::fmt::Display for RefKind {
    /// `branch main`, `tag v1.2.0`, `semver >=1.0.0`, `commit 0123…`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefKind::Branch(b) => write!(f, "branch {b}"),
            RefKind::Tag(t) => write!(f, "tag {t}"),
            RefKind::Semver(s) => write!(f, "semver {s}"),
            RefKind::Commit(c) => write!(f, "commit {c}"),
        }
    }
}

/// A values file read from a Git repository (`valuesFiles` of a chart or an override): merged
/// under the chart's `values`, after `valuesFrom`. The path may refer to the target cluster as
/// values do (`values/${cluster.name}.yaml`, `values/${cluster.labels.region}.yaml`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct GitValuesFile {
    /// The repository and the ref the file is read at.
    pub git: GitValuesSource,
    /// The file's path in the repository, relative to its root, without `..`; `${cluster.name}`,
    /// `${cluster.labels.KEY}`, `${cluster.variables.KEY}` are replaced per cluster.
    #[schemars(
        length(min = 1, max = 1024),
        regex(pattern = RELATIVE_PATH)
    )]
    pub path: String,
    /// A missing file is skipped instead of holding the release.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// The repository and ref a values file is read at.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct GitValuesSource {
    /// The repository, as a chart's `git.url`.
    #[schemars(
        length(min = 1, max = 2048),
        regex(pattern = r"^(https?|ssh)://[^/?#]+/[^?#]+$")
    )]
    pub url: String,
    /// The ref: exactly one of `branch`, `tag`, `semver`, `commit`.
    #[serde(rename = "ref")]
    pub reference: GitRef,
    /// How often the ref is looked up again, as a chart's `git.interval`. Default: 1m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^([0-9]+(s|m|h))+$"), length(max = 32))]
    pub interval: Option<String>,
}
