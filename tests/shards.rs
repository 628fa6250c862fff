//! End-to-end sharding on the lab: three replicas split the Controllers, each shard led through its own Lease, a killed replica's shard taken over; two replicas each tell a pull member's agent the namespaces of their own shard.

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use common::{
    agent::{hub_cli, join},
    fixtures::{ready, unique, wait_until, web},
    hub::Hub,
    lab::Lab,
    operator::Operator,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tenancy_hub::api::shard::shard_of;

const DEADLINE: Duration = Duration::from_secs(180);
const SHARDS: u32 = 3;
const LEASE: &str = "tenancy-hub-test";

/// The arguments of a replica leading shards of `shards` through Leases in `namespace`.
fn sharded<'a>(namespace: &'a str, shards: &'a str) -> [&'a str; 7] {
    [
        "--leader-elect",
        "--lease-namespace",
        namespace,
        "--lease-name",
        LEASE,
        "--shards",
        shards,
    ]
}

/// Who leads each of `SHARDS` shards now, from the shard Leases.
async fn holders(leases: &Api<Lease>) -> BTreeMap<u32, String> {
    holders_of(leases, SHARDS).await
}

/// Who leads each of `shards` shards now, from the shard Leases.
async fn holders_of(leases: &Api<Lease>, shards: u32) -> BTreeMap<u32, String> {
    let mut led = BTreeMap::new();
    for shard in 0..shards {
        let name = format!("{LEASE}-shard-{shard}-of-{shards}");
        if let Ok(Some(lease)) = leases.get_opt(&name).await
            && let Some(holder) = lease.spec.and_then(|s| s.holder_identity)
            && !holder.is_empty()
        {
            led.insert(shard, holder);
        }
    }
    led
}

/// One Controller name (`<prefix><i>`, the first found) for each of `shards` shards of `namespace`.
fn one_per_shard(namespace: &str, prefix: &str, shards: u32) -> BTreeMap<u32, String> {
    let mut names = BTreeMap::new();
    for i in 0.. {
        if names.len() == shards as usize {
            break;
        }
        let name = format!("{prefix}{i}");
        names
            .entry(shard_of(namespace, &name, shards))
            .or_insert(name);
    }
    names
}

/// Lines of a replica's log that tell of the install of release `web` in member-1/`namespace`.
fn helm_lines(operator: &Operator, namespace: &str) -> usize {
    operator
        .logged()
        .lines()
        .filter(|l| {
            l.contains(&format!("installed member-1/{namespace}/web")) && !l.contains("uninstalled")
        })
        .count()
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn three_replicas_split_the_controllers_by_shard_and_a_killed_ones_shard_is_taken_over() {
    let hub = Hub::without_operator(Lab::get(), unique("shards")).await;
    let namespace = hub.namespace.clone();
    let shards = SHARDS.to_string();
    let args = sharded(&namespace, &shards);
    let mut replicas: Vec<Option<Operator>> = (0..3)
        .map(|_| Some(Operator::start_with(&hub.lab, &namespace, &args)))
        .collect();
    let leases: Api<Lease> = Api::namespaced(hub.client.clone(), &namespace);
    wait_until(
        "three replicas to lead one shard each",
        DEADLINE,
        || async {
            let led = holders(&leases).await;
            let distinct: BTreeSet<&String> = led.values().collect();
            (led.len() == 3 && distinct.len() == 3).then_some(())
        },
    )
    .await;

    // Two Controllers per shard.
    let mut names: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for i in 0.. {
        if names.values().map(Vec::len).sum::<usize>() == 6 {
            break;
        }
        let name = format!("c{i}");
        let shard = shard_of(&namespace, &name, SHARDS);
        let in_shard = names.entry(shard).or_default();
        if in_shard.len() < 2 {
            in_shard.push(name);
        }
    }
    let run = unique("sh");
    let target = |name: &str| format!("{run}-{name}");
    for name in names.values().flatten() {
        hub.apply(name, web(&target(name), &["member-1"], "1"))
            .await;
    }
    for name in names.values().flatten() {
        hub.status_until(name, "delivered and ready", ready).await;
    }

    // Each Controller was worked by the one replica leading its shard: its release was installed
    // by that replica only.
    let led = holders(&leases).await;
    let pid_of = |holder: &str| -> u32 { holder.rsplit('-').next().unwrap().parse().unwrap() };
    for (shard, in_shard) in &names {
        let leader = pid_of(&led[shard]);
        for name in in_shard {
            for replica in replicas.iter().flatten() {
                let lines = helm_lines(replica, &target(name));
                let expected = usize::from(replica.pid() == leader);
                assert_eq!(
                    lines,
                    expected,
                    "Controller {name} (shard {shard}, led by pid {leader}): replica {} ran helm for it {lines} times",
                    replica.pid()
                );
            }
        }
    }

    // Kill the leader of one shard: another replica takes the shard over and delivers a change.
    let (shard, victims) = names.iter().next().map(|(s, n)| (*s, n.clone())).unwrap();
    let leader = pid_of(&led[&shard]);
    let index = replicas
        .iter()
        .position(|r| r.as_ref().is_some_and(|r| r.pid() == leader))
        .unwrap();
    replicas[index].take().unwrap().kill();
    let killed = Instant::now();
    let changed = &victims[0];
    hub.apply(changed, web(&target(changed), &["member-1"], "2"))
        .await;
    wait_until("another replica to lead the shard", DEADLINE, || async {
        let led = holders(&leases).await;
        led.get(&shard).filter(|h| pid_of(h) != leader).map(|_| ())
    })
    .await;
    let takeover = killed.elapsed();
    hub.releases_become("member-1", &target(changed), &[("web", 2)])
        .await;
    eprintln!("shard {shard} was taken over {takeover:?} after its leader was killed");
    assert!(
        takeover < Duration::from_secs(30),
        "takeover took {takeover:?}, more than two lease durations and a retry"
    );
    // Never two helm runs for one release: every other release is still at revision 1.
    for name in names.values().flatten().filter(|n| *n != changed) {
        assert_eq!(
            hub.lab.releases("member-1", &target(name)).get("web"),
            Some(&(1, "deployed".to_owned())),
            "{name}"
        );
    }

    for name in names.values().flatten() {
        hub.delete_and_wait_gone(name).await;
    }
    for replica in replicas.into_iter().flatten() {
        replica.stop();
    }
    let released = holders(&leases).await;
    assert!(
        released.is_empty(),
        "SIGTERM releases the shard Leases: {released:?}"
    );
}

#[tokio::test]
#[ignore = "needs the lab: run tests/run.sh"]
async fn a_lone_replica_leads_every_shard_and_hands_one_over_when_another_joins() {
    let hub = Hub::without_operator(Lab::get(), unique("rebalance")).await;
    let namespace = hub.namespace.clone();
    let args = sharded(&namespace, "2");
    let leases: Api<Lease> = Api::namespaced(hub.client.clone(), &namespace);
    let first = Operator::start_with(&hub.lab, &namespace, &args);
    wait_until("the lone replica to lead both shards", DEADLINE, || async {
        let led = holders_of(&leases, 2).await;
        let distinct: BTreeSet<&String> = led.values().collect();
        (led.len() == 2 && distinct.len() == 1).then_some(())
    })
    .await;
    // Its Controllers in both shards are delivered.
    let run = unique("rb");
    let names = one_per_shard(&namespace, "c", 2);
    for name in names.values() {
        hub.apply(name, web(&format!("{run}-{name}"), &["member-1"], "1"))
            .await;
    }
    for name in names.values() {
        hub.status_until(name, "delivered and ready", ready).await;
    }

    let second = Operator::start_with(&hub.lab, &namespace, &args);
    wait_until(
        "one shard handed over to the replica that joined",
        DEADLINE,
        || async {
            let led = holders_of(&leases, 2).await;
            let distinct: BTreeSet<&String> = led.values().collect();
            (led.len() == 2 && distinct.len() == 2).then_some(())
        },
    )
    .await;
    assert!(
        first.logged().contains("giving shard"),
        "the first replica says it gave a shard up:\n{}",
        first.logged()
    );
    // The shard's Controller is worked by the newcomer now: a change is delivered, once.
    let led = holders_of(&leases, 2).await;
    let moved = *led
        .iter()
        .find(|(_, h)| h.ends_with(&format!("-{}", second.pid())))
        .expect("the newcomer leads a shard")
        .0;
    let name = &names[&moved];
    hub.apply(name, web(&format!("{run}-{name}"), &["member-1"], "2"))
        .await;
    hub.releases_become("member-1", &format!("{run}-{name}"), &[("web", 2)])
        .await;
    // The record shows the revision as soon as Helm stored it; the operator logs the job's
    // outcome once the executor has answered, a moment later.
    let upgraded = format!("upgraded member-1/{run}-{name}/web");
    wait_until("the newcomer to report the upgrade", DEADLINE, || async {
        second.logged().contains(&upgraded).then_some(())
    })
    .await;
    assert!(
        !first.logged().contains(&upgraded),
        "the upgrade was run by the replica that took the shard, and only by it"
    );
    for name in names.values() {
        hub.delete_and_wait_gone(name).await;
    }
    first.stop();
    second.stop();
}

#[tokio::test]
#[ignore = "needs the lab with a pull member: kind/up.sh --pull-members 1, then --include-ignored"]
async fn two_replicas_each_have_a_pull_member_watch_their_own_shards_namespaces() {
    let hub = Hub::without_operator(Lab::get(), unique("shpull")).await;
    let namespace = hub.namespace.clone();
    let args = sharded(&namespace, "2");
    let leases: Api<Lease> = Api::namespaced(hub.client.clone(), &namespace);
    let replicas: Vec<Operator> = (0..2)
        .map(|_| Operator::start_with(&hub.lab, &namespace, &args))
        .collect();
    wait_until("two replicas to lead one shard each", DEADLINE, || async {
        let led = holders_of(&leases, 2).await;
        let distinct: BTreeSet<&String> = led.values().collect();
        (led.len() == 2 && distinct.len() == 2).then_some(())
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let edge = unique("edge");
    let _agent = join(&hub.lab, &edge, "pull-1", dir.path());

    // One Controller in each shard, both delivering to the pull member: each replica tells the
    // member's agent to watch its own Controller's namespace, and neither replaces the other's.
    let run = unique("sp");
    let names = one_per_shard(&namespace, "p", 2);
    let target = |name: &str| format!("{run}-{name}");
    for name in names.values() {
        hub.apply(name, web(&target(name), &[&edge], "1")).await;
    }
    for name in names.values() {
        hub.status_until(
            name,
            "the pull member's pod and Deployment reported by the agent",
            |s| {
                ready(s)
                    && s.updated_tenancies.iter().any(|t| {
                        t.cluster == edge
                            && t.namespace == target(name)
                            && t.pod_status.len() == 1
                            && t.replication_controller_status
                                .iter()
                                .any(|w| w.ready == "1/1")
                    })
            },
        )
        .await;
    }
    // One shard's replica widens its watch call with a second namespace; the other shard's call
    // stays, so a change there is still seen.
    let second = names[&1].clone();
    let extra = (0..)
        .map(|i| format!("q{i}"))
        .find(|n| shard_of(&namespace, n, 2) == 0)
        .unwrap();
    hub.apply(&extra, web(&target(&extra), &[&edge], "1")).await;
    hub.status_until(&extra, "the new namespace's pod reported", |s| {
        s.updated_tenancies
            .iter()
            .any(|t| t.cluster == edge && t.pod_status.len() == 1)
    })
    .await;
    hub.apply(&second, web(&target(&second), &[&edge], "2"))
        .await;
    hub.status_until(
        &second,
        "two pods reported from the other shard's namespace",
        |s| {
            s.updated_tenancies.iter().any(|t| {
                t.cluster == edge && t.namespace == target(&second) && t.pod_status.len() == 2
            })
        },
    )
    .await;
    hub.delete_and_wait_gone(&extra).await;

    for name in names.values() {
        hub.delete_and_wait_gone(name).await;
    }
    for replica in replicas {
        replica.stop();
    }
    hub_cli(&hub.lab, &["cluster", "remove", &edge]);
}
