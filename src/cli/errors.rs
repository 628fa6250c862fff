//! How the command line prints an error: its message, then each cause of its chain that the line does not already say.

use std::{error::Error, process::ExitCode};

/// `error` and its causes on one line, `message: cause: cause`. A cause whose text the line
/// already holds is left out: many errors (ours, kube's, std's) say their source in their own
/// message so that a log line or a status condition reads alone, and the chain would say it again.
pub fn error_line(error: &anyhow::Error) -> String {
    line(error.chain())
}

fn line<'a>(chain: impl Iterator<Item = &'a (dyn Error + 'static)>) -> String {
    let mut out = String::new();
    for cause in chain {
        let text = cause.to_string();
        if out.contains(text.trim()) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Prints `error` and exits 2: for commands whose exit code 1 says something else (`diff`: changes
/// found; `doctor`: a check failed).
pub(crate) fn exit_2(error: anyhow::Error) -> ExitCode {
    eprintln!("error: {}", error_line(&error));
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot load kubeconfig /x: {source}")]
    struct Embedding {
        source: std::io::Error,
    }

    fn missing() -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "No such file or directory (os error 2)",
        )
    }

    #[test]
    fn a_cause_a_layer_already_says_is_printed_once() {
        let error = anyhow::Error::new(Embedding { source: missing() }).context("cluster hub");
        let line = error_line(&error);
        assert_eq!(
            line,
            "cluster hub: cannot load kubeconfig /x: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn causes_no_layer_says_are_each_printed_in_order() {
        let error = anyhow::Error::new(missing())
            .context("reading clusters.yaml")
            .context("loading the registration");
        assert_eq!(
            error_line(&error),
            "loading the registration: reading clusters.yaml: No such file or directory (os error 2)"
        );
    }
}
