//! A chart directory exported from Git packed into a deterministic chart archive (pure but for reading the directory): sorted entries under `<chart>/`, fixed times, owners and modes, `file://` dependencies in `charts/`, so one commit always gives one sha256.
//!
//! Helm lays a packaged chart out as `<name>/Chart.yaml`, `<name>/templates/…` and, for its
//! dependencies, `<name>/charts/<dependency>`; it loads a dependency from a directory there as
//! from an archive. The archive is a ustar stream of regular files only (no directory entries,
//! links or devices), each with mode 0644 or 0755, owner 0:0 and no names, time 0, in byte
//! order of their paths, gzipped at a fixed level with no name and time in its header.

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
};

use serde::Deserialize;

/// The most files one chart archive holds, dependencies included.
pub(crate) const MAX_FILES: usize = 10_000;
/// How deep `file://` dependencies may nest.
const MAX_DEPTH: usize = 8;

/// A chart's `Chart.yaml`, as far as packing reads it.
#[derive(Deserialize)]
struct ChartYaml {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    dependencies: Vec<Dependency>,
}

/// One entry of `dependencies`.
#[derive(Deserialize)]
struct Dependency {
    #[serde(default)]
    name: String,
    #[serde(default)]
    repository: String,
}

/// A chart archive made from a directory.
#[derive(Debug)]
pub(crate) struct Packed {
    /// The gzipped tar stream.
    pub(crate) bytes: Vec<u8>,
    /// The chart's version, from its `Chart.yaml`.
    pub(crate) version: String,
}

/// The files of an archive: path inside it, content, executable.
type Files = BTreeMap<String, (Vec<u8>, bool)>;

/// Packs the chart at `chart` (a path relative to `root`, in normal form, where the fetcher
/// wrote the commit's files) as chart `name`: its `Chart.yaml` must name it; its `file://`
/// dependencies, which the fetcher exported at their relative places, go under `charts/`;
/// a dependency of a repository or registry must already be in its `charts/` (it is never
/// fetched here or by helm). At most `max_bytes` of content and [`MAX_FILES`] files.
pub(crate) fn pack(root: &Path, chart: &str, name: &str, max_bytes: u64) -> Result<Packed, String> {
    let mut files = Files::new();
    let mut budget = max_bytes;
    let version = add_chart(root, chart, name, name, &mut files, &mut budget, 0)?;
    Ok(Packed {
        bytes: archive(&files).map_err(|e| format!("packing chart {name}: {e}"))?,
        version,
    })
}

/// Adds the chart at `dir` (relative to `root`) under `prefix`, with its `file://`
/// dependencies; returns its version.
fn add_chart(
    root: &Path,
    dir: &str,
    expected: &str,
    prefix: &str,
    files: &mut Files,
    budget: &mut u64,
    depth: usize,
) -> Result<String, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "file:// dependencies nest deeper than {MAX_DEPTH} levels at {dir}"
        ));
    }
    let base = root.join(dir);
    let text = std::fs::read(base.join("Chart.yaml"))
        .map_err(|e| format!("{dir}/Chart.yaml cannot be read ({e}): the path names no chart"))?;
    let meta: ChartYaml = serde_yaml::from_slice(&text)
        .map_err(|e| format!("{dir}/Chart.yaml: {}", crate::charts::index::yaml_error(&e)))?;
    if meta.name != expected {
        return Err(format!(
            "{dir}/Chart.yaml names chart {:?}, not {expected:?}: chartName (or the dependency's name) must be the name its Chart.yaml gives",
            meta.name.chars().take(64).collect::<String>()
        ));
    }
    if meta.version.is_empty() || meta.version.len() > crate::charts::common::MAX_VERSION {
        return Err(format!(
            "{dir}/Chart.yaml gives no version, or one longer than {} characters",
            crate::charts::common::MAX_VERSION
        ));
    }
    walk(&base, Path::new(""), prefix, files, budget)?;
    for dependency in &meta.dependencies {
        let Some(relative) = dependency.repository.strip_prefix("file://") else {
            let vendored = |f: &String| {
                let name = &dependency.name;
                f.starts_with(&format!("{prefix}/charts/{name}/"))
                    || f.starts_with(&format!("{prefix}/charts/{name}-"))
            };
            if dependency.repository.is_empty() || files.keys().any(vendored) {
                continue;
            }
            return Err(format!(
                "{dir}/Chart.yaml depends on {:?} from {}, which is not in its charts/ directory: commit the dependency's archive under charts/ or use a file:// dependency; the hub never lets helm fetch one",
                dependency.name,
                crate::policy::source::redact(&dependency.repository)
            ));
        };
        let resolved = resolve_relative(dir, relative).ok_or_else(|| {
            format!(
                "{dir}/Chart.yaml: dependency {:?} at {relative} leaves the repository",
                dependency.name
            )
        })?;
        add_chart(
            root,
            &resolved,
            &dependency.name,
            &format!("{prefix}/charts/{}", dependency.name),
            files,
            budget,
            depth + 1,
        )?;
    }
    Ok(meta.version)
}

/// `relative` (a `file://` dependency's path, `../common`) taken from `dir`, in normal form;
/// None when it leaves the repository or names nothing.
pub(crate) fn resolve_relative(dir: &str, relative: &str) -> Option<String> {
    let mut out: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
    for segment in relative.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            other if other.contains('\\') || other.chars().any(char::is_control) => return None,
            other => out.push(other),
        }
    }
    (!out.is_empty()).then(|| out.join("/"))
}

/// Adds every regular file under `base/at` to `files` under `prefix/at`, within `budget` bytes
/// and [`MAX_FILES`] files; a symlink or any other kind of file is refused.
fn walk(
    base: &Path,
    at: &Path,
    prefix: &str,
    files: &mut Files,
    budget: &mut u64,
) -> Result<(), String> {
    let dir = base.join(at);
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", at.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let relative: PathBuf = at.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        let shown = relative.to_string_lossy();
        if kind.is_symlink() {
            return Err(format!(
                "{shown} is a symbolic link: a chart holds regular files only"
            ));
        }
        if kind.is_dir() {
            walk(base, &relative, prefix, files, budget)?;
            continue;
        }
        if !kind.is_file() {
            return Err(format!("{shown} is not a regular file"));
        }
        if files.len() >= MAX_FILES {
            return Err(format!("the chart holds more than {MAX_FILES} files"));
        }
        let Some(name) = relative.to_str() else {
            return Err(format!("{shown} is not a UTF-8 path"));
        };
        let meta = entry.metadata().map_err(|e| e.to_string())?;
        *budget = budget
            .checked_sub(meta.len())
            .ok_or_else(|| "the chart is larger than the fetch's size bound".to_owned())?;
        let content = std::fs::read(base.join(&relative)).map_err(|e| format!("{shown}: {e}"))?;
        use std::os::unix::fs::PermissionsExt as _;
        let executable = meta.permissions().mode() & 0o111 != 0;
        files.insert(format!("{prefix}/{name}"), (content, executable));
    }
    Ok(())
}

/// The gzipped tar stream of `files`, byte for byte the same for the same files.
fn archive(files: &Files) -> std::io::Result<Vec<u8>> {
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::new(6));
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    for (path, (content, executable)) in files {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(content.len() as u64);
        header.set_mode(if *executable { 0o755 } else { 0o644 });
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        tar.append_data(&mut header, path, content.as_slice())?;
    }
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()
}
