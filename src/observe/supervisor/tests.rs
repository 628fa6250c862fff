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
