//! Grid's engine: hosts and their capabilities (SPEC §4). Today: the model runtime
//! (C1) and its durable journal. Every later capability joins as its own module.

pub mod journal;
pub mod model;
