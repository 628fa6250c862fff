//! `dependsOn` between the releases of one Controller on one cluster: the graph from the spec,
//! cycles and names it does not release (`Invalid` for the releases involved only), and the gate
//! over the plan's Helm jobs: an install or upgrade after every release it depends on is Ready, an
//! uninstall after the releases that depend on it are gone (pure).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::{
    api::crd::{ControllerSpec, Tenancy},
    api::key::{ClusterName, ClusterNamespace, ReleaseKey},
};

use crate::plan::{
    desired::{release_key, targets},
    limits,
    release::*,
};

/// Each release's dependencies, as release keys on its own cluster.
pub(crate) type Edges = BTreeMap<ReleaseKey, BTreeSet<ReleaseKey>>;

/// Releases whose Helm work a gate holds back, each with what it waits for, in words.
pub(crate) type Held = BTreeMap<ReleaseKey, String>;

/// Longest cycle spelled out in full; a longer one names its first releases and the way back.
const CHAIN_SHOWN: usize = 8;

/// True when `name` can be a Helm release name: lowercase letters, digits, '-' and '.', at most
/// 53 characters, starting and ending with a letter or digit.
fn is_release_name(name: &str) -> bool {
    let b = name.as_bytes();
    let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 53
        && ok(&b[0])
        && ok(&b[b.len() - 1])
        && b.iter().all(|c| ok(c) || *c == b'-' || *c == b'.')
}

/// The release a `dependsOn` entry of `from` names: `release` in `from`'s namespace, or
/// `namespace/release`, always on `from`'s cluster. None when the entry cannot name a release.
pub(crate) fn named_by(from: &ReleaseKey, entry: &str) -> Option<ReleaseKey> {
    let (namespace, release) = entry
        .split_once('/')
        .unwrap_or((from.scope.namespace.as_str(), entry));
    if !is_release_name(release) {
        return None;
    }
    Some(ReleaseKey {
        scope: ClusterNamespace::new(from.scope.cluster.clone(), namespace).ok()?,
        release: release.to_owned(),
    })
}

/// How `to` is named from `from`: its release name in the same namespace, `namespace/release`
/// otherwise.
pub(crate) fn name_from(from: &ReleaseKey, to: &ReleaseKey) -> String {
    if from.scope.namespace == to.scope.namespace {
        to.release.clone()
    } else {
        format!("{}/{}", to.scope.namespace, to.release)
    }
}

/// Every release of a spec whose chart names `dependsOn` entries, with its entries (the first
/// entry of a key asked for twice decides; that key is `Invalid` anyway). Nothing is worked out
/// for a spec that names none.
fn entries<'a>(
    spec: &'a ControllerSpec,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
) -> BTreeMap<ReleaseKey, &'a [String]> {
    let mut out = BTreeMap::new();
    let uses = |t: &Tenancy| t.charts.iter().any(|c| !c.depends_on.is_empty());
    if !spec.tenancies.iter().any(uses) {
        return out;
    }
    for tenancy in &spec.tenancies {
        for cluster in targets(tenancy, clusters).0 {
            let Ok(scope) = ClusterNamespace::new(cluster, &tenancy.namespace) else {
                continue;
            };
            for chart in &tenancy.charts {
                out.entry(release_key(&scope, tenancy, chart))
                    .or_insert(chart.depends_on.as_slice());
            }
        }
    }
    out.retain(|_, entries| !entries.is_empty());
    out
}

/// The dependency edges a spec names, with the registered `clusters`: every entry that can name
/// a release, whether or not the spec releases it (removal order holds for them all).
pub(crate) fn edges(
    spec: &ControllerSpec,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
) -> Edges {
    entries(spec, clusters)
        .into_iter()
        .map(|(key, names)| {
            let to = names.iter().filter_map(|n| named_by(&key, n)).collect();
            (key, to)
        })
        .collect()
}

/// Checks the `dependsOn` of the releases a spec asks for and returns the edges it names. A
/// release naming an entry the spec does not release on its cluster (`named`: every key the spec
/// names), or on a cycle, leaves `releases` with one `Invalid` problem; what runs stays as it is.
/// A release that already has a problem gets no second one. Linear in releases and entries.
pub(crate) fn check(
    spec: &ControllerSpec,
    clusters: &BTreeMap<ClusterName, BTreeMap<String, String>>,
    named: &BTreeSet<ReleaseKey>,
    releases: &mut Vec<Release>,
    problems: &mut Vec<Problem>,
) -> Edges {
    let entries = entries(spec, clusters);
    if entries.is_empty() {
        return Edges::new();
    }
    let mut by_cluster: HashMap<&ClusterName, Vec<&ReleaseKey>> = HashMap::new();
    for k in named {
        by_cluster.entry(&k.scope.cluster).or_default().push(k);
    }
    let mut edges = Edges::new();
    let mut wrong: BTreeMap<ReleaseKey, Problem> = BTreeMap::new();
    for (key, names) in &entries {
        let mut to = BTreeSet::new();
        for name in names.iter() {
            let d = named_by(key, name);
            if !d.as_ref().is_some_and(|d| named.contains(d)) {
                wrong
                    .entry(key.clone())
                    .or_insert_with(|| Problem::UnknownDependency {
                        key: key.clone(),
                        chart: String::new(),
                        dependency: name.clone(),
                        releases: releases_there(key, &by_cluster),
                    });
            }
            to.extend(d);
        }
        edges.insert(key.clone(), to);
    }
    for (key, chain) in cycles(&edges, named) {
        wrong
            .entry(key.clone())
            .or_insert(Problem::DependencyCycle {
                key,
                chart: String::new(),
                cycle: chain,
            });
    }
    releases.retain(|r| match wrong.remove(&r.key) {
        Some(mut problem) => {
            if let Problem::UnknownDependency { chart, .. }
            | Problem::DependencyCycle { chart, .. } = &mut problem
            {
                chart.clone_from(&r.chart_name);
            }
            problems.push(problem);
            false
        }
        None => true,
    });
    edges
}

/// The releases a spec names on `key`'s cluster (`by_cluster`), in words: a few of them and how
/// many in all.
fn releases_there(
    key: &ReleaseKey,
    by_cluster: &HashMap<&ClusterName, Vec<&ReleaseKey>>,
) -> String {
    let there = by_cluster
        .get(&key.scope.cluster)
        .map_or(&[][..], Vec::as_slice);
    let others = there.iter().filter(|k| **k != key);
    // Sorted, as `named` is.
    let total = there.len() - usize::from(there.binary_search(&key).is_ok());
    if total == 0 {
        return "none".into();
    }
    limits::few(others.map(|k| name_from(key, k)), total)
}

/// The strongly connected components of `edges` (targets outside `within` left out) that hold a
/// cycle, by Tarjan's algorithm without recursion: linear in releases and edges.
fn cyclic_components(edges: &Edges, within: &dyn Fn(&ReleaseKey) -> bool) -> Vec<Vec<ReleaseKey>> {
    let nodes: Vec<&ReleaseKey> = edges.keys().collect();
    let at: HashMap<&ReleaseKey, usize> = nodes.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    let next: Vec<Vec<usize>> = nodes
        .iter()
        .map(|k| {
            edges[*k]
                .iter()
                .filter(|d| within(d))
                .filter_map(|d| at.get(d).copied())
                .collect()
        })
        .collect();
    let n = nodes.len();
    let (mut index, mut low, mut on_stack) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut counter, mut out) = (Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some(&mut (v, ref mut i)) = work.last_mut() {
            if *i == 0 && index[v] == usize::MAX {
                index[v] = counter;
                low[v] = counter;
                counter += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = next[v].get(*i) {
                *i += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 || next[v].contains(&v) {
                    component.sort_unstable();
                    out.push(component.into_iter().map(|i| nodes[i].clone()).collect());
                }
            }
        }
    }
    out
}

/// Every release on a cycle of `edges` among `named` releases, with a cycle through its
/// component spelled out (`web → api → web`), starting at the release when it is on that cycle.
fn cycles(edges: &Edges, named: &BTreeSet<ReleaseKey>) -> Vec<(ReleaseKey, String)> {
    let mut out = Vec::new();
    for component in cyclic_components(edges, &|k| named.contains(k)) {
        let members: BTreeSet<&ReleaseKey> = component.iter().collect();
        let cycle = one_cycle(edges, &component[0], &members);
        for key in &component {
            let chain = match cycle.iter().position(|k| k == key) {
                Some(p) => cycle[p..].iter().chain(&cycle[..p]).collect::<Vec<_>>(),
                None => cycle.iter().collect(),
            };
            out.push((key.clone(), spell(key, &chain)));
        }
    }
    out
}

/// A shortest cycle from `start` back to it within `members` (breadth first), without the
/// repeated start.
fn one_cycle(
    edges: &Edges,
    start: &ReleaseKey,
    members: &BTreeSet<&ReleaseKey>,
) -> Vec<ReleaseKey> {
    let mut came_from: HashMap<&ReleaseKey, &ReleaseKey> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(k) = queue.pop_front() {
        for d in edges.get(k).into_iter().flatten() {
            if d == start {
                let mut path = vec![k.clone()];
                let mut at = k;
                while at != start {
                    at = came_from[at];
                    path.push(at.clone());
                }
                path.reverse();
                return path;
            }
            if members.contains(d) && !came_from.contains_key(d) {
                came_from.insert(d, k);
                queue.push_back(d);
            }
        }
    }
    vec![start.clone()]
}

/// A cycle in words, as seen from `from`: `web → api → web`; a long one names its first
/// releases, how many more, and the way back.
fn spell(from: &ReleaseKey, chain: &[&ReleaseKey]) -> String {
    let mut names: Vec<String> = chain
        .iter()
        .take(CHAIN_SHOWN)
        .map(|k| name_from(from, k))
        .collect();
    if chain.len() > CHAIN_SHOWN {
        names.push(format!("… ({} more)", chain.len() - CHAIN_SHOWN));
    }
    if let Some(first) = chain.first() {
        names.push(name_from(from, first));
    }
    names.join(" → ")
}

/// The edges removal order follows: the spec's (`current`, whose keys are every release the
/// spec names with `dependsOn`), and of `remembered`, those of releases the spec no longer names
/// (`named` says which it does) that are still `present`.
pub(crate) fn remembered(
    current: &Edges,
    named: &dyn Fn(&ReleaseKey) -> bool,
    remembered: &Edges,
    present: &dyn Fn(&ReleaseKey) -> bool,
) -> Edges {
    let mut out = current.clone();
    for (key, to) in remembered {
        if !named(key) && present(key) && !out.contains_key(key) {
            out.insert(key.clone(), to.clone());
        }
    }
    out
}

/// The releases that depend on each release, by `edges` with their cycles left out (a cycle
/// has no order: its releases go in any).
fn dependents(edges: &Edges) -> BTreeMap<&ReleaseKey, BTreeSet<&ReleaseKey>> {
    let cyclic: HashMap<ReleaseKey, usize> = cyclic_components(edges, &|_| true)
        .into_iter()
        .enumerate()
        .flat_map(|(i, c)| c.into_iter().map(move |k| (k, i)))
        .collect();
    let mut out: BTreeMap<&ReleaseKey, BTreeSet<&ReleaseKey>> = BTreeMap::new();
    for (from, to) in edges {
        for d in to {
            let one_cycle = cyclic.get(from).is_some_and(|c| cyclic.get(d) == Some(c));
            if !one_cycle && from != d {
                out.entry(d).or_default().insert(from);
            }
        }
    }
    out
}

/// Why an uninstall of `key` waits: the releases that depend on it and are still `present`.
fn uninstall_waits(
    key: &ReleaseKey,
    dependents: &BTreeMap<&ReleaseKey, BTreeSet<&ReleaseKey>>,
    present: &dyn Fn(&ReleaseKey) -> bool,
) -> Option<String> {
    let waiting: Vec<String> = dependents
        .get(key)
        .into_iter()
        .flatten()
        .filter(|r| present(r))
        .map(|r| name_from(key, r))
        .collect();
    (!waiting.is_empty()).then(|| {
        format!(
            "uninstalled after the releases that depend on it: waiting for {} to be uninstalled first",
            limits::few(&waiting, waiting.len())
        )
    })
}

/// The gate on Helm jobs. An install or upgrade waits until every release it depends on is
/// Ready (`not_ready` tells why one is not, None when it is); an uninstall waits while a release
/// that depends on it is still `present` (installed, or with a job). Rollbacks pass. Returns the
/// jobs let through and those held, with what each waits for.
pub(crate) fn gate(
    jobs: Vec<Job>,
    edges: &Edges,
    not_ready: &dyn Fn(&ReleaseKey) -> Option<String>,
    present: &dyn Fn(&ReleaseKey) -> bool,
) -> (Vec<Job>, Held) {
    if edges.is_empty() {
        return (jobs, Held::new());
    }
    let dependents = dependents(edges);
    let mut judged: HashMap<ReleaseKey, Option<String>> = HashMap::new();
    let mut why_not = |d: &ReleaseKey| {
        judged
            .entry(d.clone())
            .or_insert_with(|| not_ready(d))
            .clone()
    };
    let (mut go, mut held) = (Vec::new(), Held::new());
    for job in jobs {
        let waits = match &job {
            Job::Apply { release, .. } => {
                let key = &release.key;
                let waiting: Vec<(String, String)> = edges
                    .get(key)
                    .into_iter()
                    .flatten()
                    .filter_map(|d| why_not(d).map(|why| (name_from(key, d), why)))
                    .collect();
                waiting.first().map(|(name, why)| {
                    let more = match waiting.len() {
                        1 => String::new(),
                        n => format!(" and {} more", n - 1),
                    };
                    format!("waiting for dependency {name} ({why}){more}")
                })
            }
            Job::Uninstall { key, .. } => uninstall_waits(key, &dependents, present),
            Job::Rollback { .. } => None,
        };
        match waits {
            Some(why) => {
                held.insert(job.key().clone(), why);
            }
            None => go.push(job),
        }
    }
    (go, held)
}

/// Of the releases a deleted resource uninstalls (`removing`), those that must wait for a
/// release that depends on them and is still `present`, with what each waits for.
pub(crate) fn removal_order(
    removing: &BTreeSet<ReleaseKey>,
    edges: &Edges,
    present: &dyn Fn(&ReleaseKey) -> bool,
) -> Held {
    if edges.is_empty() {
        return Held::new();
    }
    let dependents = dependents(edges);
    removing
        .iter()
        .filter_map(|k| uninstall_waits(k, &dependents, present).map(|why| (k.clone(), why)))
        .collect()
}

#[cfg(test)]
mod tests;
