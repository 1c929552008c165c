//! mlx5 Direct Verbs backend (work in progress).

pub mod control;
pub mod rings;
pub(crate) mod sys;

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
