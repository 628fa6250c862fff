//! `tenancy-hub rollout resume|restart NAME`: asks the operator, through an annotation, to resume or restart a rollout.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use kube::{
    Api,
    api::{Patch, PatchParams},
};

use crate::{
    api::crd::TenancyController, clusters::registry::HubSource, plan::rollout::ROLLOUT_ANNOTATION,
};

/// What to ask of a rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Action {
    /// Clear a halt: the failed clusters get a new progress deadline and the rollout goes on.
    Resume,
    /// Start the newest generation's rollout again from the first wave.
    Restart,
}

/// Options of `rollout`.
#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// What to do.
    #[arg(value_enum)]
    pub(crate) action: Action,
    /// The Controller.
    pub(crate) name: String,
    /// Its hub namespace; default: the context's namespace.
    #[arg(short, long)]
    pub(crate) namespace: Option<String>,
    /// Kubeconfig for the hub cluster; default: KUBECONFIG, ~/.kube/config, or the in-cluster config.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context of the hub cluster in that kubeconfig; default: its current context.
    #[arg(long)]
    pub(crate) context: Option<String>,
}

/// The annotation value asking for `action`; `stamp` makes each request new, since the operator
/// acts once per value.
pub(crate) fn annotation_value(action: Action, stamp: i64) -> String {
    match action {
        Action::Resume => format!("resume-{stamp}"),
        Action::Restart => format!("restart-{stamp}"),
    }
}

/// Sets the annotation on the Controller and says what it asked for.
pub(crate) async fn run(args: RolloutArgs) -> anyhow::Result<()> {
    let hub = HubSource {
        kubeconfig: args.kubeconfig,
        context: args.context,
    };
    let client = hub.client().await?;
    let namespace = args
        .namespace
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let api: Api<TenancyController> = Api::namespaced(client, &namespace);
    let value = annotation_value(
        args.action,
        k8s_openapi::jiff::Timestamp::now().as_millisecond(),
    );
    let patch = serde_json::json!({"metadata": {"annotations": {ROLLOUT_ANNOTATION: value}}});
    api.patch(&args.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("annotating Controller {namespace}/{}", args.name))?;
    println!(
        "Controller {namespace}/{}: {ROLLOUT_ANNOTATION}={value} set; the operator acts on it once",
        args.name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::rollout::Command;

    #[test]
    fn the_annotation_asks_for_what_the_gate_understands_and_is_new_each_time() {
        let resume = annotation_value(Action::Resume, 1);
        assert_eq!(
            Command::parse(&resume),
            Some(Command::Resume("resume-1".into()))
        );
        let restart = annotation_value(Action::Restart, 2);
        assert_eq!(
            Command::parse(&restart),
            Some(Command::Restart("restart-2".into()))
        );
        assert_ne!(annotation_value(Action::Resume, 3), resume);
    }
}
