//! ibverbs RAW_PACKET backend (work in progress).

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
        "the verbs backend is not implemented yet".into(),
    ))
}
