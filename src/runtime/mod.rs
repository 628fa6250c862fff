//! Running the operator: wiring, leader election, the HTTP endpoints and who may read them.

pub mod auth;
pub mod http;
pub mod leader;
pub mod operator;
pub mod shards;
