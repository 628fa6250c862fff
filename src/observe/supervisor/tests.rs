//! Tests of the watch supervisor's steps.

use super::*;

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn new_namespaces_widen_a_running_cluster_and_the_last_one_gone_stops_it() {
    let c = |s: &str| -> ClusterName { s.parse().unwrap() };
    let running = BTreeMap::from([(c("m1"), set(&["a", "b"])), (c("m2"), set(&["a"]))]);
    let target = BTreeMap::from([(c("m1"), set(&["b", "c"])), (c("m3"), set(&["x"]))]);
    let s = step(&running, &target);
    assert_eq!(s.start, BTreeMap::from([(c("m3"), set(&["x"]))]));
    assert_eq!(
        s.update,
        BTreeMap::from([(c("m1"), (set(&["b", "c"]), true))])
    );
    assert_eq!(s.stop, BTreeSet::from([c("m2")]));
    let gone: Vec<String> = s.gone.iter().map(ToString::to_string).collect();
    assert_eq!(gone, ["m1/a", "m2/a"]);
    let narrower = BTreeMap::from([(c("m1"), set(&["a"])), (c("m2"), set(&["a"]))]);
    let s = step(&running, &narrower);
    assert_eq!(s.update, BTreeMap::from([(c("m1"), (set(&["a"]), false))]));
    assert_eq!(step(&running, &running), Step::default());
}

/// Observers that know every cluster and keep what each watch is told of its shards.
#[derive(Default)]
struct Capture(Mutex<Vec<(ClusterName, ShardShares)>>);

impl Observers for Capture {
    fn knows(&self, _: &ClusterName) -> bool {
        true
    }

    fn watch(&self, watch: ClusterWatch) -> Option<futures::future::BoxFuture<'static, ()>> {
        self.0
            .lock()
            .unwrap()
            .push((watch.cluster.clone(), watch.shares.clone()));
        Some(Box::pin(async {}))
    }
}

#[tokio::test]
async fn each_watch_knows_its_namespaces_by_the_shard_of_the_controllers_targeting_them() {
    let shards = Arc::new(Shards::led_here(2, [0, 1]));
    let (events, _rx) = tokio::sync::mpsc::channel(8);
    let supervisor =
        WatchSupervisor::new(events, CancellationToken::new(), TaskTracker::new(), shards);
    // A Controller of each shard.
    let owner = |shard: u32| {
        (0..)
            .map(|i| ObjectRef::<TenancyController>::new(&format!("c{i}")).within("team"))
            .find(|o| shard_of("team", &o.name, 2) == shard)
            .unwrap()
    };
    let (zero, one) = (owner(0), owner(1));
    let scopes = |names: &[&str]| -> BTreeSet<ClusterNamespace> {
        names.iter().map(|s| s.parse().unwrap()).collect()
    };
    let capture = Capture::default();
    supervisor.set(&zero, scopes(&["m1/a"]), &capture);
    supervisor.set(&one, scopes(&["m1/a", "m1/b", "m2/c"]), &capture);
    let shares = |cluster: &str| {
        let captured = capture.0.lock().unwrap();
        let (_, shares) = captured
            .iter()
            .find(|(c, _)| c.as_str() == cluster)
            .unwrap();
        shares.by_shard.read().unwrap().clone()
    };
    assert_eq!(
        shares("m1"),
        BTreeMap::from([(0, set(&["a"])), (1, set(&["a", "b"]))])
    );
    assert_eq!(shares("m2"), BTreeMap::from([(1, set(&["c"]))]));
    // Shard 1's Controller goes: m1 keeps shard 0's namespace only, and m2 is no longer watched.
    supervisor.set(&one, BTreeSet::new(), &capture);
    assert_eq!(shares("m1"), BTreeMap::from([(0, set(&["a"]))]));
}
