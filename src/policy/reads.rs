//! What the policies let a hub namespace read of its own hub objects (pure): Secrets and ConfigMaps for `valuesFrom`, Secrets for its Alerts' webhooks.

use std::collections::BTreeMap;

use crate::policy::{Admission, AlertSecret, NamedPolicy, ValuesAccess};

impl Admission {
    /// Whether a Controller of `hub_namespace` may read values from the hub object of `kind`,
    /// `name` and `labels` in its own namespace: some policy governing the namespace has a
    /// `valuesFrom` rule allowing it. In every mode; the refusal names the object and what to do.
    pub(crate) fn may_read_values(
        &self,
        hub_namespace: &str,
        kind: crate::api::crd::ValuesKind,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let governing = self.governing(hub_namespace);
        if governing.iter().any(|p| {
            p.spec
                .values_from
                .iter()
                .any(|r| r.allows(kind, name, labels))
        }) {
            return Ok(());
        }
        Err(Self::values_refusal(&governing, hub_namespace, kind, name))
    }

    /// What may be read of the hub object of `kind` and `name` before anything of it is known,
    /// so that nothing is read of an object no rule could allow: [`ValuesAccess::Content`] when
    /// a rule allows it whatever its labels, [`ValuesAccess::LabelsFirst`] when only a rule on
    /// labels could. The refusal is [`Self::may_read_values`]'s, word for word, so it never
    /// tells whether the object exists or how large it is.
    pub(crate) fn values_access(
        &self,
        hub_namespace: &str,
        kind: crate::api::crd::ValuesKind,
        name: &str,
    ) -> Result<ValuesAccess, String> {
        let governing = self.governing(hub_namespace);
        let rules = || governing.iter().flat_map(|p| &p.spec.values_from);
        if rules().any(|r| r.allows(kind, name, &BTreeMap::new())) {
            Ok(ValuesAccess::Content)
        } else if rules().any(|r| r.kind.is_none_or(|k| k == kind) && !r.match_labels.is_empty()) {
            Ok(ValuesAccess::LabelsFirst)
        } else {
            Err(Self::values_refusal(&governing, hub_namespace, kind, name))
        }
    }

    fn values_refusal(
        governing: &[&NamedPolicy],
        hub_namespace: &str,
        kind: crate::api::crd::ValuesKind,
        name: &str,
    ) -> String {
        let policies: Vec<&str> = governing.iter().map(|p| p.name.as_str()).collect();
        if policies.is_empty() {
            format!(
                "{kind} {hub_namespace}/{name} may not be read: no TenancyPolicy governs hub namespace {hub_namespace}"
            )
        } else {
            format!(
                "{kind} {hub_namespace}/{name} may not be read: no valuesFrom rule of the policies governing {hub_namespace} ({}) allows it; a platform admin adds one",
                policies.join(", ")
            )
        }
    }

    /// Whether an Alert of `hub_namespace` may send to the webhook of its Secret `name`, judged
    /// before anything of the Secret is read: by name ([`AlertSecret::Allowed`] or
    /// [`AlertSecret::Refused`]), or only once its labels are known ([`AlertSecret::ByLabels`],
    /// then [`Admission::may_send_alert`]). Only `alertSecrets` rules count, in every mode.
    pub(crate) fn alert_secret(&self, hub_namespace: &str, name: &str) -> AlertSecret {
        let governing = self.governing(hub_namespace);
        let rules = || governing.iter().flat_map(|p| &p.spec.alert_secrets);
        if rules().any(|r| r.allows(name, &BTreeMap::new())) {
            AlertSecret::Allowed
        } else if rules().any(|r| r.needs_labels(name)) {
            AlertSecret::ByLabels
        } else {
            AlertSecret::Refused(self.alert_refusal(hub_namespace, name))
        }
    }

    /// Whether an Alert of `hub_namespace` may send to the webhook of Secret `name` carrying
    /// `labels` (an absent Secret is judged as one without labels, so a refusal says the same
    /// whether it exists).
    pub(crate) fn may_send_alert(
        &self,
        hub_namespace: &str,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        match self
            .governing(hub_namespace)
            .iter()
            .flat_map(|p| &p.spec.alert_secrets)
            .any(|r| r.allows(name, labels))
        {
            true => Ok(()),
            false => Err(self.alert_refusal(hub_namespace, name)),
        }
    }

    fn alert_refusal(&self, hub_namespace: &str, name: &str) -> String {
        let governing = self.governing(hub_namespace);
        let policies: Vec<&str> = governing.iter().map(|p| p.name.as_str()).collect();
        if policies.is_empty() {
            format!(
                "Secret {hub_namespace}/{name} may not be read: no TenancyPolicy governs hub namespace {hub_namespace}"
            )
        } else {
            format!(
                "Secret {hub_namespace}/{name} may not be read: no alertSecrets rule of the policies governing {hub_namespace} ({}) allows it; a platform admin adds one",
                policies.join(", ")
            )
        }
    }

    /// The internal addresses (CIDRs and host names) the policies governing `hub_namespace`
    /// let its Alerts send to.
    pub(crate) fn alert_internal_addresses(&self, hub_namespace: &str) -> Vec<String> {
        let mut all: Vec<String> = self
            .governing(hub_namespace)
            .iter()
            .flat_map(|p| p.spec.alert_internal_addresses.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }
}
