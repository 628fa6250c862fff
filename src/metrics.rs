//! Operator metrics, rendered as Prometheus text.

use std::{
    collections::BTreeMap,
    fmt::{self, Write as _},
    sync::{
        Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

/// A running total of observed durations and how many there were.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Summary {
    sum: f64,
    count: u64,
}

impl Summary {
    /// Adds one observation; a negative or NaN duration counts as zero.
    fn observe(&mut self, seconds: f64) {
        self.sum += seconds.max(0.0);
        self.count += 1;
    }
}

/// Values sampled at scrape time rather than counted as they happen.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gauges {
    /// Helm jobs waiting in the queue.
    pub queue_depth: usize,
    /// Helm jobs running now.
    pub jobs_running: usize,
    /// Every registered cluster's name and whether it is reachable.
    pub clusters: Vec<(String, bool)>,
    /// Cluster namespaces watched.
    pub watched_namespaces: usize,
}

/// The operator's counters and summaries; share one through an `Arc`.
#[derive(Debug, Default)]
pub struct Metrics {
    reconciles_ok: AtomicU64,
    reconciles_error: AtomicU64,
    reconcile_duration: Mutex<Summary>,
    helm_jobs: Mutex<BTreeMap<(String, String), u64>>,
    helm_job_duration: Mutex<BTreeMap<String, Summary>>,
    queue_wait: Mutex<Summary>,
    watch_restarts: Mutex<BTreeMap<String, u64>>,
    watch_events: AtomicU64,
    status_writes: AtomicU64,
    status_writes_skipped: AtomicU64,
    registry_reloads: AtomicU64,
    orphaned_owner_gone: AtomicU64,
    orphaned_unregistered: AtomicU64,
    registry_rejects: AtomicU64,
}

/// Locks `m`, carrying on past a panic elsewhere: every update leaves the data consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Metrics {
    /// Counts one reconcile of a `Controller` that took `seconds` and succeeded when `ok`.
    pub fn reconcile(&self, seconds: f64, ok: bool) {
        let counter = if ok {
            &self.reconciles_ok
        } else {
            &self.reconciles_error
        };
        counter.fetch_add(1, Ordering::Relaxed);
        lock(&self.reconcile_duration).observe(seconds);
    }

    /// Counts one finished Helm job on `cluster` with its `outcome` (such as `applied`, `failed`).
    pub fn helm_job(&self, cluster: &str, outcome: &str, seconds: f64) {
        *lock(&self.helm_jobs)
            .entry((cluster.to_owned(), outcome.to_owned()))
            .or_default() += 1;
        lock(&self.helm_job_duration)
            .entry(cluster.to_owned())
            .or_default()
            .observe(seconds);
    }

    /// Records how long a Helm job waited in the queue before it started.
    pub fn queue_wait(&self, seconds: f64) {
        lock(&self.queue_wait).observe(seconds);
    }

    /// Counts one restart of a broken watch stream on `cluster`.
    pub fn watch_restart(&self, cluster: &str) {
        *lock(&self.watch_restarts)
            .entry(cluster.to_owned())
            .or_default() += 1;
    }

    /// Counts one event delivered by a watch.
    pub fn watch_event(&self) {
        self.watch_events.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one status write to a `Controller`.
    pub fn status_write(&self) {
        self.status_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one status write skipped because nothing changed.
    pub fn status_write_skipped(&self) {
        self.status_writes_skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one reload of the registration file: applied (`ok`) or refused.
    pub fn registry_reload(&self, ok: bool) {
        let counter = if ok {
            &self.registry_reloads
        } else {
            &self.registry_rejects
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Records how many releases are left without a manager: their owner is gone, or their
    /// cluster is no longer registered.
    pub fn orphaned(&self, owner_gone: usize, unregistered: usize) {
        self.orphaned_owner_gone
            .store(owner_gone as u64, Ordering::Relaxed);
        self.orphaned_unregistered
            .store(unregistered as u64, Ordering::Relaxed);
    }

    /// Status writes counted so far.
    pub fn status_writes(&self) -> u64 {
        self.status_writes.load(Ordering::Relaxed)
    }

    /// Watch events counted so far.
    pub fn watch_events(&self) -> u64 {
        self.watch_events.load(Ordering::Relaxed)
    }

    /// Every metric in the Prometheus text exposition format 0.0.4, in a fixed order.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = Exposition::default();
        self.render_reconciles(&mut out);
        self.render_helm(&mut out);
        self.render_watches_and_status(&mut out);
        render_gauges(&mut out, gauges);
        let name = "tenancy_hub_orphaned_releases";
        out.family(
            name,
            "gauge",
            "Releases left without a manager, by reason: their Controller is gone, or their cluster is no longer registered.",
        );
        for (reason, value) in [
            ("owner-gone", &self.orphaned_owner_gone),
            ("cluster-unregistered", &self.orphaned_unregistered),
        ] {
            out.sample(name, &[("reason", reason)], value.load(Ordering::Relaxed));
        }
        out.0
    }

    fn render_reconciles(&self, out: &mut Exposition) {
        let name = "tenancy_hub_reconciles_total";
        out.family(
            name,
            "counter",
            "Reconciles of Controller resources, by result.",
        );
        for (result, counter) in [
            ("ok", &self.reconciles_ok),
            ("error", &self.reconciles_error),
        ] {
            out.sample(name, &[("result", result)], counter.load(Ordering::Relaxed));
        }
        out.summary(
            "tenancy_hub_reconcile_duration_seconds",
            "Time spent reconciling a Controller resource.",
            [(None, *lock(&self.reconcile_duration))],
        );
    }

    fn render_helm(&self, out: &mut Exposition) {
        let name = "tenancy_hub_helm_jobs_total";
        out.family(
            name,
            "counter",
            "Helm jobs finished, by cluster and outcome.",
        );
        for ((cluster, outcome), n) in lock(&self.helm_jobs).iter() {
            out.sample(name, &[("cluster", cluster), ("outcome", outcome)], n);
        }
        out.summary(
            "tenancy_hub_helm_job_duration_seconds",
            "Time Helm jobs took, by cluster.",
            lock(&self.helm_job_duration)
                .iter()
                .map(|(c, s)| (Some(c.as_str()), *s)),
        );
        out.summary(
            "tenancy_hub_queue_wait_seconds",
            "Time Helm jobs waited in the queue before they started.",
            [(None, *lock(&self.queue_wait))],
        );
    }

    fn render_watches_and_status(&self, out: &mut Exposition) {
        let name = "tenancy_hub_watch_restarts_total";
        out.family(
            name,
            "counter",
            "Watch streams restarted after breaking, by cluster.",
        );
        for (cluster, n) in lock(&self.watch_restarts).iter() {
            out.sample(name, &[("cluster", cluster)], n);
        }
        out.counter(
            "tenancy_hub_watch_events_total",
            "Events delivered by the watches of cluster namespaces.",
            &self.watch_events,
        );
        out.counter(
            "tenancy_hub_status_writes_total",
            "Status writes to Controller resources.",
            &self.status_writes,
        );
        out.counter(
            "tenancy_hub_status_writes_skipped_total",
            "Status writes skipped because nothing had changed.",
            &self.status_writes_skipped,
        );
        out.counter(
            "tenancy_hub_registry_reloads_total",
            "Edits of the registration file applied without a restart.",
            &self.registry_reloads,
        );
        out.counter(
            "tenancy_hub_registry_rejects_total",
            "Edits of the registration file refused; the last good registry stayed in force.",
            &self.registry_rejects,
        );
    }
}

/// Writes the gauges sampled at scrape time, clusters in name order.
fn render_gauges(out: &mut Exposition, gauges: &Gauges) {
    out.gauge(
        "tenancy_hub_queue_depth",
        "Helm jobs waiting in the queue.",
        gauges.queue_depth,
    );
    out.gauge(
        "tenancy_hub_jobs_running",
        "Helm jobs running now.",
        gauges.jobs_running,
    );
    let name = "tenancy_hub_cluster_reachable";
    out.family(
        name,
        "gauge",
        "Whether a registered cluster is reachable (1) or not (0).",
    );
    let clusters: BTreeMap<&str, bool> = gauges
        .clusters
        .iter()
        .map(|(c, up)| (c.as_str(), *up))
        .collect();
    for (cluster, up) in clusters {
        out.sample(name, &[("cluster", cluster)], u8::from(up));
    }
    out.gauge(
        "tenancy_hub_watched_namespaces",
        "Cluster namespaces watched.",
        gauges.watched_namespaces,
    );
}

/// A float written as Prometheus expects, with `+Inf`, `-Inf` and `NaN`.
struct Float(f64);

impl fmt::Display for Float {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            v if v.is_nan() => f.write_str("NaN"),
            v if v == f64::INFINITY => f.write_str("+Inf"),
            v if v == f64::NEG_INFINITY => f.write_str("-Inf"),
            v => write!(f, "{v}"),
        }
    }
}

/// Escapes a label value: backslash, double quote and newline.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The text being rendered.
#[derive(Default)]
struct Exposition(String);

impl Exposition {
    /// Writes the `# HELP` and `# TYPE` lines of a family.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// Writes one sample line.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl fmt::Display) {
        self.0.push_str(name);
        for (i, (key, v)) in labels.iter().enumerate() {
            let open = if i == 0 { '{' } else { ',' };
            let _ = write!(self.0, "{open}{key}=\"{}\"", escape_label(v));
        }
        if !labels.is_empty() {
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    /// Writes a counter family of one unlabelled sample.
    fn counter(&mut self, name: &str, help: &str, value: &AtomicU64) {
        self.family(name, "counter", help);
        self.sample(name, &[], value.load(Ordering::Relaxed));
    }

    /// Writes a gauge family of one unlabelled sample.
    fn gauge(&mut self, name: &str, help: &str, value: usize) {
        self.family(name, "gauge", help);
        self.sample(name, &[], value);
    }

    /// Writes a summary family as `_sum` and `_count` pairs, each labelled by cluster when given.
    fn summary<'a>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (Option<&'a str>, Summary)>,
    ) {
        self.family(name, "summary", help);
        for (cluster, s) in series {
            let labels: Vec<(&str, &str)> = cluster.map(|c| ("cluster", c)).into_iter().collect();
            self.sample(&format!("{name}_sum"), &labels, Float(s.sum));
            self.sample(&format!("{name}_count"), &labels, s.count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample lines of `text` that belong to `name` (its own or `_sum`/`_count`).
    fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with([' ', '{']))
            })
            .collect()
    }

    /// One sample line taken apart: metric name, label pairs (unescaped) and value.
    fn parse_sample(line: &str) -> (String, Vec<(String, String)>, f64) {
        let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let mut chars = line.chars().peekable();
        let mut name = String::new();
        while let Some(c) = chars.next_if(|&c| is_name(c) || c == ':') {
            name.push(c);
        }
        assert!(name.starts_with(|c: char| !c.is_ascii_digit()), "{line:?}");
        let mut labels = Vec::new();
        if chars.next_if_eq(&'{').is_some() {
            while chars.next_if_eq(&'}').is_none() {
                let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
                assert!(!key.is_empty() && key.chars().all(is_name), "{line:?}");
                assert_eq!(chars.next(), Some('"'), "{line:?}");
                let mut value = String::new();
                loop {
                    match chars.next().expect("a closing quote") {
                        '\\' => match chars.next() {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape {other:?} in {line:?}"),
                        },
                        '"' => break,
                        '\n' => panic!("raw newline in {line:?}"),
                        c => value.push(c),
                    }
                }
                labels.push((key, value));
                chars.next_if_eq(&',');
            }
        }
        assert_eq!(
            chars.next(),
            Some(' '),
            "one space before the value in {line:?}"
        );
        let value = match chars.collect::<String>().as_str() {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        (name, labels, value)
    }

    fn busy() -> Metrics {
        let m = Metrics::default();
        m.reconcile(0.5, true);
        m.reconcile(1.25, true);
        m.reconcile(2.0, false);
        m.helm_job("member-1", "applied", 3.0);
        m.helm_job("member-1", "applied", 1.0);
        m.helm_job("member-1", "failed", 0.5);
        m.helm_job("hub", "uninstalled", 2.5);
        m.queue_wait(0.25);
        m.queue_wait(0.75);
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
        }
    }

    #[test]
    fn reconciles_are_counted_by_result_with_their_duration() {
        let text = busy().render(&Gauges::default());
        assert_eq!(
            samples(&text, "tenancy_hub_reconciles_total"),
            [
                "tenancy_hub_reconciles_total{result=\"ok\"} 2",
                "tenancy_hub_reconciles_total{result=\"error\"} 1"
            ]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_reconcile_duration_seconds_sum"),
            ["tenancy_hub_reconcile_duration_seconds_sum 3.75"]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_reconcile_duration_seconds_count"),
            ["tenancy_hub_reconcile_duration_seconds_count 3"]
        );
        assert!(text.contains("# TYPE tenancy_hub_reconcile_duration_seconds summary\n"));
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
        assert_eq!(
            samples(&text, "tenancy_hub_helm_job_duration_seconds_sum"),
            [
                "tenancy_hub_helm_job_duration_seconds_sum{cluster=\"hub\"} 2.5",
                "tenancy_hub_helm_job_duration_seconds_sum{cluster=\"member-1\"} 4.5",
            ]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_helm_job_duration_seconds_count"),
            [
                "tenancy_hub_helm_job_duration_seconds_count{cluster=\"hub\"} 1",
                "tenancy_hub_helm_job_duration_seconds_count{cluster=\"member-1\"} 3",
            ]
        );
    }

    #[test]
    fn queue_waits_are_summed_and_counted() {
        let text = busy().render(&Gauges::default());
        assert_eq!(
            samples(&text, "tenancy_hub_queue_wait_seconds_sum"),
            ["tenancy_hub_queue_wait_seconds_sum 1"]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_queue_wait_seconds_count"),
            ["tenancy_hub_queue_wait_seconds_count 2"]
        );
    }

    #[test]
    fn watch_restarts_events_and_status_writes_are_counted() {
        let m = busy();
        let text = m.render(&Gauges::default());
        assert_eq!(
            samples(&text, "tenancy_hub_watch_restarts_total"),
            [
                "tenancy_hub_watch_restarts_total{cluster=\"hub\"} 1",
                "tenancy_hub_watch_restarts_total{cluster=\"member-2\"} 2",
            ]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_watch_events_total"),
            ["tenancy_hub_watch_events_total 3"]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_status_writes_total"),
            ["tenancy_hub_status_writes_total 1"]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_status_writes_skipped_total"),
            ["tenancy_hub_status_writes_skipped_total 2"]
        );
        assert_eq!((m.status_writes(), m.watch_events()), (1, 3));
    }

    #[test]
    fn gauges_are_rendered_with_clusters_in_name_order() {
        let text = Metrics::default().render(&gauges());
        assert_eq!(
            samples(&text, "tenancy_hub_queue_depth"),
            ["tenancy_hub_queue_depth 7"]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_jobs_running"),
            ["tenancy_hub_jobs_running 2"]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_cluster_reachable"),
            [
                "tenancy_hub_cluster_reachable{cluster=\"hub\"} 1",
                "tenancy_hub_cluster_reachable{cluster=\"member-1\"} 0",
            ]
        );
        assert_eq!(
            samples(&text, "tenancy_hub_watched_namespaces"),
            ["tenancy_hub_watched_namespaces 12"]
        );
        assert!(text.contains("# TYPE tenancy_hub_queue_depth gauge\n"));
    }

    #[test]
    fn fresh_metrics_render_zeroes_and_empty_families() {
        let text = Metrics::default().render(&Gauges::default());
        assert!(text.contains("tenancy_hub_reconciles_total{result=\"error\"} 0\n"));
        assert!(text.contains("tenancy_hub_queue_wait_seconds_count 0\n"));
        assert!(text.contains("# TYPE tenancy_hub_helm_jobs_total counter\n"));
        assert!(samples(&text, "tenancy_hub_helm_jobs_total").is_empty());
    }

    #[test]
    fn label_values_escape_backslashes_quotes_and_newlines() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        let m = Metrics::default();
        m.helm_job("we\"ird\\\n", "fail\"ed", 1.0);
        let text = m.render(&Gauges::default());
        let line = samples(&text, "tenancy_hub_helm_jobs_total")[0];
        assert_eq!(
            line,
            "tenancy_hub_helm_jobs_total{cluster=\"we\\\"ird\\\\\\n\",outcome=\"fail\\\"ed\"} 1"
        );
        let (_, labels, _) = parse_sample(line);
        assert_eq!(
            labels,
            [
                ("cluster".into(), "we\"ird\\\n".into()),
                ("outcome".into(), "fail\"ed".into())
            ]
        );
    }

    #[test]
    fn every_line_is_a_comment_or_a_sample_of_a_declared_family() {
        let m = busy();
        m.watch_restart("odd \"name\"\\x");
        let text = m.render(&gauges());
        assert!(text.ends_with('\n'));
        let mut declared: Vec<(String, String)> = Vec::new();
        let mut helped: Vec<String> = Vec::new();
        for line in text.lines() {
            if let Some(help) = line.strip_prefix("# HELP ") {
                let (name, text) = help.split_once(' ').expect("name and help text");
                assert!(!text.is_empty(), "{line:?}");
                helped.push(name.to_owned());
            } else if let Some(ty) = line.strip_prefix("# TYPE ") {
                let (name, kind) = ty.split_once(' ').expect("name and type");
                assert!(["counter", "gauge", "summary"].contains(&kind), "{line:?}");
                assert_eq!(
                    helped.last().map(String::as_str),
                    Some(name),
                    "HELP precedes TYPE"
                );
                assert!(
                    declared.iter().all(|(n, _)| n != name),
                    "{name} declared twice"
                );
                declared.push((name.to_owned(), kind.to_owned()));
            } else {
                assert!(!line.starts_with('#'), "unknown comment {line:?}");
                let (name, _, value) = parse_sample(line);
                let (family, kind) = declared.last().expect("a family is declared first");
                let belongs = match kind.as_str() {
                    "summary" => {
                        [format!("{family}_sum"), format!("{family}_count")].contains(&name)
                    }
                    _ => &name == family,
                };
                assert!(belongs, "{name} is not in family {family}");
                if kind == "counter" {
                    assert!(name.ends_with("_total") && value >= 0.0, "{line:?}");
                }
            }
        }
        assert_eq!(declared.len(), 16, "every family is declared");
    }

    #[test]
    fn special_floats_are_written_as_prometheus_expects() {
        assert_eq!(Float(f64::INFINITY).to_string(), "+Inf");
        assert_eq!(Float(f64::NEG_INFINITY).to_string(), "-Inf");
        assert_eq!(Float(f64::NAN).to_string(), "NaN");
        assert_eq!(Float(0.1).to_string(), "0.1");
        let mut s = Summary::default();
        s.observe(f64::NAN);
        s.observe(-1.0);
        assert_eq!(s, Summary { sum: 0.0, count: 2 });
    }
}
