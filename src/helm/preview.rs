//! A preview's post-render: the manifest `helm template` rendered, patched by the Helm executor's own post-renderer (`tenancy-hub-helm post-render`), so `diff` shows what an install deploys.

use std::{process::Stdio, time::Duration};

use tokio::{io::AsyncWriteExt as _, process::Command};

use crate::{
    helm::{args::HelmOptions, process::spawn_dying_with_operator},
    plan::post_render::PostRender,
};

/// How long a post-render may take: patches over one manifest, in process.
const POST_RENDER_TIMEOUT: Duration = Duration::from_secs(60);

/// The request `tenancy-hub-helm post-render` reads on its stdin.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Preview<'a> {
    manifest: &'a str,
    post_render: &'a PostRender,
}

/// `manifest` patched by `post_render` with the executor of `options`; Err: why not, as the
/// executor says it (naming the patch), or that there is no executor to run it.
pub(crate) async fn post_render(
    options: &HelmOptions,
    manifest: &str,
    post_render: &PostRender,
) -> Result<String, String> {
    let Some(executor) = &options.sdk else {
        return Err("its postRenderers and commonMetadata are run by the Helm executor (tenancy-hub-helm), which was not found: pass --helm-executor".into());
    };
    let body = serde_json::to_vec(&Preview {
        manifest,
        post_render,
    })
    .map_err(|e| e.to_string())?;
    let mut command = Command::new(executor);
    command
        .arg("post-render")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = spawn_dying_with_operator(command)
        .await
        .map_err(|e| format!("cannot run {}: {e}", executor.display()))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let run = async {
        // The executor reads the whole request before it answers.
        stdin.write_all(&body).await?;
        drop(stdin);
        child.wait_with_output().await
    };
    match tokio::time::timeout(POST_RENDER_TIMEOUT, run).await {
        Err(_) => Err(format!(
            "the post-render did not finish within {}s",
            POST_RENDER_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Err(format!("the post-render failed to run: {e}")),
        Ok(Ok(out)) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Ok(Ok(out)) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
    }
}
