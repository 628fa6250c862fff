//! One read of a release's live objects in its member cluster: each object of the deployed manifest is fetched once (a get per object, at most `drift::MAX_MANIFEST_OBJECTS`), compared with its manifest for drift and judged for health.

use dashmap::DashMap;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind},
    discovery::{self, Scope},
};
use serde_json::Value;

use crate::{
    api::crd::DriftIgnore,
    api::key::{ClusterName, ReleaseKey},
    api::policy::Impersonation,
    clusters::identity::acting_as,
    observe::drift::{Error, ObjectDrift, ObjectId, Result, manifest_objects, object_drift},
    observe::records::decode_manifest,
    plan::health::{Compiled, Judged, Rules},
};

/// What one process learns once for its checks: the API resources of the kinds met in
/// manifests, per cluster, so each kind is discovered once, and the charts' health expressions,
/// compiled once per set.
#[derive(Default)]
pub(crate) struct Kinds {
    known: DashMap<(ClusterName, String, String), (ApiResource, bool)>,
    /// Health expressions compiled.
    pub(crate) compiled: Compiled,
}

impl Kinds {
    /// The API resource of `id`'s kind in `cluster` and whether it is namespaced.
    async fn resolve(
        &self,
        client: &Client,
        cluster: &ClusterName,
        id: &ObjectId,
    ) -> kube::Result<(ApiResource, bool)> {
        let key = (cluster.clone(), id.api_version.clone(), id.kind.clone());
        if let Some(known) = self.known.get(&key) {
            return Ok(known.clone());
        }
        let (group, version) = id
            .api_version
            .split_once('/')
            .unwrap_or(("", &id.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &id.kind);
        let (resource, capabilities) = discovery::pinned_kind(client, &gvk).await?;
        let found = (resource, capabilities.scope == Scope::Namespaced);
        self.known.insert(key, found.clone());
        Ok(found)
    }
}

/// What a check is asked to do with the objects it reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked<'a> {
    /// Compare them with the manifest (drift detection is not disabled); when false only the
    /// objects of kinds `health` names are read.
    pub(crate) compare: bool,
    /// Fields left out of the comparison.
    pub(crate) ignore: &'a [DriftIgnore],
    /// The chart's health expressions, compiled; every object read is judged, by them or by
    /// kstatus's rules.
    pub(crate) health: &'a Rules,
}

/// What one check found: the objects that drifted, and the health of those judged.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Checked {
    /// Objects that differ from the manifest (or that the identity may not read), in order.
    pub(crate) drift: Vec<ObjectDrift>,
    /// Objects judged not current, bounded.
    #[serde(default)]
    pub(crate) health: Judged,
}

/// Reads release `key`'s live objects of the manifest of its `revision`, compares them with it
/// and judges their health, as `asked`. The record and the objects are read as `identity` (the
/// user and groups Helm acts as for the release) when it has one, so a check reads nothing that
/// identity may not read: an object it may not read is reported as such, never fetched with the
/// operator's rights; kinds are discovered with the operator's own `member` client. Secret
/// values are compared, never returned: only paths are.
pub(crate) async fn check(
    member: &Client,
    identity: Option<&Impersonation>,
    kinds: &Kinds,
    (key, revision): (&ReleaseKey, i64),
    asked: Asked<'_>,
) -> Result<Checked> {
    let record = format!("sh.helm.release.v1.{}.v{revision}", key.release);
    let undecodable = |reason: String| Error::Undecodable {
        key: key.clone(),
        record: record.clone(),
        reason,
    };
    let reader = match identity {
        Some(who) => acting_as(member, who).map_err(|reason| Error::Identity {
            key: key.clone(),
            reason,
        })?,
        None => member.clone(),
    };
    let secrets: Api<Secret> = Api::namespaced(reader.clone(), &key.scope.namespace);
    let secret = secrets.get(&record).await.map_err(|e| Error::Record {
        key: key.clone(),
        record: record.clone(),
        source: Box::new(e),
    })?;
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get("release"))
        .ok_or_else(|| undecodable("no data.release".into()))?;
    let manifest = decode_manifest(&data.0).map_err(undecodable)?;
    let objects = manifest_objects(&manifest).map_err(undecodable)?;
    drop(manifest);
    let mut out = Checked::default();
    for desired in objects {
        let Some(mut id) = ObjectId::of(&desired) else {
            continue;
        };
        if !asked.compare && !asked.health.names(&id.api_version, &id.kind) {
            continue;
        }
        let live_error = |e: kube::Error, id: &ObjectId| Error::Live {
            key: key.clone(),
            object: format!("{}/{}", id.kind, id.name),
            source: Box::new(e),
        };
        let (resource, namespaced) = kinds
            .resolve(member, &key.scope.cluster, &id)
            .await
            .map_err(|e| live_error(e, &id))?;
        let api: Api<DynamicObject> = if namespaced {
            let namespace = id
                .namespace
                .get_or_insert_with(|| key.scope.namespace.clone())
                .clone();
            Api::namespaced_with(reader.clone(), &namespace, &resource)
        } else {
            id.namespace = None;
            Api::all_with(reader.clone(), &resource)
        };
        let live = match (api.get_opt(&id.name).await, identity) {
            (Ok(live), _) => live,
            (Err(kube::Error::Api(s)), Some(who)) if s.code == 403 => {
                out.drift.push(ObjectDrift::not_readable(id, &who.user));
                continue;
            }
            (Err(e), _) => return Err(live_error(e, &id)),
        };
        let live = live.map(|l| serde_json::to_value(l).unwrap_or(Value::Null));
        if let Some(verdict) = live.as_ref().and_then(|l| asked.health.judge(l)) {
            out.health.add(id.clone(), verdict);
        }
        if !asked.compare {
            continue;
        }
        if let Some(drift) = object_drift(id, &desired, live.as_ref(), asked.ignore) {
            out.drift.push(drift);
        }
    }
    out.drift.sort_by(|a, b| a.id.cmp(&b.id));
    out.health = out.health.finish();
    Ok(out)
}
