//! tenancy-hub: delivers Helm charts into tenant namespaces across clusters and reports what runs there.
//!
//! The modules, from the pure core up to the binary's edge: `api` (the resources and typed keys),
//! `delivery` (planning, the queue, helm, release records, charts), `observe` (what runs in the
//! members), `status` (the hub resource's status), `clusters` (who the members are and whether they
//! answer), `controller` (the reconciler and its loops), `runtime` (wiring, leader election, HTTP)
//! and `cli`.

pub mod api;
pub mod charts;
pub mod cli;
pub mod clusters;
pub mod controller;
pub mod helm;
pub mod member;
pub mod metrics;
pub mod observe;
pub mod plan;
pub mod policy;
pub mod queue;
pub mod runtime;
pub mod status;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// The folders from the pure core up to the binary's edge; a module may use only its own
    /// folder and those before it (`metrics` is used by every layer).
    const LAYERS: [&str; 13] = [
        "api",
        "clusters",
        "policy",
        "plan",
        "queue",
        "charts",
        "helm",
        "observe",
        "member",
        "status",
        "controller",
        "runtime",
        "cli",
    ];

    /// The top-level folders a source file names through `crate::`, outside its tests.
    fn used_folders(source: &str) -> BTreeSet<String> {
        let code = source.split("#[cfg(test)]").next().unwrap_or_default();
        let mut used = BTreeSet::new();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a::x, b::{y, z}}`: the first segment of each top-level item.
                let mut depth = 0;
                let mut item = String::new();
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            used.insert(item.trim().split("::").next().unwrap_or("").to_owned());
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                used.insert(item.trim().split("::").next().unwrap_or("").to_owned());
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

    #[test]
    fn no_module_uses_a_folder_above_its_own() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut checked = 0;
        for (rank, folder) in LAYERS.iter().enumerate() {
            for entry in std::fs::read_dir(src.join(folder)).unwrap().flatten() {
                // Rust modules only: `helm/helm-sdk` is the Go executor's module.
                if entry.path().extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let source = std::fs::read_to_string(entry.path()).unwrap();
                for used in used_folders(&source) {
                    if let Some(above) = LAYERS.iter().position(|l| *l == used) {
                        assert!(
                            above <= rank,
                            "{} uses {used}, a folder above {folder}",
                            entry.path().display()
                        );
                    }
                }
                checked += 1;
            }
        }
        assert!(checked > 20, "only {checked} files found");
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
        expected.extend(["lib.rs", "main.rs", "metrics.rs"].map(String::from));
        expected.sort();
        assert_eq!(top, expected);
    }
}
