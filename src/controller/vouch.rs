//! Whether a Controller delivers to a release's cluster, so that a pull member's seal there vouches for it as the owner of the member's records.

use std::collections::BTreeSet;

use crate::{
    api::{crd::TenancyController, key::ClusterName, key::ReleaseKey},
    plan::OwnerId,
    plan::claims::Basis,
};

/// What tells whether a Controller delivers to a cluster, for the records a pull member's agent
/// sealed there: that agent holds its cluster's sealing key, so it can seal a record claiming
/// any owner. Its seal is taken for an owner that delivers there: one whose spec names a release
/// in the cluster now, whose status (which only the operator writes) shows the cluster, or
/// whose governing policies let it act there (so a release it left there when its spec moved on
/// is still removed). The records of any other are foreign to it: never uninstalled, waited for
/// or reported as its own.
pub(crate) struct Delivers<'a> {
    owner: &'a OwnerId,
    clusters: BTreeSet<ClusterName>,
    basis: &'a Basis,
}

impl<'a> Delivers<'a> {
    /// What `c` (`owner`), whose spec names `named`, delivers to under `basis`.
    pub(crate) fn new(
        c: &TenancyController,
        owner: &'a OwnerId,
        named: &[ReleaseKey],
        basis: &'a Basis,
    ) -> Self {
        let shown = c.status.iter().flat_map(|s| {
            let tenancies = s.updated_tenancies.iter().map(|t| t.cluster.as_str());
            tenancies.chain(s.clusters.iter().map(|c| c.name.as_str()))
        });
        let clusters = named
            .iter()
            .map(|k| k.scope.cluster.clone())
            .chain(shown.filter_map(|c| c.parse().ok()))
            .collect();
        Self {
            owner,
            clusters,
            basis,
        }
    }

    /// Whether the owner delivers to the cluster of `key`.
    pub(crate) fn to(&self, key: &ReleaseKey) -> bool {
        let cluster = &key.scope.cluster;
        self.clusters.contains(cluster)
            || self
                .basis
                .admission
                .identity_for_removal(&self.owner.namespace, key, self.basis.labels.get(cluster))
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        controller_status::{ControllerStatus, TenancyStatus},
        crd::ControllerSpec,
        policy::{Impersonation, TenancyPolicySpec},
    };
    use crate::policy::{Admission, Mode, NamedPolicy};

    fn key(text: &str) -> ReleaseKey {
        text.parse().unwrap()
    }

    /// Hub namespace `team`'s one policy: cluster `member-1` only.
    fn enforced() -> Basis {
        let policy = NamedPolicy {
            name: "team".into(),
            spec: TenancyPolicySpec {
                hub_namespaces: vec!["team".into()],
                clusters: vec!["member-1".into()],
                namespaces: vec!["*".into()],
                chart_sources: vec!["chart-home".into()],
                impersonate: Some(Impersonation {
                    user: "team-deployer".into(),
                    groups: vec![],
                    namespace_role: None,
                }),
                ..Default::default()
            },
        };
        let labels = ["member-1", "edge-1", "edge-2"]
            .iter()
            .map(|c| (c.parse().unwrap(), Default::default()))
            .collect();
        Basis {
            labels,
            admission: Admission {
                mode: Mode::Enforce,
                policies: vec![policy],
                operator_namespace: "tenancy-hub".into(),
            },
        }
    }

    fn controller(status_on: Option<&str>) -> TenancyController {
        let mut c = TenancyController::new("web", ControllerSpec::default());
        c.metadata.namespace = Some("team".into());
        c.status = status_on.map(|cluster| ControllerStatus {
            updated_tenancies: vec![TenancyStatus {
                cluster: cluster.into(),
                namespace: "team".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        c
    }

    fn owner() -> OwnerId {
        OwnerId {
            namespace: "team".into(),
            name: "web".into(),
        }
    }

    #[test]
    fn a_controller_delivers_where_it_names_a_release_its_status_shows_or_a_policy_lets_it_act() {
        let named = [key("edge-1/team/web")];
        let (owner, basis) = (owner(), enforced());
        let delivers = Delivers::new(&controller(Some("edge-2")), &owner, &named, &basis);
        assert!(delivers.to(&key("edge-1/team/other")), "named in its spec");
        assert!(delivers.to(&key("edge-2/team/left")), "shown in its status");
        assert!(
            delivers.to(&key("member-1/team/left")),
            "its policy allows it"
        );
    }

    #[test]
    fn a_controller_that_never_went_to_a_pull_member_is_vouched_for_nowhere_else() {
        let (owner, basis) = (owner(), enforced());
        let delivers = Delivers::new(&controller(None), &owner, &[], &basis);
        assert!(!delivers.to(&key("edge-1/team/forged")));
        assert!(!delivers.to(&key("edge-2/team/forged")));
    }
}
