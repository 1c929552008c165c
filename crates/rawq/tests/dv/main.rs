//! The mlx5 Direct Verbs data path on the software device model: error injection, the wire
//! writers and readers against the vendor's own helpers (a C oracle), the model bridged to a
//! veth, `alloc_burst` meeting the send completions, and transmit counters.
//! (The end-to-end model test with its counting allocator is `tests/dv_model.rs`, alone.)

mod close;
mod errors;
mod fwd_tx_counters;
mod oracle;
mod queue_alloc;
mod veth;
