//! The cost of chart signatures per release: one cosign-signed OCI chart delivered to N releases on every cluster, under a policy that asks the signature and under one that does not, and the checks the operator ran.

use std::time::Instant;

use serde_json::{Value, json};
use tenancy_hub::api::{
    crd::{ControllerSpec, SecretReference},
    policy::{SourceAccess, SourceVerify, VerifyProvider},
};

use super::{Args, CLUSTERS, LONG, progress};
use crate::common::{
    fixtures::{chart, put_secret, tenancy, unique, wait_until},
    hub::{Hub, allow_all},
    lab::Lab,
    repo::{OciRegistry, example_chart},
    signing::{cosign, key_pairs, oci_digest, run},
};

/// Where the operator keeps the platform's Secrets.
const OPERATOR_NAMESPACE: &str = "tenancy-hub";

/// One delivery of the chart to `namespaces` namespaces of every cluster by a fresh operator,
/// its source under `verify` or none: seconds to every release deployed, and the signature
/// checks it ran.
async fn deliver(
    registry: &OciRegistry,
    ca: &str,
    verify: Option<SourceVerify>,
    namespaces: usize,
) -> (f64, f64) {
    let hub = Hub::with_args("bench-signed", &["--tenancy-policy", "enforce"]).await;
    let mut policy = allow_all(&hub.namespace, &[]);
    policy.sources = vec![SourceAccess {
        url: registry.prefix(),
        secret_ref: Some(SecretReference { name: ca.into() }),
        tenant_secrets: Vec::new(),
        verify,
        git: None,
    }];
    hub.policy(&hub.namespace, policy).await;
    let run = unique("sg");
    let mut app = chart(&registry.reference("deployment-example"), "app", &[]);
    app.version = Some("1.0.0".into());
    let spec = ControllerSpec {
        tenancies: (0..namespaces)
            .map(|i| tenancy(&format!("{run}-{i}"), &CLUSTERS, vec![app.clone()]))
            .collect(),
        ..Default::default()
    };
    let total = namespaces * CLUSTERS.len();
    let started = Instant::now();
    hub.apply("signed", spec).await;
    let want = format!("{total}/{total}");
    wait_until("every release deployed", LONG, || async {
        let c = hub.api().get("signed").await.ok()?;
        (c.status?.summary?.releases == want).then_some(())
    })
    .await;
    let took = started.elapsed().as_secs_f64();
    let operator = hub.operator.as_ref().expect("an operator");
    let checks = operator.metric_or_zero("tenancy_hub_chart_verifications_total");
    hub.delete_and_wait_gone("signed").await;
    (took, checks)
}

/// For each count of `--signed` namespaces, `--runs` deliveries with the signature asked and
/// as many without, alternating.
pub(crate) async fn signed(a: &Args) -> Value {
    let lab = Lab::get();
    let registry = OciRegistry::serve(&lab);
    registry.push(&lab, &example_chart(), "1.0.0").await;
    let keys = key_pairs(&lab, &registry);
    let digest = oci_digest(&lab, &registry, "1.0.0");
    run(cosign(&lab, &registry, keys.path())
        .args(["sign", "--key", "good.key", "--tlog-upload=false", "--yes"])
        .arg(format!(
            "{}/charts/deployment-example@{digest}",
            registry.host
        )));
    let (ca, trust) = (unique("bench-registry-ca"), unique("bench-cosign-keys"));
    let pem = std::fs::read_to_string(&registry.ca).unwrap();
    put_secret(&lab, OPERATOR_NAMESPACE, &ca, &[("ca.crt", &pem)]).await;
    let key = std::fs::read_to_string(keys.path().join("good.pub")).unwrap();
    put_secret(&lab, OPERATOR_NAMESPACE, &trust, &[("charts.pub", &key)]).await;
    let rule = SourceVerify {
        provider: VerifyProvider::Cosign,
        secret_ref: SecretReference { name: trust },
        trusted_identities: Vec::new(),
        match_oidc_identity: Vec::new(),
        transparency_log: None,
    };
    let mut points = Vec::new();
    for &namespaces in &a.signed {
        let releases = namespaces * CLUSTERS.len();
        let (mut plain, mut checked) = (Vec::new(), Vec::new());
        let mut checks = Vec::new();
        for r in 0..a.runs {
            progress(&format!(
                "signed: {releases} releases, run {} of {}, without a signature rule",
                r + 1,
                a.runs
            ));
            plain.push(deliver(&registry, &ca, None, namespaces).await.0);
            progress(&format!(
                "signed: {releases} releases, run {} of {}, under a cosign rule",
                r + 1,
                a.runs
            ));
            let (took, ran) = deliver(&registry, &ca, Some(rule.clone()), namespaces).await;
            checked.push(took);
            checks.push(ran);
        }
        let (plain_median, checked_median) = (super::median(&plain), super::median(&checked));
        points.push(json!({
            "releases": releases,
            "unsigned_seconds": plain,
            "signed_seconds": checked,
            "unsigned_median_seconds": plain_median,
            "signed_median_seconds": checked_median,
            "signature_checks_per_run": checks,
            "added_ms_per_release": (checked_median - plain_median) * 1000.0 / releases as f64,
        }));
    }
    json!({ "clusters": CLUSTERS.len(), "runs": a.runs, "points": points })
}
