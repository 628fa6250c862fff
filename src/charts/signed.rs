//! The chart catalog's sources in the operator: the chart cache resolves, the verifier checks each resolved chart against every signature rule of the policies, with the platform's trust material read at each check.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::{
    api::policy::{SourceVerify, TransparencyLog, VerifyProvider},
    charts::{
        cache::{
            ChartCache, Resolved,
            git::dependencies::{DependencyCheck, DependencyVerdict, VerdictFuture},
        },
        catalog::{Checked, RemoteKey, Resolve},
        credentials::SecretData,
        verify::{Check, DEFAULT_VERDICTS, Keyless, OciChart, Verdict, Verifier, VerifierBinary},
    },
    plan::Verified,
    policy::{
        access::{Credentials, Trust, TrustRule},
        source::SourceUrl,
    },
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
            // A Git chart's commit was checked by the fetcher, rule by rule, as it was fetched,
            // and its dependencies by their sources' rules as they were resolved.
            if let Some(git) = resolved.git.as_ref().filter(|_| key.is_git()) {
                return Ok(match (&git.refused, &resolved.archive) {
                    (Some(refused), _) => Checked::Refused(refused.clone()),
                    (None, Some(archive)) => Checked::Verified(Verified {
                        by: git.signed_by.join("; "),
                        archive: archive.clone(),
                    }),
                    (None, None) => return Err("the chart cache holds no archive of it".to_owned()),
                });
            }
            let subject = Subject {
                oci: key.oci(),
                credentials: &key.credentials,
            };
            self.check_rules(subject, &key.trust, scope, resolved).await
        })
    }

    fn forget(&self, before: Instant) {
        self.cache.forget_indexes(before);
    }

    fn make_due(&self, repositories: &[SourceUrl]) -> usize {
        Resolve::make_due(&self.cache, repositories)
    }

    fn git_files<'a>(
        &'a self,
        group: &'a crate::charts::cache::git::files::FileGroup<'a>,
    ) -> BoxFuture<'a, crate::charts::catalog::GitFiles> {
        Resolve::git_files(&self.cache, group)
    }
}

/// Why a rule cannot be checked at all, in words: a setting someone must change.
type Unusable = String;

/// What signature rules check: the chart's OCI reference (`oci://…`; None: a chart of a Helm
/// repository) and whose credentials fetch it.
#[derive(Clone, Copy)]
struct Subject<'a> {
    oci: Option<&'a str>,
    credentials: &'a Credentials,
}

impl Sources {
    /// The chart cache with a verifier running `binary` (verdicts kept as
    /// [`DEFAULT_VERDICTS`] allows), the cache told to check Git charts' dependencies through it:
    /// how the operator and `diff` both check signatures.
    pub(crate) fn with_verifier(cache: Arc<ChartCache>, binary: VerifierBinary) -> Self {
        let sources = Self {
            cache,
            verifier: Some(Arc::new(Verifier::new(binary, DEFAULT_VERDICTS))),
        };
        sources.verify_git_dependencies();
        sources
    }

    /// Makes the chart cache check the dependencies of Git charts from sources with signature
    /// rules as this checks chart entries of those sources (the cache held weakly, so the
    /// hook it keeps does not keep it); without a verifier they stay refused.
    fn verify_git_dependencies(&self) {
        let Some(verifier) = self.verifier.clone() else {
            return;
        };
        let cache = Arc::downgrade(&self.cache);
        self.cache.verify_git_dependencies(Arc::new(
            move |check: DependencyCheck| -> VerdictFuture {
                let (cache, verifier) = (cache.clone(), verifier.clone());
                Box::pin(async move {
                    let cache = cache
                        .upgrade()
                        .ok_or_else(|| "the chart cache was shut down".to_owned())?;
                    let sources = Sources {
                        cache,
                        verifier: Some(verifier),
                    };
                    let subject = Subject {
                        oci: check.oci.as_deref(),
                        credentials: &check.credentials,
                    };
                    let checked = sources
                        .check_rules(subject, &check.trust, &check.scope, &check.resolved)
                        .await?;
                    Ok(match checked {
                        Checked::Verified(verified) => DependencyVerdict::Signed(verified.by),
                        Checked::Refused(why) => DependencyVerdict::Refused(why),
                    })
                })
            },
        ));
    }

    /// Checks what `subject` resolved to against every rule of `trust`, in order: verified by
    /// all, or refused by the first that refuses; an error when a rule cannot be checked.
    async fn check_rules(
        &self,
        subject: Subject<'_>,
        trust: &Trust,
        scope: &SourceUrl,
        resolved: &Resolved,
    ) -> Result<Checked, String> {
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
        for rule in &trust.rules {
            let provider = rule.verify.provider.as_str();
            let verdict = self.check(verifier, subject, scope, resolved, rule).await;
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
    }

    /// The verdict of one rule on what `subject` resolved to.
    async fn check(
        &self,
        verifier: &Verifier,
        subject: Subject<'_>,
        scope: &SourceUrl,
        resolved: &Resolved,
        rule: &TrustRule,
    ) -> Result<Verdict, Unusable> {
        if rule.verify.provider != VerifyProvider::Cosign
            && !rule.verify.match_oidc_identity.is_empty()
        {
            return Err(format!(
                "matchOIDCIdentity is for keyless cosign signatures, not {}",
                rule.verify.provider.as_str()
            ));
        }
        let secret = self
            .cache
            .trust_secret(&rule.verify.secret_ref.name)
            .await?;
        let name = &rule.verify.secret_ref.name;
        match (rule.verify.provider, subject.oci) {
            (VerifyProvider::Cosign | VerifyProvider::Notation, Some(reference)) => {
                let reference = reference.trim_start_matches("oci://").to_owned();
                let Some(digest) = resolved.digest.clone() else {
                    return Err("helm printed no manifest digest of the chart it pulled".into());
                };
                let registry = self
                    .cache
                    .registry_access(&reference, subject.credentials)
                    .await
                    .map_err(|e| e.to_string())?;
                let chart = OciChart {
                    reference,
                    digest,
                    registry,
                };
                let check = match rule.verify.provider {
                    VerifyProvider::Cosign => cosign_check(chart, &rule.verify, &secret, name)?,
                    _ => Check::Notation {
                        chart,
                        trust_store: texts(&secret, &[".crt", ".pem"]).join("\n"),
                        trusted_identities: match rule.verify.trusted_identities.is_empty() {
                            true => vec!["*".to_owned()],
                            false => rule.verify.trusted_identities.clone(),
                        },
                    },
                };
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
                self.provenance(verifier, subject, scope, resolved, &secret, name)
                    .await
            }
            (VerifyProvider::Pgp | VerifyProvider::Ssh, _) => Err(format!(
                "{} checks signed commits of Git sources, not charts of a Helm repository or registry",
                rule.verify.provider.as_str()
            )),
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
        subject: Subject<'_>,
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
            .provenance(location, scope, subject.credentials, &prov)
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

/// The Secret key of the transparency log's public key, which is never a signing key.
const REKOR_KEY: &str = "rekor.pub";

/// The cosign check of a rule: the Secret's public keys (`.pub`) and, when the rule names
/// identities, keyless signatures by them chaining to its CA certificates (`.crt`, `.pem`), in
/// the log whose key is `rekor.pub` unless the rule skips it.
fn cosign_check(
    chart: OciChart,
    verify: &SourceVerify,
    secret: &SecretData,
    name: &str,
) -> Result<Check, Unusable> {
    let public_keys = texts(secret, &[".pub"]);
    if verify.match_oidc_identity.is_empty() {
        if public_keys.is_empty() {
            return Err(format!(
                "Secret {name} holds no public key (a key ending in .pub) for cosign"
            ));
        }
        return Ok(Check::Cosign {
            chart,
            public_keys,
            keyless: None,
        });
    }
    let certificates = texts(secret, &[".crt", ".pem"]);
    if certificates.is_empty() {
        return Err(format!(
            "Secret {name} holds no CA certificate (a key ending in .crt or .pem) for keyless cosign: add the root of the CA that issues the signing certificates"
        ));
    }
    let transparency_log = verify.transparency_log.unwrap_or_default();
    let rekor_public_key = match transparency_log {
        TransparencyLog::Skip => None,
        TransparencyLog::Require => Some(
            secret
                .data
                .get(REKOR_KEY)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .ok_or_else(|| {
                    format!(
                        "Secret {name} holds no {REKOR_KEY} (the transparency log's public key), which keyless cosign requires: add it, or set transparencyLog: Skip in the policy"
                    )
                })?,
        ),
    };
    Ok(Check::Cosign {
        chart,
        public_keys,
        keyless: Some(Keyless {
            certificates,
            rekor_public_key,
            identities: verify.match_oidc_identity.clone(),
            transparency_log,
        }),
    })
}

/// The values of `secret` under keys ending in one of `suffixes`, in key order, as text; never
/// the transparency log's key.
fn texts(secret: &SecretData, suffixes: &[&str]) -> Vec<String> {
    secret
        .data
        .iter()
        .filter(|(k, _)| *k != REKOR_KEY && suffixes.iter().any(|s| k.ends_with(s)))
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::{crd::SecretReference, policy::OidcIdentityMatch},
        charts::verify::RegistryAccess,
    };

    const ROOT: &str = "-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n";
    const REKOR: &str = "-----BEGIN PUBLIC KEY-----\nrekor\n-----END PUBLIC KEY-----\n";
    const SIGNING: &str = "-----BEGIN PUBLIC KEY-----\nsigning\n-----END PUBLIC KEY-----\n";

    fn chart() -> OciChart {
        OciChart {
            reference: "registry.example/charts/app".into(),
            digest: "sha256:00".into(),
            registry: RegistryAccess::default(),
        }
    }

    fn keyless(transparency_log: Option<TransparencyLog>) -> SourceVerify {
        SourceVerify {
            provider: VerifyProvider::Cosign,
            secret_ref: SecretReference {
                name: "trust".into(),
            },
            trusted_identities: Vec::new(),
            match_oidc_identity: vec![OidcIdentityMatch {
                issuer: r"https://issuer\.lab\.test".into(),
                subject: r"ci@lab\.test".into(),
            }],
            transparency_log,
        }
    }

    #[test]
    fn a_keyless_rule_sends_the_roots_the_log_key_and_the_identities_and_keeps_the_keys() {
        let trust = SecretData::of(&[
            ("ca.crt", ROOT),
            ("rekor.pub", REKOR),
            ("release.pub", SIGNING),
        ]);

        let check = cosign_check(chart(), &keyless(None), &trust, "trust").unwrap();

        let Check::Cosign {
            public_keys,
            keyless: Some(keyless),
            ..
        } = check
        else {
            panic!("a keyless cosign check: {check:?}")
        };
        assert_eq!(public_keys, vec![SIGNING], "rekor.pub is no signing key");
        assert_eq!(keyless.certificates, vec![ROOT]);
        assert_eq!(keyless.rekor_public_key.as_deref(), Some(REKOR));
        assert_eq!(keyless.transparency_log, TransparencyLog::Require);
        assert_eq!(keyless.identities[0].subject, r"ci@lab\.test");
    }

    #[test]
    fn the_log_is_required_unless_the_rule_skips_it() {
        let no_log_key = SecretData::of(&[("ca.crt", ROOT)]);

        let required = cosign_check(chart(), &keyless(None), &no_log_key, "trust").unwrap_err();
        let skipped = cosign_check(
            chart(),
            &keyless(Some(TransparencyLog::Skip)),
            &SecretData::of(&[("ca.crt", ROOT), ("rekor.pub", REKOR)]),
            "trust",
        )
        .unwrap();

        assert!(
            required.contains("no rekor.pub") && required.contains("transparencyLog: Skip"),
            "{required}"
        );
        let Check::Cosign {
            keyless: Some(keyless),
            ..
        } = skipped
        else {
            panic!("keyless")
        };
        assert_eq!(keyless.rekor_public_key, None, "Skip sends no log key");
        assert_eq!(keyless.transparency_log, TransparencyLog::Skip);
    }

    #[test]
    fn a_keyless_rule_without_a_ca_certificate_and_a_key_rule_without_a_key_say_what_to_add() {
        let only_log = SecretData::of(&[("rekor.pub", REKOR)]);
        let mut keys_only = keyless(None);
        keys_only.match_oidc_identity.clear();

        let keyless = cosign_check(chart(), &keyless(None), &only_log, "trust").unwrap_err();
        let keyed = cosign_check(chart(), &keys_only, &only_log, "trust").unwrap_err();

        assert!(keyless.contains("no CA certificate"), "{keyless}");
        assert!(keyed.contains("no public key"), "{keyed}");
    }
}
