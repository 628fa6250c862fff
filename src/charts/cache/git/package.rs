//! A chart directory exported from Git packed into a deterministic chart archive (pure but for reading the directory): sorted entries under `<chart>/`, fixed times, owners and modes, `.helmignore` applied, `file://` dependencies in `charts/`, those of a repository or registry listed for the cache to resolve, so one commit (and one set of resolved dependencies) always gives one sha256.
//!
//! Helm lays a packaged chart out as `<name>/Chart.yaml`, `<name>/templates/…` and, for its
//! dependencies, `<name>/charts/<dependency>`; it loads a dependency from a directory there as
//! from an archive. A dependency of a repository or registry is added afterwards, by
//! [`add_archives`], as the archive `helm dependency build` would save: `charts/<name>-<version>.tgz`. The archive is a ustar stream of regular files only (no directory entries,
//! links or devices), each with mode 0644 or 0755, owner 0:0 and no names, time 0, in byte
//! order of their paths, gzipped at a fixed level with no name and time in its header.

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
};

use serde::Deserialize;

use super::{helmignore, lock};

/// The most files one chart archive holds, dependencies included.
pub(crate) const MAX_FILES: usize = 10_000;
/// How deep `file://` dependencies may nest.
const MAX_DEPTH: usize = 8;
/// The most dependencies of repositories or registries one chart (its `file://` dependencies
/// included) may ask for.
pub(crate) const MAX_DEPENDENCIES: usize = 64;

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
    #[serde(default)]
    version: Option<serde_yaml::Value>,
}

/// `Chart.yaml`'s `dependencies` as written, for Chart.lock's digest.
#[derive(Deserialize)]
struct RawDependencies {
    #[serde(default)]
    dependencies: Vec<serde_yaml::Value>,
}

/// A dependency of a repository or registry that the cache resolves and adds to the archive.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct DependencyRequest {
    /// The directory of the chart that asks for it (relative to the repository), for messages.
    pub(crate) chart: String,
    /// Where that chart lies in the archive (`web`, `web/charts/common`): the archive goes
    /// under its `charts/`.
    pub(crate) at: String,
    /// The dependency's chart name.
    pub(crate) name: String,
    /// Its repository (`https://…`) or registry (`oci://…`), as written.
    pub(crate) repository: String,
    /// The version: pinned by Chart.lock, else the constraint Chart.yaml gives (None: newest).
    pub(crate) version: Option<String>,
    /// Whether Chart.lock pinned it.
    pub(crate) locked: bool,
}
/// A chart archive made from a directory.
#[derive(Debug)]
pub(crate) struct Packed {
    /// The gzipped tar stream.
    pub(crate) bytes: Vec<u8>,
    /// The chart's version, from its `Chart.yaml`.
    pub(crate) version: String,
    /// The dependencies of repositories or registries to add, in `Chart.yaml` order.
    pub(crate) requests: Vec<DependencyRequest>,
}

/// The files of an archive: path inside it, content, executable.
type Files = BTreeMap<String, (Vec<u8>, bool)>;

/// Packs the chart at `chart` (a path relative to `root`, in normal form, where the fetcher
/// wrote the commit's files) as chart `name`: its `Chart.yaml` must name it; the files its
/// `.helmignore` names are left out; its `file://` dependencies, which the fetcher exported at
/// their relative places, go under `charts/`; a dependency of a repository or registry already
/// in `charts/` is kept, any other is listed in [`Packed::requests`], at the version Chart.lock
/// pins (when its digest matches) or with its constraint (it is never fetched here or by helm).
/// At most `max_bytes` of content, [`MAX_FILES`] files and [`MAX_DEPENDENCIES`] requests.
pub(crate) fn pack(root: &Path, chart: &str, name: &str, max_bytes: u64) -> Result<Packed, String> {
    let mut packing = Packing {
        root,
        files: Files::new(),
        budget: max_bytes,
        requests: Vec::new(),
    };
    let version = packing.add_chart(chart, name, name, 0)?;
    Ok(Packed {
        bytes: archive(&packing.files).map_err(|e| format!("packing chart {name}: {e}"))?,
        version,
        requests: packing.requests,
    })
}

/// What a pack has gathered so far.
struct Packing<'a> {
    root: &'a Path,
    files: Files,
    budget: u64,
    requests: Vec<DependencyRequest>,
}

impl Packing<'_> {
    /// Adds the chart at `dir` (relative to `root`) under `prefix`, with its `file://`
    /// dependencies, and lists its other dependencies; returns its version.
    fn add_chart(
        &mut self,
        dir: &str,
        expected: &str,
        prefix: &str,
        depth: usize,
    ) -> Result<String, String> {
        let root = self.root;
        if depth > MAX_DEPTH {
            return Err(format!(
                "file:// dependencies nest deeper than {MAX_DEPTH} levels at {dir}"
            ));
        }
        let base = root.join(dir);
        let text = std::fs::read(base.join("Chart.yaml")).map_err(|e| {
            format!("{dir}/Chart.yaml cannot be read ({e}): the path names no chart")
        })?;
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
        let ignore = read_helmignore(&base, dir)?;
        walk(
            &base,
            Path::new(""),
            prefix,
            (&ignore, &mut self.files),
            &mut self.budget,
        )?;
        let pins = self.pins(&base, dir, &text, &meta)?;
        for dependency in &meta.dependencies {
            let Some(relative) = dependency.repository.strip_prefix("file://") else {
                self.request(dir, prefix, dependency, pins.as_deref())?;
                continue;
            };
            let resolved = resolve_relative(dir, relative).ok_or_else(|| {
                format!(
                    "{dir}/Chart.yaml: dependency {:?} at {relative} leaves the repository",
                    dependency.name
                )
            })?;
            self.add_chart(
                &resolved,
                &dependency.name,
                &format!("{prefix}/charts/{}", dependency.name),
                depth + 1,
            )?;
        }
        Ok(meta.version)
    }

    /// The versions Chart.lock pins, when the chart at `base` has dependencies of repositories or
    /// registries and a Chart.lock (refused when out of sync, as `helm dependency build` does).
    fn pins(
        &self,
        base: &Path,
        dir: &str,
        chart_yaml: &[u8],
        meta: &ChartYaml,
    ) -> Result<Option<Vec<lock::Pinned>>, String> {
        let remote =
            |d: &Dependency| !d.repository.is_empty() && !d.repository.starts_with("file://");
        if !meta.dependencies.iter().any(remote) {
            return Ok(None);
        }
        let path = base.join("Chart.lock");
        let Ok(meta_lock) = std::fs::symlink_metadata(&path) else {
            return Ok(None);
        };
        if !meta_lock.is_file() || meta_lock.len() > lock::MAX_LOCK as u64 {
            return Err(format!(
                "{dir}/Chart.lock is not a regular file of at most {} bytes",
                lock::MAX_LOCK
            ));
        }
        let text = std::fs::read(&path).map_err(|e| format!("{dir}/Chart.lock: {e}"))?;
        let raw: RawDependencies = serde_yaml::from_slice(chart_yaml)
            .map_err(|e| format!("{dir}/Chart.yaml: {}", crate::charts::index::yaml_error(&e)))?;
        lock::pins(dir, &raw.dependencies, &text).map(Some)
    }

    /// Lists `dependency` (of a repository or registry) of the chart at `dir` for the cache,
    /// unless it is vendored under `charts/` or has no repository (then helm takes it from
    /// `charts/`); an `@name` or `alias:` repository, a lock that does not pin it, or one too many
    /// is refused.
    fn request(
        &mut self,
        dir: &str,
        prefix: &str,
        dependency: &Dependency,
        pins: Option<&[lock::Pinned]>,
    ) -> Result<(), String> {
        let name = &dependency.name;
        let vendored = |f: &String| {
            f.starts_with(&format!("{prefix}/charts/{name}/"))
                || f.starts_with(&format!("{prefix}/charts/{name}-"))
        };
        if dependency.repository.is_empty() || self.files.keys().any(vendored) {
            return Ok(());
        }
        let shown = crate::policy::source::redact(&dependency.repository);
        if dependency.repository.starts_with('@') || dependency.repository.starts_with("alias:") {
            return Err(format!(
                "{dir}/Chart.yaml: dependency {name:?} names its repository by a local name ({shown}), which means nothing to the hub (it reads no repositories.yaml): write the repository's URL"
            ));
        }
        if name.is_empty() || name.contains(['/', '\\']) || name.contains("..") {
            return Err(format!(
                "{dir}/Chart.yaml: a dependency of {shown} has no plain chart name"
            ));
        }
        let constraint = dependency
            .version
            .as_ref()
            .map(lock::scalar_text)
            .filter(|v| !v.is_empty());
        let (version, locked) = match pins {
            None => (constraint, false),
            Some(pins) => {
                let pin = pins
                .iter()
                .find(|p| &p.name == name && p.repository == dependency.repository)
                .ok_or_else(|| {
                    format!(
                        "{dir}/Chart.lock pins no version of dependency {name:?} from {shown}: run helm dependency update in {dir} and commit Chart.lock"
                    )
                })?;
                (Some(pin.version.clone()), true)
            }
        };
        if self.requests.len() >= MAX_DEPENDENCIES {
            return Err(format!(
                "the chart asks for more than {MAX_DEPENDENCIES} dependencies of repositories or registries"
            ));
        }
        self.requests.push(DependencyRequest {
            chart: dir.to_owned(),
            at: prefix.to_owned(),
            name: name.clone(),
            repository: dependency.repository.clone(),
            version,
            locked,
        });
        Ok(())
    }
}

/// The `.helmignore` rules of the chart at `base` (helm's default alone when it has none).
fn read_helmignore(base: &Path, dir: &str) -> Result<helmignore::Rules, String> {
    let path = base.join(".helmignore");
    let text = match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.is_file() && meta.len() <= 1 << 20 => {
            Some(std::fs::read_to_string(&path).map_err(|e| format!("{dir}/.helmignore: {e}"))?)
        }
        Ok(_) => {
            return Err(format!(
                "{dir}/.helmignore is not a regular text file of at most 1 MiB"
            ));
        }
        Err(_) => None,
    };
    helmignore::Rules::parse(text.as_deref()).map_err(|why| format!("{dir}/{why}"))
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

/// Adds every regular file under `base/at` that `ignore` keeps to `files` under `prefix/at`,
/// within `budget` bytes and [`MAX_FILES`] files; a symlink or any other kind of file kept is
/// refused.
fn walk(
    base: &Path,
    at: &Path,
    prefix: &str,
    (ignore, files): (&helmignore::Rules, &mut Files),
    budget: &mut u64,
) -> Result<(), String> {
    let dir = base.join(at);
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", at.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let relative: PathBuf = at.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        let shown = relative.to_string_lossy();
        if ignore.ignores(&shown, kind.is_dir()) {
            continue;
        }
        if kind.is_symlink() {
            return Err(format!(
                "{shown} is a symbolic link: a chart holds regular files only"
            ));
        }
        if kind.is_dir() {
            walk(base, &relative, prefix, (ignore, &mut *files), budget)?;
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

/// `base` (an archive [`pack`] made) with `archives` added (path inside it, content), packed
/// again the same deterministic way; at most `max_bytes` of content and [`MAX_FILES`] files.
pub(crate) fn add_archives(
    base: &[u8],
    archives: &[(String, Vec<u8>)],
    max_bytes: u64,
) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let mut files = Files::new();
    let mut budget = max_bytes;
    let mut take = |path: String, content: Vec<u8>, executable: bool| {
        budget = budget
            .checked_sub(content.len() as u64)
            .ok_or("the chart with its dependencies is larger than the fetch's size bound")?;
        if files.len() >= MAX_FILES {
            return Err("the chart with its dependencies holds more than 10000 files");
        }
        files.insert(path, (content, executable));
        Ok(())
    };
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(base));
    for entry in tar.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let path = entry
            .path()
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .into_owned();
        let executable = entry.header().mode().map_err(|e| e.to_string())? & 0o111 != 0;
        let mut content = Vec::new();
        (&mut entry)
            .take(max_bytes + 1)
            .read_to_end(&mut content)
            .map_err(|e| e.to_string())?;
        take(path, content, executable)?;
    }
    for (path, content) in archives {
        take(path.clone(), content.clone(), false)?;
    }
    archive(&files).map_err(|e| format!("packing the chart with its dependencies: {e}"))
}
