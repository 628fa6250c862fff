//! The chart catalog's sources in the operator: the chart cache resolves, the verifier checks each resolved chart against every signature rule of the policies, with the platform's trust material read at each check.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::{
    api::policy::VerifyProvider,
    charts::{
        cache::{ChartCache, Resolved},
        catalog::{Checked, RemoteKey, Resolve},
        credentials::SecretData,
        verify::{Check, OciChart, Verdict, Verifier},
    },
    plan::Verified,
    policy::{access::TrustRule, source::SourceUrl},
};

/// The chart cache, and the verifier when the operator runs one.
pub(crate) struct Sources {
    /// Fetches and keeps charts.
    pub(crate) cache: Arc<ChartCache>,
    /// Checks signatures; None: a chart a rule asks signatures of is not planned.
    pub(crate) verifier: Option<Arc<Verifier>>,
}

impl Resolve for Sources {
    fn resolve<'a>(
        &'a self,
        key: &'a RemoteKey,
        scope: &'a SourceUrl,
        since: Option<Instant>,
    ) -> BoxFuture<'a, Result<Resolved, String>> {
        Box::pin(async move {
            let resolved = Resolve::resolve(&self.cache, key, scope, since).await;
            self.cache
                .metrics()
                .chart_resolved(scope.as_str(), resolved.is_ok());
            resolved
        })
    }

    fn verify<'a>(
        &'a self,
        key: &'a RemoteKey,
        scope: &'a SourceUrl,
        resolved: &'a Resolved,
    ) -> BoxFuture<'a, Result<Checked, String>> {
        Box::pin(async move {
            let Some(verifier) = &self.verifier else {
                return Err(
                    "this operator runs without the signature verifier: install tenancy-hub-verify beside it or pass --verifier"
                        .to_owned(),
                );
            };
            let Some(archive) = resolved.archive.clone() else {
                return Err("the chart cache holds no archive of it".to_owned());
            };
            let mut by = Vec::new();
            for rule in &key.trust.0 {
                let provider = rule.verify.provider.as_str();
                let verdict = self.check(verifier, key, scope, resolved, rule).await;
                let outcome = match &verdict {
                    Ok(Verdict::Verified { .. }) => "verified",
                    Ok(Verdict::Refused { refusal, .. }) => refusal.metric_label(),
                    Err(_) => "error",
                };
                self.cache
                    .metrics()
                    .chart_verified(&rule.prefix, provider, outcome);
                match verdict {
                    Ok(Verdict::Verified { by: who, .. }) => by.push(format!("{provider}: {who}")),
                    Ok(Verdict::Refused { reason, .. }) => {
                        return Ok(Checked::Refused(format!(
                            "refused by {}: {reason}",
                            rule.describe()
                        )));
                    }
                    Err(error) => return Err(format!("{}: {error}", rule.describe())),
                }
            }
            Ok(Checked::Verified(Verified {
                by: by.join("; "),
                archive,
            }))
        })
    }

    fn forget(&self, before: Instant) {
        self.cache.forget_indexes(before);
    }
}

/// Why a rule cannot be checked at all, in words: a setting someone must change.
type Unusable = String;

impl Sources {
    /// The verdict of one rule on what `key` resolved to.
    async fn check(
        &self,
        verifier: &Verifier,
        key: &RemoteKey,
        scope: &SourceUrl,
        resolved: &Resolved,
        rule: &TrustRule,
    ) -> Result<Verdict, Unusable> {
        let secret = self
            .cache
            .trust_secret(&rule.verify.secret_ref.name)
            .await?;
        let name = &rule.verify.secret_ref.name;
        match (rule.verify.provider, key.oci()) {
            (VerifyProvider::Cosign | VerifyProvider::Notation, Some(reference)) => {
                let reference = reference.trim_start_matches("oci://").to_owned();
                let Some(digest) = resolved.digest.clone() else {
                    return Err("helm printed no manifest digest of the chart it pulled".into());
                };
                let registry = self
                    .cache
                    .registry_access(&reference, &key.credentials)
                    .await
                    .map_err(|e| e.to_string())?;
                let chart = OciChart {
                    reference,
                    digest,
                    registry,
                };
                let check = match rule.verify.provider {
                    VerifyProvider::Cosign => Check::Cosign {
                        chart,
                        public_keys: texts(&secret, &[".pub"]),
                    },
                    _ => Check::Notation {
                        chart,
                        trust_store: texts(&secret, &[".crt", ".pem"]).join("\n"),
                        trusted_identities: match rule.verify.trusted_identities.is_empty() {
                            true => vec!["*".to_owned()],
                            false => rule.verify.trusted_identities.clone(),
                        },
                    },
                };
                if let Check::Cosign { public_keys, .. } = &check
                    && public_keys.is_empty()
                {
                    return Err(format!(
                        "Secret {name} holds no public key (a key ending in .pub) for cosign"
                    ));
                }
                if let Check::Notation { trust_store, .. } = &check
                    && trust_store.is_empty()
                {
                    return Err(format!(
                        "Secret {name} holds no CA certificate (a key ending in .crt or .pem) for notation"
                    ));
                }
                verifier.verify(&check).await.map_err(|e| e.to_string())
            }
            (VerifyProvider::Provenance, None) => {
                self.provenance(verifier, key, scope, resolved, &secret, name)
                    .await
            }
            (VerifyProvider::Provenance, Some(_)) => Err(
                "provenance (.prov) is checked for charts of Helm repositories; an OCI source takes cosign or notation"
                    .into(),
            ),
            (_, None) => Err(format!(
                "{} checks OCI charts; a chart of a Helm repository takes provenance",
                rule.verify.provider.as_str()
            )),
        }
    }

    /// The verdict of a provenance rule: the `.prov` beside the archive, fetched as the
    /// archive was, checked against the archive the cache holds and the keyring.
    async fn provenance(
        &self,
        verifier: &Verifier,
        key: &RemoteKey,
        scope: &SourceUrl,
        resolved: &Resolved,
        secret: &SecretData,
        name: &str,
    ) -> Result<Verdict, Unusable> {
        let Some(keyring) = secret.data.get("keyring").cloned() else {
            return Err(format!(
                "Secret {name} holds no PGP keyring (key keyring) for provenance"
            ));
        };
        let (Some(location), Some(archive)) = (&resolved.provenance, &resolved.archive) else {
            return Err("the chart cache holds no archive of it".into());
        };
        // Held while it is checked, so the cache does not let it go meanwhile.
        let held = self
            .cache
            .hold(archive)
            .ok_or_else(|| "its archive left the chart cache; it is fetched again".to_owned())?;
        let scratch = tempfile::tempdir().map_err(|e| format!("a scratch directory: {e}"))?;
        let prov = scratch.path().join("chart.prov");
        let served = self
            .cache
            .provenance(location, scope, &key.credentials, &prov)
            .await
            .map_err(|e| e.to_string())?;
        let file_name = location
            .trim_end_matches(".prov")
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let check = Check::Provenance {
            digest: format!("sha256:{archive}"),
            archive: held.path().to_owned(),
            provenance: served.then_some(prov),
            file_name,
            keyring,
        };
        verifier.verify(&check).await.map_err(|e| e.to_string())
    }
}

/// The values of `secret` under keys ending in one of `suffixes`, in key order, as text.
fn texts(secret: &SecretData, suffixes: &[&str]) -> Vec<String> {
    secret
        .data
        .iter()
        .filter(|(k, _)| suffixes.iter().any(|s| k.ends_with(s)))
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect()
}
