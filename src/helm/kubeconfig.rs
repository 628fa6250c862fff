//! The kubeconfig helm is given: the registered file narrowed to one member's context.

use std::{io::Write as _, path::Path};

/// Writes to `out` (private, replaced whole) the kubeconfig at `source` reduced to `context`, its
/// cluster and its user, with file paths made absolute; nothing else of the source is kept.
pub(crate) fn narrow_kubeconfig(source: &Path, context: &str, out: &Path) -> Result<(), String> {
    use kube::config::Kubeconfig;
    let whole = Kubeconfig::read_from(source).map_err(|e| e.to_string())?;
    let named = whole
        .contexts
        .iter()
        .find(|c| c.name == context)
        .ok_or_else(|| format!("no context {context}"))?;
    let (cluster, user) = named
        .context
        .as_ref()
        .map(|c| (c.cluster.clone(), c.user.clone().unwrap_or_default()))
        .ok_or_else(|| format!("context {context} is empty"))?;
    let one = Kubeconfig {
        clusters: whole
            .clusters
            .iter()
            .filter(|c| c.name == cluster)
            .cloned()
            .collect(),
        auth_infos: whole
            .auth_infos
            .iter()
            .filter(|u| u.name == user)
            .cloned()
            .collect(),
        contexts: vec![named.clone()],
        current_context: Some(context.to_owned()),
        ..whole.clone()
    };
    let yaml = serde_yaml::to_string(&one).map_err(|e| e.to_string())?;
    let dir = out.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".kubeconfig-")
        .tempfile_in(dir)
        .map_err(|e| e.to_string())?;
    tmp.write_all(yaml.as_bytes()).map_err(|e| e.to_string())?;
    tmp.persist(out).map_err(|e| e.to_string())?;
    Ok(())
}
