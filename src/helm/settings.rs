//! How Helm is called: the executor's defaults (the operator's flags), and what one Helm action of a release is asked, the chart entry's `install`, `upgrade`, `uninstall` and `maxHistory` over them (pure).

use std::{path::PathBuf, time::Duration};

use crate::{
    api::crd::{CrdPolicy, Uninstall},
    plan::{HelmSettings, Job, rollout::parse_duration_ms},
};

/// How Helm is called.
#[derive(Clone, Debug)]
pub(crate) struct HelmOptions {
    /// The `helm` binary.
    pub(crate) binary: PathBuf,
    /// `--timeout` of each call; the process is killed 30 s after it.
    pub(crate) timeout: Duration,
    /// `--history-max`: revisions kept per release.
    pub(crate) history_max: u32,
    /// Where helm keeps its discovery and HTTP caches (`KUBECACHEDIR`, `HELM_CACHE_HOME`) across
    /// calls; helm's own default (under `$HOME`) when None.
    pub(crate) cache_dir: Option<PathBuf>,
    /// The long-lived executor on Helm's Go SDK (`tenancy-hub-helm`, see `helm::sdk`) that
    /// runs the jobs; None: one `helm` process per job.
    pub(crate) sdk: Option<PathBuf>,
    /// How long the long-lived executor may sit without work before it exits (zero: never).
    pub(crate) executor_idle: Duration,
    /// The operator's sealing key: release records are sealed with it and acted on only when
    /// they verify (see `helm::seal`). None only where nothing is written (previews, tests).
    pub(crate) seal: Option<crate::helm::seal::SealKey>,
}

impl Default for HelmOptions {
    fn default() -> Self {
        Self {
            binary: "helm".into(),
            timeout: Duration::from_secs(300),
            history_max: 5,
            cache_dir: None,
            sdk: None,
            executor_idle: Duration::from_secs(30),
            seal: None,
        }
    }
}

/// An install or an upgrade, as Helm is asked to do it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Applying {
    /// Helm's `--timeout`.
    pub(crate) timeout: Duration,
    /// Wait for the release's workloads (`--wait`, the watcher strategy).
    pub(crate) wait: bool,
    /// Wait for its Jobs too (`--wait-for-jobs`).
    pub(crate) wait_for_jobs: bool,
    /// Skip its hooks (`--no-hooks`).
    pub(crate) disable_hooks: bool,
    /// Create the chart's missing CRDs (an install's default; an upgrade only when asked).
    pub(crate) create_crds: bool,
    /// Also replace the chart's CRDs the cluster has (`CreateReplace`; the Helm executor only).
    pub(crate) replace_crds: bool,
    /// Replace what cannot be patched (`--force-replace`, client-side): upgrades only.
    pub(crate) force: bool,
    /// Delete what a failed upgrade created (`--cleanup-on-fail`): upgrades only.
    pub(crate) cleanup_on_fail: bool,
}

/// An uninstall, as Helm is asked to do it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Removing {
    /// Helm's `--timeout`.
    pub(crate) timeout: Duration,
    /// Skip the delete hooks (`--no-hooks`): true unless the chart entry asks for them.
    pub(crate) disable_hooks: bool,
    /// Keep the release's records, marked uninstalled (`--keep-history`).
    pub(crate) keep_history: bool,
    /// Wait until its objects are gone (`--wait`).
    pub(crate) wait: bool,
}

/// The tests run after an install or upgrade, as Helm is asked to run them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Testing {
    /// `helm test --timeout`, for all of them.
    pub(crate) timeout: Duration,
    /// Report the results, never fail the release on them.
    pub(crate) ignore_failures: bool,
    /// Only these tests run (none: every test not excluded).
    pub(crate) include: Vec<String>,
    /// These never run.
    pub(crate) exclude: Vec<String>,
}

/// A duration as the schema admits it, or `default` (the schema keeps it readable and bounded;
/// anything else is the default, never zero).
fn timeout(written: Option<&str>, default: Duration) -> Duration {
    written
        .and_then(parse_duration_ms)
        .and_then(|ms| u64::try_from(ms).ok())
        .filter(|ms| *ms >= 1_000)
        .map_or(default, Duration::from_millis)
}

/// The install of a release with `settings`, with `options` as defaults.
pub(crate) fn install(settings: &HelmSettings, options: &HelmOptions) -> Applying {
    let i = &settings.install;
    Applying {
        timeout: timeout(i.timeout.as_deref(), options.timeout),
        wait: i.wait || i.wait_for_jobs,
        wait_for_jobs: i.wait_for_jobs,
        disable_hooks: i.disable_hooks,
        create_crds: i.crds != Some(CrdPolicy::Skip),
        replace_crds: i.crds == Some(CrdPolicy::CreateReplace),
        force: false,
        cleanup_on_fail: false,
    }
}

/// The upgrade of a release with `settings`, with `options` as defaults.
pub(crate) fn upgrade(settings: &HelmSettings, options: &HelmOptions) -> Applying {
    let u = &settings.upgrade;
    Applying {
        timeout: timeout(u.timeout.as_deref(), options.timeout),
        wait: u.wait || u.wait_for_jobs,
        wait_for_jobs: u.wait_for_jobs,
        disable_hooks: u.disable_hooks,
        create_crds: matches!(u.crds, Some(CrdPolicy::Create | CrdPolicy::CreateReplace)),
        replace_crds: u.crds == Some(CrdPolicy::CreateReplace),
        force: u.force,
        cleanup_on_fail: u.cleanup_on_fail,
    }
}

/// The tests after an install or upgrade of a release with `settings`, with `options` as
/// defaults: None unless its entry enables them.
pub(crate) fn test(settings: &HelmSettings, options: &HelmOptions) -> Option<Testing> {
    let t = settings.test.as_ref().filter(|t| t.enable)?;
    let (exclude, include) = t.filters.iter().partition::<Vec<_>, _>(|f| f.exclude);
    let names = |filters: Vec<&crate::api::crd::TestFilter>| {
        filters.into_iter().map(|f| f.name.clone()).collect()
    };
    Some(Testing {
        timeout: timeout(t.timeout.as_deref(), options.timeout),
        ignore_failures: t.ignore_failures,
        include: names(include),
        exclude: names(exclude),
    })
}

/// The uninstall of a release with `settings`, with `options` as defaults.
pub(crate) fn uninstall(settings: &Uninstall, options: &HelmOptions) -> Removing {
    Removing {
        timeout: timeout(settings.timeout.as_deref(), options.timeout),
        disable_hooks: settings.disable_hooks.unwrap_or(true),
        keep_history: settings.keep_history,
        wait: settings.wait,
    }
}

/// Revisions Helm keeps for a release with `settings`.
pub(crate) fn history_max(settings: &HelmSettings, options: &HelmOptions) -> u32 {
    settings.max_history.unwrap_or(options.history_max)
}

/// The longest an apply of a release with `settings` may take in Helm, install or upgrade,
/// and its tests after: what the executor and the hub wait for before they give up on it.
pub(crate) fn apply_timeout(settings: &HelmSettings, options: &HelmOptions) -> Duration {
    let tests = test(settings, options).map_or(Duration::ZERO, |t| t.timeout);
    install(settings, options)
        .timeout
        .max(upgrade(settings, options).timeout)
        + tests
}

/// The longest timeout a job's settings name themselves (not the executor's default, which a
/// pull member's agent sets): what a hub waiting for the job's answer gives it at least.
pub(crate) fn asked_timeout(job: &Job) -> Option<Duration> {
    let (written, tests): (Vec<Option<&str>>, _) = match job {
        Job::Apply { release, .. } => (
            vec![
                release.helm.install.timeout.as_deref(),
                release.helm.upgrade.timeout.as_deref(),
            ],
            release.helm.test.as_ref().filter(|t| t.enable),
        ),
        Job::Uninstall { settings, .. } => (vec![settings.timeout.as_deref()], None),
        Job::Rollback { helm, .. } => (vec![helm.upgrade.timeout.as_deref()], None),
    };
    let apply = written
        .into_iter()
        .map(|t| timeout(t, Duration::ZERO))
        .max()
        .unwrap_or_default();
    // Tests that name no timeout of their own take the executor's default, which is not known
    // here: the hub then waits at least the apply's own timeout twice.
    let tests = tests.map_or(Duration::ZERO, |t| timeout(t.timeout.as_deref(), apply));
    Some(apply + tests).filter(|t| !t.is_zero())
}

/// A chart entry's settings for every action, unlike the defaults in each: the tests' example,
/// also the protocol's fixture `request-upgrade-settings`.
#[cfg(test)]
pub(crate) fn example() -> HelmSettings {
    use crate::api::crd::{Install, Upgrade};
    HelmSettings {
        install: Install {
            timeout: Some("20s".into()),
            wait_for_jobs: true,
            crds: Some(CrdPolicy::Skip),
            ..Install::default()
        },
        upgrade: Upgrade {
            timeout: Some("1h".into()),
            disable_hooks: true,
            force: true,
            cleanup_on_fail: true,
            crds: Some(CrdPolicy::Create),
            ..Upgrade::default()
        },
        uninstall: Uninstall {
            timeout: Some("90s".into()),
            disable_hooks: Some(false),
            keep_history: true,
            wait: true,
        },
        test: Some(crate::api::crd::Test {
            enable: true,
            timeout: Some("2m".into()),
            ignore_failures: false,
            filters: vec![
                crate::api::crd::TestFilter {
                    name: "test-connection".into(),
                    exclude: false,
                },
                crate::api::crd::TestFilter {
                    name: "test-slow".into(),
                    exclude: true,
                },
            ],
        }),
        max_history: Some(12),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::crd::Install;

    fn options() -> HelmOptions {
        HelmOptions {
            timeout: Duration::from_secs(300),
            history_max: 5,
            ..HelmOptions::default()
        }
    }

    #[test]
    fn without_settings_every_action_is_what_it_was_before_them() {
        let none = HelmSettings::default();
        let today = Applying {
            timeout: Duration::from_secs(300),
            wait: false,
            wait_for_jobs: false,
            disable_hooks: false,
            create_crds: true,
            replace_crds: false,
            force: false,
            cleanup_on_fail: false,
        };
        assert_eq!(install(&none, &options()), today);
        assert_eq!(
            upgrade(&none, &options()),
            Applying {
                create_crds: false,
                ..today
            }
        );
        assert_eq!(
            uninstall(&Uninstall::default(), &options()),
            Removing {
                timeout: Duration::from_secs(300),
                disable_hooks: true,
                keep_history: false,
                wait: false,
            }
        );
        assert_eq!(history_max(&none, &options()), 5);
        assert_eq!(apply_timeout(&none, &options()), Duration::from_secs(300));
    }

    #[test]
    fn a_chart_entry_overrides_the_operators_defaults_action_by_action() {
        let settings = example();
        let i = install(&settings, &options());
        assert_eq!(i.timeout, Duration::from_secs(20));
        assert!(i.wait && i.wait_for_jobs, "waitForJobs implies wait");
        assert!(!i.create_crds && !i.disable_hooks);
        let u = upgrade(&settings, &options());
        assert_eq!(u.timeout, Duration::from_secs(3600));
        assert!(u.disable_hooks && u.force && u.cleanup_on_fail && u.create_crds && !u.wait);
        let r = uninstall(&settings.uninstall, &options());
        assert_eq!(r.timeout, Duration::from_secs(90));
        assert!(!r.disable_hooks && r.keep_history && r.wait);
        assert_eq!(history_max(&settings, &options()), 12);
        // The longest action, then its tests.
        assert_eq!(
            apply_timeout(&settings, &options()),
            Duration::from_secs(3600 + 120)
        );
        let t = test(&settings, &options()).expect("the example enables its tests");
        assert_eq!(t.timeout, Duration::from_secs(120));
        assert_eq!(
            (t.include, t.exclude),
            (
                vec!["test-connection".to_owned()],
                vec!["test-slow".to_owned()]
            )
        );
        assert!(!t.ignore_failures);
    }

    #[test]
    fn tests_run_only_when_enabled_and_take_the_operators_timeout_unless_they_name_one() {
        let mut settings = HelmSettings::default();
        assert_eq!(test(&settings, &options()), None);
        settings.test = Some(crate::api::crd::Test::default());
        assert_eq!(test(&settings, &options()), None, "written but not enabled");
        assert_eq!(
            apply_timeout(&settings, &options()),
            Duration::from_secs(300)
        );
        settings.test = Some(crate::api::crd::Test {
            enable: true,
            ..Default::default()
        });
        let t = test(&settings, &options()).unwrap();
        assert_eq!(t.timeout, Duration::from_secs(300));
        assert!(t.include.is_empty() && t.exclude.is_empty());
        assert_eq!(
            apply_timeout(&settings, &options()),
            Duration::from_secs(600)
        );
    }

    #[test]
    fn a_hub_waits_for_a_pull_members_answer_as_long_as_the_job_asks_helm_to_take() {
        let key: crate::api::key::ReleaseKey = "edge-1/team/web".parse().unwrap();
        let owner = crate::plan::OwnerId {
            namespace: "team".into(),
            name: "c".into(),
        };
        let uninstall = |settings| Job::Uninstall {
            key: key.clone(),
            owner: owner.clone(),
            identity: None,
            settings,
        };
        assert_eq!(asked_timeout(&uninstall(Uninstall::default())), None);
        assert_eq!(
            asked_timeout(&uninstall(example().uninstall)),
            Some(Duration::from_secs(90))
        );
        let rollback = Job::Rollback {
            key: key.clone(),
            owner: owner.clone(),
            from: 2,
            identity: None,
            helm: Box::default(),
        };
        assert_eq!(asked_timeout(&rollback), None);
        // A rollback is waited for as long as the chart entry's upgrade may take.
        let rollback = Job::Rollback {
            key: key.clone(),
            owner: owner.clone(),
            from: 2,
            identity: None,
            helm: Box::new(example()),
        };
        assert_eq!(asked_timeout(&rollback), Some(Duration::from_secs(3600)));
    }

    #[test]
    fn a_timeout_the_schema_would_refuse_keeps_the_default() {
        for written in ["", "5", "0s", "999ms", "1d", "-1s"] {
            let settings = HelmSettings {
                install: Install {
                    timeout: Some(written.into()),
                    ..Install::default()
                },
                ..HelmSettings::default()
            };
            assert_eq!(
                install(&settings, &options()).timeout,
                Duration::from_secs(300),
                "{written:?}"
            );
        }
    }
}
