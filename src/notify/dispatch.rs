//! The dispatcher: notices matched against the Alerts, each Alert's rate limited, and each message sent from a task of its own (a few attempts with backoff) holding a slot of a pool shared fairly by the hub namespaces, so a slow or absent webhook holds up nothing of another tenant.

use std::{collections::HashMap, sync::Arc, time::Duration};

use kube::{
    ResourceExt as _,
    runtime::reflector::{ObjectRef, Store},
};
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    api::alert::Alert,
    metrics::Metrics,
    notify::{
        Notice,
        address::{Allowed, WebhookResolver},
        book::AlertBook,
        budget::{Full, TenantSlots, over_cap},
        filter::accepts,
        limits::{TokenBucket, jitter, retry_after},
        payload::{SIGNATURE_HEADER, body},
        provider::{AdmissionNow, Endpoint, Reach, SecretReader, shown},
    },
};

/// How long one attempt may take, connecting included.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Messages on their way at once (attempts and pauses between them); beyond, new ones are
/// dropped and counted.
pub(crate) const IN_FLIGHT: usize = 64;
/// Of those, the most one hub namespace's Alerts have on their way: a tenant whose receiver
/// never answers holds these and no more.
pub(crate) const IN_FLIGHT_PER_TENANT: usize = 8;

/// What the dispatcher reads and writes through.
#[derive(Clone)]
pub(crate) struct Dispatcher {
    /// Reads the Alerts' Secrets.
    pub(crate) reader: Arc<SecretReader>,
    /// The Alerts.
    pub(crate) alerts: Store<Alert>,
    /// What the policies allow now.
    pub(crate) admission: AdmissionNow,
    /// Where webhooks may lead.
    pub(crate) reach: Reach,
    /// Counts per Alert, written to their status.
    pub(crate) book: Arc<AlertBook>,
    /// Operator metrics.
    pub(crate) metrics: Arc<Metrics>,
}

/// Why one attempt failed, in words that cannot hold the URL.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum SendError {
    /// No answer within the attempt's time.
    #[error("no answer within {ATTEMPT_TIMEOUT:?}")]
    Timeout,
    /// No connection.
    #[error("could not connect")]
    Connect,
    /// An answer other than 2xx (redirects are not followed).
    #[error("the webhook answered {0}")]
    Status(u16),
    /// Anything else on the way.
    #[error("the request failed")]
    Other,
}

impl SendError {
    /// Whether another attempt may do better: not for answers saying the request is wrong.
    pub(crate) fn retryable(&self) -> bool {
        match self {
            Self::Status(code) => *code == 429 || *code >= 500,
            _ => true,
        }
    }
}

/// The HTTP client messages go out with: no redirects followed, a short timeout, names whose
/// addresses lead inside refused unless `allowed` lists them.
pub(crate) fn client(allowed: Allowed) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ATTEMPT_TIMEOUT)
        .connect_timeout(ATTEMPT_TIMEOUT)
        .dns_resolver(Arc::new(WebhookResolver(allowed)))
        .build()
        .expect("the notification HTTP client builds")
}

/// One HTTP client per allowance of internal addresses (most namespaces share the empty one).
#[derive(Default)]
struct Clients(HashMap<Allowed, reqwest::Client>);

impl Clients {
    fn for_allowance(&mut self, allowed: Allowed) -> reqwest::Client {
        if self.0.len() > 256 {
            self.0.clear();
        }
        self.0
            .entry(allowed.clone())
            .or_insert_with(|| client(allowed))
            .clone()
    }
}

impl Dispatcher {
    /// Takes notices until cancelled: every Alert that accepts one gets a message, within its
    /// rate; sending never holds up the next notice.
    pub(crate) async fn run(
        self,
        mut notices: mpsc::Receiver<Notice>,
        tasks: TaskTracker,
        cancel: CancellationToken,
    ) {
        let slots = TenantSlots::new(IN_FLIGHT, IN_FLIGHT_PER_TENANT);
        let mut clients = Clients::default();
        let mut buckets: HashMap<ObjectRef<Alert>, TokenBucket> = HashMap::new();
        loop {
            let notice = tokio::select! {
                n = notices.recv() => match n { Some(n) => n, None => return },
                () = cancel.cancelled() => return,
            };
            let now = std::time::Instant::now();
            let alerts = self.alerts.state();
            let over = over_cap(&alerts);
            buckets.retain(|a, _| self.alerts.get(a).is_some());
            let admission = (self.admission)();
            for alert in alerts.iter().filter(|a| {
                let namespace = a.namespace().unwrap_or_default();
                accepts(&namespace, &a.spec, &notice) && !over.contains(&(namespace, a.name_any()))
            }) {
                let key = ObjectRef::from_obj(&**alert);
                let bucket = buckets
                    .entry(key.clone())
                    .or_insert_with(|| TokenBucket::new(now));
                if !bucket.take(now) {
                    self.metrics.notification("rate_limited");
                    self.book.dropped(&key);
                    tracing::warn!(alert = %key, event = %notice.event, "notification over the Alert's rate limit; dropped");
                    continue;
                }
                let slot = match slots.take(&notice.namespace) {
                    Ok(slot) => slot,
                    Err(full) => {
                        self.metrics.notification("dropped");
                        self.book.dropped(&key);
                        let whose = match full {
                            Full::Tenant => "this namespace's",
                            Full::Pool => "every namespace's",
                        };
                        tracing::warn!(alert = %key, "too many of {whose} notifications on their way; dropped");
                        continue;
                    }
                };
                let allowed = self.reach.allowed(&admission, &notice.namespace);
                let (this, http, alert, notice) = (
                    self.clone(),
                    clients.for_allowance(allowed),
                    alert.clone(),
                    notice.clone(),
                );
                let cancel = cancel.clone();
                tasks.spawn(async move {
                    this.deliver(&http, &alert, &notice, &cancel).await;
                    drop(slot);
                });
            }
        }
    }

    /// Resolves the Alert's Secret now (the policies asked at once, the Secret read within
    /// [`crate::notify::provider::REUSE`]) and
    /// sends the message, retrying what may succeed later.
    async fn deliver(
        &self,
        http: &reqwest::Client,
        alert: &Alert,
        notice: &Notice,
        cancel: &CancellationToken,
    ) {
        let key = ObjectRef::from_obj(alert);
        let resolved = self
            .reader
            .resolve(alert, &(self.admission)(), &self.reach)
            .await;
        let endpoint = match resolved {
            Ok(e) => e,
            Err(problem) => {
                self.metrics.notification("failed");
                self.book.failed(&key);
                tracing::warn!(alert = %key, event = %notice.event, reason = problem.reason(), "notification not sent: {problem}");
                return;
            }
        };
        let payload = body(endpoint.provider, notice);
        let mut attempt = 1;
        loop {
            match post(http, &endpoint, &payload).await {
                Ok(()) => {
                    self.metrics.notification("sent");
                    self.book.sent(&key);
                    tracing::info!(alert = %key, event = %notice.event, to = %shown(&endpoint.url), attempt, "notification sent");
                    return;
                }
                Err(error) => {
                    attempt += 1;
                    let pause = retry_after(attempt, jitter()).filter(|_| error.retryable());
                    let Some(pause) = pause else {
                        self.metrics.notification("failed");
                        self.book.failed(&key);
                        tracing::warn!(alert = %key, event = %notice.event, to = %shown(&endpoint.url), attempts = attempt - 1, %error, "notification not sent");
                        return;
                    };
                    tracing::debug!(alert = %key, %error, attempt, "notification attempt failed; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = cancel.cancelled() => return,
                    }
                }
            }
        }
    }
}

/// One attempt: the body posted, signed when the endpoint has a key; the answer's body is
/// never read.
async fn post(
    http: &reqwest::Client,
    endpoint: &Endpoint,
    payload: &[u8],
) -> Result<(), SendError> {
    let mut request = http
        .post(endpoint.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::USER_AGENT, "tenancy-hub")
        .body(payload.to_vec());
    if let Some(key) = &endpoint.hmac_key {
        request = request.header(
            SIGNATURE_HEADER,
            crate::notify::payload::signature(key, payload),
        );
    }
    match request.send().await {
        Ok(answer) if answer.status().is_success() => Ok(()),
        Ok(answer) => Err(SendError::Status(answer.status().as_u16())),
        Err(e) if e.is_timeout() => Err(SendError::Timeout),
        Err(e) if e.is_connect() => Err(SendError::Connect),
        Err(_) => Err(SendError::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_errors_hold_no_url_and_say_whether_to_retry() {
        for e in [
            SendError::Timeout,
            SendError::Connect,
            SendError::Status(503),
            SendError::Other,
        ] {
            assert!(e.retryable(), "{e}");
            assert!(!e.to_string().contains("http"), "{e}");
        }
        assert!(SendError::Status(429).retryable());
        assert!(!SendError::Status(404).retryable());
        assert!(
            !SendError::Status(302).retryable(),
            "a redirect is not followed"
        );
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed_and_a_signed_body_arrives() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for answer in [
                "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            ] {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                while !String::from_utf8_lossy(&got).contains("\"time\"") {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                s.write_all(answer.as_bytes()).await.unwrap();
                seen.push(String::from_utf8_lossy(&got).into_owned());
            }
            seen
        });
        let endpoint = Endpoint {
            provider: crate::api::alert::ProviderType::Generic,
            url: format!("http://{address}/hook").parse().unwrap(),
            hmac_key: Some(b"k".to_vec()),
        };
        let payload = br#"{"time":"now"}"#;
        let http = client(Allowed::parse(&["127.0.0.1/32".into()]));
        assert_eq!(
            post(&http, &endpoint, payload).await,
            Err(SendError::Status(302))
        );
        assert_eq!(post(&http, &endpoint, payload).await, Ok(()));
        let seen = server.await.unwrap();
        let signature = crate::notify::payload::signature(b"k", payload);
        assert!(
            seen[1]
                .to_ascii_lowercase()
                .contains(&format!("x-tenancy-hub-signature: {signature}")),
            "{}",
            seen[1]
        );
    }
}
