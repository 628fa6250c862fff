//! Helm's chart version constraints (Masterminds semver syntax) matched against index versions.

use std::cmp::Ordering;

use semver::{Prerelease, Version};

/// A version constraint that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid version constraint {constraint:?}: {reason}")]
pub(crate) struct Invalid {
    constraint: String,
    reason: String,
}

/// How one comparator compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    Tilde,
    Caret,
}

/// Operators by their spellings, longest first so `>=` is not read as `>`.
const OPS: [(&str, Op); 11] = [
    ("!=", Op::Ne),
    (">=", Op::Ge),
    ("=>", Op::Ge),
    ("<=", Op::Le),
    ("=<", Op::Le),
    ("~>", Op::Tilde),
    (">", Op::Gt),
    ("<", Op::Lt),
    ("=", Op::Eq),
    ("~", Op::Tilde),
    ("^", Op::Caret),
];

/// Which parts of a comparator's version were left out or wildcards (`1`, `1.x`, `1.2.*`, `*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loose {
    /// Every part given.
    Exact,
    /// The patch is open: `1.2`, `1.2.x`.
    Patch,
    /// Minor and patch are open: `1`, `1.x`.
    Minor,
    /// Everything is open: `*`, `x`.
    All,
}

/// One comparison, such as `>=1.2` or `~1.2.3`.
#[derive(Clone, Debug)]
struct Comparator {
    op: Op,
    /// The version, open parts as 0.
    con: Version,
    loose: Loose,
}

/// Compares as Helm does: major, minor, patch, then prerelease; build metadata is ignored.
fn compare(a: &Version, b: &Version) -> Ordering {
    (a.major, a.minor, a.patch, &a.pre).cmp(&(b.major, b.minor, b.patch, &b.pre))
}

impl Comparator {
    fn parse(text: &str) -> Result<Self, String> {
        let (op, rest) = OPS
            .iter()
            .find_map(|(spelling, op)| text.strip_prefix(spelling).map(|rest| (*op, rest)))
            .unwrap_or((Op::Eq, text));
        let rest = rest.strip_prefix('v').unwrap_or(rest);
        let core = rest.split_once('+').map_or(rest, |(core, _build)| core);
        let (core, pre) = core.split_once('-').unwrap_or((core, ""));
        let parts: Vec<&str> = core.split('.').collect();
        if parts.len() > 3 {
            return Err(format!("{text:?} has more than three version parts"));
        }
        let part = |i: usize| -> Result<Option<u64>, String> {
            match parts.get(i).copied() {
                None | Some("x" | "X" | "*") => Ok(None),
                Some(n) => n
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{text:?} is not a version")),
            }
        };
        let pre = if pre.is_empty() {
            Prerelease::EMPTY
        } else {
            Prerelease::new(pre).map_err(|e| format!("{text:?}: {e}"))?
        };
        let (numbers, loose) = match (part(0)?, part(1)?, part(2)?) {
            (None, _, _) => ((0, 0, 0), Loose::All),
            (Some(major), None, _) => ((major, 0, 0), Loose::Minor),
            (Some(major), Some(minor), None) => ((major, minor, 0), Loose::Patch),
            (Some(major), Some(minor), Some(patch)) => ((major, minor, patch), Loose::Exact),
        };
        let mut con = Version::new(numbers.0, numbers.1, numbers.2);
        con.pre = pre;
        Ok(Self { op, con, loose })
    }

    /// Whether `v` passes. A prerelease passes only a comparator that names a prerelease (an
    /// exact `!=` aside), so ranges never pick prereleases unless asked to.
    fn allows(&self, v: &Version) -> bool {
        let c = &self.con;
        let exact = self.loose == Loose::Exact;
        if !v.pre.is_empty() && c.pre.is_empty() && !(self.op == Op::Ne && exact) {
            return false;
        }
        let ord = compare(v, c);
        match self.op {
            Op::Eq if exact => ord == Ordering::Equal,
            Op::Eq | Op::Tilde => self.tilde(v, ord),
            Op::Ne => self.not_equal(v, ord),
            Op::Gt => match self.loose {
                Loose::Exact | Loose::All => ord == Ordering::Greater,
                _ if v.major != c.major => v.major > c.major,
                Loose::Minor => false,
                Loose::Patch => v.minor > c.minor,
            },
            Op::Lt => ord == Ordering::Less,
            Op::Ge => ord != Ordering::Less,
            Op::Le => match self.loose {
                Loose::Exact => ord != Ordering::Greater,
                _ if v.major != c.major => v.major < c.major,
                Loose::Minor | Loose::All => true,
                Loose::Patch => v.minor <= c.minor,
            },
            Op::Caret => self.caret(v, ord),
        }
    }

    /// `~1.2.3`: at least it, same major and minor; `~1`: same major; `~*`: anything.
    fn tilde(&self, v: &Version, ord: Ordering) -> bool {
        let c = &self.con;
        ord != Ordering::Less
            && (self.loose == Loose::All
                || (v.major == c.major && (self.loose == Loose::Minor || v.minor == c.minor)))
    }

    /// `^1.2.3`: at least it, same major; `^0.2.3`: same minor; `^0.0.3`: that patch only.
    fn caret(&self, v: &Version, ord: Ordering) -> bool {
        let c = &self.con;
        if ord == Ordering::Less {
            false
        } else if self.loose == Loose::All {
            true
        } else if c.major > 0 || self.loose == Loose::Minor {
            v.major == c.major
        } else if v.major > 0 {
            false
        } else if c.minor > 0 || self.loose == Loose::Patch {
            v.minor == c.minor
        } else {
            v.minor == 0 && v.patch == c.patch
        }
    }

    /// `!=1.2.3`: any other version; `!=1.2` or `!=1.2.x`: outside 1.2; `!=1`: outside 1.
    fn not_equal(&self, v: &Version, ord: Ordering) -> bool {
        let c = &self.con;
        match self.loose {
            Loose::Exact => ord != Ordering::Equal,
            _ if v.major != c.major => true,
            Loose::Minor => false,
            Loose::Patch => v.minor != c.minor || v.pre != c.pre,
            Loose::All => ord != Ordering::Equal,
        }
    }
}

/// A parsed constraint: any of its `||` groups, each allowing a version when all its
/// comparators do.
#[derive(Clone, Debug)]
pub(crate) struct Constraint {
    any: Vec<Vec<Comparator>>,
}

impl Constraint {
    /// Parses Helm's syntax: `1.2.3` or `=1.2.3` (exact), `!=`, `>`, `<`, `>=`, `<=`, `~`, `^`,
    /// `x`/`*` wildcards and partial versions (`1.2.x`, `1.2`), hyphen ranges `1.2 - 1.4`,
    /// comparators joined by spaces or commas (all must hold) and groups joined by `||` (any).
    pub(crate) fn parse(text: &str) -> Result<Self, Invalid> {
        let invalid = |reason: String| Invalid {
            constraint: text.to_owned(),
            reason,
        };
        let any = text
            .split("||")
            .map(|group| group_of(group).map_err(invalid))
            .collect::<Result<_, _>>()?;
        Ok(Self { any })
    }

    /// Whether `version` satisfies the constraint.
    pub(crate) fn matches(&self, version: &Version) -> bool {
        self.any
            .iter()
            .any(|all| all.iter().all(|c| c.allows(version)))
    }
}

/// The comparators of one `||` group, hyphen ranges rewritten as `>=` and `<=`.
fn group_of(group: &str) -> Result<Vec<Comparator>, String> {
    let spaced = group.replace(',', " ");
    let mut tokens = spaced.split_whitespace().peekable();
    let mut out = Vec::new();
    let is_op = |t: &str| t.chars().all(|c| "=!<>~^".contains(c));
    while let Some(token) = tokens.next() {
        let mut text = token.to_owned();
        if is_op(token) {
            text.push_str(
                tokens
                    .next()
                    .ok_or(format!("{token:?} without a version"))?,
            );
        }
        if tokens.peek() == Some(&"-") {
            tokens.next();
            let upper = tokens.next().ok_or("a range without an upper end")?;
            if text.starts_with(|c: char| "=!<>~^".contains(c)) || is_op(upper) {
                return Err("a range's ends are plain versions".into());
            }
            out.push(Comparator::parse(&format!(">={text}"))?);
            out.push(Comparator::parse(&format!("<={upper}"))?);
        } else {
            out.push(Comparator::parse(&text)?);
        }
    }
    if out.is_empty() {
        return Err("an empty alternative".into());
    }
    Ok(out)
}

/// A version as Helm reads one from an index: an optional `v`, a missing minor or patch taken
/// as 0. None when it is no version.
pub(crate) fn parse_version(text: &str) -> Option<Version> {
    let text = text.trim();
    let text = text.strip_prefix('v').unwrap_or(text);
    if let Ok(v) = Version::parse(text) {
        return Some(v);
    }
    let end = text.find(['-', '+']).unwrap_or(text.len());
    let (core, tail) = text.split_at(end);
    let padded = match core.split('.').count() {
        1 => format!("{core}.0.0{tail}"),
        2 => format!("{core}.0{tail}"),
        _ => return None,
    };
    Version::parse(&padded).ok()
}

/// Of `versions` (as an index lists them), the one Helm installs for `constraint`: one equal to
/// the constraint's text first, otherwise the newest the constraint allows; with no constraint,
/// the newest that is no prerelease. None when no version fits.
pub(crate) fn select<'a>(
    versions: impl IntoIterator<Item = &'a str>,
    constraint: Option<&str>,
) -> Result<Option<&'a str>, Invalid> {
    let constraint = constraint.map(str::trim).filter(|c| !c.is_empty());
    let parsed = Constraint::parse(constraint.unwrap_or("*"))?;
    let versions: Vec<&str> = versions.into_iter().collect();
    if let Some(exact) = constraint.and_then(|c| versions.iter().find(|v| **v == c)) {
        return Ok(Some(exact));
    }
    Ok(versions
        .into_iter()
        .filter_map(|text| parse_version(text).map(|v| (v, text)))
        .filter(|(v, _)| parsed.matches(v))
        .max_by(|(a, _), (b, _)| compare(a, b))
        .map(|(_, text)| text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INDEX: [&str; 12] = [
        "0.0.3",
        "0.1.0",
        "0.2.3",
        "0.2.9",
        "1.0.0",
        "1.2.0",
        "1.2.3",
        "1.2.9",
        "1.3.0-beta.1",
        "1.4.5",
        "2.0.0-rc.1",
        "2.1.0",
    ];

    /// Every index version `constraint` allows, in index order.
    fn allowed(constraint: &str) -> Vec<&'static str> {
        let c = Constraint::parse(constraint).unwrap();
        INDEX
            .into_iter()
            .filter(|v| c.matches(&parse_version(v).unwrap()))
            .collect()
    }

    #[test]
    fn a_bare_or_equals_version_is_exact() {
        assert_eq!(allowed("1.2.3"), ["1.2.3"]);
        assert_eq!(allowed("=1.2.3"), ["1.2.3"]);
        assert_eq!(allowed("v1.2.3"), ["1.2.3"]);
        assert_eq!(allowed("= 1.2.3"), ["1.2.3"]);
    }

    #[test]
    fn not_equal_leaves_out_one_version_or_a_wildcard_range() {
        assert_eq!(allowed("!=1.2.3").len(), INDEX.len() - 1);
        assert!(!allowed("!=1.2.3").contains(&"1.2.3"));
        assert_eq!(
            allowed(">=1.0.0, !=1.2.x"),
            ["1.0.0", "1.4.5", "2.1.0"],
            "a wildcard leaves out the whole minor"
        );
    }

    #[test]
    fn comparisons_bound_the_range_and_partial_versions_round_to_their_parts() {
        assert_eq!(allowed(">1.4.5"), ["2.1.0"]);
        assert_eq!(allowed("<0.2.3"), ["0.0.3", "0.1.0"]);
        assert_eq!(allowed(">=1.4.5"), ["1.4.5", "2.1.0"]);
        assert_eq!(allowed("<=0.1.0"), ["0.0.3", "0.1.0"]);
        assert_eq!(
            allowed(">1.2"),
            ["1.4.5", "2.1.0"],
            ">1.2 means 1.3 or later"
        );
        assert_eq!(allowed(">1"), ["2.1.0"], ">1 means 2 or later");
        assert_eq!(
            allowed("<=1.2"),
            [
                "0.0.3", "0.1.0", "0.2.3", "0.2.9", "1.0.0", "1.2.0", "1.2.3", "1.2.9"
            ],
            "<=1.2 takes every 1.2 patch"
        );
        assert_eq!(allowed("=>2.1.0"), ["2.1.0"]);
        assert_eq!(allowed("=<0.0.3"), ["0.0.3"]);
    }

    #[test]
    fn tilde_keeps_the_minor_unless_only_a_major_is_given() {
        assert_eq!(allowed("~1.2.3"), ["1.2.3", "1.2.9"]);
        assert_eq!(allowed("~1.2"), ["1.2.0", "1.2.3", "1.2.9"]);
        assert_eq!(allowed("~>1.2"), ["1.2.0", "1.2.3", "1.2.9"]);
        assert_eq!(allowed("~1"), ["1.0.0", "1.2.0", "1.2.3", "1.2.9", "1.4.5"]);
    }

    #[test]
    fn caret_keeps_the_leftmost_non_zero_part() {
        assert_eq!(allowed("^1.2.3"), ["1.2.3", "1.2.9", "1.4.5"]);
        assert_eq!(allowed("^0.2.3"), ["0.2.3", "0.2.9"]);
        assert_eq!(allowed("^0.0.3"), ["0.0.3"]);
        assert_eq!(allowed("^0"), ["0.0.3", "0.1.0", "0.2.3", "0.2.9"]);
        assert_eq!(allowed("^2"), ["2.1.0"]);
    }

    #[test]
    fn wildcards_and_partial_versions_match_every_release_under_them() {
        assert_eq!(allowed("1.2.x"), ["1.2.0", "1.2.3", "1.2.9"]);
        assert_eq!(allowed("1.2.*"), ["1.2.0", "1.2.3", "1.2.9"]);
        assert_eq!(allowed("1.2"), ["1.2.0", "1.2.3", "1.2.9"]);
        assert_eq!(
            allowed("1.x"),
            ["1.0.0", "1.2.0", "1.2.3", "1.2.9", "1.4.5"]
        );
        assert_eq!(allowed("*").len(), INDEX.len() - 2, "no prereleases");
        assert_eq!(allowed("x"), allowed("*"));
    }

    #[test]
    fn a_hyphen_range_includes_both_ends() {
        assert_eq!(allowed("1.2.3 - 1.4.5"), ["1.2.3", "1.2.9", "1.4.5"]);
        assert_eq!(
            allowed("1 - 1.2"),
            ["1.0.0", "1.2.0", "1.2.3", "1.2.9"],
            "a partial upper end takes all under it"
        );
    }

    #[test]
    fn spaces_and_commas_join_conditions_and_bars_join_alternatives() {
        assert_eq!(allowed(">=0.2.0 <1.0.0"), ["0.2.3", "0.2.9"]);
        assert_eq!(allowed(">= 0.2.0, < 1.0.0"), ["0.2.3", "0.2.9"]);
        assert_eq!(allowed("0.1.0 || ^2"), ["0.1.0", "2.1.0"]);
        assert_eq!(allowed("<0.1.0 || >=1.4.0 <2.0.0"), ["0.0.3", "1.4.5"]);
    }

    #[test]
    fn a_prerelease_passes_only_comparators_that_name_a_prerelease() {
        assert!(!allowed(">=1.0.0").contains(&"1.3.0-beta.1"));
        assert_eq!(
            allowed(">=1.3.0-beta.0"),
            ["1.3.0-beta.1", "1.4.5", "2.0.0-rc.1", "2.1.0"]
        );
        assert_eq!(
            allowed(">=1.3.0-beta.0 <1.4.0"),
            Vec::<&str>::new(),
            "as in Helm, the plain upper bound refuses the prerelease"
        );
        assert_eq!(allowed(">=1.3.0-beta.0 <1.4.0-0"), ["1.3.0-beta.1"]);
        assert_eq!(allowed("2.0.0-rc.1"), ["2.0.0-rc.1"]);
        assert_eq!(allowed(">=2.0.0-alpha"), ["2.0.0-rc.1", "2.1.0"]);
    }

    #[test]
    fn malformed_constraints_are_refused_with_the_reason() {
        for bad in ["", ">=", "1.2.3.4", "one", ">=1 - 2", "1.2 ||", "1.2 -"] {
            let error = Constraint::parse(bad).unwrap_err();
            assert!(
                error.to_string().contains("invalid version constraint"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_newest_match_is_selected_and_an_exact_text_wins() {
        assert_eq!(select(INDEX, None), Ok(Some("2.1.0")));
        assert_eq!(select(INDEX, Some("")), Ok(Some("2.1.0")));
        assert_eq!(select(INDEX, Some("~1.2")), Ok(Some("1.2.9")));
        assert_eq!(select(INDEX, Some(">3")), Ok(None));
        assert_eq!(
            select(["1.2", "1.2.5"], Some("1.2")),
            Ok(Some("1.2")),
            "a version written as the constraint is taken before the range it spells"
        );
        assert_eq!(
            select(["v1.0", "1.0.1", "junk"], Some("<1.0.1")),
            Ok(Some("v1.0")),
            "lax versions are read, others skipped"
        );
        assert!(select(INDEX, Some(">>1")).is_err());
    }

    #[test]
    fn index_versions_are_read_as_helm_reads_them() {
        assert_eq!(parse_version("v1.2"), Some(Version::new(1, 2, 0)));
        assert_eq!(parse_version("3"), Some(Version::new(3, 0, 0)));
        assert_eq!(
            parse_version("1.2-beta.1").map(|v| v.pre.to_string()),
            Some("beta.1".into())
        );
        assert_eq!(parse_version("1.2.3.4"), None);
        assert_eq!(parse_version("latest"), None);
    }
}
