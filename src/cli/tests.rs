//! The command line's unit tests: parsing, the operator's configuration, log colours, sizes.

use super::*;
use crate::cli::args::parse_size;
use crate::queue::QueueConfig;
use clap::CommandFactory;

#[test]
fn log_lines_are_plain_when_they_do_not_go_to_a_terminal() {
    assert!(!log_colors(LogFormat::Text, false, None));
    assert!(!log_colors(LogFormat::Json, false, None));
}

#[test]
fn log_lines_to_a_terminal_are_coloured_unless_no_color_is_set() {
    assert!(log_colors(LogFormat::Text, true, None));
    assert!(log_colors(LogFormat::Text, true, Some("".as_ref())));
    assert!(!log_colors(LogFormat::Text, true, Some("1".as_ref())));
}

#[test]
fn json_log_lines_are_never_coloured() {
    assert!(!log_colors(LogFormat::Json, true, None));
}

#[test]
fn the_log_format_is_text_unless_json_is_asked_for() {
    let format = |args: &[&str]| {
        let line = ["tenancy-hub"].iter().chain(args).chain(&["crd"]);
        Cli::try_parse_from(line).unwrap().log.log_format
    };
    assert_eq!(format(&[]), LogFormat::Text);
    assert_eq!(format(&["--log-format", "json"]), LogFormat::Json);
    assert!(Cli::try_parse_from(["tenancy-hub", "--log-format", "xml", "crd"]).is_err());
}

#[test]
fn the_admission_policy_is_a_command_of_its_own() {
    let parsed = Cli::try_parse_from(["tenancy-hub", "admission-policy"]).unwrap();
    assert!(matches!(parsed.command, Command::AdmissionPolicy));
}

#[test]
fn sizes_are_read_in_bytes_with_binary_and_decimal_units() {
    assert_eq!(parse_size("1Gi"), Ok(1 << 30));
    assert_eq!(parse_size("512Mi"), Ok(512 << 20));
    assert_eq!(parse_size("64 Ki"), Ok(64 << 10));
    assert_eq!(parse_size("2G"), Ok(2_000_000_000));
    assert_eq!(parse_size("1000"), Ok(1000));
    assert!(parse_size("1Ti").is_err());
    assert!(parse_size("Gi").is_err());
    assert!(parse_size("-1").is_err());
}

#[test]
fn the_command_line_is_well_formed() {
    Cli::command().debug_assert();
}

/// The leader election Lease of `tenancy-hub run ARGS`, when POD_NAMESPACE is not set.
fn lease_of(args: &[&str]) -> Option<(String, String)> {
    let line = ["tenancy-hub", "run"].iter().chain(args);
    let Command::Run(run) = Cli::try_parse_from(line).unwrap().command else {
        panic!("not run");
    };
    run.lease().map(|l| (l.namespace, l.name))
}

fn lease(namespace: &str, name: &str) -> Option<(String, String)> {
    Some((namespace.into(), name.into()))
}

#[test]
fn leader_election_is_on_by_default_with_one_lease_for_the_whole_hub() {
    assert_eq!(lease_of(&[]), lease("tenancy-hub", "tenancy-hub"));
}

#[test]
fn an_operator_limited_to_one_namespace_gets_a_lease_of_that_scope() {
    assert_eq!(
        lease_of(&["--namespace", "team-a"]),
        lease("tenancy-hub", "tenancy-hub-team-a")
    );
}

#[test]
fn lease_flags_override_the_defaults() {
    let args = [
        "-n",
        "team-a",
        "--lease-namespace",
        "ops",
        "--lease-name",
        "x",
    ];
    assert_eq!(lease_of(&args), lease("ops", "x"));
}

#[test]
fn a_bare_leader_elect_flag_still_means_on() {
    let args = ["--leader-elect", "--lease-namespace", "ops"];
    assert_eq!(lease_of(&args), lease("ops", "tenancy-hub"));
    assert_eq!(lease_of(&["--leader-elect=true"]), lease_of(&[]));
}

/// The queue's configuration for `tenancy-hub run ARGS`.
fn queue_of(args: &[&str]) -> QueueConfig {
    let line = ["tenancy-hub", "run"].iter().chain(args);
    let Command::Run(run) = Cli::try_parse_from(line).unwrap().command else {
        panic!("not run");
    };
    run.config().queue
}

/// The queue's cap on one owner's running jobs for `tenancy-hub run ARGS`.
fn per_owner_of(args: &[&str]) -> usize {
    queue_of(args).per_owner
}

#[test]
fn one_tenant_may_use_all_workers_but_one_unless_told_otherwise() {
    let per_tenant = |args: &[&str]| queue_of(args).per_tenant;
    assert_eq!(per_tenant(&[]), 3);
    assert_eq!(per_tenant(&["--workers", "8"]), 7);
    assert_eq!(per_tenant(&["--max-jobs-per-tenant", "2"]), 2);
    assert_eq!(per_tenant(&["--max-jobs-per-tenant", "0"]), 0);
}

#[test]
fn one_controller_may_use_all_workers_but_one_unless_told_otherwise() {
    assert_eq!(per_owner_of(&[]), 3);
    assert_eq!(per_owner_of(&["--workers", "8"]), 7);
    assert_eq!(per_owner_of(&["--workers", "1"]), 1);
    assert_eq!(per_owner_of(&["--max-jobs-per-owner", "2"]), 2);
    assert_eq!(per_owner_of(&["--max-jobs-per-owner", "0"]), 0);
}

#[test]
fn leader_election_is_off_only_when_asked() {
    assert_eq!(lease_of(&["--leader-elect=false"]), None);
    assert_eq!(lease_of(&["--leader-elect", "false"]), None);
}

#[test]
fn tables_align_columns_under_their_headers() {
    let rows = [
        ["hub".to_string(), "yes".to_string()],
        ["member-1".to_string(), "no".to_string()],
    ];
    let out = table(&["CLUSTER", "OK"], &rows);
    assert_eq!(out, "CLUSTER    OK\nhub        yes\nmember-1   no\n");
}

#[test]
fn unreachable_clusters_show_their_error_in_the_table() {
    let health = [registry::Health {
        cluster: "member-2".into(),
        context: "member-2".into(),
        reachable: false,
        version: None,
        error: Some("connection refused".into()),
    }];
    let out = render_health(&health, Output::Table).unwrap();
    assert!(
        out.contains("member-2   member-2   no          connection refused"),
        "{out}"
    );
}
