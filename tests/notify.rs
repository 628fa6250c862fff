//! End-to-end tests of notifications: a webhook receiver on loopback gets one signed message per transition (failure, recovery, drift, a rollout halt), none for reconciles that change nothing, delivery goes on while it is down or slow, a Secret no policy allows sends nothing, and a tenant's Alerts, written as its own identity, hear nothing of another team's Controllers.

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
use futures::StreamExt as _;
use hmac::{Hmac, Mac};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Event, Secret},
    apimachinery::pkg::util::intstr::IntOrString,
};
use kube::{
    Api, Client, ResourceExt as _,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::Value;
use sha2::Sha256;
use tenancy_hub::api::{
    alert::{Alert, AlertSpec, AlertStatus, ProviderType, SecretName},
    crd::{ControllerSpec, DriftDetection, DriftMode, Rollout, TenancyController, ValuesKind},
    policy::{AlertSecretRule, TenancyPolicySpec},
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

/// Creates Secret `name` with `data` through `api` (its client and namespace).
async fn secret(api: &Api<Secret>, name: &str, data: &[(&str, &[u8])]) {
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
    api.create(&PostParams::default(), &s).await.unwrap();
}

/// Applies Alert `name` through `api` (its client and namespace), sending every event of
/// `controllers` (of every Controller when empty) to the webhook of Secret `secret_name`.
async fn alert(
    api: &Api<Alert>,
    name: &str,
    secret_name: &str,
    controllers: &[&str],
) -> Result<Alert, kube::Error> {
    let a = Alert::new(
        name,
        AlertSpec {
            provider: tenancy_hub::api::alert::AlertProvider {
                type_: ProviderType::Generic,
                secret_ref: SecretName {
                    name: secret_name.into(),
                },
            },
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        },
    );
    api.patch(
        name,
        &PatchParams::apply("tenancy-hub-tests").force(),
        &Patch::Apply(&a),
    )
    .await
}

/// Waits until the status of Alert `name`, read through `api`, satisfies `check`.
async fn alert_until(
    api: &Api<Alert>,
    name: &str,
    what: &str,
    check: impl Fn(&AlertStatus) -> bool,
) -> AlertStatus {
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

/// Waits until Alert `name`, read through `api`, is Ready sending to the webhook at `address`.
async fn alert_sends_to(api: &Api<Alert>, name: &str, address: SocketAddr) -> AlertStatus {
    let status = alert_until(api, name, &format!("Alert {name} to be Ready"), |s| {
        alert_ready(s).is_some_and(|r| r.0 == "True")
    })
    .await;
    assert_eq!(
        status.endpoint.as_deref(),
        Some(format!("http://{address}").as_str())
    );
    status
}

/// Waits until Alert `name`, read through `api`, is refused (`Ready=False`) for `reason` with
/// a message saying each of `says`, showing no endpoint; returns the condition's message.
async fn alert_refused(api: &Api<Alert>, name: &str, reason: &str, says: &[&str]) -> String {
    let what = format!("Alert {name} to be refused for {reason}, saying {says:?}");
    let status = alert_until(api, name, &what, |s| {
        alert_ready(s).is_some_and(|(status, why, message)| {
            status == "False" && why == reason && says.iter().all(|w| message.contains(w))
        })
    })
    .await;
    assert_eq!(status.endpoint, None);
    alert_ready(&status).unwrap().2.to_owned()
}

/// `policy` letting the Alerts of its hub namespaces send to the webhook of Secret `name`.
fn with_webhook(mut policy: TenancyPolicySpec, name: &str) -> TenancyPolicySpec {
    policy.alert_secrets = vec![AlertSecretRule {
        names: vec![name.into()],
        ..Default::default()
    }];
    policy
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
    hub.policy(
        &hub.namespace,
        with_webhook(allow_all(&hub.namespace, &[]), "hook"),
    )
    .await;
    let (secrets, alerts) = (
        Api::namespaced(hub.client.clone(), &hub.namespace),
        Api::namespaced(hub.client.clone(), &hub.namespace),
    );
    let url = format!("http://{address}/hook/s3cr3t-t0ken");
    secret(
        &secrets,
        "hook",
        &[("address", url.as_bytes()), ("hmacKey", KEY)],
    )
    .await;
    alert(&alerts, "on-call", "hook", &[]).await.unwrap();
    // A Secret of the namespace no policy rule allows: the Alert says so and sends nothing.
    let sneaky_url = format!("http://{sneaky_address}/hook/platform");
    secret(
        &secrets,
        "platform-token",
        &[("address", sneaky_url.as_bytes())],
    )
    .await;
    alert(&alerts, "sneaky", "platform-token", &[])
        .await
        .unwrap();
    let status = alert_sends_to(&alerts, "on-call", address).await;
    assert!(!format!("{status:?}").contains("s3cr3t"), "{status:?}");
    let secret_name = format!("Secret {}/platform-token", hub.namespace);
    alert_refused(
        &alerts,
        "sneaky",
        "SecretNotAllowed",
        &[&secret_name, "a platform admin adds one"],
    )
    .await;

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
    alert_until(&alerts, "on-call", "a message given up counted", |s| {
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
    let sent = alert_until(&alerts, "on-call", "the counts written", |s| s.sent >= 6).await;
    assert!(sent.last_sent_time.is_some());
    let sneaky = alert_until(&alerts, "sneaky", "the refused sends counted", |s| {
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

/// The label selecting the Controllers of a test whose operator follows several hub namespaces.
const RUN: &str = "notify.tenancy-hub.test/run";

/// Controller `name` with `spec`, labelled for the operator of run `id`.
fn labelled(name: &str, spec: ControllerSpec, id: &str) -> TenancyController {
    let mut c = TenancyController::new(name, spec);
    c.metadata.labels = Some([(RUN.to_owned(), id.to_owned())].into());
    c
}

/// Server-side applies Controller `c` through `api` (its client and namespace).
async fn apply_controller(api: &Api<TenancyController>, c: &TenancyController) {
    let name = c.metadata.name.as_deref().expect("a named Controller");
    api.patch(
        name,
        &PatchParams::apply("tenant").force(),
        &Patch::Apply(c),
    )
    .await
    .unwrap();
}

/// The API server's refusal of `what`: its status code and message.
fn refusal<T: std::fmt::Debug>(what: &str, result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("{what}: the API server was to refuse it, got {other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_tenants_alerts_hear_nothing_of_another_teams_controllers_and_send_nothing_to_a_secret_no_policy_allows()
 {
    // Two teams on one operator: each a hub namespace whose group may write Controllers and
    // Alerts there and nothing else (the Role of deploy/examples/team-a-hub.yaml), and a policy
    // allowing its own webhook Secret. Team B's namespace also holds a platform token.
    let id = unique("tenants");
    let _turn = HUB_WIDE_ALERTS.lock().await;
    let (hub, team_b) = Hub::two_teams(&id, RUN, &["--notify-internal-addresses"]).await;
    let team_a = hub.namespace.clone();
    let (shop_ns, apps_b) = (unique("shop"), format!("{id}-apps"));
    let (receiver_a, address_a) = Receiver::start().await;
    let (receiver_b, address_b) = Receiver::start().await;
    let (platform, platform_address) = Receiver::start().await;
    let mut clients = Vec::new();
    for (team, hook, address, allowed) in [
        (&team_a, "hook-a", address_a, &shop_ns),
        (&team_b, "hook-b", address_b, &apps_b),
    ] {
        hub.tenant_may_write(team, ("Group", team), &["controllers", "alerts"])
            .await;
        let mut policy = with_webhook(allow_all(team, &[]), hook);
        policy.namespaces = vec![allowed.clone()];
        hub.policy(team, policy).await;
        let url = format!("http://{address}/hook/{team}-s3cr3t");
        let secrets = Api::namespaced(hub.client.clone(), team);
        secret(
            &secrets,
            hook,
            &[("address", url.as_bytes()), ("hmacKey", KEY)],
        )
        .await;
        let client = hub
            .lab
            .client_as_in("hub", &format!("{team}-dev"), &[team])
            .await;
        let own: Api<Alert> = Api::namespaced(client.clone(), team);
        wait_until("the team's Role to take effect", DEADLINE, || async {
            own.list(&Default::default()).await.ok()
        })
        .await;
        clients.push(client);
    }
    let url = format!("http://{platform_address}/hook/platform-s3cr3t");
    let secrets_b = Api::namespaced(hub.client.clone(), &team_b);
    secret(
        &secrets_b,
        "platform-token",
        &[("address", url.as_bytes()), ("hmacKey", KEY)],
    )
    .await;

    // Team A, as itself: Controller shop, and an Alert of it to its own webhook.
    let (as_a, as_b) = (clients[0].clone(), clients[1].clone());
    let controllers_a: Api<TenancyController> = Api::namespaced(as_a.clone(), &team_a);
    let alerts_a: Api<Alert> = Api::namespaced(as_a, &team_a);
    let healthy = shop(&shop_ns, &[("replicaCount", "1")], false);
    apply_controller(&controllers_a, &labelled("shop", healthy, &id)).await;
    alert(&alerts_a, "on-call", "hook-a", &["shop"])
        .await
        .unwrap();

    // Team B, as itself, in its own namespace: an Alert naming team A's Controller by its name,
    // one of every Controller, one of its platform token, one of team A's Secret by its name.
    let alerts_b: Api<Alert> = Api::namespaced(as_b.clone(), &team_b);
    for (name, secret_name, controllers) in [
        ("spy", "hook-b", &["shop"][..]),
        ("spy-all", "hook-b", &[]),
        ("platform", "platform-token", &[]),
        ("borrow", "hook-a", &[]),
    ] {
        alert(&alerts_b, name, secret_name, controllers)
            .await
            .unwrap();
    }
    // Naming it with its namespace: refused when written, no Controller's name holds a '/'.
    let across = format!("{team_a}/shop");
    let (code, message) = refusal(
        "an Alert naming namespace/name",
        alert(&alerts_b, "spy-across", "hook-b", &[&across]).await,
    );
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("spec.controllers[0]"), "{message}");
    // Team A's namespace is not team B's to write or read, nor is any Secret.
    let in_a = Api::<Alert>::namespaced(as_b.clone(), &team_a);
    let secret_of = |namespace: &str| Api::<Secret>::namespaced(as_b.clone(), namespace);
    for (what, (code, message)) in [
        (
            "writes an Alert in team A's namespace",
            refusal("write", alert(&in_a, "spy", "hook-b", &[]).await),
        ),
        (
            "reads team A's Alert",
            refusal("read", in_a.get("on-call").await),
        ),
        (
            "reads team A's Secret",
            refusal("read", secret_of(&team_a).get("hook-a").await),
        ),
        (
            "reads the platform token",
            refusal("read", secret_of(&team_b).get("platform-token").await),
        ),
    ] {
        assert_eq!(code, 403, "team B {what}: {message}");
    }

    // As the operator sees them: an Alert whose Secret its policy allows is Ready, the others
    // say why not.
    alert_sends_to(&alerts_a, "on-call", address_a).await;
    for name in ["spy", "spy-all"] {
        alert_sends_to(&alerts_b, name, address_b).await;
    }
    let platform_secret = format!("Secret {team_b}/platform-token");
    alert_refused(
        &alerts_b,
        "platform",
        "SecretNotAllowed",
        &[&platform_secret, "a platform admin adds one"],
    )
    .await;
    // A name team B's policy does not allow, absent from its namespace, is refused as an
    // existing one would be: whether it exists is not told.
    let borrowed = format!("Secret {team_b}/hook-a");
    let absent = alert_refused(&alerts_b, "borrow", "SecretNotAllowed", &[&borrowed]).await;
    assert_eq!(
        absent.replace("hook-a", "platform-token"),
        alert_refused(&alerts_b, "platform", "SecretNotAllowed", &[]).await,
        "an absent Secret is refused in the words of one that exists"
    );

    // Team A's shop fails: its own webhook is told.
    hub.status_until("shop", "team A's shop to be Ready", ready)
        .await;
    let failing = shop(&shop_ns, &[("replicaCount", "-1")], false);
    apply_controller(&controllers_a, &labelled("shop", failing, &id)).await;
    let failed = receiver_a.until("shop", "Stalled").await;
    assert_eq!(failed["namespace"].as_str(), Some(team_a.as_str()));
    // Then team B's own Controller is refused by its policy. The dispatcher takes notices in
    // order, so once team B's Alerts have sent (or failed to send) that one, whatever they were
    // to send of team A's failure has come too.
    let controllers_b: Api<TenancyController> = Api::namespaced(as_b, &team_b);
    let elsewhere = web(&format!("{id}-elsewhere"), &["member-1"], "1");
    apply_controller(&controllers_b, &labelled("cart", elsewhere, &id)).await;
    receiver_b.until("cart", "Forbidden").await;
    alert_until(&alerts_b, "spy-all", "team B's message counted", |s| {
        s.sent >= 1
    })
    .await;
    for name in ["platform", "borrow"] {
        alert_until(&alerts_b, name, "a send refused, counted", |s| {
            s.failed >= 1 && s.sent == 0
        })
        .await;
    }
    assert!(
        receiver_b
            .messages()
            .iter()
            .all(|m| m["namespace"] == team_b.as_str() && m["controller"] == "cart"),
        "team B hears of its own Controllers only: {:?}",
        receiver_b.messages()
    );
    assert!(
        receiver_a
            .messages()
            .iter()
            .all(|m| m["namespace"] == team_a.as_str()),
        "{:?}",
        receiver_a.messages()
    );
    assert!(
        platform.messages().is_empty(),
        "nothing goes to a Secret no policy allows"
    );
    let spy = alert_sends_to(&alerts_b, "spy", address_b).await;
    assert_eq!(
        (spy.sent, spy.failed),
        (0, 0),
        "it names no Controller of its namespace"
    );

    // No Secret value in either team's Alerts' status, the Events or the operator's log.
    let mut shown = hub.log();
    for namespace in [&team_a, &team_b] {
        let list = Default::default();
        let alerts = Api::<Alert>::namespaced(hub.client.clone(), namespace);
        let events = Api::<Event>::namespaced(hub.client.clone(), namespace);
        let (alerts, events) = (alerts.list(&list).await, events.list(&list).await);
        let statuses: Vec<_> = alerts
            .unwrap()
            .items
            .into_iter()
            .map(|a| a.status)
            .collect();
        shown += &serde_json::to_string(&(statuses, events.unwrap().items)).unwrap();
    }
    for looked_at in ["Failed", "Forbidden", "SecretNotAllowed"] {
        let reason = format!("\"reason\":\"{looked_at}\"");
        assert!(shown.contains(&reason), "no {reason} in {shown}");
    }
    let key = std::str::from_utf8(KEY).unwrap();
    assert!(
        !shown.contains("s3cr3t") && !shown.contains(key),
        "a webhook's path or key never reaches a status, an Event or the log"
    );
}

/// The hub API server's URL, from the lab's kubeconfig.
fn hub_api_url(hub: &Hub) -> String {
    let config = &hub.lab.kubeconfig;
    let context = config.contexts.iter().find(|c| c.name == "hub").unwrap();
    let cluster = &context.context.as_ref().unwrap().cluster;
    let server = config.clusters.iter().find(|c| &c.name == cluster).unwrap();
    server.cluster.as_ref().unwrap().server.clone().unwrap()
}

/// `team`'s policy: its Controllers deliver to namespaces `<team>-*`, its Alerts send to the
/// webhooks of Secrets `secrets` and may reach loopback.
fn loopback_policy(team: &str, secrets: &[&str]) -> TenancyPolicySpec {
    let mut policy = allow_all(team, &[]);
    policy.namespaces = vec![format!("{team}-*")];
    policy.alert_secrets = vec![AlertSecretRule {
        names: secrets.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }];
    policy.alert_internal_addresses = vec!["127.0.0.1/32".into()];
    policy
}

/// The two-team tests run operators that follow every Alert of the hub. Run together, each
/// operator would judge the other test's Alerts (and read their Secrets), so their counts and
/// deadlines would measure each other: they take turns, each holding this for its whole run.
static HUB_WIDE_ALERTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Two teams on one operator that refuses webhooks inside the cluster: each team may write
/// Controllers and Alerts in its hub namespace, its policy allows its own webhook Secret `hook`
/// and loopback (where the test's receivers listen). Returns the hub, team B's namespace and
/// each team's own client.
async fn two_teams_on_loopback(id: &str) -> (Hub, String, Client, Client) {
    let (hub, team_b) = Hub::two_teams(id, RUN, &[]).await;
    let mut clients = Vec::new();
    for team in [hub.namespace.clone(), team_b.clone()] {
        hub.tenant_may_write(&team, ("Group", &team), &["controllers", "alerts"])
            .await;
        hub.policy(&team, loopback_policy(&team, &["hook"])).await;
        let client = hub
            .lab
            .client_as_in("hub", &format!("{team}-dev"), &[&team])
            .await;
        let own: Api<Alert> = Api::namespaced(client.clone(), &team);
        wait_until("the team's Role to take effect", DEADLINE, || async {
            own.list(&Default::default()).await.ok()
        })
        .await;
        clients.push(client);
    }
    let as_b = clients.pop().unwrap();
    let as_a = clients.pop().unwrap();
    (hub, team_b, as_a, as_b)
}

/// Team B's Alerts `on-call-0` … to its receiver, each Ready.
async fn team_b_alerts(hub: &Hub, team_b: &str, as_b: &Client, count: usize) -> Receiver {
    let (receiver, address) = Receiver::start().await;
    let url = format!("http://{address}/hook/{team_b}-s3cr3t");
    let secrets = Api::namespaced(hub.client.clone(), team_b);
    secret(
        &secrets,
        "hook",
        &[("address", url.as_bytes()), ("hmacKey", KEY)],
    )
    .await;
    let alerts: Api<Alert> = Api::namespaced(as_b.clone(), team_b);
    for i in 0..count {
        alert(&alerts, &format!("on-call-{i}"), "hook", &[])
            .await
            .unwrap();
    }
    for i in 0..count {
        alert_sends_to(&alerts, &format!("on-call-{i}"), address).await;
    }
    receiver
}

/// Team B's Controller `cart` fails: each of its `count` Alerts tells `receiver` once.
async fn team_b_fails(
    team_b: &str,
    as_b: &Client,
    id: &str,
    (receiver, count): (&Receiver, usize),
) {
    let controllers: Api<TenancyController> = Api::namespaced(as_b.clone(), team_b);
    let failing = web(&format!("{team_b}-cart"), &["member-1"], "-1");
    apply_controller(&controllers, &labelled("cart", failing, id)).await;
    wait_until(
        "every Alert of team B to tell its failure",
        DEADLINE,
        || async { (receiver.count("cart", "Stalled") >= count).then_some(()) },
    )
    .await;
    assert_eq!(receiver.count("cart", "Stalled"), count);
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn webhooks_inside_the_cluster_are_refused_a_tarpit_holds_only_its_tenants_share_and_an_alert_secret_feeds_no_values()
 {
    let id = unique("inside");
    let _turn = HUB_WIDE_ALERTS.lock().await;
    let (hub, team_b, as_a, as_b) = two_teams_on_loopback(&id).await;
    let team_a = hub.namespace.clone();
    let secrets_a = Api::namespaced(hub.client.clone(), &team_a);
    let alerts_a: Api<Alert> = Api::namespaced(as_a.clone(), &team_a);
    const TEAM_B_ALERTS: usize = 3;
    let receiver_b = team_b_alerts(&hub, &team_b, &as_b, TEAM_B_ALERTS).await;

    // Alerts of addresses inside the cluster, each in a Secret of its own no rule allows yet.
    let hub_api = format!("{}/api/v1/secrets", hub_api_url(&hub));
    let inside = [
        ("http://10.0.0.1/hook/x", "RFC 1918"),
        (
            "http://100.100.100.200/latest/meta-data",
            "carrier-grade NAT",
        ),
        ("http://kubernetes.default.svc/api", "cluster-internal name"),
        (
            "http://grafana.monitoring.svc.cluster.local:3000/x",
            "cluster-internal name",
        ),
        ("http://[fd00::1]/hook/x", "unique local"),
        (hub_api.as_str(), "the hub's own API server"),
    ];
    let names: Vec<String> = (0..inside.len()).map(|i| format!("inside-{i}")).collect();
    for (name, (address, _)) in names.iter().zip(inside) {
        secret(&secrets_a, name, &[("address", address.as_bytes())]).await;
        alert(&alerts_a, name, name, &[]).await.unwrap();
    }
    for name in &names {
        alert_refused(
            &alerts_a,
            name,
            "SecretNotAllowed",
            &["no alertSecrets rule"],
        )
        .await;
    }
    // The policy allows them now: each is judged again within seconds (not on its minute), and
    // refused for where its address leads.
    let mut allowed: Vec<&str> = names.iter().map(String::as_str).collect();
    allowed.push("hook");
    hub.policy(&team_a, loopback_policy(&team_a, &allowed))
        .await;
    let changed = std::time::Instant::now();
    for (name, (_, says)) in names.iter().zip(inside) {
        let what = format!("Alert {name} judged again for its address");
        let status = wait_until(&what, Duration::from_secs(20), || async {
            let status = alerts_a.get(name).await.ok()?.status?;
            let (_, reason, message) = alert_ready(&status)?;
            (reason == "AddressInvalid" && message.contains(says)).then(|| message.to_owned())
        })
        .await;
        assert!(
            !status.contains("/hook/x") && !status.contains("meta-data"),
            "{status}"
        );
    }
    eprintln!(
        "Alerts judged again {:?} after the policy changed",
        changed.elapsed()
    );

    // A tarpit: team A's receiver takes 30 s to answer, and 70 Alerts of team A send to it.
    let (tarpit, tarpit_address) = Receiver::start().await;
    tarpit.mode.store(SLOW, Ordering::SeqCst);
    let url = format!("http://{tarpit_address}/hook/{team_a}-s3cr3t");
    secret(&secrets_a, "hook", &[("address", url.as_bytes())]).await;
    futures::stream::iter(0..70)
        .map(|i| {
            let alerts_a = alerts_a.clone();
            async move { alert(&alerts_a, &format!("tarpit-{i:02}"), "hook", &[]).await }
        })
        .buffer_unordered(16)
        .for_each(|written| async move {
            written.unwrap();
        })
        .await;
    alert_sends_to(&alerts_a, "tarpit-69", tarpit_address).await;
    // Team A's Controller fails (its chart's values asked of the Alert's Secret, which feeds
    // no values): every one of its Alerts is to tell the tarpit.
    let controllers_a: Api<TenancyController> = Api::namespaced(as_a, &team_a);
    let mut spec = web(&format!("{team_a}-shop"), &["member-1"], "1");
    spec.tenancies[0].charts[0].values_from = vec![tenancy_hub::api::crd::ValuesReference {
        kind: ValuesKind::Secret,
        name: "hook".into(),
        ..Default::default()
    }];
    apply_controller(&controllers_a, &labelled("shop", spec, &id)).await;
    let status = hub
        .status_until("shop", "the Alert's Secret refused as values", |s| {
            common::fixtures::message(s, "member-1", "web").is_some_and(|m| {
                m.phase == "Invalid" && m.error_message.contains("may not be read")
            })
        })
        .await;
    let said = &common::fixtures::message(&status, "member-1", "web")
        .unwrap()
        .error_message;
    assert!(said.contains(&format!("Secret {team_a}/hook")), "{said}");
    assert!(!said.contains("s3cr3t"), "{said}");
    wait_until("the tarpit to be sent to", DEADLINE, || async {
        (tarpit.turned_away.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    // Team A's sends past its share of the pool are dropped and counted on its Alerts.
    let dropped = wait_until(
        "team A's sends past its share dropped",
        DEADLINE,
        || async {
            let list = alerts_a.list(&Default::default()).await.ok()?;
            let dropped: u64 = list
                .items
                .iter()
                .filter_map(|a| Some(a.status.as_ref()?.dropped))
                .sum();
            (dropped >= 70 - 8).then_some(dropped)
        },
    )
    .await;

    // Meanwhile every Alert of team B tells its own failure.
    let started = std::time::Instant::now();
    team_b_fails(&team_b, &as_b, &id, (&receiver_b, TEAM_B_ALERTS)).await;
    let told_in = started.elapsed();
    let reached = tarpit.turned_away.load(Ordering::SeqCst);
    eprintln!(
        "team B told in {told_in:?} while team A's tarpit was tried {reached} times; team A dropped {dropped}"
    );
    let alerts_b: Api<Alert> = Api::namespaced(as_b, &team_b);
    for i in 0..TEAM_B_ALERTS {
        let name = format!("on-call-{i}");
        let status = alert_until(&alerts_b, &name, "team B's message counted", |s| {
            s.sent >= 1
        })
        .await;
        assert_eq!(
            (status.sent, status.dropped, status.failed),
            (1, 0, 0),
            "{name}"
        );
    }
}

/// The API server's count of Secret lists and gets so far.
async fn secret_reads_on_the_hub(hub: &Hub) -> f64 {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = hub.client.request_text(request).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter(|l| l.contains("resource=\"secrets\""))
        .filter(|l| l.contains("verb=\"LIST\"") || l.contains("verb=\"GET\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn two_thousand_alerts_on_a_large_secret_no_rule_allows_read_nothing_and_another_team_is_still_told()
 {
    let id = unique("flood");
    let _turn = HUB_WIDE_ALERTS.lock().await;
    let (hub, team_b, as_a, as_b) = two_teams_on_loopback(&id).await;
    let team_a = hub.namespace.clone();
    let operator = hub.operator.as_ref().unwrap();
    // A 900 KB Secret of team A's namespace that no alertSecrets rule allows.
    let big = vec![b'x'; 900 * 1024];
    let secrets_a = Api::namespaced(hub.client.clone(), &team_a);
    secret(&secrets_a, "big", &[("address", big.as_slice())]).await;
    let (reads, hub_reads) = (
        operator.metric("tenancy_hub_alert_secret_reads_total"),
        secret_reads_on_the_hub(&hub).await,
    );

    // Team A, as itself, writes 2,000 Alerts naming it, 64 at a time.
    const FLOOD: usize = 2000;
    let alerts_a: Api<Alert> = Api::namespaced(as_a, &team_a);
    let started = std::time::Instant::now();
    futures::stream::iter(0..FLOOD)
        .map(|i| {
            let alerts_a = alerts_a.clone();
            async move { alert(&alerts_a, &format!("flood-{i:04}"), "big", &[]).await }
        })
        .buffer_unordered(64)
        .for_each(|written| async move {
            written.unwrap();
        })
        .await;
    let written = started.elapsed();

    // Each is judged: the first 100 by age refused by the policy, the rest over the cap.
    let judged = wait_until("every flooding Alert judged", DEADLINE * 2, || async {
        let list = alerts_a.list(&Default::default()).await.ok()?;
        let reasons: Vec<String> = list
            .items
            .iter()
            .filter_map(|a| alert_ready(a.status.as_ref()?).map(|r| r.1.to_owned()))
            .collect();
        let count = |r: &str| reasons.iter().filter(|x| *x == r).count();
        (count("SecretNotAllowed") == 100 && count("TooManyAlerts") == FLOOD - 100)
            .then_some(list.items)
    })
    .await;
    let over = judged
        .iter()
        .find(|a| alert_ready(a.status.as_ref().unwrap()).unwrap().1 == "TooManyAlerts")
        .unwrap();
    let said = alert_ready(over.status.as_ref().unwrap()).unwrap().2;
    assert!(
        said.contains(&format!(
            "hub namespace {team_a} holds more than the 100 Alerts the operator follows"
        )) && said.contains("delete Alerts it does not need"),
        "{said}"
    );
    let judged_in = started.elapsed();

    // One of the followed Alerts deleted, the oldest refused one is followed within seconds
    // (it is judged at once, not at its next minute's recheck): its Secret is now what it is
    // refused for.
    let mut by_age: Vec<(String, String)> = judged
        .iter()
        .map(|a| {
            let created = a
                .metadata
                .creation_timestamp
                .as_ref()
                .unwrap()
                .0
                .to_string();
            (created, a.name_any())
        })
        .collect();
    by_age.sort();
    alerts_a
        .delete(&by_age[0].1, &Default::default())
        .await
        .unwrap();
    let deleted = std::time::Instant::now();
    alert_refused(&alerts_a, &by_age[100].1, "SecretNotAllowed", &[]).await;
    assert!(
        deleted.elapsed() < std::time::Duration::from_secs(20),
        "the Alert let in was judged after {:?}",
        deleted.elapsed()
    );

    // Team B is told of its Controller's failure meanwhile.
    let receiver_b = team_b_alerts(&hub, &team_b, &as_b, 1).await;
    team_b_fails(&team_b, &as_b, &id, (&receiver_b, 1)).await;
    assert!(
        receiver_b
            .messages()
            .iter()
            .all(|m| m["namespace"] == team_b.as_str())
    );

    // Not a byte of the large Secret was read: the operator read team B's webhook Secret
    // alone, and the API server served few Secret reads over the whole flood.
    let read = operator.metric("tenancy_hub_alert_secret_reads_total") - reads;
    let bytes = operator.metric("tenancy_hub_alert_secret_read_bytes_total");
    let served = secret_reads_on_the_hub(&hub).await - hub_reads;
    eprintln!(
        "{FLOOD} Alerts written in {written:?}, judged in {judged_in:?}; Alert Secret reads {read}, {bytes} bytes; Secret lists and gets served by the hub {served}"
    );
    assert!(read <= 5.0, "{read} reads of Alert Secrets");
    assert!(bytes < 10_000.0, "{bytes} bytes of Alert Secrets read");
    assert!(
        served < 200.0,
        "{served} Secret reads served during the flood"
    );
}
