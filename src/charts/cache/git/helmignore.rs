//! A chart's `.helmignore` as helm reads it (helm's `pkg/ignore`): one pattern a line, `#` comments, `!` negation, a trailing `/` for directories, Go's `filepath.Match` globs, `**` refused; plus helm's default rule (dotfiles in `templates/`).
//!
//! Helm's quirks are kept on purpose, so a chart packs here as `helm package` packs it: rules
//! are evaluated in order and the first match decides; a negated rule ignores every path it
//! does *not* match (and every non-directory when it names directories); a pattern without a
//! `/` is matched against the file's base name only; one starting with `/` or holding a `/`
//! against the whole path from the chart's directory.

/// The most rules one `.helmignore` may hold.
const MAX_RULES: usize = 1_000;

/// One rule.
#[derive(Clone, Debug)]
struct Rule {
    /// The glob, without `!`, trailing `/` and leading `/`.
    glob: String,
    /// `!pattern`.
    negate: bool,
    /// `pattern/`: directories only.
    dir_only: bool,
    /// Matched against the base name only (no `/` in the pattern).
    base_only: bool,
}

/// The rules of one chart directory.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rules(Vec<Rule>);

impl Rules {
    /// The rules of `text` (a `.helmignore`; None: the chart has none), then helm's default
    /// `templates/.?*`; an error names the line that helm would refuse too.
    pub(crate) fn parse(text: Option<&str>) -> Result<Self, String> {
        let mut rules = Rules::default();
        let text = text.unwrap_or("");
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for (number, line) in text.lines().enumerate() {
            rules
                .add(line)
                .map_err(|why| format!(".helmignore line {}: {why}", number + 1))?;
            if rules.0.len() > MAX_RULES {
                return Err(format!(".helmignore holds more than {MAX_RULES} rules"));
            }
        }
        rules
            .add("templates/.?*")
            .expect("helm's default rule parses");
        Ok(rules)
    }

    fn add(&mut self, line: &str) -> Result<(), String> {
        let rule = line.trim();
        if rule.is_empty() || rule.starts_with('#') {
            return Ok(());
        }
        if rule.contains("**") {
            return Err("double-star (**) syntax is not supported (as in helm)".into());
        }
        go_match(rule, "abc").map_err(|()| format!("{rule:?} is not a valid pattern"))?;
        let (negate, rule) = match rule.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, rule),
        };
        let (dir_only, rule) = match rule.strip_suffix('/') {
            Some(rest) => (true, rest),
            None => (false, rule),
        };
        let (glob, base_only) = match rule.strip_prefix('/') {
            Some(rest) => (rest, false),
            None => (rule, !rule.contains('/')),
        };
        self.0.push(Rule {
            glob: glob.to_owned(),
            negate,
            dir_only,
            base_only,
        });
        Ok(())
    }

    /// Whether helm leaves `path` (relative to the chart directory, `/`-separated) out.
    pub(crate) fn ignores(&self, path: &str, is_dir: bool) -> bool {
        if path.is_empty() || path == "." || path == "./" {
            return false;
        }
        for rule in &self.0 {
            let name = match rule.base_only {
                true => path.rsplit('/').next().unwrap_or(path),
                false => path,
            };
            let matched = go_match(&rule.glob, name).unwrap_or(false);
            if rule.negate {
                if (rule.dir_only && !is_dir) || !matched {
                    return true;
                }
                continue;
            }
            if rule.dir_only && !is_dir {
                continue;
            }
            if matched {
                return true;
            }
        }
        false
    }
}

/// Go's `filepath.Match` on Unix: `*` any run of non-`/`, `?` one non-`/` character,
/// `[...]` a class (`^` negates, `a-z` ranges, `\` escapes); Err for a malformed pattern.
pub(crate) fn go_match(mut pattern: &str, mut name: &str) -> Result<bool, ()> {
    'pattern: while !pattern.is_empty() {
        let (star, chunk, rest) = scan_chunk(pattern);
        pattern = rest;
        if star && chunk.is_empty() {
            return Ok(!name.contains('/'));
        }
        let (t, ok, err) = match_chunk(chunk, name);
        if ok && (t.is_empty() || !pattern.is_empty()) {
            name = t;
            continue;
        }
        if err {
            return Err(());
        }
        if star {
            for (i, c) in name.char_indices() {
                if c == '/' {
                    break;
                }
                let next = &name[i + c.len_utf8()..];
                let (t, ok, err) = match_chunk(chunk, next);
                if ok {
                    if pattern.is_empty() && !t.is_empty() {
                        continue;
                    }
                    name = t;
                    continue 'pattern;
                }
                if err {
                    return Err(());
                }
            }
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

/// The leading stars, the chunk up to the next star outside a class, and the rest.
fn scan_chunk(pattern: &str) -> (bool, &str, &str) {
    let trimmed = pattern.trim_start_matches('*');
    let star = trimmed.len() != pattern.len();
    let bytes = trimmed.as_bytes();
    let (mut i, mut in_range) = (0, false);
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 < bytes.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => return (star, &trimmed[..i], &trimmed[i..]),
            _ => {}
        }
        i += 1;
    }
    (star, trimmed, "")
}

/// Matches `chunk` (no star) at the start of `s`: the rest of `s`, whether it matched, and
/// whether the chunk is malformed.
fn match_chunk<'a>(mut chunk: &str, mut s: &'a str) -> (&'a str, bool, bool) {
    let mut failed = false;
    while let Some(first) = chunk.chars().next() {
        failed = failed || s.is_empty();
        match first {
            '[' => {
                let mut r = '\0';
                if !failed {
                    let c = s.chars().next().expect("not empty");
                    r = c;
                    s = &s[c.len_utf8()..];
                }
                chunk = &chunk[1..];
                let negated = chunk.starts_with('^');
                if negated {
                    chunk = &chunk[1..];
                }
                let (mut matched, mut ranges) = (false, 0);
                loop {
                    if chunk.starts_with(']') && ranges > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let Some((lo, rest)) = get_esc(chunk) else {
                        return ("", false, true);
                    };
                    chunk = rest;
                    let mut hi = lo;
                    if let Some(after) = chunk.strip_prefix('-') {
                        let Some((h, rest)) = get_esc(after) else {
                            return ("", false, true);
                        };
                        hi = h;
                        chunk = rest;
                    }
                    matched = matched || (lo <= r && r <= hi);
                    ranges += 1;
                }
                failed = failed || matched == negated;
            }
            '?' => {
                if !failed {
                    let c = s.chars().next().expect("not empty");
                    failed = c == '/';
                    s = &s[c.len_utf8()..];
                }
                chunk = &chunk[1..];
            }
            other => {
                let literal = if other == '\\' {
                    chunk = &chunk[1..];
                    match chunk.chars().next() {
                        Some(c) => c,
                        None => return ("", false, true),
                    }
                } else {
                    other
                };
                if !failed {
                    let c = s.chars().next().expect("not empty");
                    failed = c != literal;
                    s = &s[c.len_utf8()..];
                }
                chunk = &chunk[literal.len_utf8()..];
            }
        }
    }
    match failed {
        true => ("", false, false),
        false => (s, true, false),
    }
}

/// One character of a class (escaped or not) and the rest; None when malformed (as Go: the
/// class must go on after it).
fn get_esc(chunk: &str) -> Option<(char, &str)> {
    if chunk.is_empty() || chunk.starts_with(['-', ']']) {
        return None;
    }
    let chunk = match chunk.strip_prefix('\\') {
        Some(rest) if !rest.is_empty() => rest,
        Some(_) => return None,
        None => chunk,
    };
    let c = chunk.chars().next()?;
    let rest = &chunk[c.len_utf8()..];
    (!rest.is_empty()).then_some((c, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Rules {
        Rules::parse(Some(text)).unwrap()
    }

    #[test]
    fn go_globs_match_as_filepath_match_does() {
        let cases = [
            ("abc", "abc", true),
            ("*", "abc", true),
            ("*c", "abc", true),
            ("a*", "a", true),
            ("a*/b", "abc/b", true),
            ("a*/b", "a/c/b", false),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", true),
            ("ab[c]", "abc", true),
            ("ab[b-d]", "abc", true),
            ("ab[^c]", "abc", false),
            ("ab[^b-d]", "abe", true),
            ("a\\*b", "a*b", true),
            ("a\\*b", "ab", false),
            ("a?b", "a☺b", true),
            ("a?b", "a/b", false),
            ("*x", "xxx", true),
            ("*.txt", "dir/a.txt", false),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(go_match(pattern, name), Ok(want), "{pattern} {name}");
        }
        for bad in ["[", "[^", "[-]", "a[", "ab[c-]", "\\"] {
            assert_eq!(go_match(bad, "abc"), Err(()), "{bad} is malformed");
        }
    }

    #[test]
    fn comments_blank_lines_and_a_byte_order_mark_are_skipped_and_double_star_is_refused() {
        let parsed = Rules::parse(Some("\u{feff}# a comment\n\n  *.bak  \n")).unwrap();
        assert!(parsed.ignores("values.bak", false));
        assert!(!parsed.ignores("values.yaml", false));
        let refused = Rules::parse(Some("ok\n**/secret\n")).unwrap_err();
        assert!(
            refused.contains("line 2") && refused.contains("**"),
            "{refused}"
        );
        let bad = Rules::parse(Some("[\n")).unwrap_err();
        assert!(bad.contains("line 1"), "{bad}");
    }

    #[test]
    fn a_pattern_without_a_slash_matches_the_base_name_at_any_depth() {
        let r = rules("*.swp\n.git\n");
        assert!(r.ignores("templates/deep/x.swp", false));
        assert!(r.ignores(".git", true));
        assert!(r.ignores("sub/.git", true));
        assert!(!r.ignores("templates/x.yaml", false));
    }

    #[test]
    fn a_rooted_or_structured_pattern_matches_the_whole_path() {
        let r = rules("/secret.txt\ndocs/*.md\n");
        assert!(r.ignores("secret.txt", false));
        assert!(!r.ignores("sub/secret.txt", false));
        assert!(r.ignores("docs/a.md", false));
        assert!(!r.ignores("x/docs/a.md", false));
    }

    #[test]
    fn a_trailing_slash_names_directories_only() {
        let r = rules("tmp/\n");
        assert!(r.ignores("tmp", true));
        assert!(!r.ignores("tmp", false));
    }

    #[test]
    fn a_negated_rule_ignores_what_it_does_not_match_as_helm_does() {
        // helm's pkg/ignore: `!x` stops with "ignored" at the first path it does not match.
        let r = rules("!*.yaml\n*.txt\n");
        assert!(r.ignores("README.md", false));
        assert!(!r.ignores("values.yaml", false));
        let dirs = rules("!keep/\n");
        assert!(dirs.ignores("file.yaml", false), "not a directory");
    }

    #[test]
    fn dotfiles_in_templates_are_ignored_by_default() {
        let r = Rules::parse(None).unwrap();
        assert!(r.ignores("templates/.hidden.yaml", false));
        assert!(!r.ignores("templates/cm.yaml", false));
        assert!(!r.ignores(".helmignore", false));
        assert!(!r.ignores("", true));
    }
}
