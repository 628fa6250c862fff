//! The hub reconciler, the state it shares with its background loops, those loops, and registration reload.

pub mod claims;
pub mod context;
pub mod drift;
pub mod drift_checks;
pub mod events;
#[cfg(test)]
mod fixtures;
pub mod interest;
pub mod loops;
pub mod reconcile;
pub mod reload;
pub mod shard;

/// Runs CPU-heavy work of `size` units (charts named, Controllers) with `block_in_place` when it
/// is big and the runtime is multi-threaded, so the worker's other tasks (lease renewal among
/// them) move to another thread meanwhile; in place otherwise (tests use current-thread runtimes,
/// where `block_in_place` is not allowed).
pub fn offload<T>(size: usize, work: impl FnOnce() -> T) -> T {
    const BIG: usize = 64;
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if size >= BIG && multi {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}
