//! Running the operator: wiring, leader election and the HTTP endpoints.

pub mod http;
pub mod leader;
pub mod operator;
