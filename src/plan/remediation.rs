//! How a failed install or upgrade is remediated and tried again (a chart entry's `install.remediation`, `upgrade.remediation` and `rollbackOnFailure`, in Flux's words): what one try does when it fails, and whether the queue tries again (pure).
//!
//! Tries are counted by the queue from 1 for one fingerprint of the job (a spec change starts
//! again from 1). With `retries: n`, a failure of try `k` is tried again while `k <= n`, and the
//! failed release is remediated before each new try; the last failure is remediated only with
//! `remediateLastFailure` (true by default when `n > 0`). `-1` tries again until the spec
//! changes. Without `remediation`, a failure is tried again only when it is transient (the
//! queue's own cap) and remediated only with `rollbackOnFailure`.

use serde::{Deserialize, Serialize};

use crate::{
    api::crd::{InstallRemediation, RemediationStrategy, UpgradeRemediation},
    plan::release::{HelmSettings, Job},
};

/// What the executor does when one try of an apply fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Remediate {
    /// Uninstall a failed install.
    pub(crate) install: bool,
    /// Roll back or uninstall a failed upgrade; None: leave the failed revision as it is.
    pub(crate) upgrade: Option<RemediationStrategy>,
}

/// How many tries a failing apply gets from its entry's remediation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    /// The entry sets no retries: the queue's own rules (transient failures only, up to its cap).
    Unset,
    /// At most this many tries, whatever fails.
    Tries(u32),
    /// Tries until the spec changes (`retries: -1`).
    Unlimited,
}

/// The retries written, as a budget of tries.
fn budget_of(retries: Option<i32>) -> Budget {
    match retries {
        None => Budget::Unset,
        Some(r) if r < 0 => Budget::Unlimited,
        Some(r) => Budget::Tries(u32::try_from(r).unwrap_or(0).saturating_add(1)),
    }
}

/// Whether a failure of try `attempt` is remediated, with `retries` and `last` as written.
fn remediates(retries: Option<i32>, last: Option<bool>, attempt: u32) -> bool {
    match budget_of(retries) {
        Budget::Unset => last.unwrap_or(false),
        Budget::Unlimited => true,
        Budget::Tries(tries) => attempt < tries || last.unwrap_or(tries > 1),
    }
}

/// The budget of tries of an apply with `helm`, by the action it was planned to do.
pub(crate) fn budget(helm: &HelmSettings, installing: bool) -> Budget {
    if installing {
        budget_of(helm.install.remediation.as_ref().and_then(|r| r.retries))
    } else {
        budget_of(helm.upgrade.remediation.as_ref().and_then(|r| r.retries))
    }
}

/// What try `attempt` (from 1) of an apply with `helm` does when it fails; `rollback_on_failure`
/// (the chart's older switch) always remediates, by rollback.
pub(crate) fn for_try(helm: &HelmSettings, rollback_on_failure: bool, attempt: u32) -> Remediate {
    let attempt = attempt.max(1);
    let install = helm.install.remediation.as_ref().is_some_and(
        |InstallRemediation {
             retries,
             remediate_last_failure,
         }| { remediates(*retries, *remediate_last_failure, attempt) },
    );
    let upgrade = helm.upgrade.remediation.as_ref().and_then(
        |UpgradeRemediation {
             retries,
             remediate_last_failure,
             strategy,
         }| {
            remediates(*retries, *remediate_last_failure, attempt)
                .then(|| strategy.unwrap_or(RemediationStrategy::Rollback))
        },
    );
    Remediate {
        install: install || rollback_on_failure,
        upgrade: upgrade.or(rollback_on_failure.then_some(RemediationStrategy::Rollback)),
    }
}

impl Job {
    /// What this try of an apply does when it fails (nothing for other jobs); a job not started
    /// by the queue counts as a first try.
    pub(crate) fn remediate(&self) -> Remediate {
        match self {
            Job::Apply {
                release, attempt, ..
            } => for_try(&release.helm, release.rollback_on_failure, *attempt),
            _ => Default::default(),
        }
    }

    /// How many tries a failing apply gets from its chart entry's remediation.
    pub(crate) fn budget(&self) -> Budget {
        match self {
            Job::Apply {
                release,
                installing,
                ..
            } => budget(&release.helm, *installing),
            _ => Budget::Unset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::crd::{Install, Upgrade};

    fn helm(
        install: Option<(i32, Option<bool>)>,
        upgrade: Option<(i32, Option<bool>)>,
    ) -> HelmSettings {
        HelmSettings {
            install: Install {
                remediation: install.map(|(r, l)| InstallRemediation {
                    retries: Some(r),
                    remediate_last_failure: l,
                }),
                ..Install::default()
            },
            upgrade: Upgrade {
                remediation: upgrade.map(|(r, l)| UpgradeRemediation {
                    retries: Some(r),
                    remediate_last_failure: l,
                    strategy: None,
                }),
                ..Upgrade::default()
            },
            ..HelmSettings::default()
        }
    }

    #[test]
    fn without_remediation_nothing_is_remediated_and_the_queue_keeps_its_rules() {
        let h = HelmSettings::default();
        assert_eq!(for_try(&h, false, 1), Remediate::default());
        assert_eq!(budget(&h, true), Budget::Unset);
        assert_eq!(budget(&h, false), Budget::Unset);
    }

    #[test]
    fn rollback_on_failure_remediates_every_try_by_rollback_and_install_by_uninstall() {
        let r = for_try(&HelmSettings::default(), true, 7);
        assert!(r.install);
        assert_eq!(r.upgrade, Some(RemediationStrategy::Rollback));
    }

    #[test]
    fn retries_remediate_between_tries_and_the_last_failure_by_default() {
        let h = helm(Some((2, None)), Some((2, None)));
        assert_eq!(budget(&h, true), Budget::Tries(3));
        for attempt in 1..=3 {
            let r = for_try(&h, false, attempt);
            assert!(r.install, "try {attempt}");
            assert_eq!(
                r.upgrade,
                Some(RemediationStrategy::Rollback),
                "try {attempt}"
            );
        }
    }

    #[test]
    fn remediate_last_failure_false_leaves_the_last_failed_try_for_a_person() {
        let h = helm(None, Some((2, Some(false))));
        assert_eq!(
            for_try(&h, false, 1).upgrade,
            Some(RemediationStrategy::Rollback)
        );
        assert_eq!(
            for_try(&h, false, 2).upgrade,
            Some(RemediationStrategy::Rollback)
        );
        assert_eq!(for_try(&h, false, 3).upgrade, None, "the last try");
        assert!(!for_try(&h, false, 1).install, "install has no remediation");
    }

    #[test]
    fn zero_retries_remediate_only_when_asked() {
        assert_eq!(
            for_try(&helm(None, Some((0, None))), false, 1).upgrade,
            None
        );
        let asked = helm(Some((0, Some(true))), Some((0, Some(true))));
        assert_eq!(budget(&asked, false), Budget::Tries(1));
        assert_eq!(
            for_try(&asked, false, 1).upgrade,
            Some(RemediationStrategy::Rollback)
        );
        assert!(for_try(&asked, false, 1).install);
    }

    #[test]
    fn minus_one_tries_until_the_spec_changes_and_always_remediates() {
        let h = helm(Some((-1, Some(false))), None);
        assert_eq!(budget(&h, true), Budget::Unlimited);
        assert!(for_try(&h, false, 1_000).install);
    }

    #[test]
    fn the_uninstall_strategy_is_what_a_failed_upgrade_does() {
        let mut h = helm(None, Some((1, None)));
        h.upgrade.remediation.as_mut().unwrap().strategy = Some(RemediationStrategy::Uninstall);
        assert_eq!(
            for_try(&h, false, 1).upgrade,
            Some(RemediationStrategy::Uninstall)
        );
        // rollbackOnFailure does not override a strategy written out.
        assert_eq!(
            for_try(&h, true, 1).upgrade,
            Some(RemediationStrategy::Uninstall)
        );
    }

    #[test]
    fn the_budget_follows_the_action_planned() {
        let h = helm(Some((4, None)), Some((1, None)));
        assert_eq!(budget(&h, true), Budget::Tries(5));
        assert_eq!(budget(&h, false), Budget::Tries(2));
    }
}
