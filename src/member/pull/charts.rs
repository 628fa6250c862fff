//! Charts for pull members: the hub publishes a chart's archive in its member's hub namespace as chunks named by digest, and the agent puts them together and checks the digest before Helm sees a byte.
//!
//! Chunks keep every object far from the API server's 1 MiB limit; [`MAX_CHART`] bounds a chart
//! whole. Every source goes this way: a chart-home directory is packed into an archive (the same
//! bytes each time, so its digest is stable), a repository or OCI chart is the archive the hub's
//! cache verified.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use sha2::{Digest, Sha256};

use crate::member::pull::messages::{CALL_LABEL, ChartRef, chunk_name};

/// The largest chart archive a pull member is sent.
pub(crate) const MAX_CHART: u64 = 16 * 1024 * 1024;
/// Bytes per chunk.
const CHUNK: usize = 512 * 1024;
/// Secret data key of a chunk's bytes.
const CHUNK_KEY: &str = "chunk";

/// Errors of moving a chart to an agent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The chart is larger than a pull member is sent.
    #[error(
        "chart {chart} is {size} bytes packed, more than the {MAX_CHART} a pull member is sent; make it smaller"
    )]
    TooLarge {
        /// The chart.
        chart: String,
        /// Its size.
        size: u64,
    },
    /// A chart directory could not be read or packed.
    #[error("chart directory {path} cannot be packed: {source}")]
    Pack {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A chunk could not be written or read on the hub.
    #[error("chart chunk {name} in hub namespace {namespace}: {source}")]
    Hub {
        /// The chunk's name.
        name: String,
        /// The member's hub namespace.
        namespace: String,
        /// The API error.
        source: kube::Error,
    },
    /// What arrived is not what was published.
    #[error("chart {digest} arrived damaged ({what}); it is fetched again on the next try")]
    Damaged {
        /// The digest expected.
        digest: String,
        /// What was wrong.
        what: String,
    },
    /// The archive could not be stored on the agent's disk.
    #[error("chart {digest} cannot be stored in {dir}: {source}")]
    Store {
        /// The digest.
        digest: String,
        /// The agent's chart directory.
        dir: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The archive of a chart directory: its files under the directory's name, in name order, with
/// fixed times and modes, so the same files always give the same bytes.
pub(crate) fn pack(dir: &Path) -> Result<Vec<u8>, Error> {
    let failed = |source| Error::Pack {
        path: dir.to_owned(),
        source,
    };
    let name = dir.file_name().map(PathBuf::from).unwrap_or_default();
    let mut files = Vec::new();
    walk(dir, Path::new(""), &mut files).map_err(failed)?;
    files.sort();
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mut total = 0u64;
    for relative in files {
        let bytes = std::fs::read(dir.join(&relative)).map_err(failed)?;
        total += bytes.len() as u64;
        if total > 4 * MAX_CHART {
            return Err(Error::TooLarge {
                chart: dir.display().to_string(),
                size: total,
            });
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        tar.append_data(&mut header, name.join(&relative), bytes.as_slice())
            .map_err(failed)?;
    }
    let gz = tar.into_inner().map_err(failed)?;
    gz.finish().map_err(failed)
}

/// Every regular file under `root/relative`, as paths relative to `root` (links not followed).
fn walk(root: &Path, relative: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(root.join(relative))? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = relative.join(entry.file_name());
        if kind.is_dir() {
            walk(root, &path, files)?;
        } else if kind.is_file() {
            files.push(path);
        }
    }
    Ok(())
}

/// The reference an archive is published under.
pub(crate) fn reference(archive: &[u8]) -> ChartRef {
    let digest: String = Sha256::digest(archive)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    ChartRef {
        digest,
        size: archive.len() as u64,
        chunks: archive.len().div_ceil(CHUNK).max(1) as u32,
    }
}

/// Publishes `archive` (of `chart`) in `namespace` unless its chunks are there already.
pub(crate) async fn publish(
    secrets: &Api<Secret>,
    namespace: &str,
    chart: &str,
    archive: &[u8],
) -> Result<ChartRef, Error> {
    let size = archive.len() as u64;
    if size > MAX_CHART {
        return Err(Error::TooLarge {
            chart: chart.to_owned(),
            size,
        });
    }
    let found = reference(archive);
    for (index, piece) in archive.chunks(CHUNK).enumerate() {
        let name = chunk_name(&found.digest, index as u32);
        let hub = |source| Error::Hub {
            name: name.clone(),
            namespace: namespace.to_owned(),
            source,
        };
        if secrets.get_opt(&name).await.map_err(hub)?.is_some() {
            continue;
        }
        let chunk = Secret {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(CALL_LABEL.to_owned(), "chart".to_owned())].into()),
                ..Default::default()
            },
            data: Some([(CHUNK_KEY.to_owned(), ByteString(piece.to_vec()))].into()),
            immutable: Some(true),
            ..Default::default()
        };
        match secrets.create(&PostParams::default(), &chunk).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(hub(e)),
        }
    }
    Ok(found)
}

/// The archive `chart` names, from `dir` when fetched before, else put together from its chunks
/// in `namespace` and checked against its size and digest first. Returns its path.
pub(crate) async fn fetch(
    secrets: &Api<Secret>,
    namespace: &str,
    chart: &ChartRef,
    dir: &Path,
) -> Result<PathBuf, Error> {
    let damaged = |what: String| Error::Damaged {
        digest: chart.digest.clone(),
        what,
    };
    if chart.size > MAX_CHART
        || chart.digest.len() != 64
        || !chart.digest.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(damaged(format!(
            "{} bytes, digest {:?}",
            chart.size, chart.digest
        )));
    }
    let path = dir.join(format!("{}.tgz", chart.digest));
    if path.is_file() {
        return Ok(path);
    }
    let mut archive = Vec::with_capacity(chart.size as usize);
    for index in 0..chart.chunks {
        let name = chunk_name(&chart.digest, index);
        let secret = secrets.get(&name).await.map_err(|source| Error::Hub {
            name: name.clone(),
            namespace: namespace.to_owned(),
            source,
        })?;
        let piece = secret
            .data
            .and_then(|mut d| d.remove(CHUNK_KEY))
            .ok_or_else(|| damaged(format!("chunk {name} holds no bytes")))?;
        archive.extend_from_slice(&piece.0);
        if archive.len() as u64 > chart.size {
            return Err(damaged(format!(
                "more than the {} bytes published",
                chart.size
            )));
        }
    }
    let got = reference(&archive);
    if got.digest != chart.digest || got.size != chart.size {
        return Err(damaged(format!("its digest is {}", got.digest)));
    }
    let store = |source| Error::Store {
        digest: chart.digest.clone(),
        dir: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(store)?;
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(store)?;
    file.write_all(&archive).map_err(store)?;
    file.persist(&path).map_err(|e| store(e.error))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_directory_packs_to_the_same_bytes_each_time() {
        let home = tempfile::tempdir().unwrap();
        let chart = home.path().join("web");
        std::fs::create_dir_all(chart.join("templates")).unwrap();
        std::fs::write(
            chart.join("Chart.yaml"),
            "apiVersion: v2\nname: web\nversion: 0.1.0\n",
        )
        .unwrap();
        std::fs::write(chart.join("templates/cm.yaml"), "kind: ConfigMap\n").unwrap();
        let first = pack(&chart).unwrap();
        let second = pack(&chart).unwrap();
        assert_eq!(reference(&first), reference(&second));
        let mut names: Vec<String> = tar::Archive::new(flate2::read::GzDecoder::new(&first[..]))
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["web/Chart.yaml", "web/templates/cm.yaml"]);
        std::fs::write(chart.join("templates/cm.yaml"), "kind: Secret\n").unwrap();
        assert_ne!(
            reference(&pack(&chart).unwrap()).digest,
            reference(&first).digest
        );
    }

    #[test]
    fn a_reference_counts_its_chunks() {
        assert_eq!(reference(&[]).chunks, 1);
        assert_eq!(reference(&vec![0; CHUNK]).chunks, 1);
        assert_eq!(reference(&vec![0; CHUNK + 1]).chunks, 2);
    }
}
