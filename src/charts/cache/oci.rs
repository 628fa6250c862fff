//! OCI charts in the cache: `helm pull` with the source's credentials in private files, the archive kept under its sha256.

use std::{
    ffi::OsString,
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
};

use crate::{
    charts::{
        cache::{
            ChartCache, Error, PARTIAL, PULL_TIMEOUT, Resolved, Result, archive_version, sha256_of,
        },
        credentials::{self, Material},
    },
    plan::ChartSource,
    policy::access::Credentials,
    policy::source::redact,
    queue::failure::trim_error,
};

/// The digest helm prints on a `Digest:` line (OCI pulls; helm 4 prints it on stderr).
pub(crate) fn parse_digest(stdout: &str, stderr: &str) -> Option<String> {
    stdout
        .lines()
        .chain(stderr.lines())
        .find_map(|l| l.trim().strip_prefix("Digest:"))
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
}

/// The private files an OCI pull reads its credentials from: paths only ever reach argv.
#[derive(Debug, Default)]
pub(super) struct PullFiles {
    /// The registries' login file (`--registry-config`), always given, so helm never falls back
    /// on a login of the operator's user.
    pub(super) registry_config: PathBuf,
    /// `--ca-file`.
    pub(super) ca: Option<PathBuf>,
    /// `--cert-file` and `--key-file`.
    pub(super) identity: Option<(PathBuf, PathBuf)>,
}

impl PullFiles {
    /// Writes what `material` holds for the registry `host` into `dir` (private to the
    /// operator), each file 0600.
    pub(super) fn write(
        dir: &Path,
        material: Option<&Material>,
        host: &str,
    ) -> std::io::Result<Self> {
        let private = |name: &str, content: &[u8]| -> std::io::Result<PathBuf> {
            use std::os::unix::fs::OpenOptionsExt as _;
            let path = dir.join(name);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            file.write_all(content)?;
            Ok(path)
        };
        let config = match material {
            Some(m) => m.registry_config(host),
            None => credentials::registry_config(None, host),
        };
        Ok(Self {
            registry_config: private("config.json", &config)?,
            ca: material
                .and_then(|m| m.ca.as_deref())
                .map(|ca| private("ca.crt", ca))
                .transpose()?,
            identity: match material.and_then(|m| m.identity.as_ref()) {
                Some((cert, key)) => Some((private("tls.crt", cert)?, private("tls.key", key)?)),
                None => None,
            },
        })
    }
}

/// Arguments of `helm pull` of an OCI chart into `into`, its credentials read from `files`:
/// every value inside one `--flag=value` argument and the reference after `--`, so nothing can
/// pose as a flag; never a credential, only the paths of the files holding them.
pub(super) fn pull_args(
    reference: &str,
    constraint: Option<&str>,
    into: &Path,
    files: &PullFiles,
) -> Vec<OsString> {
    let flag = |name: &str, path: &Path| {
        let mut arg = OsString::from(format!("--{name}="));
        arg.push(path);
        arg
    };
    let mut args: Vec<OsString> = vec!["pull".into(), flag("destination", into)];
    if let Some(constraint) = constraint {
        args.push(format!("--version={constraint}").into());
    }
    args.push(flag("registry-config", &files.registry_config));
    if let Some(ca) = &files.ca {
        args.push(flag("ca-file", ca));
    }
    if let Some((cert, key)) = &files.identity {
        args.push(flag("cert-file", cert));
        args.push(flag("key-file", key));
    }
    args.push("--".into());
    args.push(reference.into());
    args
}

/// The `host[:port]` of an OCI reference.
pub(crate) fn registry_host(reference: &str) -> &str {
    let rest = reference.strip_prefix("oci://").unwrap_or(reference);
    rest.split('/').next().unwrap_or(rest)
}

impl ChartCache {
    /// Resolves an OCI chart: `helm pull` of the newest version matching `constraint`, with
    /// `credentials`, kept in the cache under its sha256. The digest is the manifest's, as helm
    /// prints it.
    pub(crate) async fn oci(
        &self,
        reference: &str,
        constraint: Option<&str>,
        credentials: &Credentials,
    ) -> Result<Resolved> {
        let material = self.material(credentials, true).await?;
        self.pull(reference, constraint, credentials, material.as_ref())
            .await
            .map_err(|e| self.hinted(e, credentials))
    }

    async fn pull(
        &self,
        reference: &str,
        constraint: Option<&str>,
        credentials: &Credentials,
        material: Option<&Material>,
    ) -> Result<Resolved> {
        let failed = |message: String| Error::Pull {
            reference: redact(reference),
            message: redact(&material.map_or(message.clone(), |m| m.mask(&message))),
        };
        let scratch = tempfile::Builder::new()
            .prefix(PARTIAL)
            .tempdir_in(&self.store.dir)
            .map_err(|e| self.store.io(e))?;
        // Beside the scratch directory, not in it: helm writes the chart there.
        let private = tempfile::Builder::new()
            .prefix(PARTIAL)
            .tempdir_in(&self.store.dir)
            .map_err(|e| self.store.io(e))?;
        let files = PullFiles::write(private.path(), material, registry_host(reference))
            .map_err(|e| self.store.io(e))?;
        let mut command = tokio::process::Command::new(&self.helm);
        command
            .args(pull_args(reference, constraint, scratch.path(), &files))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = command.spawn().map_err(|e| {
            failed(format!(
                "cannot run {}: {e}; install helm or pass --helm",
                self.helm.display()
            ))
        })?;
        let out = match tokio::time::timeout(PULL_TIMEOUT, child.wait_with_output()).await {
            Err(_) => {
                return Err(failed(format!(
                    "helm did not finish within {}s and was stopped",
                    PULL_TIMEOUT.as_secs()
                )));
            }
            Ok(Err(e)) => return Err(failed(format!("helm failed to run: {e}"))),
            Ok(Ok(out)) if !out.status.success() => {
                return Err(failed(trim_error(&String::from_utf8_lossy(&out.stderr))));
            }
            Ok(Ok(out)) => out,
        };
        let digest = parse_digest(
            &String::from_utf8_lossy(&out.stdout),
            &String::from_utf8_lossy(&out.stderr),
        );
        let pulled = std::fs::read_dir(scratch.path())
            .map_err(|e| self.store.io(e))?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "tgz"))
            .ok_or_else(|| failed("helm wrote no chart archive".into()))?;
        let read = pulled.clone();
        let (sha, size, version) = tokio::task::spawn_blocking(move || {
            let sha = sha256_of(&read)?;
            let size = std::fs::metadata(&read)?.len();
            Ok::<_, std::io::Error>((sha, size, archive_version(&read)))
        })
        .await
        .expect("hashing does not panic")
        .map_err(|e| self.store.io(e))?;
        let version = version.map_err(|reason| Error::Archive {
            origin: redact(reference),
            reason,
        })?;
        self.store.metrics.chart_fetched("archive", size);
        let hit = self.store.has(&sha);
        self.store.metrics.chart_cache(hit);
        if !hit {
            self.store.keep(&pulled, &sha, size)?;
        }
        self.store.state().pins.insert(
            (
                ChartSource::Oci(reference.to_owned()),
                credentials.clone(),
                version.clone(),
            ),
            sha.clone(),
        );
        Ok(Resolved {
            version,
            digest,
            archive: Some(sha),
            provenance: None,
            git: None,
        })
    }
}
