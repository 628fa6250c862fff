//! What a signature check needs of the chart cache: the platform's trust material, how to reach an OCI chart's registry, and a repository chart's provenance file, each read with the source's own credentials and bounds.

use std::{io::Write as _, path::Path};

use reqwest::Url;

use crate::{
    charts::{
        cache::{ChartCache, Error, registry_host},
        credentials::{Material, SecretData},
        fetch,
        verify::RegistryAccess,
    },
    policy::{access::Credentials, source::SourceUrl},
};

/// Largest provenance file fetched: a signed copy of Chart.yaml and a digest, a few KiB.
const PROVENANCE_LIMIT: u64 = 1 << 20;

impl ChartCache {
    /// The Secret `name` of the operator's namespace holding a source's trust material, read
    /// now (so a changed key takes effect at the next check); an error says which and what to do.
    pub(crate) async fn trust_secret(&self, name: &str) -> Result<SecretData, String> {
        let Some(secrets) = &self.secrets else {
            return Err(format!(
                "the trust material of Secret {name} is not read by this process"
            ));
        };
        let namespace = &secrets.operator_namespace;
        match secrets.reader.read(namespace, name).await {
            Ok(Some(secret)) => Ok(secret),
            Ok(None) => Err(format!(
                "Secret {namespace}/{name} (its trust material) does not exist; a platform admin creates it"
            )),
            Err(e) => Err(format!(
                "reading Secret {namespace}/{name} (its trust material): {e}"
            )),
        }
    }

    /// How the verifier reaches the registry of OCI chart `reference` fetched with
    /// `credentials`: the same login and CA `helm pull` was given.
    pub(crate) async fn registry_access(
        &self,
        reference: &str,
        credentials: &Credentials,
    ) -> Result<RegistryAccess, Error> {
        let material = self.material(credentials, true).await?;
        let Some(material) = material else {
            return Ok(RegistryAccess::default());
        };
        let config = material.registry_config(registry_host(reference));
        Ok(RegistryAccess {
            docker_config: Some(String::from_utf8_lossy(&config).into_owned()),
            ca_bundle: material
                .ca
                .as_deref()
                .map(|ca| String::from_utf8_lossy(ca).into_owned()),
        })
    }

    /// Fetches a repository chart's provenance file from `location` into `into`, under `scope`
    /// with `credentials` as its archive was; false when the repository serves none (404).
    pub(crate) async fn provenance(
        &self,
        location: &str,
        scope: &SourceUrl,
        credentials: &Credentials,
        into: &Path,
    ) -> Result<bool, Error> {
        let url = Url::parse(location).map_err(|e| Error::Url {
            url: crate::policy::source::redact(location),
            reason: e.to_string(),
        })?;
        let material: Option<Material> = self.material(credentials, false).await?;
        let access = self.access(credentials, material.as_ref(), scope);
        let mut file = std::fs::File::create(into).map_err(|e| self.store.io(e))?;
        let fetched = self
            .get(
                &url,
                scope,
                access.as_ref(),
                PROVENANCE_LIMIT,
                "provenance",
                |chunk| file.write_all(chunk),
            )
            .await;
        match fetched {
            Ok(_) => Ok(true),
            Err(Error::Fetch(fetch::Error::Status { status, .. }))
                if status == reqwest::StatusCode::NOT_FOUND =>
            {
                Ok(false)
            }
            Err(e) => Err(self.hinted(e, credentials)),
        }
    }
}
