//! Helm's error text, read the same whichever executor ran the job: trimmed for status and Events, and classified as a failure to report, to retry, or to wait on (pure).

use crate::queue::FailureKind;

/// Helm's error: from its `Error: ` line (it prints one, after any log lines) to the end, without
/// the `Error: ` prefix.
pub(crate) fn helm_error(stderr: &str) -> Option<&str> {
    stderr
        .match_indices("Error: ")
        .map(|(i, _)| i)
        .filter(|&i| i == 0 || stderr.as_bytes()[i - 1] == b'\n')
        .last()
        .map(|i| stderr[i + "Error: ".len()..].trim())
}

/// Helm's error, its lines joined, at most 512 characters; log lines before it are left out. Without
/// an `Error: ` line, the last three lines of stderr.
pub(crate) fn trim_error(stderr: &str) -> String {
    let (text, last) = match helm_error(stderr) {
        Some(error) => (error, usize::MAX),
        None => (stderr, 3),
    };
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("WARNING:"))
        .collect();
    let joined = lines[lines.len().saturating_sub(last)..].join(" ");
    let mut out: String = joined.chars().take(512).collect();
    if joined.chars().count() > 512 {
        out.push('…');
    }
    out
}

/// Prefixes helm puts before the cause of a failure: the action that failed, the rollback it did,
/// the release it could not load. Stripped in any order and number before the cause is read.
const WRAPPERS: [&str; 6] = [
    "UPGRADE FAILED: ",
    "INSTALLATION FAILED: ",
    "INSTALL FAILED: ",
    "uninstall: ",
    "an error occurred while rolling back the release. original upgrade error: ",
    "an error occurred while uninstalling the release. original install error: ",
];

/// Strips helm's wrappers (see [`WRAPPERS`], plus `release NAME failed, and has been rolled back
/// (or uninstalled) due to rollback-on-failure being set: ` and `Release not loaded: NAME: `).
fn cause(error: &str) -> &str {
    let mut rest = error;
    loop {
        let before = rest.len();
        for prefix in WRAPPERS {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        if let Some(after) = rest.strip_prefix("release ")
            && let Some((_, cause)) = after.split_once(" due to rollback-on-failure being set: ")
        {
            rest = cause;
        }
        if let Some(after) = rest.strip_prefix("Release not loaded: ")
            && let Some((_, cause)) = after.split_once(": ")
        {
            rest = cause;
        }
        if rest.len() == before {
            return rest;
        }
    }
}

/// True when the cause is helm failing to render the chart: a template that does not parse or
/// execute (a `fail` or `required` included), values the chart's schema rejects, rendered YAML that
/// does not parse, objects that cannot be built (a kind the cluster does not know). Recognised by
/// how helm starts these messages, so whatever text the chart puts in them does not matter.
fn is_render_failure(cause: &str) -> bool {
    const STARTS: [&str; 10] = [
        "parse error at (",
        "execution error at (",
        "template: ",
        "YAML parse error on ",
        "error converting YAML to JSON",
        "values don't meet the specifications of the schema(s)",
        "unable to build kubernetes objects from release manifest",
        "resource mapping not found for name",
        "failed parsing --set",
        "failed parsing --values",
    ];
    if STARTS.iter().any(|s| cause.starts_with(s)) {
        return true;
    }
    // Helm 4 reports a template that fails to execute as `FILE:LINE:COL` then `executing "FILE" at …`.
    let mut lines = cause.lines();
    let location = lines.next().unwrap_or_default();
    let mut numbers = location.rsplitn(3, ':');
    let position = numbers
        .next()
        .zip(numbers.next())
        .is_some_and(|(col, line)| {
            [col, line]
                .iter()
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
    position
        && lines
            .next()
            .is_some_and(|l| l.trim_start().starts_with("executing \""))
}

/// Kubernetes status texts of rejections a retry cannot fix: 422 Invalid (an immutable field
/// included: `KIND "NAME" is invalid: …`), 403 Forbidden (`RESOURCE "NAME" is forbidden: …`,
/// `RESOURCE is forbidden: User …`), an admission webhook's denial, 404 of a kind with no CRD.
const REJECTED: [&str; 5] = [
    "\" is invalid: ",
    "\" is forbidden: ",
    " is forbidden: User \"",
    "\" denied the request",
    "no matches for kind \"",
];

/// 401: the cluster refuses the credentials of the registered kubeconfig.
const UNAUTHORIZED: [&str; 2] = [
    "the server has asked for the client to provide credentials",
    "Unauthorized",
];

/// Signals of failures a later try can get past: the network (refused, reset, timed out), the API
/// server (503 unable to handle, 429 too many requests, etcd timing out, 409 a concurrent change),
/// helm (another operation on the release in progress, a wait past its deadline).
const TRANSIENT: [&str; 12] = [
    "connect: connection refused",
    "connection reset by peer",
    "i/o timeout",
    "net/http: TLS handshake timeout",
    "context deadline exceeded",
    "the server is currently unable to handle the request",
    "the server has received too many requests and has asked us to try again later",
    "Too Many Requests",
    "etcdserver: request timed out",
    "etcdserver: leader changed",
    "the object has been modified; please apply your changes to the latest version",
    "another operation (install/upgrade/rollback) is in progress",
];

/// What kind of failure helm's stderr tells of, read through the structure of its message:
/// `Error: `, then helm's wrappers (`UPGRADE FAILED: `, a rollback's, …), then the cause.
///
/// - A cause that is a render failure (see [`is_render_failure`]) is `Permanent`, whatever text
///   it embeds: a template's `fail "connection refused"` is still the chart's verdict.
/// - A Kubernetes rejection a retry cannot fix (422, 403, a denied admission, a missing kind) is
///   `Permanent`, checked before any transient signal, since its causes quote the rejected values.
/// - 401 is `Unavailable`: only new credentials fix it, never a spec change, so it waits like an
///   unreachable cluster (and a changed kubeconfig reconnects the cluster).
/// - A recognised transient signal is `Transient`: retried with backoff up to the attempt cap.
/// - Anything else is `Permanent`. Retrying an unknown failure writes a failed revision on every
///   try and buries its message under retries; reported instead, it waits for a person, and any
///   spec change (or a restart of the operator) tries again. A transient failure helm words in a
///   new way costs one manual nudge; an unknown permanent one retried would cost a revision a try.
pub(crate) fn classify(stderr: &str) -> FailureKind {
    let cause = cause(helm_error(stderr).unwrap_or(stderr));
    if is_render_failure(cause) || REJECTED.iter().any(|s| cause.contains(s)) {
        FailureKind::Permanent
    } else if UNAUTHORIZED.iter().any(|s| cause.contains(s)) {
        FailureKind::Unavailable
    } else if TRANSIENT.iter().any(|s| cause.contains(s)) {
        FailureKind::Transient
    } else {
        FailureKind::Permanent
    }
}
