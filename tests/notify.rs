//! End-to-end tests of notifications: a webhook receiver on loopback gets one signed message per transition (failure, recovery, drift, a rollout halt), none for reconciles that change nothing, delivery goes on while it is down or slow, and a Secret no policy allows sends nothing.

mod common;

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU8, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Router, body::Bytes, extract::State, http::HeaderMap, http::StatusCode, routing::post};
use common::{
    fixtures::{DEADLINE, chart, ready, tenancy, unique, wait_until, web},
    hub::{Hub, allow_all},
};
use hmac::{Hmac, Mac};
use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::util::intstr::IntOrString,
};
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::Value;
use sha2::Sha256;
use tenancy_hub::api::{
    alert::{Alert, AlertSpec, AlertStatus, ProviderType, SecretName},
    crd::{ControllerSpec, DriftDetection, DriftMode, Rollout},
    policy::ValuesRule,
};

/// The signing key the receiver checks.
const KEY: &[u8] = b"notify-test-key";
/// The receiver answers at once.
const UP: u8 = 0;
/// The receiver answers 503.
const DOWN: u8 = 1;
/// The receiver answers after longer than the operator waits for one attempt.
const SLOW: u8 = 2;

/// A request as received: its signature header and its body.
type Received = (Option<String>, Vec<u8>);

/// A webhook on loopback: what it was sent while up, and how many requests it turned away.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
    mode: Arc<AtomicU8>,
    turned_away: Arc<AtomicUsize>,
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    match r.mode.load(Ordering::SeqCst) {
        UP => {
            let signature = headers
                .get("x-tenancy-hub-signature")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            r.got.lock().unwrap().push((signature, body.to_vec()));
            StatusCode::OK
        }
        DOWN => {
            r.turned_away.fetch_add(1, Ordering::SeqCst);
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => {
            r.turned_away.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::OK
        }
    }
}

impl Receiver {
    /// Listens on 127.0.0.1 (an ephemeral port) until the test ends.
    async fn start() -> (Self, SocketAddr) {
        let r = Receiver::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = Router::new()
            .route("/hook/{token}", post(receive))
            .with_state(r.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (r, address)
    }

    /// Every message received so far, its signature checked: each carries one made with `KEY`.
    fn messages(&self) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(signature, body)| {
                let mut mac = Hmac::<Sha256>::new_from_slice(KEY).unwrap();
                mac.update(body);
                let expected: String = mac
                    .finalize()
                    .into_bytes()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                assert_eq!(
                    signature.as_deref(),
                    Some(format!("sha256={expected}").as_str()),
                    "a message signed with the Alert's key"
                );
                serde_json::from_slice(body).unwrap()
            })
            .collect()
    }

    /// How many messages of `event` about Controller `controller` were received.
    fn count(&self, controller: &str, event: &str) -> usize {
        self.messages()
            .iter()
            .filter(|m| m["controller"] == controller && m["event"] == event)
            .count()
    }

    /// Waits until a message of `event` about `controller` came, returning it.
    async fn until(&self, controller: &str, event: &str) -> Value {
        wait_until(
            &format!("a {event} message about {controller}"),
            DEADLINE,
            || async {
                self.messages()
                    .into_iter()
                    .find(|m| m["controller"] == controller && m["event"] == event)
            },
        )
        .await
    }

    /// The events received about `controller`, in order.
    fn events(&self, controller: &str) -> Vec<String> {
        self.messages()
            .iter()
            .filter(|m| m["controller"] == controller)
            .map(|m| m["event"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Applies Secret `name` of the hub namespace with `data`.
async fn secret(hub: &Hub, name: &str, data: &[(&str, &[u8])]) {
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    Api::<Secret>::namespaced(hub.client.clone(), &hub.namespace)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// Applies Alert `name` sending every event to the webhook of Secret `secret_name`.
async fn alert(hub: &Hub, name: &str, secret_name: &str) {
    let a = Alert::new(
        name,
        AlertSpec {
            provider: tenancy_hub::api::alert::AlertProvider {
                type_: ProviderType::Generic,
                secret_ref: SecretName {
                    name: secret_name.into(),
                },
            },
            ..Default::default()
        },
    );
    Api::<Alert>::namespaced(hub.client.clone(), &hub.namespace)
        .patch(
            name,
            &PatchParams::apply("tenancy-hub-tests").force(),
            &Patch::Apply(&a),
        )
        .await
        .unwrap();
}

/// Waits until Alert `name`'s status satisfies `check`.
async fn alert_until(
    hub: &Hub,
    name: &str,
    what: &str,
    check: impl Fn(&AlertStatus) -> bool,
) -> AlertStatus {
    let api: Api<Alert> = Api::namespaced(hub.client.clone(), &hub.namespace);
    wait_until(what, DEADLINE, || async {
        let status = api.get(name).await.ok()?.status?;
        check(&status).then_some(status)
    })
    .await
}

fn alert_ready(status: &AlertStatus) -> Option<(&str, &str, &str)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// `web` on member-1 with `settings`, drift repaired, rolled out one cluster at a time with a
/// 15 s progress deadline when `rollout`.
fn shop(namespace: &str, settings: &[(&str, &str)], rollout: bool) -> ControllerSpec {
    let mut web = chart("deployment-example", "web", settings);
    web.drift_detection = Some(DriftDetection {
        mode: DriftMode::Enabled,
        ignore: Vec::new(),
    });
    ControllerSpec {
        tenancies: vec![tenancy(namespace, &["member-1"], vec![web])],
        rollout: rollout.then(|| Rollout {
            max_unavailable: Some(IntOrString::Int(1)),
            progress_deadline: Some("15s".into()),
            ..Rollout::default()
        }),
        ..Default::default()
    }
}

/// Makes the operator reconcile `name` `times` more times without changing what it asks for
/// (an annotation changes), each reconcile seen in the operator's metrics.
async fn reconcile_unchanged(hub: &Hub, name: &str, times: usize) {
    let operator = hub.operator.as_ref().unwrap();
    for i in 0..times {
        let before = operator.metric("tenancy_hub_reconciles_total");
        let patch = serde_json::json!({"metadata": {"annotations": {"test.multitenancy.dev/nudge": i.to_string()}}});
        hub.api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        wait_until("one more reconcile", DEADLINE, || async {
            (operator.metric("tenancy_hub_reconciles_total") > before).then_some(())
        })
        .await;
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_webhook_gets_one_signed_message_per_transition_and_delivery_goes_on_while_it_is_down_or_slow()
 {
    // The receivers listen on loopback, which an Alert may reach only when the operator says so.
    let hub = Hub::with_args(
        "notify",
        &["--drift-interval", "5", "--notify-internal-addresses"],
    )
    .await;
    let (receiver, address) = Receiver::start().await;
    let (sneaky_receiver, sneaky_address) = Receiver::start().await;
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.values_from = vec![ValuesRule {
        kind: Some(tenancy_hub::api::crd::ValuesKind::Secret),
        names: vec!["hook".into()],
        ..Default::default()
    }];
    hub.policy(&hub.namespace, policy).await;
    let url = format!("http://{address}/hook/s3cr3t-t0ken");
    secret(
        &hub,
        "hook",
        &[("address", url.as_bytes()), ("hmacKey", KEY)],
    )
    .await;
    alert(&hub, "on-call", "hook").await;
    // A Secret of the namespace no policy rule allows: the Alert says so and sends nothing.
    let sneaky_url = format!("http://{sneaky_address}/hook/platform");
    secret(
        &hub,
        "platform-token",
        &[("address", sneaky_url.as_bytes())],
    )
    .await;
    alert(&hub, "sneaky", "platform-token").await;
    let status = alert_until(&hub, "on-call", "Alert on-call to be Ready", |s| {
        alert_ready(s).is_some_and(|r| r.0 == "True")
    })
    .await;
    assert_eq!(
        status.endpoint.as_deref(),
        Some(format!("http://{address}").as_str())
    );
    assert!(!format!("{status:?}").contains("s3cr3t"), "{status:?}");
    let sneaky = alert_until(&hub, "sneaky", "Alert sneaky to be refused", |s| {
        alert_ready(s).is_some_and(|r| r.0 == "False")
    })
    .await;
    let (_, reason, message) = alert_ready(&sneaky).unwrap();
    assert_eq!(reason, "SecretNotAllowed");
    assert!(
        message.contains(&format!("Secret {}/platform-token", hub.namespace))
            && message.contains("a platform admin adds one"),
        "{message}"
    );
    assert_eq!(sneaky.endpoint, None);

    // A first install that becomes Ready is no transition.
    let ns = unique("shop");
    hub.apply("shop", shop(&ns, &[("replicaCount", "1")], false))
        .await;
    hub.status_until("shop", "shop to be Ready", ready).await;

    // Failure: a replica count the API server refuses.
    hub.apply("shop", shop(&ns, &[("replicaCount", "-1")], false))
        .await;
    let failed = receiver.until("shop", "Stalled").await;
    assert_eq!(
        (
            failed["namespace"].as_str(),
            failed["cluster"].as_str(),
            failed["release"].as_str()
        ),
        (Some(hub.namespace.as_str()), Some("member-1"), Some("web"))
    );
    assert_eq!(failed["reason"], "ReleaseFailed");
    // Reconciles that change nothing tell nothing.
    reconcile_unchanged(&hub, "shop", 3).await;
    assert_eq!(receiver.events("shop"), ["Stalled"]);

    // Recovery.
    hub.apply("shop", shop(&ns, &[("replicaCount", "2")], false))
        .await;
    receiver.until("shop", "Recovered").await;
    hub.status_until("shop", "shop to be Ready again", ready)
        .await;
    reconcile_unchanged(&hub, "shop", 2).await;
    assert_eq!(receiver.events("shop"), ["Stalled", "Recovered"]);

    // Drift found and repaired.
    hub.lab.kubectl(
        "member-1",
        &["-n", &ns, "scale", "deployment/web", "--replicas=5"],
    );
    let repaired = receiver.until("shop", "DriftRepaired").await;
    assert_eq!(repaired["release"], "web");
    hub.status_until("shop", "shop Ready after the repair", ready)
        .await;
    reconcile_unchanged(&hub, "shop", 2).await;
    assert_eq!(receiver.count("shop", "DriftDetected"), 1);
    assert_eq!(receiver.count("shop", "DriftRepaired"), 1);
    assert_eq!(
        receiver.count("shop", "Recovered"),
        1,
        "a repaired drift is no recovery"
    );

    // A rollout halted by pods that never become ready.
    hub.apply("shop", shop(&ns, &[("replicaCount", "2")], true))
        .await;
    hub.status_until("shop", "the rollout to complete", |s| {
        s.rollout.as_ref().is_some_and(|r| r.phase == "Complete") && ready(s)
    })
    .await;
    hub.apply(
        "shop",
        shop(
            &ns,
            &[("replicaCount", "2"), ("nodeSelector.nowhere", "never")],
            true,
        ),
    )
    .await;
    let halted = receiver.until("shop", "RolloutHalted").await;
    assert_eq!(
        (halted["cluster"].as_str(), halted["release"].as_str()),
        (Some("member-1"), Some("web"))
    );
    reconcile_unchanged(&hub, "shop", 2).await;
    assert_eq!(receiver.count("shop", "RolloutHalted"), 1);
    assert_eq!(
        receiver.count("shop", "Stalled"),
        1,
        "the halt is told as RolloutHalted only"
    );

    // The receiver is slow, then down: the operator goes on delivering.
    let operator = hub.operator.as_ref().unwrap();
    receiver.mode.store(SLOW, Ordering::SeqCst);
    hub.apply("shop", shop(&ns, &[("replicaCount", "2")], true))
        .await;
    let other = unique("other");
    hub.apply("second", web(&other, &["member-1"], "1")).await;
    hub.releases_become("member-1", &other, &[("web", 1)]).await;
    hub.status_until("second", "the second Controller to be Ready", ready)
        .await;
    wait_until("the slow receiver to be tried", DEADLINE, || async {
        (receiver.turned_away.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    receiver.mode.store(DOWN, Ordering::SeqCst);
    let turned_away = receiver.turned_away.load(Ordering::SeqCst);
    hub.apply("second", web(&other, &["member-1"], "-1")).await;
    hub.status_until("second", "the second Controller's failure reported", |s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Stalled" && c.status == "True")
    })
    .await;
    // Its Stalled message is tried a few times, then given up and counted.
    wait_until(
        "the down receiver to be tried again and again",
        DEADLINE,
        || async { (receiver.turned_away.load(Ordering::SeqCst) >= turned_away + 4).then_some(()) },
    )
    .await;
    alert_until(&hub, "on-call", "a message given up counted", |s| {
        s.failed > 0
    })
    .await;
    hub.apply("second", web(&other, &["member-1"], "2")).await;
    hub.releases_become("member-1", &other, &[("web", 3)]).await;

    // Back up: the next transition arrives.
    hub.status_until("second", "the second Controller Ready again", ready)
        .await;
    receiver.mode.store(UP, Ordering::SeqCst);
    hub.apply("second", web(&other, &["member-1"], "-2")).await;
    receiver.until("second", "Stalled").await;

    assert!(
        sneaky_receiver.messages().is_empty(),
        "nothing goes to a Secret no policy allows"
    );
    let sent = alert_until(&hub, "on-call", "the counts written", |s| s.sent >= 6).await;
    assert!(sent.last_sent_time.is_some());
    let sneaky = alert_until(&hub, "sneaky", "the refused sends counted", |s| {
        s.failed > 0
    })
    .await;
    assert_eq!(sneaky.sent, 0);
    assert!(operator.metric("tenancy_hub_notifications_total{result=\"sent\"}") >= 6.0);
    let log = hub.log();
    assert!(
        !log.contains("s3cr3t-t0ken") && !log.contains("/hook/platform"),
        "a webhook's path never reaches the log"
    );
}
