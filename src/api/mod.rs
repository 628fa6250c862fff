//! The `Controller`, `TenancyPolicy`, `MemberCluster` and `Alert` resources, the typed keys every other module speaks in, and the shard each `Controller` falls in.

pub mod alert;
pub(crate) mod controller_status;
pub mod crd;
pub mod key;
pub mod member_cluster;
pub mod policy;
pub mod shard;

/// How long any one write to the hub (a status patch, an Event, the Lease) may take before it is
/// given up and tried again later, so a hub that stops answering holds up no loop.
pub const HUB_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Every CustomResourceDefinition of the project as one YAML stream, as `tenancy-hub crd` prints
/// it and `deploy/crd.yaml` holds it: in the order of their names, as `cat crds/*.yaml` gives them.
pub fn crds_yaml() -> String {
    format!(
        "{}---\n{}---\n{}---\n{}",
        alert::alert_crd_yaml(),
        crd::crd_yaml(),
        member_cluster::member_cluster_crd_yaml(),
        policy_crd_yaml()
    )
}

/// The `TenancyPolicy` CustomResourceDefinition as YAML, exactly as `crds/` holds it.
pub fn policy_crd_yaml() -> String {
    use kube::CustomResourceExt;
    serde_yaml::to_string(&policy::TenancyPolicy::crd())
        .expect("a CustomResourceDefinition always serializes")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_deployed_crds_match_the_code() {
        let deployed = include_str!("../../deploy/crd.yaml");
        assert!(
            deployed == super::crds_yaml(),
            "deploy/crd.yaml is stale: run kind/crds.sh"
        );
    }

    /// Every `format` of the generated schemas is one the API server knows, so applying
    /// `crds/` warns of nothing (`uint64`, schemars' word for a `u64`, is not among them).
    #[test]
    fn every_schema_format_is_one_the_api_server_knows() {
        const KNOWN: [&str; 9] = [
            "int32",
            "int64",
            "float",
            "double",
            "byte",
            "date",
            "date-time",
            "duration",
            "int-or-string",
        ];
        let yaml = super::crds_yaml();
        let formats: std::collections::BTreeSet<&str> = yaml
            .lines()
            .filter_map(|l| l.trim().strip_prefix("format: "))
            .collect();
        assert!(formats.contains("int64"), "{formats:?}");
        for format in formats {
            assert!(
                KNOWN.contains(&format),
                "format {format:?} is not one the API server knows: give the field a schema_with"
            );
        }
    }
}
