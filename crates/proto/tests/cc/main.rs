//! Congestion control on a virtual bottleneck: the deterministic forms of
//! issue #16's criteria (see `sim.rs` for the model).

#[path = "../common/rng.rs"]
mod rng;
mod sim;
mod tcp;

mod criteria;
