//! Tests of rollout gates: steps, health, halts and rollbacks.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::settings::{MaxUnavailable, parse_duration_ms};
use super::states::phase;
use super::*;
use crate::api::crd::{ClusterSelector, Rollout, Wave};
use crate::api::key::ReleaseKey;
use crate::plan::{Applied, Job, Plan, Release};

fn c(name: &str) -> ClusterName {
    name.parse().unwrap()
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn settings(max: MaxUnavailable) -> Settings {
    Settings {
        max_unavailable: max,
        progress_deadline_ms: 60_000,
        pause_ms: 0,
        rollback_on_halt: false,
    }
}

struct World {
    waves: Vec<Vec<ClusterName>>,
    facts: BTreeMap<ClusterName, Facts>,
    state: Option<RolloutStatus>,
    settings: Settings,
    generation: i64,
    command: Option<Command>,
}

impl World {
    fn new(waves: &[&[&str]]) -> Self {
        let waves: Vec<Vec<ClusterName>> = waves
            .iter()
            .map(|w| w.iter().map(|n| c(n)).collect())
            .collect();
        let facts = waves
            .iter()
            .flatten()
            .map(|n| {
                (
                    n.clone(),
                    Facts {
                        reachable: true,
                        ..Facts::default()
                    },
                )
            })
            .collect();
        World {
            waves,
            facts,
            state: None,
            settings: settings(MaxUnavailable::Count(1)),
            generation: 2,
            command: None,
        }
    }

    fn step(&mut self, secs: i64) -> Step {
        let step = step(&Input {
            generation: self.generation,
            waves: &self.waves,
            facts: &self.facts,
            previous: self.state.as_ref(),
            command: self.command.as_ref(),
            settings: &self.settings,
            now: at(secs),
        });
        self.state = Some(step.state.clone());
        step
    }

    fn healthy(&mut self, name: &str) {
        let f = self.facts.get_mut(&c(name)).unwrap();
        f.updated = true;
        f.healthy = true;
    }

    fn allowed(step: &Step) -> Vec<String> {
        step.allowed.iter().map(ToString::to_string).collect()
    }
}

#[test]
fn durations_read_as_milliseconds_and_nonsense_is_refused() {
    assert_eq!(parse_duration_ms("10m"), Some(600_000));
    assert_eq!(parse_duration_ms("1h30m"), Some(5_400_000));
    assert_eq!(parse_duration_ms("0s"), Some(0));
    assert_eq!(parse_duration_ms("250ms"), Some(250));
    for bad in ["", "m", "10", "10x", "1.5m", "-1s"] {
        assert_eq!(parse_duration_ms(bad), None, "{bad}");
    }
}

#[test]
fn max_unavailable_takes_numbers_and_percentages_rounded_down_to_at_least_one() {
    let read = |v: IntOrString| {
        Settings::of(&Rollout {
            max_unavailable: Some(v),
            ..Rollout::default()
        })
        .map(|s| s.max_unavailable)
    };
    assert_eq!(read(IntOrString::Int(2)), Ok(MaxUnavailable::Count(2)));
    assert_eq!(
        read(IntOrString::String("25%".into())),
        Ok(MaxUnavailable::Percent(25))
    );
    assert!(read(IntOrString::Int(0)).is_err());
    assert!(read(IntOrString::String("lots".into())).is_err());
    assert_eq!(MaxUnavailable::Percent(25).of(10), 2);
    assert_eq!(MaxUnavailable::Percent(25).of(3), 1);
    assert_eq!(MaxUnavailable::Percent(100).of(3), 3);
    let defaults = Settings::of(&Rollout::default()).unwrap();
    assert_eq!(defaults.max_unavailable, MaxUnavailable::Count(1));
    assert_eq!(defaults.progress_deadline_ms, 600_000);
    assert_eq!(defaults.pause_ms, 0);
}

#[test]
fn clusters_go_to_the_first_wave_that_selects_them_and_the_rest_go_last() {
    let wave = |ring: &str| Wave {
        cluster_selector: ClusterSelector {
            match_labels: BTreeMap::from([("ring".into(), ring.into())]),
        },
    };
    let rollout = Rollout {
        waves: vec![wave("canary"), wave("early")],
        ..Rollout::default()
    };
    let labels = BTreeMap::from([
        (c("a"), BTreeMap::from([("ring".into(), "early".into())])),
        (c("b"), BTreeMap::from([("ring".into(), "canary".into())])),
        (c("c"), BTreeMap::new()),
        (c("d"), BTreeMap::from([("ring".into(), "early".into())])),
    ]);
    let targeted = labels.keys().cloned().collect();
    assert_eq!(
        waves(&rollout, &targeted, &labels),
        vec![vec![c("b")], vec![c("a"), c("d")], vec![c("c")]]
    );
    let none = waves(&Rollout::default(), &targeted, &labels);
    assert_eq!(none, vec![vec![c("a"), c("b"), c("c"), c("d")]]);
}

#[test]
fn a_good_change_reaches_one_cluster_at_a_time_in_order_each_after_the_previous_is_healthy() {
    let mut w = World::new(&[&["m1", "m2", "m3"]]);
    let s = w.step(0);
    assert_eq!(World::allowed(&s), ["m1"]);
    assert!(matches!(s.happened[0], RolloutEvent::Started { .. }));
    assert_eq!(s.state.progress, "0/3");
    let s = w.step(1);
    assert_eq!(World::allowed(&s), ["m1"], "m1 is not healthy yet");
    w.healthy("m1");
    let s = w.step(2);
    assert_eq!(World::allowed(&s), ["m1", "m2"]);
    assert_eq!(s.state.clusters[0].state, state::HEALTHY);
    assert_eq!(s.state.clusters[1].state, state::PROGRESSING);
    w.healthy("m2");
    w.step(3);
    w.healthy("m3");
    let s = w.step(4);
    assert_eq!(World::allowed(&s), ["m1", "m2", "m3"]);
    assert_eq!(s.state.phase, phase::COMPLETE);
    assert_eq!(s.state.progress, "3/3");
    assert!(s.happened.contains(&RolloutEvent::Finished {
        generation: 2,
        duration_ms: 4000
    }));
    assert!(!s.active());
}

#[test]
fn max_unavailable_lets_that_many_clusters_change_at_once() {
    let mut w = World::new(&[&["m1", "m2", "m3", "m4"]]);
    w.settings.max_unavailable = MaxUnavailable::Percent(50);
    let s = w.step(0);
    assert_eq!(World::allowed(&s), ["m1", "m2"]);
    w.healthy("m2");
    let s = w.step(1);
    assert_eq!(World::allowed(&s), ["m1", "m2", "m3"]);
}

#[test]
fn a_wave_starts_only_when_every_cluster_of_the_waves_before_is_healthy() {
    let mut w = World::new(&[&["canary"], &["e1", "e2"], &["rest"]]);
    w.settings.max_unavailable = MaxUnavailable::Count(5);
    let s = w.step(0);
    assert_eq!(World::allowed(&s), ["canary"]);
    assert_eq!((s.state.wave, s.state.waves), (1, 3));
    w.healthy("canary");
    let s = w.step(1);
    assert_eq!(World::allowed(&s), ["canary", "e1", "e2"]);
    assert!(
        s.happened
            .contains(&RolloutEvent::WaveCompleted { wave: 1, of: 3 })
    );
    assert!(s.happened.contains(&RolloutEvent::WaveStarted {
        wave: 2,
        of: 3,
        clusters: vec!["e1".into(), "e2".into()]
    }));
    w.healthy("e1");
    let s = w.step(2);
    assert_eq!(s.allowed.len(), 3, "e2 is not healthy: the last wave waits");
}

#[test]
fn the_next_wave_waits_out_the_pause_after_the_wave_before_is_healthy() {
    let mut w = World::new(&[&["canary"], &["rest"]]);
    w.settings.pause_ms = 30_000;
    w.step(0);
    w.healthy("canary");
    let s = w.step(10);
    assert_eq!(s.state.phase, phase::PAUSED);
    assert_eq!(World::allowed(&s), ["canary"]);
    assert!(s.active());
    let s = w.step(39);
    assert_eq!(World::allowed(&s), ["canary"]);
    let s = w.step(40);
    assert_eq!(World::allowed(&s), ["canary", "rest"]);
    assert_eq!(s.state.wave, 2);
}

#[test]
fn a_failed_release_halts_and_clusters_not_reached_stay_pending() {
    let mut w = World::new(&[&["m1", "m2", "m3"]]);
    w.step(0);
    w.facts.get_mut(&c("m1")).unwrap().failed = Some(("web".into(), "template: bad value".into()));
    let s = w.step(1);
    let halt = s.state.halted.clone().unwrap();
    assert_eq!(
        (halt.cluster.as_str(), halt.release.as_str()),
        ("m1", "web")
    );
    assert!(halt.reason.contains("template: bad value"));
    assert_eq!(s.state.phase, phase::HALTED);
    assert_eq!((s.state.failed, s.state.pending), (1, 2));
    assert_eq!(World::allowed(&s), ["m1"]);
    assert!(matches!(s.happened[..], [RolloutEvent::Halted(_)]));
    let s = w.step(100);
    assert_eq!(World::allowed(&s), ["m1"], "a halt stays until a change");
    assert!(s.happened.is_empty(), "a halt is told once");
    assert!(!s.active());
}

#[test]
fn a_cluster_not_healthy_within_the_deadline_halts_naming_what_it_waits_for() {
    let mut w = World::new(&[&["m1", "m2"]]);
    w.step(0);
    w.facts.get_mut(&c("m1")).unwrap().waiting = Some(("web".into(), "1 pod(s) not ready".into()));
    assert!(w.step(60).state.halted.is_none());
    let s = w.step(61);
    let halt = s.state.halted.unwrap();
    assert_eq!(halt.release, "web");
    assert!(
        halt.reason
            .contains("progress deadline (60s): 1 pod(s) not ready")
    );
}

#[test]
fn an_unreachable_cluster_waits_without_halting_before_the_deadline_then_goes_on() {
    let mut w = World::new(&[&["m1", "m2"]]);
    w.step(0);
    w.facts.get_mut(&c("m1")).unwrap().reachable = false;
    for t in 1..=50 {
        let s = w.step(t);
        assert!(s.state.halted.is_none());
        assert_eq!(World::allowed(&s), ["m1"], "not healthy while unreachable");
    }
    w.facts.get_mut(&c("m1")).unwrap().reachable = true;
    w.healthy("m1");
    assert_eq!(World::allowed(&w.step(51)), ["m1", "m2"]);
}

#[test]
fn an_unreachable_cluster_past_the_deadline_halts_saying_so() {
    let mut w = World::new(&[&["m1", "m2"]]);
    w.step(0);
    w.facts.get_mut(&c("m1")).unwrap().reachable = false;
    let halt = w.step(61).state.halted.unwrap();
    assert!(halt.reason.contains("unreachable"), "{}", halt.reason);
}

#[test]
fn a_cluster_registered_mid_rollout_joins_the_last_wave() {
    let mut w = World::new(&[&["canary"], &["rest"]]);
    w.step(0);
    // The new cluster would match the first wave's selector: it still goes last.
    w.waves[0].push(c("new"));
    w.facts.insert(
        c("new"),
        Facts {
            reachable: true,
            ..Facts::default()
        },
    );
    let s = w.step(1);
    let new = s.state.clusters.iter().find(|x| x.name == "new").unwrap();
    assert_eq!((new.wave, new.state.as_str()), (2, state::PENDING));
    assert_eq!(s.state.clusters.last().unwrap().name, "rest");
    assert_eq!(World::allowed(&s), ["canary"]);
}

#[test]
fn a_spec_change_mid_rollout_starts_again_from_the_first_wave() {
    let mut w = World::new(&[&["m1", "m2", "m3"]]);
    w.step(0);
    w.healthy("m1");
    assert_eq!(World::allowed(&w.step(1)), ["m1", "m2"]);
    // The new generation changes every cluster again: nothing runs it yet.
    w.generation = 3;
    w.facts.values_mut().for_each(|f| {
        f.updated = false;
        f.healthy = false;
    });
    let s = w.step(2);
    assert_eq!(World::allowed(&s), ["m1"]);
    assert_eq!(s.state.generation, 3);
    assert!(matches!(
        s.happened[0],
        RolloutEvent::Started { generation: 3, .. }
    ));
}

#[test]
fn clusters_already_healthy_on_the_generation_need_no_step() {
    let mut w = World::new(&[&["canary"], &["m1", "m2"]]);
    for n in ["canary", "m1", "m2"] {
        w.healthy(n);
    }
    let s = w.step(0);
    assert_eq!(s.state.phase, phase::COMPLETE);
    assert_eq!(s.allowed.len(), 3);
}

#[test]
fn a_resume_clears_the_halt_and_gives_the_failed_cluster_a_new_deadline() {
    let mut w = World::new(&[&["m1", "m2"]]);
    w.step(0);
    w.facts.get_mut(&c("m1")).unwrap().failed = Some(("web".into(), "boom".into()));
    w.step(1);
    w.facts.get_mut(&c("m1")).unwrap().failed = None;
    w.command = Some(Command::Resume("resume-1".into()));
    let s = w.step(2);
    assert!(s.state.halted.is_none());
    assert!(s.happened.contains(&RolloutEvent::Resumed));
    assert_eq!(s.state.clusters[0].state, state::PROGRESSING);
    w.healthy("m1");
    assert_eq!(World::allowed(&w.step(3)), ["m1", "m2"]);
    // The same annotation value acts once.
    assert!(!w.step(4).happened.contains(&RolloutEvent::Resumed));
}

#[test]
fn a_restart_starts_the_same_generation_again_from_the_first_wave_once() {
    let mut w = World::new(&[&["m1", "m2"]]);
    w.step(0);
    w.healthy("m1");
    w.step(1);
    w.facts.get_mut(&c("m1")).unwrap().healthy = false;
    w.command = Some(Command::Restart("restart-7".into()));
    let s = w.step(2);
    assert!(matches!(
        s.happened[0],
        RolloutEvent::Started {
            restarted: true,
            ..
        }
    ));
    assert_eq!(World::allowed(&s), ["m1"]);
    assert_eq!(s.state.command, "restart-7");
    let s = w.step(3);
    assert!(s.happened.is_empty(), "{:?}", s.happened);
}

#[test]
fn a_cluster_no_longer_targeted_leaves_the_rollout() {
    let mut w = World::new(&[&["m1", "m2"]]);
    w.step(0);
    w.facts.remove(&c("m1"));
    w.waves[0].retain(|x| x.as_str() != "m1");
    let s = w.step(1);
    assert_eq!(World::allowed(&s), ["m2"]);
    assert_eq!(s.state.clusters.len(), 1);
}

#[test]
fn a_policy_refusal_alone_is_no_failure_a_cluster_with_only_refused_releases_passes() {
    // The reconciler leaves refused releases out of the facts: such a cluster has nothing
    // to update and is healthy.
    let mut w = World::new(&[&["m1", "m2"]]);
    w.healthy("m1");
    let s = w.step(0);
    assert!(s.state.halted.is_none());
    assert_eq!(World::allowed(&s), ["m1", "m2"]);
}

#[test]
fn jobs_of_clusters_not_reached_are_held_and_the_others_kept() {
    use crate::plan::OwnerId;
    let job = |key: &str| Job::Uninstall {
        key: key.parse().unwrap(),
        owner: OwnerId {
            namespace: "default".into(),
            name: "app".into(),
        },
        identity: None,
        settings: Default::default(),
    };
    let mut plan = Plan {
        jobs: vec![job("m1/team/web"), job("m2/team/web"), job("m3/team/db")],
        ..Plan::default()
    };
    hold(&mut plan, &BTreeSet::from([c("m1")]), "waiting".into());
    assert_eq!(plan.jobs, vec![job("m1/team/web")]);
    let held: Vec<String> = plan.rollout_held.iter().map(ToString::to_string).collect();
    assert_eq!(held, ["m2/team/web", "m3/team/db"]);
    assert_eq!(plan.rollout_note.as_deref(), Some("waiting"));
    let mut all = Plan {
        jobs: vec![job("m1/team/web")],
        ..Plan::default()
    };
    hold(&mut all, &BTreeSet::from([c("m1")]), "waiting".into());
    assert_eq!(all.rollout_note, None, "nothing held, nothing said");
}

#[test]
fn with_rollback_on_halt_the_failed_cluster_is_rolled_back_and_then_held() {
    use crate::plan::{ChartSource, OwnerId};
    let mut w = World::new(&[&["m1", "m2"]]);
    w.settings.rollback_on_halt = true;
    w.step(0);
    w.facts.get_mut(&c("m1")).unwrap().failed = Some(("web".into(), "boom".into()));
    let s = w.step(1);
    assert!(
        s.allowed.is_empty(),
        "the failed cluster gets the new generation no more"
    );
    let release = |key: &str| Release {
        health: Vec::new(),
        adoption: Default::default(),
        commit: None,
        masked: Default::default(),
        post_render: None,
        credentials: Default::default(),
        verified: None,
        key: key.parse().unwrap(),
        owner: OwnerId {
            namespace: "default".into(),
            name: "app".into(),
        },
        chart_name: "web".into(),
        source: ChartSource::Directory("web".into()),
        version: None,
        chart_digest: None,
        settings: vec![],
        values: None,
        rollback_on_failure: false,
        spec_hash: "new".into(),
        identity: None,
        drift: Default::default(),
        helm: Default::default(),
    };
    let applied = |key: &str, hash: &str, revision: i64| {
        (
            key.parse::<ReleaseKey>().unwrap(),
            Applied {
                key: key.parse().unwrap(),
                owner: None,
                spec_hash: Some(hash.into()),
                revision,
                status: "deployed".into(),
                modified_at: None,
            },
        )
    };
    let desired = [
        release("m1/team/web"),
        release("m1/team/first"),
        release("m2/team/web"),
    ];
    let on_new = HashMap::from([
        applied("m1/team/web", "new", 3),
        applied("m1/team/first", "new", 1),
        applied("m2/team/web", "old", 2),
    ]);
    let jobs = rollbacks(&s.state, &w.settings, &desired, &on_new);
    assert!(
        matches!(&jobs[..], [Job::Rollback { key, from: 3, .. }] if key.to_string() == "m1/team/web"),
        "{jobs:?}"
    );
    let rolled_back = HashMap::from([applied("m1/team/web", "old", 4)]);
    assert!(rollbacks(&s.state, &w.settings, &desired, &rolled_back).is_empty());
    w.settings.rollback_on_halt = false;
    assert!(rollbacks(&s.state, &w.settings, &desired, &on_new).is_empty());
}

#[test]
fn the_state_read_back_from_the_status_carries_on_where_it_was() {
    let mut w = World::new(&[&["m1", "m2"]]);
    w.step(0);
    let text = serde_json::to_string(w.state.as_ref().unwrap()).unwrap();
    w.state = Some(serde_json::from_str(&text).unwrap());
    w.healthy("m1");
    let s = w.step(1);
    assert!(
        !s.happened
            .iter()
            .any(|h| matches!(h, RolloutEvent::Started { .. }))
    );
    assert_eq!(World::allowed(&s), ["m1", "m2"]);
}
