//! Hostile tenants in the members against the lab: namespaceRole bound only where the operator created the namespace and unbound after the last release, drift bounded and read as the release's identity.

mod common;

use std::io::{Read as _, Write as _};

use base64::Engine as _;
use common::{
    fixtures::{DEADLINE, chart, message, tenancy, unique, wait_until, web},
    hub::{Hub, impersonating},
};
use k8s_openapi::{
    ByteString,
    api::{
        core::v1::{Namespace, Secret},
        rbac::v1::RoleBinding,
    },
};
use kube::{Api, Client, api::PostParams};
use tenancy_hub::api::{crd::ControllerSpec, policy::Impersonation};

/// A team with its own hub namespace and operator (policies enforced), allowed to deliver to the
/// members into namespaces `<team>-*` as its own identity `<team>-deployer`, with
/// `namespaceRole: admin`.
struct Team {
    hub: Hub,
    name: String,
    deployer: String,
}

impl Team {
    async fn new(prefix: &str, extra: &[&str]) -> Self {
        let args = [&["--tenancy-policy", "enforce"][..], extra].concat();
        let hub = Hub::with_args(prefix, &args).await;
        let name = unique(prefix);
        let deployer = format!("{name}-deployer");
        let who = Impersonation {
            user: deployer.clone(),
            groups: Vec::new(),
            namespace_role: Some("admin".into()),
        };
        let pattern = format!("{name}-*");
        let policy = impersonating(&hub.namespace, &[&pattern], who);
        hub.policy(&hub.namespace, policy).await;
        Self {
            hub,
            name,
            deployer,
        }
    }

    async fn member(&self) -> Client {
        self.hub.lab.client("member-1").await
    }

    /// The RoleBindings of member-1's `namespace` that name the team's identity.
    async fn bindings(&self, namespace: &str) -> Vec<RoleBinding> {
        let bindings: Api<RoleBinding> = Api::namespaced(self.member().await, namespace);
        let all = bindings.list(&Default::default()).await.unwrap().items;
        all.into_iter()
            .filter(|b| b.subjects.iter().flatten().any(|s| s.name == self.deployer))
            .collect()
    }

    /// The annotations of member-1's `namespace`.
    async fn annotations(&self, namespace: &str) -> std::collections::BTreeMap<String, String> {
        let namespaces: Api<Namespace> = Api::all(self.member().await);
        let found = namespaces.get(namespace).await.unwrap();
        found.metadata.annotations.unwrap_or_default()
    }

    /// The release records of member-1's `namespace`, as the team's own identity reads them.
    async fn records(&self, namespace: &str) -> Api<Secret> {
        let tenant = self.hub.lab.client_as("member-1", &self.deployer).await;
        Api::namespaced(tenant, namespace)
    }

    /// Delivers `web` (one replica) into `namespace` and waits until it is deployed.
    async fn deliver_web(&self, name: &str, namespace: &str) {
        self.hub
            .apply(name, web(namespace, &["member-1"], "1"))
            .await;
        self.hub
            .releases_become("member-1", namespace, &[("web", 1)])
            .await;
    }
}

/// A spec of `deployment-example` releases `releases` in `namespace` of member-1.
fn releases(namespace: &str, releases: &[&str]) -> ControllerSpec {
    let charts = releases
        .iter()
        .map(|r| chart("deployment-example", r, &[("replicaCount", "1")]))
        .collect();
    ControllerSpec {
        tenancies: vec![tenancy(namespace, &["member-1"], charts)],
        ..Default::default()
    }
}

/// The Helm release JSON a record's `release` field holds (base64 of gzipped JSON).
fn decode_record(field: &[u8]) -> serde_json::Value {
    let zipped = base64::engine::general_purpose::STANDARD
        .decode(field)
        .unwrap();
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(&zipped[..])
        .read_to_end(&mut json)
        .unwrap();
    serde_json::from_slice(&json).unwrap()
}

/// A record's `release` field holding `bytes`, gzipped as Helm writes it.
fn encode_record(bytes: impl IntoIterator<Item = Vec<u8>>) -> ByteString {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    for chunk in bytes {
        gz.write_all(&chunk).unwrap();
    }
    let field = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
    ByteString(field.into_bytes())
}

/// Replaces the `release` field of revision 1 of `web` in `namespace`, as the tenant.
async fn rewrite_record(team: &Team, namespace: &str, field: ByteString) {
    let records = team.records(namespace).await;
    let name = "sh.helm.release.v1.web.v1";
    let mut record = records.get(name).await.unwrap();
    record
        .data
        .get_or_insert_default()
        .insert("release".into(), field);
    records
        .replace(name, &PostParams::default(), &record)
        .await
        .unwrap_or_else(|e| panic!("the tenant rewrites its release record: {e}"));
}

/// Namespace `namespace` of member-1, made by an admin, holding Secret `treasure`; returns the
/// Secret's value.
fn someone_elses(team: &Team, namespace: &str) -> String {
    let lab = &team.hub.lab;
    lab.kubectl("member-1", &["create", "namespace", namespace]);
    let value = unique("hunter2");
    let literal = format!("--from-literal=key={value}");
    let args = ["create", "secret", "generic", "treasure", &literal];
    lab.kubectl("member-1", &[&["-n", namespace][..], &args].concat());
    value
}

/// A figure of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in KiB.
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    line.trim().trim_end_matches(" kB").trim().parse().unwrap()
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_namespace_that_existed_gets_no_role_binding_and_its_release_says_who_must_grant_rights()
{
    let team = Team::new("existing", &[]).await;
    let lab = &team.hub.lab;
    // Someone else's namespace, made by an admin, that the team's pattern happens to match.
    let prod = format!("{}-prod", team.name);
    let secret = someone_elses(&team, &prod);

    team.hub
        .apply("existing", web(&prod, &["member-1"], "1"))
        .await;
    let status = team
        .hub
        .status_until("existing", "web refused by member-1's RBAC", |s| {
            message(s, "member-1", "web").is_some_and(|m| m.phase == "Failed")
        })
        .await;
    let said = &message(&status, "member-1", "web").unwrap().error_message;
    let deployer = &team.deployer;
    for needed in [
        "forbidden".to_owned(),
        format!(
            "namespace {prod} on cluster member-1 was not created by tenancy-hub for {deployer}"
        ),
        format!("namespaceRole admin was not bound to {deployer}"),
        format!("admins must grant {deployer} the rights the release needs in {prod}"),
    ] {
        assert!(said.contains(&needed), "{needed:?} in {said}");
    }
    assert!(
        team.hub.log().contains(&format!(
            "namespace {prod} on cluster member-1 was not created by tenancy-hub"
        )),
        "the log says it too"
    );
    assert!(team.bindings(&prod).await.is_empty(), "no RoleBinding");
    // The identity still cannot read the Secret, or anything else there.
    let tenant: Api<Secret> = Api::namespaced(lab.client_as("member-1", deployer).await, &prod);
    match tenant.get("treasure").await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        other => panic!("the identity read someone else's Secret: {other:?}"),
    }
    assert!(!serde_json::to_string(&status).unwrap().contains(&secret));
    assert!(lab.releases("member-1", &prod).is_empty());
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_namespace_the_operator_creates_is_bound_until_the_identitys_last_release_leaves() {
    let team = Team::new("created", &[]).await;
    let apps = format!("{}-apps", team.name);
    team.hub
        .apply("created", releases(&apps, &["web", "api"]))
        .await;
    team.hub
        .releases_become("member-1", &apps, &[("web", 1), ("api", 1)])
        .await;
    let bound = team.bindings(&apps).await;
    assert_eq!(bound.len(), 1, "one RoleBinding for the identity");
    assert_eq!(bound[0].role_ref.name, "admin");
    let marks = team.annotations(&apps).await;
    let deployer = Some(&team.deployer);
    assert_eq!(
        marks.get("multitenancy.dev/created-by").map(String::as_str),
        Some("tenancy-hub")
    );
    assert_eq!(marks.get("multitenancy.dev/created-for"), deployer);
    assert_eq!(marks.get("release.multitenancy.dev/web"), deployer);
    assert_eq!(marks.get("release.multitenancy.dev/api"), deployer);

    // One release leaves: the other still needs the binding.
    team.hub.apply("created", releases(&apps, &["web"])).await;
    team.hub
        .releases_become("member-1", &apps, &[("web", 1)])
        .await;
    wait_until("the mark of api to go", DEADLINE, || async {
        let marks = team.annotations(&apps).await;
        (!marks.contains_key("release.multitenancy.dev/api")).then_some(())
    })
    .await;
    assert_eq!(team.bindings(&apps).await.len(), 1, "web still needs it");

    // The tenant forges a release record, as it may in its namespace: it keeps nothing bound.
    let mut forged = Secret::default();
    forged.metadata.name = Some("sh.helm.release.v1.keepalive.v1".into());
    forged.metadata.labels = Some(
        [
            ("owner", "helm"),
            ("name", "keepalive"),
            ("status", "deployed"),
            ("version", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    );
    forged.type_ = Some("helm.sh/release.v1".into());
    let json = serde_json::json!({"name": "keepalive", "namespace": apps, "version": 1,
        "info": {"status": "deployed"}, "manifest": ""});
    forged.data = Some(
        [(
            "release".to_owned(),
            encode_record([json.to_string().into_bytes()]),
        )]
        .into(),
    );
    team.records(&apps)
        .await
        .create(&PostParams::default(), &forged)
        .await
        .expect("the tenant writes a record in its namespace");

    // The last release leaves with the Controller: the binding goes too.
    team.hub.delete_and_wait_gone("created").await;
    wait_until("the identity's RoleBinding to go", DEADLINE, || async {
        team.bindings(&apps).await.is_empty().then_some(())
    })
    .await;
    let marks = team.annotations(&apps).await;
    assert!(
        !marks
            .keys()
            .any(|k| k.starts_with("release.multitenancy.dev/")),
        "{marks:?}"
    );
}

/// The most a release record may grow the operator's peak resident memory: its decoder stops at
/// 32 MiB, and the rest is buffers.
const BOMB_GROWTH_MAX_KIB: u64 = 64 << 10;

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_release_record_that_expands_to_512_mib_grows_the_operator_by_less_than_64_mib_and_is_reported_once()
 {
    let team = Team::new("bomb", &["--drift-interval", "2"]).await;
    let namespace = format!("{}-bomb", team.name);
    team.deliver_web("bomb", &namespace).await;
    let operator = team.hub.operator.as_ref().unwrap();
    let pid = operator.pid();
    // Its peak so far is forgotten: what follows is measured from here.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("the peak resets");
    let before = proc_status_kib(pid, "VmRSS");

    // The tenant rewrites the record of its deployed revision: 512 MiB of zeros, gzipped
    // (about half a MiB, which fits in a Secret).
    let zeros = (0..512).map(|_| vec![0u8; 1 << 20]);
    rewrite_record(&team, &namespace, encode_record(zeros)).await;

    let reported = "drift is not checked for this revision";
    let said = wait_until("the drift check to report the record", DEADLINE, || async {
        let log = team.hub.log();
        log.lines()
            .find(|l| l.contains(reported) && l.contains(&namespace))
            .map(str::to_owned)
    })
    .await;
    assert!(said.contains("expands past 32 MiB"), "{said}");
    assert!(
        said.contains(&format!("member-1/{namespace}/web")),
        "{said}"
    );
    // Two more rounds of checks: the record is not read again, and not reported again.
    let rounds = |log: &str| log.matches("checking releases for drift").count();
    let seen = rounds(&team.hub.log());
    wait_until("two more rounds of drift checks", DEADLINE, || async {
        (rounds(&team.hub.log()) >= seen + 2).then_some(())
    })
    .await;
    let log = team.hub.log();
    let reports = log.lines().filter(|l| l.contains(reported)).count();
    assert_eq!(reports, 1, "reported once, not read again");

    let peak = proc_status_kib(pid, "VmHWM");
    let grown = peak.saturating_sub(before);
    eprintln!("operator VmRSS before {before} KiB, peak after {peak} KiB: grew {grown} KiB");
    assert!(
        grown < BOMB_GROWTH_MAX_KIB,
        "the operator grew {grown} KiB decoding a bomb"
    );
    assert!(operator.get("/healthz").0 == 200, "the operator lives on");
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn drift_of_an_impersonated_release_reads_nothing_its_identity_may_not_read() {
    let team = Team::new("oracle", &["--drift-interval", "2"]).await;
    let vault = unique("vault");
    someone_elses(&team, &vault);
    let namespace = format!("{}-oracle", team.name);
    team.deliver_web("oracle", &namespace).await;

    // The tenant rewrites its record so that its manifest names a Secret of another namespace
    // that exists, one that does not, and a cluster-scoped object: read with the operator's
    // rights, "found" and "missing" would tell which exist.
    let records = team.records(&namespace).await;
    let record = records.get("sh.helm.release.v1.web.v1").await.unwrap();
    let mut release = decode_record(&record.data.as_ref().unwrap()["release"].0);
    let named = format!(
        "\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: treasure, namespace: {vault}}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: nothing-here, namespace: {vault}}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: admin}}\n"
    );
    let manifest = format!("{}{named}", release["manifest"].as_str().unwrap());
    release["manifest"] = manifest.into();
    rewrite_record(
        &team,
        &namespace,
        encode_record([release.to_string().into_bytes()]),
    )
    .await;

    let status = team
        .hub
        .status_until("oracle", "the drift of web reported", |s| {
            message(s, "member-1", "web")
                .and_then(|m| m.drift.as_ref())
                .is_some_and(|d| d.objects.len() == 3)
        })
        .await;
    let drift = message(&status, "member-1", "web")
        .unwrap()
        .drift
        .clone()
        .unwrap();
    for object in &drift.objects {
        assert_eq!(
            (
                object.not_readable_by.as_str(),
                object.missing,
                object.paths.len()
            ),
            (team.deployer.as_str(), false, 0),
            "{object:?}"
        );
    }
    let mut names: Vec<&str> = drift.objects.iter().map(|o| o.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["admin", "nothing-here", "treasure"]);
    assert_eq!(drift.action, "Reported", "nothing to repair");
}
