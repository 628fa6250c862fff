//! The `view` scenario: the fleet view at fleet size, against N simulated pull members divided between C Controllers (the envelope's), the real operator, hub API server and etcd; the matrix's first render in headless Chromium, one live update, and the operator's memory and CPU with S open live streams.
//!
//! The members join and the Controllers' work is taken (`common::envelope::Divided`). A viewer
//! (a ServiceAccount that may get the Controllers of their hub namespace) signs in in headless
//! Chromium; the page's own navigation timing says when its DOM held the N rows (checked by a
//! script, polled with a deadline), on the sign-in's redirect and on a reload. One member then
//! reports one pod of its release not ready, and the open page (a script polling it every 10 ms)
//! notes when its row shows it, without a reload. Then, the browser closed, the operator's RSS and
//! CPU (from /proc) idle without views, over a burst of changes without views (every member's
//! report changed once), idle with S live streams of `/ui/live/fleet` open (over identities of
//! their own, each under the per-viewer cap), and over the same burst with them open, with the
//! bytes and events each stream was sent.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    Args, BENCH_ACCOUNT, bench_identity,
    common::{
        browser::Browser,
        envelope::{Divided, Envelope},
        fixtures::wait_until,
        hub::reader_token_as,
        lab::Lab,
        operator::usage,
    },
    progress,
};

/// Streams one viewer identity may hold (the operator's per-viewer cap, `live::PER_VIEWER`).
const PER_VIEWER: usize = 8;
/// How long the page may take to render or show a change before the scenario fails.
const SHOWN_WITHIN: Duration = Duration::from_secs(120);

/// The figures of the fleet view at `a.view_clusters` members and `a.view_controllers` Controllers.
pub(crate) async fn view(a: &Args) -> Value {
    let lab = Lab::get();
    let kubeconfig = bench_identity(&lab);
    let (n, controllers) = (a.view_clusters, a.view_controllers);
    progress(&format!(
        "view: {n} simulated pull members, {controllers} Controllers"
    ));
    let envelope = Envelope {
        members: n,
        sample: 0,
        quiet: Duration::from_secs(a.quiet_seconds),
        operator_args: vec![
            "--kubeconfig".into(),
            kubeconfig.to_string_lossy().into_owned(),
        ],
        operator_flow: Some(BENCH_ACCOUNT.into()),
    };
    let divided = envelope.divided(&lab, controllers).await;
    let mut out = serde_json::Map::from_iter([
        ("members".to_owned(), json!(n)),
        ("controllers".to_owned(), json!(controllers)),
    ]);
    if let Some(f) = divided.figures().get("converge_seconds") {
        out.insert("converge_seconds".into(), f.clone());
    }
    let identities = a.view_streams.div_ceil(PER_VIEWER);
    let mut tokens = Vec::new();
    for i in 0..=identities {
        let account = format!("fleet-viewer-{i}");
        tokens.push(
            reader_token_as(
                &lab,
                &lab.client("hub").await,
                divided.hub_namespace(),
                &account,
            )
            .await,
        );
    }
    let base = format!("http://{}", divided.operator().http);
    out.extend(in_browser(&divided, &base, &tokens[identities]).await);
    out.extend(streams(a, &divided, &base, &tokens[..identities]).await);
    // Shown before the teardown, which at 1,000 members takes minutes: a run cut short keeps them.
    progress(&format!("view: {}", Value::Object(out.clone())));
    let errors = divided.end().await;
    for error in errors.iter().take(5) {
        progress(&format!("view: {error}"));
    }
    out.insert("errors".into(), json!(errors.len()));
    progress(&format!("view: {}", Value::Object(out.clone())));
    Value::Object(out)
}

/// The page's navigation timing once its matrix holds `n` rows, polled with a deadline.
async fn rendered(browser: &Browser, n: usize) -> Value {
    let script = format!(
        "const rows = document.querySelectorAll('table.matrix tbody tr').length;
         const nav = performance.getEntriesByType('navigation')[0];
         if (rows < {n} || !nav || nav.loadEventEnd === 0) return null;
         return {{rows, response_start_ms: nav.responseStart, response_end_ms: nav.responseEnd,
                  dom_interactive_ms: nav.domInteractive, dom_loaded_ms: nav.domContentLoadedEventEnd,
                  load_ms: nav.loadEventEnd, transfer_bytes: nav.transferSize,
                  body_bytes: nav.decodedBodySize}};"
    );
    wait_until(
        &format!("the matrix to hold {n} rows"),
        SHOWN_WITHIN,
        || async { Some(browser.run(&script).await).filter(|v| !v.is_null()) },
    )
    .await
}

/// Milliseconds since the epoch, as the page's `Date.now()` counts them.
fn epoch_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// Signs in with `token`, times the matrix's first render (the sign-in's redirect) and a reload's,
/// then one member's pod made not ready until the open page shows it.
async fn in_browser(
    divided: &Divided<'_>,
    base: &str,
    token: &str,
) -> serde_json::Map<String, Value> {
    let n = divided.members().len();
    let browser = Browser::start().await;
    browser.goto(&format!("{base}/ui/login")).await;
    browser.type_into("#token", token).await;
    browser.click("#signin").await;
    let first = rendered(&browser, n).await;
    progress(&format!("view: first render {first}"));
    browser.goto(&format!("{base}/ui/")).await;
    let reload = rendered(&browser, n).await;
    progress(&format!("view: reload {reload}"));
    // The member's row, found by its link; a reload would lose the page's mark.
    let member = &divided.members()[0];
    let watch = format!(
        "window.viewBench = {{seen: null}};
         const seen = window.viewBench;
         const timer = setInterval(() => {{
           const link = document.querySelector('a[href=\"/ui/clusters/{member}\"]');
           const row = link && link.closest('tr');
           if (row && row.textContent.includes('2/3')) {{ seen.seen = Date.now(); clearInterval(timer); }}
         }}, 10);
         return true;"
    );
    browser.run(&watch).await;
    let changed_at = epoch_ms();
    divided.fleet().unready_pods(0..1, 1);
    let seen_at = wait_until("the open page to show the change", SHOWN_WITHIN, || async {
        browser
            .run("return window.viewBench ? window.viewBench.seen : 'reloaded';")
            .await
            .as_f64()
    })
    .await;
    let live = (seen_at - changed_at) / 1000.0;
    progress(&format!("view: live update shown in {live:.3} s"));
    let mut out = serde_json::Map::new();
    for (phase, timing) in [("first", first), ("reload", reload)] {
        for (k, v) in timing.as_object().into_iter().flatten() {
            out.insert(format!("render_{phase}_{k}"), v.clone());
        }
    }
    out.insert("live_update_seconds".into(), json!(live));
    out
}

/// Bytes and events each open stream has been sent.
struct Counted {
    bytes: Vec<Arc<AtomicU64>>,
    events: Vec<Arc<AtomicU64>>,
}

impl Counted {
    fn bytes(&self) -> Vec<u64> {
        self.bytes
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }
    fn events(&self) -> Vec<u64> {
        self.events
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }
}

/// Opens `count` streams of `url`, each identity of `tokens` holding at most [`PER_VIEWER`],
/// reading each until `stop`; returns once each has been sent its first event.
async fn open(url: &str, tokens: &[String], count: usize, stop: &CancellationToken) -> Counted {
    let http = reqwest::Client::new();
    let mut counted = Counted {
        bytes: Vec::new(),
        events: Vec::new(),
    };
    for i in 0..count {
        let response = http
            .get(url)
            .bearer_auth(&tokens[i % tokens.len()])
            .send()
            .await
            .unwrap();
        if response.status() != 200 {
            let (status, body) = (response.status(), response.text().await.unwrap_or_default());
            panic!("stream {i} of {url} refused: {status} {body}");
        }
        let (bytes, events) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        counted.bytes.push(bytes.clone());
        counted.events.push(events.clone());
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut response = response;
            loop {
                let chunk = tokio::select! {
                    () = stop.cancelled() => return,
                    chunk = response.chunk() => chunk,
                };
                let Ok(Some(chunk)) = chunk else { return };
                bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                let sent = chunk.windows(6).filter(|w| w == b"event:").count();
                events.fetch_add(sent as u64, Ordering::Relaxed);
            }
        });
    }
    wait_until("every stream sent its first event", SHOWN_WITHIN, || {
        std::future::ready(counted.events().iter().all(|e| *e > 0).then_some(()))
    })
    .await;
    counted
}

/// The operator's CPU (percent of a core) and RSS (MiB) over `window`, named after `phase`.
async fn idle(pid: u32, phase: &str, window: Duration) -> serde_json::Map<String, Value> {
    let (_, _, before) = usage(pid);
    tokio::time::sleep(window).await; // a measurement window, not a wait
    let (rss, _, after) = usage(pid);
    progress(&format!("view: {phase} measured"));
    serde_json::Map::from_iter([
        (
            format!("{phase}_cpu_percent"),
            json!(100.0 * (after - before) / window.as_secs_f64()),
        ),
        (format!("{phase}_rss_mib"), json!(rss as f64 / 1024.0)),
    ])
}

/// Every member reports `unready` pods not ready; over `window` from then, the operator's CPU
/// and RSS, when the members' reports were all on the hub, and, with `streams`, what each was
/// sent and when the last byte came.
async fn burst(
    divided: &Divided<'_>,
    phase: &str,
    unready: usize,
    window: Duration,
    streams: Option<&Counted>,
) -> serde_json::Map<String, Value> {
    let pid = divided.operator().pid();
    let (n, fleet) = (divided.members().len(), divided.fleet());
    let (_, _, cpu_before) = usage(pid);
    let (bytes_before, events_before) =
        streams.map(|s| (s.bytes(), s.events())).unwrap_or_default();
    let started = Instant::now();
    fleet.unready_pods(0..n, unready);
    let (mut written, mut last_byte, mut total) = (None, 0.0, 0);
    while started.elapsed() < window {
        if written.is_none() && fleet.waiting() == 0 {
            written = Some(started.elapsed().as_secs_f64());
        }
        if let Some(s) = streams {
            let now: u64 = s.bytes().iter().sum();
            if now != total {
                (total, last_byte) = (now, started.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // sampling within the window
    }
    let (rss, peak, cpu_after) = usage(pid);
    let mut out = serde_json::Map::from_iter([
        (
            format!("{phase}_cpu_seconds"),
            json!(cpu_after - cpu_before),
        ),
        (
            format!("{phase}_cpu_percent"),
            json!(100.0 * (cpu_after - cpu_before) / window.as_secs_f64()),
        ),
        (format!("{phase}_rss_mib"), json!(rss as f64 / 1024.0)),
        (format!("{phase}_peak_rss_mib"), json!(peak as f64 / 1024.0)),
        (format!("{phase}_reports_written_seconds"), json!(written)),
    ]);
    if let Some(s) = streams {
        let bytes: Vec<u64> = s
            .bytes()
            .iter()
            .zip(&bytes_before)
            .map(|(a, b)| a - b)
            .collect();
        let events: Vec<u64> = s
            .events()
            .iter()
            .zip(&events_before)
            .map(|(a, b)| a - b)
            .collect();
        let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
        out.extend([
            (
                format!("{phase}_bytes_per_stream_mean"),
                json!(mean(&bytes)),
            ),
            (
                format!("{phase}_bytes_per_stream_max"),
                json!(bytes.iter().max()),
            ),
            (
                format!("{phase}_events_per_stream_mean"),
                json!(mean(&events)),
            ),
            (format!("{phase}_last_byte_seconds"), json!(last_byte)),
        ]);
    }
    progress(&format!("view: {phase} measured"));
    out
}

/// The operator idle and over a burst of changes, without views, then with `a.view_streams`
/// live streams of the fleet open over `tokens`.
async fn streams(
    a: &Args,
    divided: &Divided<'_>,
    base: &str,
    tokens: &[String],
) -> serde_json::Map<String, Value> {
    let pid = divided.operator().pid();
    let (quiet, window) = (
        Duration::from_secs(a.quiet_seconds),
        Duration::from_secs(a.view_burst_seconds),
    );
    let mut out = serde_json::Map::from_iter([
        ("streams".to_owned(), json!(a.view_streams)),
        ("stream_identities".to_owned(), json!(tokens.len())),
    ]);
    out.extend(idle(pid, "idle", quiet).await);
    out.extend(burst(divided, "burst", 2, window, None).await);
    let stop = CancellationToken::new();
    let opened = Instant::now();
    let counted = open(
        &format!("{base}/ui/live/fleet"),
        tokens,
        a.view_streams,
        &stop,
    )
    .await;
    let first: Vec<u64> = counted.bytes();
    out.insert(
        "streams_open_seconds".into(),
        json!(opened.elapsed().as_secs_f64()),
    );
    out.insert(
        "stream_first_bytes_mean".into(),
        json!(first.iter().sum::<u64>() as f64 / first.len() as f64),
    );
    out.extend(idle(pid, "idle_streams", quiet).await);
    out.extend(burst(divided, "burst_streams", 0, window, Some(&counted)).await);
    stop.cancel();
    out
}
