//! The scale envelope's members divided between C Controllers on one operator, held for a caller's own measurements (the fleet view's benchmark) until [`Divided::end`].
//!
//! The members join as in a run on shards (member i in part i % C, labelled so); one operator,
//! with no shards, then gets the C parts' Controllers, each delivering one release to the members
//! of its part, and the run waits until each one's work is taken. The caller measures what it
//! wants against the operator and the members, then ends it: the Controllers deleted (every
//! release uninstalled by its member), the members removed, the operator stopped.

use futures::future::join_all;
use serde_json::Value;

use super::{
    super::{lab::Lab, operator::Operator, simulated::Fleet},
    Envelope, PART_LABEL, PHASE, Run, progress,
    shards::Part,
    spec,
};

/// The members joined and divided between Controllers whose work is taken, until [`Divided::end`].
#[allow(dead_code)] // used by some test crates only
pub struct Divided<'a> {
    run: Run<'a>,
    fleet: Fleet,
    parts: Vec<Part>,
}

impl Envelope {
    /// Joins the members on `lab` and divides them between `controllers` Controllers on one
    /// operator; returns once every Controller's work is taken.
    #[allow(dead_code)] // used by some test crates only
    pub async fn divided<'a>(&'a self, lab: &'a Lab, controllers: usize) -> Divided<'a> {
        let mut run = Run::new(self, lab).await;
        run.start_operators(1, &[]).await;
        let fleet = run.join(Some(controllers)).await;
        progress("members joined", &run);
        let parts = run.parts(1, controllers);
        let before = run.counters().await;
        for part in &parts {
            let selector = format!("{}-{}", run.label, part.index);
            let spec = spec(&part.namespace, (PART_LABEL, &selector), "3");
            run.hub.apply(&part.name, spec).await;
        }
        run.taken_parts(&parts).await;
        let costs = run.costs("converge", before).await;
        run.figures.extend(costs);
        progress(
            &format!("the work of each of {controllers} Controllers taken"),
            &run,
        );
        Divided { run, fleet, parts }
    }
}

#[allow(dead_code)] // used by some test crates only
impl Divided<'_> {
    /// The operator.
    pub fn operator(&self) -> &Operator {
        self.run.operator()
    }

    /// The hub namespace of the Controllers.
    pub fn hub_namespace(&self) -> &str {
        &self.run.hub.namespace
    }

    /// The members' names, member i at index i.
    pub fn members(&self) -> &[String] {
        &self.run.names
    }

    /// The simulated members.
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// The Controllers' names, part j's at index j.
    pub fn controllers(&self) -> Vec<String> {
        self.parts.iter().map(|p| p.name.clone()).collect()
    }

    /// The costs of the members' join and of the Controllers' convergence (`join_*`,
    /// `converge_*`, as a run's).
    pub fn figures(&self) -> Value {
        Value::Object(self.run.figures.clone())
    }

    /// Deletes the Controllers (each release uninstalled by its member), removes the members and
    /// stops the operator; returns what went wrong in the members.
    pub async fn end(mut self) -> Vec<String> {
        let deletes = self
            .parts
            .iter()
            .map(|p| self.run.hub.delete_and_wait_gone_within(&p.name, PHASE));
        join_all(deletes).await;
        let errors = self.fleet.errors();
        self.fleet.stop().await;
        self.run.remove().await;
        errors
    }
}
