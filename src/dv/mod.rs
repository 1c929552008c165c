//! mlx5 Direct Verbs backend: rawq writes send WQEs, rings doorbells, polls CQEs and refills the
//! receive queue itself.
//!
//! * [`wire`]: typed views of every ring format.
//! * [`rings`]: the ring memory of one queue (the contract with the control path).
//! * [`DvQueue`](queue::DvQueue): the data path ([`tx`], [`rx`], [`cq`]) over one [`rings::QueueRings`].
//! * [`model`]: a software mlx5 device that plays the NIC's side of the rings, for tests.

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
