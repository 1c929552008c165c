//! mlx5 Direct Verbs backend: rawq writes send WQEs, rings doorbells, polls CQEs and refills the
//! receive queue itself.
//!
//! * [`wire`]: typed views of every ring format (checked byte for byte against `mlx5dv.h` by
//!   `tests/dv_oracle.rs`).
//! * [`rings`]: the ring memory of one queue pair: the contract with the control path.
//! * [`queue::DvQueue`]: the data path over one [`rings::QueueRings`]: [`tx`] (SEND and enhanced
//!   multi-packet WQEs, completions every N WQEs, one doorbell per burst), [`rx`] (cyclic and
//!   striding RQs, compressed CQEs), [`cq`] (ownership test, consumer index). Error completions go
//!   through a [`queue::Recover`] hook, so the data path depends on neither the verbs control
//!   path nor the model.
//! * [`model`]: a software mlx5 NIC that plays the device's side of the rings (strict WQE checks,
//!   error CQEs, RX metadata, compression, a wire that can be bridged to a veth), for tests and
//!   for [`Backend::Model`](crate::Backend).
//!
//! Cost, measured with `benches/dv.rs` (model completing inline, one core): a 32-packet
//! `tx_burst` of 64-byte packets costs about 1.6x a bare loop storing 64 bytes per packet
//! (min inline 0; 2.5x with the 18-byte inline header); `scripts/callgrind-dv.sh` counts about 78
//! instructions per packet on send (completion handling included) and 151 on receive (refill
//! included).

pub mod cq;
mod mmio;
pub mod model;
pub mod queue;
pub mod rings;
pub mod rx;
pub mod tx;

pub mod wire;

use std::any::Any;

use crate::error::{Error, Result};
use crate::mempool::Mempool;
use crate::port::{PortConfig, PortInfo};
use crate::queue::Queue;

pub(crate) fn open(
    _cfg: &PortConfig,
    _pool: &Mempool,
) -> Result<(Vec<Queue>, PortInfo, Box<dyn Any + Send>)> {
    Err(Error::Unsupported(
        "the mlx5 DV backend is not implemented yet".into(),
    ))
}
