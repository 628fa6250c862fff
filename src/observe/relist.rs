//! The watcher that lists afresh after every error, after a capped exponential pause.

use std::fmt::Debug;

use futures::{Stream, StreamExt};
use kube::{Api, Resource, runtime::watcher};
use serde::de::DeserializeOwned;

/// Longest pause before a watch that failed lists again. Short, because a cluster has only a
/// handful of watches (not one set per namespace), so retrying an unreachable cluster costs
/// little, while a long pause delays seeing a cluster that came back (and a rollout waiting on it).
const RELIST_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// A watcher that lists afresh after every error, after a capped exponential pause. kube's own
/// watcher resumes from its last resource version after an error and then says nothing until
/// something changes, so a consumer that stopped trusting its picture at the error would never
/// learn that it is in sync again; the `InitDone` of the new list tells it.
pub(crate) fn relisting_watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    type Inner<K> = futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;
    futures::stream::unfold((None::<Inner<K>>, 0u32), move |(stream, failures)| {
        let (api, config) = (api.clone(), config.clone());
        async move {
            let mut stream = match stream {
                Some(s) => s,
                None => {
                    if failures > 0 {
                        let pause = std::time::Duration::from_millis(500)
                            .saturating_mul(2u32.saturating_pow(failures - 1))
                            .min(RELIST_BACKOFF_MAX);
                        tokio::time::sleep(pause).await;
                    }
                    watcher(api, config).boxed()
                }
            };
            match stream.next().await {
                Some(Ok(event)) => {
                    let failures = if matches!(event, watcher::Event::InitDone) {
                        0
                    } else {
                        failures
                    };
                    Some((Ok(event), (Some(stream), failures)))
                }
                Some(Err(e)) => Some((Err(e), (None, failures.saturating_add(1)))),
                None => Some((
                    Err(watcher::Error::NoResourceVersion),
                    (None, failures.saturating_add(1)),
                )),
            }
        }
    })
}
