//! Test fixtures for the reconciler: a `Context` on a scripted fake API server, and that server's script.

use std::{collections::BTreeMap, path::PathBuf, sync::Arc, time::Duration};

use http::{Method, Request, Response};
use k8s_openapi::{
    api::core::v1::Secret,
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::Timestamp,
};
use kube::{
    Client, ResourceExt,
    client::Body,
    core::PartialObjectMeta,
    runtime::{
        events::{Recorder, Reporter},
        reflector::{self, store::Writer},
        watcher,
    },
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    api::crd::{ControllerSpec, HUB_CLUSTER, TenancyController},
    api::key::ReleaseKey,
    charts::catalog::ChartCatalog,
    clusters::registry::ClusterRegistry,
    controller::{
        context::{Context, Settings},
        reconcile::FINALIZER,
    },
    observe::releases::ReleaseIndex,
    observe::supervisor::WatchSupervisor,
    plan::{
        self, MANAGED_BY, MANAGED_BY_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
        SPEC_HASH_LABEL, owner_id,
    },
    queue::{QueueConfig, handle::HelmQueue},
};

/// How long the script waits for a request the reconciler must make.
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// How long the script listens before it holds that no request is coming.
const QUIET: Duration = Duration::from_millis(500);

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn mock_client() -> (Client, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// A reconciler `Context` whose hub is a scripted fake API server.
pub(crate) struct Fixture {
    /// The context to reconcile with.
    pub(crate) ctx: Arc<Context>,
    /// The hub's API server: the test answers the requests the reconciler makes, in order.
    pub(crate) hub: ApiServer,
    /// The hub as a member cluster, where pods and workloads are watched: never answered, so the
    /// watchers wait and the script of `hub` holds only what the reconciler itself asks.
    _member: Handle,
    controllers: Writer<TenancyController>,
    policies: Writer<crate::api::policy::TenancyPolicy>,
    cancel: CancellationToken,
    _chart_cache: tempfile::TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Fixture {
    /// A context with an empty registry (the hub only), the hub's release records listed and
    /// empty, an idle queue and writer, and the repository's `config/charts` as chart home.
    pub(crate) fn new() -> Self {
        Self::with_policy_mode(crate::policy::Mode::Permissive)
    }

    /// Like [`Fixture::new`], every cluster worked and observed through `links` (fakes).
    pub(crate) fn linked(links: crate::member::Links) -> Self {
        let mut f = Self::new();
        Arc::get_mut(&mut f.ctx)
            .expect("the fixture's context is not shared yet")
            .members
            .links = links;
        f
    }

    /// Like [`Fixture::new`], applying the tenancy policies in `mode`.
    pub(crate) fn with_policy_mode(mode: crate::policy::Mode) -> Self {
        let (hub_client, hub) = mock_client();
        let (member_client, member) = mock_client();
        let (store, controllers) = reflector::store();
        let (policy_store, policies) = reflector::store();
        let cancel = CancellationToken::new();
        let (changes, _) = tokio::sync::mpsc::channel(16);
        let releases = ReleaseIndex::default();
        releases.seed(hub_cluster(), Vec::new());
        let registry = ClusterRegistry::hub_only(member_client);
        let chart_cache = tempfile::tempdir().expect("a temporary directory");
        let charts = crate::charts::cache::ChartCache::open(
            chart_cache.path(),
            crate::charts::cache::DEFAULT_SIZE,
            PathBuf::from("helm"),
            Default::default(),
        )
        .expect("an empty chart cache opens");
        let registry = Arc::new(arc_swap::ArcSwap::from_pointee(registry));
        let charts = Arc::new(charts);
        let cli = crate::helm::cli::HelmCli::new(
            Default::default(),
            registry.clone(),
            Default::default(),
            charts.clone(),
        )
        .expect("a scratch directory");
        let executor = crate::helm::sdk::HelmExecutor::new(cli, &Default::default());
        let links = crate::member::Links::new(
            registry.clone(),
            Arc::new(executor),
            crate::member::pull::hub::PullHub::new(hub_client.clone(), None, None),
            crate::member::pull::hub::link::ANSWER_WITHIN,
        );
        let ctx = Context {
            hub: crate::controller::context::Hub {
                client: hub_client.clone(),
                controllers: store,
                policies: policy_store,
                shards: Default::default(),
                settings: Settings {
                    chart_home: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/charts"),
                    pending_timeout: Duration::from_secs(300),
                    scope: None,
                    selector: None,
                    chart_interval: Duration::from_secs(300),
                    drift_interval: Duration::from_secs(300),
                    policy_mode: mode,
                    operator_namespace: "tenancy-hub".into(),
                },
            },
            members: crate::controller::context::Members {
                registry,
                links,
                releases: Arc::new(releases),
                model: Default::default(),
                watches: Arc::new(WatchSupervisor::new(
                    changes,
                    cancel.clone(),
                    Default::default(),
                    Default::default(),
                )),
                health: Default::default(),
            },
            kept: crate::controller::context::Kept {
                claims: Arc::new(crate::plan::claims::Claims::new(
                    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/charts"),
                )),
                orphans: Default::default(),
                index: Arc::new(crate::controller::index::ControllerIndex::new(
                    crate::controller::drift::DriftBoard::new(Duration::from_secs(300)).0,
                )),
                charts: Arc::new(ChartCatalog::new(charts, Duration::from_secs(300))),
                values: Arc::new(crate::controller::hub_values::HubValues::new(
                    hub_client.clone(),
                    Default::default(),
                )),
            },
            out: crate::controller::context::Out {
                queue: HelmQueue::new(QueueConfig::default()),
                writer: Default::default(),
                events: Arc::new(crate::controller::events::Events::new(Recorder::new(
                    hub_client,
                    Reporter::from("tenancy-hub"),
                ))),
                notifier: Default::default(),
                metrics: Default::default(),
            },
        };
        Self {
            ctx: Arc::new(ctx),
            hub: ApiServer(hub),
            _member: member,
            controllers,
            policies,
            cancel,
            _chart_cache: chart_cache,
        }
    }

    /// Puts a TenancyPolicy in the store, as the hub's watch would.
    pub(crate) fn policy(&mut self, policy: crate::api::policy::TenancyPolicy) {
        self.policies
            .apply_watcher_event(&watcher::Event::Apply(policy));
    }

    /// Puts resources in the reflector store, as the hub's watch would.
    pub(crate) fn store(&mut self, objects: &[&TenancyController]) {
        let basis = self.ctx.claim_basis();
        for object in objects {
            self.controllers
                .apply_watcher_event(&watcher::Event::Apply((*object).clone()));
            self.ctx.kept.claims.update(object, &basis);
        }
    }

    /// Makes `records` the hub's fully listed release records.
    pub(crate) fn records(&self, records: Vec<PartialObjectMeta<Secret>>) {
        self.ctx.members.releases.seed(hub_cluster(), records);
    }

    /// The spec hash the planner gives the release `key` of `c`, with the charts as they are.
    pub(crate) async fn spec_hash(&self, c: &TenancyController, key: &ReleaseKey) -> String {
        let home = &self.ctx.hub.settings.chart_home;
        let admission = crate::policy::Admission::permissive();
        self.ctx
            .kept
            .charts
            .prepare("", &c.spec, home, &|chart| admission.fetch_scope("", chart))
            .await;
        let lookup =
            |s: &plan::ChartSource,
             c: &crate::policy::access::Credentials,
             t: &crate::policy::access::Trust,
             v: Option<&str>| { self.ctx.kept.charts.lookup("", s, c, t, v) };
        let clusters = self.ctx.members.registry.load().labels();
        plan::desired(
            &owner_id(c),
            &c.spec,
            &clusters,
            home,
            &lookup,
            &admission,
            &crate::plan::fleet::Fleet::none(),
        )
        .releases
        .into_iter()
        .find(|r| r.key == *key)
        .expect("the spec asks for the release")
        .spec_hash
    }
}

fn hub_cluster() -> crate::api::key::ClusterName {
    HUB_CLUSTER.parse().expect("the hub's name is valid")
}

/// A `Controller` in namespace `default`, created at `created` (RFC 3339), with `spec` as YAML.
pub(crate) fn controller(name: &str, created: &str, spec: &str) -> TenancyController {
    let spec: ControllerSpec = serde_yaml::from_str(spec).expect("a valid spec");
    let mut c = TenancyController::new(name, spec);
    c.metadata = ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        uid: Some(format!("uid-{name}")),
        generation: Some(1),
        resource_version: Some("1".into()),
        creation_timestamp: Some(Time(created.parse::<Timestamp>().expect("RFC 3339"))),
        ..ObjectMeta::default()
    };
    c
}

/// `c` with the cleanup finalizer, as the hub holds it once the finalizer was added.
pub(crate) fn finalized(mut c: TenancyController) -> TenancyController {
    c.metadata.finalizers = Some(vec![FINALIZER.into()]);
    c
}

/// `c` being deleted.
pub(crate) fn deleted(mut c: TenancyController) -> TenancyController {
    c.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
    c
}

/// Helm's record (a Secret's metadata) of revision 1 of a release in `key`, managed for `owner`.
pub(crate) fn release_record(
    key: &ReleaseKey,
    owner: &TenancyController,
    status: &str,
    spec_hash: &str,
) -> PartialObjectMeta<Secret> {
    let owner = owner_id(owner);
    let labels = [
        ("owner", "helm"),
        ("name", key.release.as_str()),
        ("version", "1"),
        ("status", status),
        (MANAGED_BY_LABEL, MANAGED_BY),
        (OWNER_NAMESPACE_LABEL, owner.namespace.as_str()),
        (OWNER_NAME_LABEL, owner.name.as_str()),
        (SPEC_HASH_LABEL, spec_hash),
    ];
    PartialObjectMeta {
        metadata: ObjectMeta {
            name: Some(format!("sh.helm.release.v1.{}.v1", key.release)),
            namespace: Some(key.scope.namespace.clone()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        },
        ..PartialObjectMeta::default()
    }
}

/// The hub's API server as the test scripts it: each method awaits the next request, checks it
/// and answers it.
pub(crate) struct ApiServer(Handle);

impl ApiServer {
    async fn next(&mut self, method: Method, path: &str) -> (Value, Responder) {
        let (request, send) = tokio::time::timeout(REQUEST_DEADLINE, self.0.next_request())
            .await
            .unwrap_or_else(|_| panic!("no {method} {path} within {REQUEST_DEADLINE:?}"))
            .expect("the client is alive");
        assert_eq!(
            (request.method(), request.uri().path()),
            (&method, path),
            "the reconciler's next request"
        );
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .expect("a request body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("a JSON body")
        };
        (body, Responder(send))
    }

    /// Expects the JSON patch that adds the cleanup finalizer to `c` (which has no finalizer),
    /// and answers with `c` holding it, which it returns.
    pub(crate) async fn finalizer_added(&mut self, c: &TenancyController) -> TenancyController {
        let (patch, answer) = self.next(Method::PATCH, &controller_path(c)).await;
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ])
        );
        let updated = finalized(c.clone());
        answer.json(&updated);
        updated
    }

    /// Expects the JSON patch that removes the cleanup finalizer (the first) from `c`, and
    /// answers with `c` holding none.
    pub(crate) async fn finalizer_removed(&mut self, c: &TenancyController) {
        let (patch, answer) = self.next(Method::PATCH, &controller_path(c)).await;
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
        let mut updated = c.clone();
        updated.metadata.finalizers = None;
        answer.json(&updated);
    }

    /// Expects a new Event on `c` with `reason`, and answers that it was created; returns it.
    pub(crate) async fn event(&mut self, c: &TenancyController, reason: &str) -> Value {
        let path = format!(
            "/apis/events.k8s.io/v1/namespaces/{}/events",
            c.namespace().unwrap_or_default()
        );
        let (event, answer) = self.next(Method::POST, &path).await;
        assert_eq!(event["reason"], reason, "{event}");
        assert_eq!(event["regarding"]["name"], c.name_any(), "{event}");
        answer.json(&event);
        event
    }

    /// Holds that no request comes: the reconciler has returned, so one it made would be here.
    pub(crate) async fn nothing(&mut self) {
        if let Ok(Some((request, _))) = tokio::time::timeout(QUIET, self.0.next_request()).await {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
    }
}

fn controller_path(c: &TenancyController) -> String {
    format!(
        "/apis/multitenancy.dev/v1alpha1/namespaces/{}/controllers/{}",
        c.namespace().unwrap_or_default(),
        c.name_any()
    )
}

struct Responder(tower_test::mock::SendResponse<Response<Body>>);

impl Responder {
    fn json(self, value: &impl serde::Serialize) {
        let body = serde_json::to_vec(value).expect("serializes");
        self.0.send_response(
            Response::builder()
                .body(Body::from(body))
                .expect("a response"),
        );
    }
}
