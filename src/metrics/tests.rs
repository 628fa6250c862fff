//! Tests of the operator metrics: what a scrape shows, series by series.

use std::collections::BTreeMap;

use super::*;

/// The value of the sample written exactly as `series` (name and labels), if there is one.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
        .next()
}

/// The sample lines of the family `name`, sorted (series order within a family is not fixed).
fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let mut lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
        })
        .collect();
    lines.sort_unstable();
    lines
}

fn busy() -> Metrics {
    let m = Metrics::new();
    m.reconcile(0.5, None);
    m.reconcile(1.25, None);
    m.reconcile(2.0, Some("hub"));
    m.reconcile(0.25, Some("cleanup_pending"));
    m.helm_job("member-1", "applied", 3.0);
    m.helm_job("member-1", "applied", 1.0);
    m.helm_job("member-1", "failed", 0.5);
    m.helm_job("hub", "uninstalled", 2.5);
    m.queue_wait(0.25);
    m.queue_wait(0.75);
    m.status_propagation(1.5);
    m.watch_restart("member-2");
    m.watch_restart("member-2");
    m.watch_restart("hub");
    m.watch_event();
    m.watch_event();
    m.watch_event();
    m.status_write();
    m.status_write_skipped();
    m.status_write_skipped();
    m
}

fn gauges() -> Gauges {
    Gauges {
        queue_depth: 7,
        jobs_running: 2,
        clusters: vec![("member-1".into(), false), ("hub".into(), true)],
        watched_namespaces: 12,
        channels: vec![("outcomes", 3), ("triggers", 0)],
        streams: vec![("workloads", 8)],
    }
}

#[test]
fn the_chart_cache_counts_hits_misses_and_bytes_fetched_by_kind() {
    let m = Metrics::new();
    let text = m.render(&gauges());
    assert_eq!(
        value(
            &text,
            "tenancy_hub_chart_fetched_bytes_total{kind=\"index\"}"
        ),
        Some(0.0),
        "both kinds show from the start"
    );
    m.chart_cache(false);
    m.chart_cache(true);
    m.chart_cache(true);
    m.chart_fetched("index", 1000);
    m.chart_fetched("archive", 300);
    m.chart_fetched("index", 24);
    m.chart_cache_size(300);
    let text = m.render(&gauges());
    assert_eq!(
        value(&text, "tenancy_hub_chart_cache_hits_total"),
        Some(2.0)
    );
    assert_eq!(
        value(&text, "tenancy_hub_chart_cache_misses_total"),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "tenancy_hub_chart_fetched_bytes_total{kind=\"index\"}"
        ),
        Some(1024.0)
    );
    assert_eq!(
        value(
            &text,
            "tenancy_hub_chart_fetched_bytes_total{kind=\"archive\"}"
        ),
        Some(300.0)
    );
    assert_eq!(value(&text, "tenancy_hub_chart_cache_bytes"), Some(300.0));
}

#[test]
fn reconciles_are_counted_by_result_and_failures_by_reason_with_a_duration_histogram() {
    let text = busy().render(&Gauges::default());
    assert_eq!(
        samples(&text, "tenancy_hub_reconciles_total"),
        [
            "tenancy_hub_reconciles_total{result=\"error\"} 2",
            "tenancy_hub_reconciles_total{result=\"ok\"} 2",
        ]
    );
    assert_eq!(
        samples(&text, "tenancy_hub_reconcile_errors_total"),
        [
            "tenancy_hub_reconcile_errors_total{reason=\"cleanup_pending\"} 1",
            "tenancy_hub_reconcile_errors_total{reason=\"hub\"} 1",
        ]
    );
    let name = "tenancy_hub_reconcile_duration_seconds";
    assert!(text.contains(&format!("# TYPE {name} histogram\n")));
    assert_eq!(value(&text, &format!("{name}_sum")), Some(4.0));
    assert_eq!(value(&text, &format!("{name}_count")), Some(4.0));
    assert_eq!(
        value(&text, &format!("{name}_bucket{{le=\"0.32\"}}")),
        Some(1.0)
    );
    assert_eq!(
        value(&text, &format!("{name}_bucket{{le=\"0.64\"}}")),
        Some(2.0)
    );
    assert_eq!(
        value(&text, &format!("{name}_bucket{{le=\"+Inf\"}}")),
        Some(4.0)
    );
}

#[test]
fn helm_jobs_are_counted_by_cluster_and_outcome_and_timed_by_cluster() {
    let text = busy().render(&Gauges::default());
    assert_eq!(
        samples(&text, "tenancy_hub_helm_jobs_total"),
        [
            "tenancy_hub_helm_jobs_total{cluster=\"hub\",outcome=\"uninstalled\"} 1",
            "tenancy_hub_helm_jobs_total{cluster=\"member-1\",outcome=\"applied\"} 2",
            "tenancy_hub_helm_jobs_total{cluster=\"member-1\",outcome=\"failed\"} 1",
        ]
    );
    let name = "tenancy_hub_helm_job_duration_seconds";
    assert!(text.contains(&format!("# TYPE {name} histogram\n")));
    for (cluster, sum, count) in [("hub", 2.5, 1.0), ("member-1", 4.5, 3.0)] {
        let labels = format!("{{cluster=\"{cluster}\"}}");
        assert_eq!(value(&text, &format!("{name}_sum{labels}")), Some(sum));
        assert_eq!(value(&text, &format!("{name}_count{labels}")), Some(count));
    }
    assert_eq!(
        value(
            &text,
            &format!("{name}_bucket{{le=\"0.8\",cluster=\"member-1\"}}")
        ),
        Some(1.0)
    );
}

#[test]
fn queue_waits_and_status_propagation_are_histograms() {
    let text = busy().render(&Gauges::default());
    let wait = "tenancy_hub_queue_wait_seconds";
    assert!(text.contains(&format!("# TYPE {wait} histogram\n")));
    assert_eq!(value(&text, &format!("{wait}_sum")), Some(1.0));
    assert_eq!(value(&text, &format!("{wait}_count")), Some(2.0));
    let status = "tenancy_hub_status_propagation_seconds";
    assert!(text.contains(&format!("# TYPE {status} histogram\n")));
    assert_eq!(value(&text, &format!("{status}_count")), Some(1.0));
    assert_eq!(
        value(&text, &format!("{status}_bucket{{le=\"1.6\"}}")),
        Some(1.0)
    );
    assert_eq!(
        value(&text, &format!("{status}_bucket{{le=\"0.8\"}}")),
        Some(0.0)
    );
}

#[test]
fn drift_is_counted_by_cluster_and_action() {
    let m = Metrics::new();
    m.drift("member-1", "found");
    m.drift("member-1", "found");
    m.drift("member-1", "repaired");
    let text = m.render(&Gauges::default());
    assert_eq!(
        samples(&text, "tenancy_hub_drift_total"),
        [
            "tenancy_hub_drift_total{cluster=\"member-1\",action=\"found\"} 2",
            "tenancy_hub_drift_total{cluster=\"member-1\",action=\"repaired\"} 1",
        ]
    );
}

#[test]
fn watch_restarts_events_and_status_writes_are_counted() {
    let text = busy().render(&Gauges::default());
    assert_eq!(
        samples(&text, "tenancy_hub_watch_restarts_total"),
        [
            "tenancy_hub_watch_restarts_total{cluster=\"hub\"} 1",
            "tenancy_hub_watch_restarts_total{cluster=\"member-2\"} 2",
        ]
    );
    assert_eq!(value(&text, "tenancy_hub_watch_events_total"), Some(3.0));
    assert_eq!(value(&text, "tenancy_hub_status_writes_total"), Some(1.0));
    assert_eq!(
        value(&text, "tenancy_hub_status_writes_skipped_total"),
        Some(2.0)
    );
}

#[test]
fn gauges_are_sampled_at_scrape_and_a_cluster_gone_from_the_registry_disappears() {
    let m = Metrics::new();
    let text = m.render(&gauges());
    assert_eq!(value(&text, "tenancy_hub_queue_depth"), Some(7.0));
    assert_eq!(value(&text, "tenancy_hub_jobs_running"), Some(2.0));
    assert_eq!(
        samples(&text, "tenancy_hub_cluster_reachable"),
        [
            "tenancy_hub_cluster_reachable{cluster=\"hub\"} 1",
            "tenancy_hub_cluster_reachable{cluster=\"member-1\"} 0",
        ]
    );
    assert_eq!(value(&text, "tenancy_hub_watched_namespaces"), Some(12.0));
    assert_eq!(
        value(&text, "tenancy_hub_watch_streams{source=\"workloads\"}"),
        Some(8.0)
    );
    assert_eq!(
        value(&text, "tenancy_hub_channel_depth{channel=\"outcomes\"}"),
        Some(3.0),
        "the depth of each bounded channel is exported"
    );
    assert!(text.contains("# TYPE tenancy_hub_queue_depth gauge\n"));
    let fewer = Gauges {
        clusters: vec![("hub".into(), true)],
        ..Gauges::default()
    };
    let text = m.render(&fewer);
    assert_eq!(
        samples(&text, "tenancy_hub_cluster_reachable"),
        ["tenancy_hub_cluster_reachable{cluster=\"hub\"} 1"]
    );
    assert_eq!(value(&text, "tenancy_hub_queue_depth"), Some(0.0));
}

#[test]
fn orphaned_releases_are_gauges_by_reason() {
    let m = Metrics::new();
    m.orphaned(3, 1);
    let text = m.render(&Gauges::default());
    assert_eq!(
        samples(&text, "tenancy_hub_orphaned_releases"),
        [
            "tenancy_hub_orphaned_releases{reason=\"cluster-unregistered\"} 1",
            "tenancy_hub_orphaned_releases{reason=\"owner-gone\"} 3",
        ]
    );
    m.orphaned(0, 0);
    let text = m.render(&Gauges::default());
    assert_eq!(
        value(
            &text,
            "tenancy_hub_orphaned_releases{reason=\"owner-gone\"}"
        ),
        Some(0.0)
    );
}

#[test]
fn fresh_metrics_render_zeroes_and_empty_families() {
    let text = Metrics::new().render(&Gauges::default());
    assert_eq!(
        value(&text, "tenancy_hub_reconciles_total{result=\"error\"}"),
        Some(0.0)
    );
    assert_eq!(
        value(&text, "tenancy_hub_queue_wait_seconds_count"),
        Some(0.0)
    );
    assert!(
        !text.contains("tenancy_hub_helm_jobs"),
        "a family without series is left out"
    );
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn label_values_escape_backslashes_quotes_and_newlines() {
    let m = Metrics::new();
    m.helm_job("we\"ird\\\n", "fail\"ed", 1.0);
    let text = m.render(&Gauges::default());
    assert_eq!(
        samples(&text, "tenancy_hub_helm_jobs_total"),
        ["tenancy_hub_helm_jobs_total{cluster=\"we\\\"ird\\\\\\n\",outcome=\"fail\\\"ed\"} 1"]
    );
}

#[test]
fn every_family_is_declared_once_with_help_and_a_type() {
    let text = busy().render(&gauges());
    let mut declared: Vec<(&str, &str)> = Vec::new();
    for line in text.lines() {
        if let Some(ty) = line.strip_prefix("# TYPE ") {
            let (name, kind) = ty.split_once(' ').expect("name and type");
            assert!(
                ["counter", "gauge", "histogram"].contains(&kind),
                "{line:?}"
            );
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{name} has no help"
            );
            assert!(
                declared.iter().all(|(n, _)| *n != name),
                "{name} declared twice"
            );
            declared.push((name, kind));
        }
    }
    let kinds = |kind: &str| declared.iter().filter(|(_, k)| *k == kind).count();
    assert_eq!(
        (kinds("counter"), kinds("histogram"), kinds("gauge")),
        (17, 5, 8),
        "{declared:?}"
    );
}

#[test]
fn notifications_are_counted_by_result_every_result_shown_from_the_start() {
    let m = Metrics::new();
    assert_eq!(
        samples(
            &m.render(&Gauges::default()),
            "tenancy_hub_notifications_total"
        ),
        [
            "tenancy_hub_notifications_total{result=\"dropped\"} 0",
            "tenancy_hub_notifications_total{result=\"failed\"} 0",
            "tenancy_hub_notifications_total{result=\"rate_limited\"} 0",
            "tenancy_hub_notifications_total{result=\"sent\"} 0",
        ]
    );
    m.notification("sent");
    m.notification("sent");
    m.notification("rate_limited");
    let text = m.render(&Gauges::default());
    assert_eq!(
        value(&text, "tenancy_hub_notifications_total{result=\"sent\"}"),
        Some(2.0)
    );
    assert_eq!(
        value(
            &text,
            "tenancy_hub_notifications_total{result=\"rate_limited\"}"
        ),
        Some(1.0)
    );
}

#[test]
fn negative_durations_count_as_zero() {
    let m = Metrics::new();
    m.queue_wait(-1.0);
    let text = m.render(&Gauges::default());
    assert_eq!(
        value(&text, "tenancy_hub_queue_wait_seconds_sum"),
        Some(0.0)
    );
    assert_eq!(
        value(&text, "tenancy_hub_queue_wait_seconds_bucket{le=\"0.005\"}"),
        Some(1.0)
    );
}

/// The declarations (`# HELP`, `# TYPE`, `# UNIT`) of a rendering, then the shape of each of
/// its series (name and label names) with the bucket bounds of a histogram's, sorted.
fn declarations(text: &str) -> Vec<String> {
    let mut shapes: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut out: Vec<String> = Vec::new();
    for line in text.lines().filter(|l| *l != "# EOF") {
        if line.starts_with('#') {
            out.push(line.to_owned());
            continue;
        }
        let series = line.split_once(' ').expect("a series and its value").0;
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let pairs: Vec<(&str, &str)> = labels
            .trim_end_matches('}')
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .collect();
        let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
        let bounds = shapes
            .entry(format!("{name}{{{}}}", keys.join(",")))
            .or_default();
        for (_, le) in pairs.iter().filter(|(k, _)| *k == "le") {
            let le = le.trim_matches('"');
            if !bounds.contains(&le) {
                bounds.push(le);
            }
        }
    }
    out.sort();
    out.extend(shapes.into_iter().map(|(shape, bounds)| match bounds[..] {
        [] => shape,
        _ => format!("{shape} le {}", bounds.join(" ")),
    }));
    out
}

/// What a scrape declares: each metric's help, type and unit, the label names of its series
/// and a histogram's bucket bounds.
const DECLARED: &[&str] = &[
    "# HELP tenancy_hub_alert_secret_read_bytes Bytes of data the reads of Alerts' Secrets returned.",
    "# HELP tenancy_hub_alert_secret_reads Reads of the Secrets Alerts name (whole Secrets; a Secret no alertSecrets rule allows is never read).",
    "# HELP tenancy_hub_channel_depth Messages waiting in a bounded channel between components; a full channel makes its senders wait, nothing is dropped.",
    "# HELP tenancy_hub_chart_cache_bytes Size of the chart archives kept in the chart cache.",
    "# HELP tenancy_hub_chart_cache_hits Chart archives wanted (by a resolution or a helm call) and found in the chart cache.",
    "# HELP tenancy_hub_chart_cache_misses Chart archives wanted and not in the chart cache: fetched into it.",
    "# HELP tenancy_hub_chart_fetched_bytes Bytes the chart cache fetched, by kind: repository index or chart archive.",
    "# HELP tenancy_hub_cluster_reachable Whether a registered cluster is reachable (1) or not (0).",
    "# HELP tenancy_hub_drift Drift between a release's manifest and its live objects, by cluster and action: found (each new or changed finding) or repaired.",
    "# HELP tenancy_hub_helm_job_duration_seconds Time Helm jobs took, by cluster.",
    "# HELP tenancy_hub_helm_jobs Helm jobs finished, by cluster and outcome.",
    "# HELP tenancy_hub_jobs_running Helm jobs running now.",
    "# HELP tenancy_hub_notifications Messages to the Alerts' webhooks, by result: sent, failed (every attempt failed, or the Alert cannot send), dropped (the queue or the messages on their way were full), rate_limited (over the Alert's rate).",
    "# HELP tenancy_hub_orphaned_releases Releases left without a manager, by reason: their Controller is gone, or their cluster is no longer registered.",
    "# HELP tenancy_hub_queue_depth Helm jobs waiting in the queue.",
    "# HELP tenancy_hub_queue_wait_seconds Time Helm jobs waited in the queue before they started.",
    "# HELP tenancy_hub_reconcile_duration_seconds Time spent reconciling a Controller resource.",
    "# HELP tenancy_hub_reconcile_errors Failed reconciles, by the kind of error.",
    "# HELP tenancy_hub_reconciles Reconciles of Controller resources, by result.",
    "# HELP tenancy_hub_registry_rejects Edits of the registration file refused; the last good registry stayed in force.",
    "# HELP tenancy_hub_registry_reloads Edits of the registration file applied without a restart.",
    "# HELP tenancy_hub_rollout_duration_seconds Time a progressive rollout took from its start until every cluster was healthy on the generation.",
    "# HELP tenancy_hub_status_api_reviews Reviews the status API asked the hub, by kind: TokenReview or SubjectAccessReview (answers shared by concurrent callers and remembered are not counted again).",
    "# HELP tenancy_hub_status_propagation_seconds Time from a change reaching a resource's report or the model to its status write.",
    "# HELP tenancy_hub_status_writes Status writes to Controller resources.",
    "# HELP tenancy_hub_status_writes_skipped Status writes skipped because nothing had changed.",
    "# HELP tenancy_hub_values_reads Secrets and ConfigMaps of hub namespaces whose content was read for valuesFrom, by kind (only objects a policy rule allows are read).",
    "# HELP tenancy_hub_watch_events Events delivered by the watches of cluster namespaces.",
    "# HELP tenancy_hub_watch_restarts Watch streams restarted after breaking, by cluster.",
    "# HELP tenancy_hub_watch_streams Watch streams open to the clusters, by what they watch: a few per cluster, however many namespaces are watched.",
    "# HELP tenancy_hub_watched_namespaces Cluster namespaces watched.",
    "# TYPE tenancy_hub_alert_secret_read_bytes counter",
    "# TYPE tenancy_hub_alert_secret_reads counter",
    "# TYPE tenancy_hub_channel_depth gauge",
    "# TYPE tenancy_hub_chart_cache_bytes gauge",
    "# TYPE tenancy_hub_chart_cache_hits counter",
    "# TYPE tenancy_hub_chart_cache_misses counter",
    "# TYPE tenancy_hub_chart_fetched_bytes counter",
    "# TYPE tenancy_hub_cluster_reachable gauge",
    "# TYPE tenancy_hub_drift counter",
    "# TYPE tenancy_hub_helm_job_duration_seconds histogram",
    "# TYPE tenancy_hub_helm_jobs counter",
    "# TYPE tenancy_hub_jobs_running gauge",
    "# TYPE tenancy_hub_notifications counter",
    "# TYPE tenancy_hub_orphaned_releases gauge",
    "# TYPE tenancy_hub_queue_depth gauge",
    "# TYPE tenancy_hub_queue_wait_seconds histogram",
    "# TYPE tenancy_hub_reconcile_duration_seconds histogram",
    "# TYPE tenancy_hub_reconcile_errors counter",
    "# TYPE tenancy_hub_reconciles counter",
    "# TYPE tenancy_hub_registry_rejects counter",
    "# TYPE tenancy_hub_registry_reloads counter",
    "# TYPE tenancy_hub_rollout_duration_seconds histogram",
    "# TYPE tenancy_hub_status_api_reviews counter",
    "# TYPE tenancy_hub_status_propagation_seconds histogram",
    "# TYPE tenancy_hub_status_writes counter",
    "# TYPE tenancy_hub_status_writes_skipped counter",
    "# TYPE tenancy_hub_values_reads counter",
    "# TYPE tenancy_hub_watch_events counter",
    "# TYPE tenancy_hub_watch_restarts counter",
    "# TYPE tenancy_hub_watch_streams gauge",
    "# TYPE tenancy_hub_watched_namespaces gauge",
    "# UNIT tenancy_hub_chart_cache_bytes bytes",
    "# UNIT tenancy_hub_chart_fetched_bytes bytes",
    "# UNIT tenancy_hub_helm_job_duration_seconds seconds",
    "# UNIT tenancy_hub_queue_wait_seconds seconds",
    "# UNIT tenancy_hub_reconcile_duration_seconds seconds",
    "# UNIT tenancy_hub_rollout_duration_seconds seconds",
    "# UNIT tenancy_hub_status_propagation_seconds seconds",
    "tenancy_hub_alert_secret_read_bytes_total{}",
    "tenancy_hub_alert_secret_reads_total{}",
    "tenancy_hub_channel_depth{channel}",
    "tenancy_hub_chart_cache_bytes{}",
    "tenancy_hub_chart_cache_hits_total{}",
    "tenancy_hub_chart_cache_misses_total{}",
    "tenancy_hub_chart_fetched_bytes_total{kind}",
    "tenancy_hub_cluster_reachable{cluster}",
    "tenancy_hub_drift_total{cluster,action}",
    "tenancy_hub_helm_job_duration_seconds_bucket{le,cluster} le 0.1 0.2 0.4 0.8 1.6 3.2 6.4 12.8 25.6 51.2 102.4 204.8 409.6 819.2 +Inf",
    "tenancy_hub_helm_job_duration_seconds_count{cluster}",
    "tenancy_hub_helm_job_duration_seconds_sum{cluster}",
    "tenancy_hub_helm_jobs_total{cluster,outcome}",
    "tenancy_hub_jobs_running{}",
    "tenancy_hub_notifications_total{result}",
    "tenancy_hub_orphaned_releases{reason}",
    "tenancy_hub_queue_depth{}",
    "tenancy_hub_queue_wait_seconds_bucket{le} le 0.005 0.01 0.02 0.04 0.08 0.16 0.32 0.64 1.28 2.56 5.12 10.24 20.48 40.96 +Inf",
    "tenancy_hub_queue_wait_seconds_count{}",
    "tenancy_hub_queue_wait_seconds_sum{}",
    "tenancy_hub_reconcile_duration_seconds_bucket{le} le 0.005 0.01 0.02 0.04 0.08 0.16 0.32 0.64 1.28 2.56 5.12 10.24 20.48 40.96 +Inf",
    "tenancy_hub_reconcile_duration_seconds_count{}",
    "tenancy_hub_reconcile_duration_seconds_sum{}",
    "tenancy_hub_reconcile_errors_total{reason}",
    "tenancy_hub_reconciles_total{result}",
    "tenancy_hub_registry_rejects_total{}",
    "tenancy_hub_registry_reloads_total{}",
    "tenancy_hub_rollout_duration_seconds_bucket{le} le 0.1 0.2 0.4 0.8 1.6 3.2 6.4 12.8 25.6 51.2 102.4 204.8 409.6 819.2 +Inf",
    "tenancy_hub_rollout_duration_seconds_count{}",
    "tenancy_hub_rollout_duration_seconds_sum{}",
    "tenancy_hub_status_api_reviews_total{kind}",
    "tenancy_hub_status_propagation_seconds_bucket{le} le 0.1 0.2 0.4 0.8 1.6 3.2 6.4 12.8 25.6 51.2 102.4 204.8 409.6 819.2 +Inf",
    "tenancy_hub_status_propagation_seconds_count{}",
    "tenancy_hub_status_propagation_seconds_sum{}",
    "tenancy_hub_status_writes_skipped_total{}",
    "tenancy_hub_status_writes_total{}",
    "tenancy_hub_values_reads_total{kind}",
    "tenancy_hub_watch_events_total{}",
    "tenancy_hub_watch_restarts_total{cluster}",
    "tenancy_hub_watch_streams{source}",
    "tenancy_hub_watched_namespaces{}",
];

#[test]
fn every_metric_keeps_its_name_help_unit_type_and_labels() {
    let m = busy();
    m.drift("member-1", "found");
    assert_eq!(declarations(&m.render(&gauges())), DECLARED);
}
