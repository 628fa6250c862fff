//! The rules of Git sources (pure): a path in a repository in normal form and held by a policy's path prefixes by whole segments, refs allowed by a policy's branch and tag patterns.

use crate::{
    api::{
        crd::{GitRef, GitSource, RefKind},
        policy::{GitAccess, TenancyPolicySpec},
    },
    policy::{
        access::Governing,
        source::{SourceUrl, redact},
    },
};

/// A Git source as admission sees it: a chart's `git`, or a values file's repository and path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Source<'a> {
    /// The repository, as the spec writes it.
    pub(crate) url: &'a str,
    /// The path in it, as the spec writes it (a values file's rendered for its cluster).
    pub(crate) path: &'a str,
    /// The ref.
    pub(crate) reference: &'a GitRef,
}

impl<'a> From<&'a GitSource> for Source<'a> {
    fn from(git: &'a GitSource) -> Self {
        Self {
            url: &git.url,
            path: &git.path,
            reference: &git.reference,
        }
    }
}

/// The Git `sources` entries of a policy with their repository prefixes in normal form (one
/// that does not parse holds nothing).
pub(crate) fn prefixes(
    policy: &TenancyPolicySpec,
) -> impl Iterator<Item = (SourceUrl, &GitAccess)> + '_ {
    policy.sources.iter().filter_map(|s| {
        let access = s.git.as_ref()?;
        Some((SourceUrl::git(&s.url).ok()?.0, access))
    })
}

/// The rules every mode keeps for a Git source: the repository `https://` or `ssh://` (plain
/// `http://` only under a Git entry of a governing policy that sets `insecure`) in normal form (no credentials
/// but an ssh user, no query or fragment, no encoded separator; see [`SourceUrl::git`]), a host
/// that leads back into the hub only under a listed Git prefix, the path relative without `..`,
/// exactly one ref.
pub(crate) fn check(
    governing: &[Governing<'_>],
    hub_namespace: &str,
    source: Source<'_>,
) -> Result<(), String> {
    let shown = redact(source.url);
    let (name, _) =
        SourceUrl::git(source.url).map_err(|refused| format!("git url {shown:?} {refused}"))?;
    clean_path(source.path).map_err(|why| format!("git {why}"))?;
    source
        .reference
        .kind()
        .map_err(|why| format!("git {why}"))?;
    let listed = || {
        governing
            .iter()
            .flat_map(|(_, spec)| prefixes(spec))
            .any(|(p, _)| p.holds(&name))
    };
    if let Some(why) = name.internal()
        && !listed()
    {
        return Err(format!(
            "git url {shown:?}: its host is {why}, which the hub does not fetch from unless a TenancyPolicy governing hub namespace {hub_namespace} lists its prefix in a Git sources entry"
        ));
    }
    let insecure = || {
        governing
            .iter()
            .flat_map(|(_, spec)| prefixes(spec))
            .any(|(p, access)| access.insecure && p.holds(&name))
    };
    if name.scheme() == "http" && !insecure() {
        return Err(format!(
            "git url {shown:?} is plain http, and no Git sources entry holding it in a TenancyPolicy governing hub namespace {hub_namespace} sets insecure: true: serve it over https or ssh, or (for a lab only) have a platform admin set insecure: true on that entry"
        ));
    }
    Ok(())
}

/// The tags a Git source's `semver` range may pick: every pattern of the Git entries (of every
/// governing policy) holding its repository and its path, sorted; None for another ref, or when
/// no entry holds it (then admission refuses it unless permissive). A range is never resolved
/// against a tag none of these patterns allows, however new.
pub(crate) fn tags(governing: &[Governing<'_>], source: Source<'_>) -> Option<Vec<String>> {
    if !matches!(source.reference.kind(), Ok(RefKind::Semver(_))) {
        return None;
    }
    let (name, _) = SourceUrl::git(source.url).ok()?;
    let path = clean_path(source.path).ok()?;
    let holding: Vec<&GitAccess> = governing
        .iter()
        .flat_map(|(_, spec)| prefixes(spec))
        .filter(|(prefix, access)| prefix.holds(&name) && path_allowed(access, &path))
        .map(|(_, access)| access)
        .collect();
    if holding.is_empty() {
        return None;
    }
    let mut tags: Vec<String> = holding.iter().flat_map(|a| a.tags.clone()).collect();
    tags.sort();
    tags.dedup();
    Some(tags)
}

/// The rule of `policy` a Git source breaks, or None when one of its Git `sources` entries
/// holds the repository, the path and the ref.
pub(crate) fn rule(policy: &TenancyPolicySpec, source: Source<'_>) -> Option<String> {
    let (Ok((name, _)), Ok(path), Ok(reference)) = (
        SourceUrl::git(source.url),
        clean_path(source.path),
        source.reference.kind(),
    ) else {
        return Some(format!("git source {} is refused", redact(source.url)));
    };
    let holding: Vec<_> = prefixes(policy).filter(|(p, _)| p.holds(&name)).collect();
    if holding.is_empty() {
        return Some(format!(
            "Git repository {name} is under no Git sources entry"
        ));
    }
    let mut broken = Vec::new();
    for (prefix, access) in &holding {
        if !path_allowed(access, &path) {
            broken.push(format!(
                "path {path:?} is under none of the paths of {prefix} ({})",
                access.paths.join(", ")
            ));
            continue;
        }
        match ref_allowed(access, &reference) {
            Ok(()) => return None,
            Err(why) => broken.push(format!("{why} for {prefix}")),
        }
    }
    Some(broken.join("; "))
}

/// The rules of every mode ([`check`]) and, when `enforce`, a governing policy allowing the
/// source ([`rule`]); a refusal names each policy and the rule it breaks.
pub(crate) fn admit(
    governing: &[Governing<'_>],
    hub_namespace: &str,
    enforce: bool,
    source: Source<'_>,
) -> Result<(), String> {
    check(governing, hub_namespace, source)?;
    if !enforce {
        return Ok(());
    }
    let Some(rules) = governing
        .iter()
        .map(|(name, spec)| rule(spec, source).map(|r| format!("TenancyPolicy {name}: {r}")))
        .collect::<Option<Vec<String>>>()
    else {
        return Ok(());
    };
    Err(match rules.is_empty() {
        true => format!(
            "no TenancyPolicy governs hub namespace {hub_namespace}: a platform admin must list it in a policy's hubNamespaces"
        ),
        false => format!(
            "not allowed by the policies governing hub namespace {hub_namespace} ({})",
            rules.join("; ")
        ),
    })
}

/// A path in a Git repository in normal form: relative, `/`-separated, without `.` or empty
/// segments and without a trailing `/`; `""` is the repository's root. Err says why the text is
/// refused: an absolute path, a `..` segment (encoded or not), a `\`, a control character.
pub(crate) fn clean_path(text: &str) -> Result<String, String> {
    if text.starts_with('/') {
        return Err(format!(
            "path {text:?} is absolute: give it relative to the repository's root"
        ));
    }
    if text.contains('\\') || text.chars().any(char::is_control) {
        return Err(format!(
            "path {:?} holds a backslash or a control character",
            text.escape_debug().to_string()
        ));
    }
    let mut segments = Vec::new();
    for segment in text.split('/') {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        if decoded == ".." {
            return Err(format!(
                "path {text:?} has a '..' segment: a path stays inside the directory it names"
            ));
        }
        if segment.is_empty() || segment == "." {
            continue;
        }
        segments.push(segment);
    }
    Ok(segments.join("/"))
}

/// True when the path prefix `prefix` (normal form; `""` the whole repository) holds `path`
/// (normal form) by whole segments: `charts` holds `charts` and `charts/web`, not `charts-x`.
pub(crate) fn path_holds(prefix: &str, path: &str) -> bool {
    prefix.is_empty() || path == prefix || path.starts_with(&format!("{prefix}/"))
}

/// True when `pattern` (an exact name, `prefix*` or `*`) allows `name`.
pub(crate) fn pattern_allows(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Whether a Git `sources` entry allows the path: one of its `paths` (every path when none)
/// holds it by whole segments. A path prefix that is itself refused holds nothing.
pub(crate) fn path_allowed(access: &GitAccess, path: &str) -> bool {
    access.paths.is_empty()
        || access
            .paths
            .iter()
            .filter_map(|p| clean_path(p).ok())
            .any(|p| path_holds(&p, path))
}

/// Whether a Git `sources` entry allows the ref. A semver range is resolved only among the tags
/// the entries holding it allow (see [`crate::policy::access::Trust::tags`]), so an entry
/// allowing some tag allows it. Err: the rule, in words.
pub(crate) fn ref_allowed(access: &GitAccess, reference: &RefKind) -> Result<(), String> {
    let listed = |patterns: &[String]| match patterns.is_empty() {
        true => "none".to_owned(),
        false => patterns.join(", "),
    };
    match reference {
        RefKind::Branch(branch) if access.branches.iter().any(|p| pattern_allows(p, branch)) => {
            Ok(())
        }
        RefKind::Branch(branch) => Err(format!(
            "branch {branch} is not among the branches allowed ({})",
            listed(&access.branches)
        )),
        RefKind::Tag(tag) => tag_allowed(access, tag),
        RefKind::Semver(_) if !access.tags.is_empty() => Ok(()),
        RefKind::Semver(range) => Err(format!(
            "semver {range} picks among the tags allowed, and no tag is (tags: none): list the tag patterns the range may pick (v1.*, *)"
        )),
        RefKind::Commit(_) if access.allow_commits => Ok(()),
        RefKind::Commit(commit) => Err(format!(
            "commit {commit} is named directly, which allowCommits does not allow"
        )),
    }
}

/// Whether a Git `sources` entry allows the tag a chart names.
pub(crate) fn tag_allowed(access: &GitAccess, tag: &str) -> Result<(), String> {
    match access.tags.iter().any(|p| pattern_allows(p, tag)) {
        true => Ok(()),
        false => Err(format!(
            "tag {tag} is not among the tags allowed ({})",
            match access.tags.is_empty() {
                true => "none".to_owned(),
                false => access.tags.join(", "),
            }
        )),
    }
}

#[cfg(test)]
mod tests;
