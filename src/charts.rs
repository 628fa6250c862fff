//! What is known of each chart: chart-home directories by content digest, repository and OCI charts by resolved version.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::SystemTime,
};

use dashmap::DashMap;
use sha2::{Digest, Sha256};

use crate::{
    crd::ControllerSpec,
    plan::{self, ChartLookup, ChartSource},
};

/// What a directory looked like when its digest was taken: every file's path, size and mtime.
type Stamp = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

/// The chart catalog: looked up by the planner, filled before each plan.
#[derive(Default)]
pub struct ChartCatalog {
    directories: DashMap<PathBuf, (Stamp, String)>,
}

impl ChartCatalog {
    /// Brings what is known of every chart `spec` names up to date (directories are read again
    /// when their files changed).
    pub async fn prepare(&self, spec: &ControllerSpec, chart_home: &Path) {
        for chart in spec.tenancies.iter().flat_map(|t| &t.charts) {
            if let ChartSource::Directory(path) = plan::source_of(chart, chart_home) {
                self.refresh_directory(&path);
            }
        }
    }

    /// What is known of a chart now, for the planner.
    pub fn lookup(&self, source: &ChartSource, _version: Option<&str>) -> ChartLookup {
        match source {
            ChartSource::Directory(path) => match self.directories.get(path) {
                Some(entry) => ChartLookup::Found {
                    version: None,
                    digest: Some(entry.1.clone()),
                },
                None => ChartLookup::Missing(format!(
                    "no chart (Chart.yaml) at {}; add it to the chart home (--chart-home), or set repo or an oci:// chartName",
                    path.display()
                )),
            },
            ChartSource::Repository { .. } | ChartSource::Oci(_) => ChartLookup::Found {
                version: None,
                digest: None,
            },
        }
    }

    /// Takes a directory's digest again when its files changed; forgets it when it is no chart.
    fn refresh_directory(&self, path: &Path) {
        let Some(stamp) = stamp(path) else {
            self.directories.remove(path);
            return;
        };
        if self
            .directories
            .get(path)
            .is_some_and(|entry| entry.0 == stamp)
        {
            return;
        }
        match digest_directory(path, &stamp) {
            Ok(digest) => {
                self.directories.insert(path.to_owned(), (stamp, digest));
            }
            Err(error) => {
                tracing::warn!(chart = %path.display(), %error, "cannot read the chart directory");
                self.directories.remove(path);
            }
        }
    }
}

/// Every file below a chart directory with its size and mtime; None when it holds no Chart.yaml.
fn stamp(root: &Path) -> Option<Stamp> {
    if !root.join("Chart.yaml").is_file() {
        return None;
    }
    let mut out = Stamp::new();
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            let meta = entry.metadata().ok()?;
            if meta.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(root).ok()?.to_owned();
                out.insert(relative, (meta.len(), meta.modified().ok()));
            }
        }
    }
    Some(out)
}

/// A digest over every file's relative path and content, in path order: 16 hex digits.
fn digest_directory(root: &Path, stamp: &Stamp) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    for relative in stamp.keys() {
        let content = std::fs::read(root.join(relative))?;
        hasher.update(relative.to_string_lossy().as_bytes());
        hasher.update([0]);
        hasher.update((content.len() as u64).to_le_bytes());
        hasher.update(&content);
    }
    let digest = hasher.finalize();
    Ok(digest[..8].iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{Chart, Tenancy};

    fn spec(chart: &str) -> ControllerSpec {
        ControllerSpec {
            tenancies: vec![Tenancy {
                namespace: "a".into(),
                charts: vec![Chart {
                    chart_name: chart.into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn digest_of(catalog: &ChartCatalog, path: &Path) -> Option<String> {
        match catalog.lookup(&ChartSource::Directory(path.to_owned()), None) {
            ChartLookup::Found { digest, .. } => digest,
            ChartLookup::Missing(_) => None,
        }
    }

    #[tokio::test]
    async fn a_chart_directory_digest_follows_its_content_not_its_place() {
        let home = tempfile::tempdir().unwrap();
        let chart = home.path().join("web");
        std::fs::create_dir_all(chart.join("templates")).unwrap();
        std::fs::write(chart.join("Chart.yaml"), "name: web\nversion: 0.1.0\n").unwrap();
        std::fs::write(chart.join("templates/cm.yaml"), "kind: ConfigMap\n").unwrap();
        let catalog = ChartCatalog::default();
        catalog.prepare(&spec("web"), home.path()).await;
        let first = digest_of(&catalog, &chart).expect("found");

        std::fs::write(
            chart.join("templates/cm.yaml"),
            "kind: ConfigMap # changed\n",
        )
        .unwrap();
        catalog.prepare(&spec("web"), home.path()).await;
        let changed = digest_of(&catalog, &chart).expect("found");
        assert_ne!(first, changed, "same name and version, new content");

        let other = tempfile::tempdir().unwrap();
        let copy = other.path().join("web");
        std::fs::create_dir_all(copy.join("templates")).unwrap();
        for f in ["Chart.yaml", "templates/cm.yaml"] {
            std::fs::copy(chart.join(f), copy.join(f)).unwrap();
        }
        catalog.prepare(&spec("web"), other.path()).await;
        assert_eq!(digest_of(&catalog, &copy), Some(changed));
    }

    #[tokio::test]
    async fn a_directory_without_chart_yaml_is_missing_and_says_where_it_was_looked_for() {
        let home = tempfile::tempdir().unwrap();
        let catalog = ChartCatalog::default();
        catalog.prepare(&spec("nothing"), home.path()).await;
        let ChartLookup::Missing(reason) =
            catalog.lookup(&ChartSource::Directory(home.path().join("nothing")), None)
        else {
            panic!("a missing chart is found");
        };
        assert!(
            reason.contains("nothing") && reason.contains("--chart-home"),
            "{reason}"
        );
    }
}
