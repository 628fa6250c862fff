//! tenancy-hub: delivers Helm charts into tenant namespaces across clusters and reports what runs there.
//!
//! The folders, from the pure core up to the binary's edge, cut at the hub/member seam: `api` (the
//! resources and typed keys), `clusters` (registration, clients, health), `policy` (admission),
//! `plan` (planner, rollout gates, claims), `queue` (the fair queue), `charts` (sources, cache,
//! versions), `helm` (the executors, release-record seals), `observe` (release records, pod and
//! workload watches, drift comparison), `member` (the seam: one link per member cluster), `notify`
//! (Alerts: what happened told to webhooks), `status`, `preview` (a release's manifest diff, for `diff`
//! and the fleet view),
//! `controller` (the reconciler, its per-Controller index and loops), `runtime` (operator phases,
//! leader election, shards, HTTP) and `cli`. Only what the binary and the tests use is public.

#![warn(missing_docs)]

pub mod api;
pub mod charts;
pub mod cli;
pub mod clusters;
pub mod controller;
pub mod helm;
pub mod member;
pub mod metrics;
pub(crate) mod notify;
pub mod observe;
pub mod plan;
pub mod policy;
pub(crate) mod preview;
pub mod queue;
pub mod runtime;
pub mod status;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The folders from the pure core up to the binary's edge; a module may use only its own
    /// folder and those before it (`metrics` is used by every layer).
    const LAYERS: [&str; 15] = [
        "api",
        "clusters",
        "policy",
        "plan",
        "queue",
        "charts",
        "helm",
        "observe",
        "member",
        "notify",
        "status",
        "preview",
        "controller",
        "runtime",
        "cli",
    ];

    /// The top-level items of a `use` group, `a::x, b::{y, z}}…` read up to its closing brace,
    /// each trimmed.
    fn group_items(group: &str) -> Vec<String> {
        let (mut items, mut item, mut depth) = (Vec::new(), String::new(), 0);
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(item.trim().to_owned());
                    item.clear();
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        items.push(item.trim().to_owned());
        items
    }

    /// A source file without its tests: cut at its test module, and with the one item after each
    /// other `#[cfg(test)]` (a test-only module or field) left out.
    fn production(source: &str) -> String {
        let code = source
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        let mut kept = Vec::new();
        let mut skip = false;
        for line in code.lines() {
            if line.trim() == "#[cfg(test)]" {
                skip = true;
            } else if skip {
                skip = false;
            } else {
                kept.push(line);
            }
        }
        kept.join("\n")
    }

    /// The top-level folders a source file names through `crate::`, outside its tests.
    fn used_folders(source: &str) -> BTreeSet<String> {
        let code = production(source);
        let code = code.as_str();
        let mut used = BTreeSet::new();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a::x, b::{y, z}}`: the first segment of each top-level item.
                for item in group_items(group) {
                    used.insert(item.split("::").next().unwrap_or("").to_owned());
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                used.insert(name);
            }
        }
        used
    }

    /// The Rust files under `dir`, at any depth (`helm/helm-sdk`, the Go executor, holds none).
    fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    found.push(path);
                }
            }
        }
        found.sort();
        found
    }

    /// The folders of `LAYERS` above layer `rank` that `source` uses, outside its tests.
    fn upward(rank: usize, source: &str) -> Vec<String> {
        used_folders(source)
            .into_iter()
            .filter(|used| {
                LAYERS
                    .iter()
                    .position(|l| l == used)
                    .is_some_and(|at| at > rank)
            })
            .collect()
    }

    #[test]
    fn no_module_uses_a_folder_above_its_own() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut checked = 0;
        for (rank, folder) in LAYERS.iter().enumerate() {
            // Every file of the folder at any depth, and the module files of its subfolders;
            // not the tests (`tests.rs`, `tests/`), which may use anything.
            let production = rust_files(&src.join(folder)).into_iter().filter(|p| {
                !p.ends_with("tests.rs") && !p.components().any(|c| c.as_os_str() == "tests")
            });
            for path in production {
                let source = std::fs::read_to_string(&path).unwrap();
                let above = upward(rank, &source);
                assert!(
                    above.is_empty(),
                    "{} uses {above:?}, above {folder}",
                    path.display()
                );
                checked += 1;
            }
        }
        assert!(checked > 120, "only {checked} files found");
    }

    #[test]
    fn an_upward_import_planted_deep_inside_a_folder_is_found() {
        let member = LAYERS.iter().position(|l| *l == "member").unwrap();
        let planted = "use crate::{api::key::ReleaseKey, controller::context::Context};";
        assert_eq!(upward(member, planted), ["controller"]);
        assert!(upward(member, "use crate::observe::records::Deployed;").is_empty());
        let in_a_test = "fn f() {}\n#[cfg(test)]\nmod tests { use crate::cli::Cli; }";
        assert!(upward(member, in_a_test).is_empty());
        // `member/pull/hub/` is read like any folder: it holds files, and they are checked.
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let deep = rust_files(&src.join("member"));
        assert!(
            deep.iter().any(|p| p.ends_with("member/pull/hub/link.rs")),
            "{deep:?}"
        );
    }

    /// The two programs of the pull protocol keep to their rooms: the agent's side
    /// (`member/pull/agent*`) never uses the hub's (`member/pull/hub*`), nor the other way.
    #[test]
    fn the_hub_and_the_agent_sides_of_the_pull_protocol_use_nothing_of_each_other() {
        let pull = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/member/pull");
        for (side, other) in [("agent", "hub"), ("hub", "agent")] {
            let mut files = rust_files(&pull.join(side));
            files.push(pull.join(format!("{side}.rs")));
            for path in files {
                let code = production(&std::fs::read_to_string(&path).unwrap());
                assert!(
                    !code.contains(&format!("pull::{other}")),
                    "{} uses the {other} side of the pull protocol",
                    path.display()
                );
            }
        }
    }

    /// The sibling files of `folder` that one of its files (module `module`, `mod` for the
    /// folder's own) uses outside its tests: through `crate::folder::x`, `super::x`, or (in
    /// `mod.rs`) a child module's path `x::`; an item of `mod.rs` used by a child counts as `mod`.
    fn used_siblings(
        folder: &str,
        module: &str,
        source: &str,
        siblings: &BTreeSet<String>,
    ) -> BTreeSet<String> {
        let code = production(source);
        let code = code.as_str();
        let mut used = BTreeSet::new();
        let ident = |rest: &str| -> String {
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        let mut note = |name: String| {
            if siblings.contains(&name) {
                used.insert(name);
            } else if module != "mod" && !name.is_empty() {
                used.insert("mod".to_owned());
            }
        };
        let prefix = format!("{folder}::");
        // `crate::folder::…`, and `folder::…` as an item of a `crate::{…}` group.
        let mut paths: Vec<String> = code
            .match_indices(&format!("crate::{prefix}"))
            .map(|(at, _)| code[at + "crate::".len() + prefix.len()..].to_owned())
            .collect();
        for (at, _) in code.match_indices("crate::{") {
            let items = group_items(&code[at + "crate::{".len()..]);
            paths.extend(
                items
                    .iter()
                    .filter_map(|item| item.strip_prefix(&prefix).map(str::to_owned)),
            );
        }
        for rest in &paths {
            match rest.strip_prefix('{') {
                Some(group) => group_items(group).iter().for_each(|item| note(ident(item))),
                None => note(ident(rest)),
            }
        }
        if module != "mod" {
            for (at, _) in code.match_indices("super::") {
                let name = ident(&code[at + "super::".len()..]);
                if siblings.contains(&name) {
                    used.insert(name);
                }
            }
        } else {
            for name in siblings {
                let path = format!("{name}::");
                let bare = code.match_indices(&path).any(|(at, _)| {
                    !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
                });
                if bare {
                    used.insert(name.clone());
                }
            }
        }
        used.remove(module);
        used
    }

    #[test]
    fn no_files_of_one_folder_use_each_other_in_a_circle() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        // Every folder of the layers and the folders inside them (`plan/rollout/`, whose own
        // module file is `plan/rollout.rs`).
        // `metrics`, usable by every layer, is a folder too, and holds to the same rule.
        let mut pending: Vec<String> = LAYERS
            .iter()
            .chain(&["metrics"])
            .map(|l| l.to_string())
            .collect();
        let mut folders = 0;
        while let Some(folder) = pending.pop() {
            let dir = src.join(&folder);
            let mut files: Vec<(String, String)> = Vec::new();
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    pending.push(format!("{folder}/{name}"));
                } else if path.extension().is_some_and(|x| x == "rs") {
                    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
                    files.push((stem, std::fs::read_to_string(&path).unwrap()));
                }
            }
            if let Ok(own) = std::fs::read_to_string(dir.with_extension("rs")) {
                files.push(("mod".to_owned(), own));
            }
            let folder = folder.replace('/', "::");
            let folder = folder.as_str();
            let siblings: BTreeSet<String> = files
                .iter()
                .map(|(m, _)| m.clone())
                .filter(|m| m != "mod")
                .collect();
            let edges: std::collections::BTreeMap<String, BTreeSet<String>> = files
                .iter()
                .map(|(m, source)| (m.clone(), used_siblings(folder, m, source, &siblings)))
                .collect();
            // Depth-first search; a file met again on the current path closes a circle.
            fn visit(
                node: &str,
                edges: &std::collections::BTreeMap<String, BTreeSet<String>>,
                path: &mut Vec<String>,
                done: &mut BTreeSet<String>,
            ) -> Option<Vec<String>> {
                if let Some(at) = path.iter().position(|p| p == node) {
                    let mut circle = path[at..].to_vec();
                    circle.push(node.to_owned());
                    return Some(circle);
                }
                if !done.insert(node.to_owned()) {
                    return None;
                }
                path.push(node.to_owned());
                for next in edges.get(node).into_iter().flatten() {
                    if let Some(circle) = visit(next, edges, path, done) {
                        return Some(circle);
                    }
                }
                path.pop();
                None
            }
            let mut done = BTreeSet::new();
            for start in edges.keys() {
                let circle = visit(start, &edges, &mut Vec::new(), &mut done);
                assert!(
                    circle.is_none(),
                    "src/{}/: {}",
                    folder.replace("::", "/"),
                    circle.unwrap().join(" → ")
                );
            }
            folders += 1;
        }
        assert!(folders > LAYERS.len(), "only {folders} folders read");
    }

    #[test]
    fn the_circle_check_sees_a_circle_through_mod_rs() {
        let siblings = BTreeSet::from(["a".to_owned()]);
        let child = "use crate::q::{Thing, a::X};\nfn f() {}";
        assert_eq!(
            used_siblings("q", "a", child, &siblings),
            BTreeSet::from(["mod".to_owned()])
        );
        let root = "pub mod a;\nfn g() { a::X::new(); }";
        assert_eq!(
            used_siblings("q", "mod", root, &siblings),
            BTreeSet::from(["a".to_owned()])
        );
        let nested = "use crate::{api::Key, q::{a::X, Thing}};";
        assert_eq!(
            used_siblings("q", "b", nested, &siblings),
            BTreeSet::from(["a".to_owned(), "mod".to_owned()])
        );
        let tests_only = "fn g() {}\n#[cfg(test)]\nmod tests { use super::a::X; }";
        assert!(used_siblings("q", "b", tests_only, &siblings).is_empty());
    }

    #[test]
    fn the_source_tree_holds_only_the_crate_root_metrics_and_the_folders() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut top: Vec<String> = std::fs::read_dir(src)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        top.sort();
        let mut expected: Vec<String> = LAYERS.iter().map(|l| l.to_string()).collect();
        expected.extend(["lib.rs", "main.rs", "metrics"].map(String::from));
        expected.sort();
        assert_eq!(top, expected);
    }
}
