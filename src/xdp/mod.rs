//! AF_XDP backend (work in progress; see issue "AF_XDP backend").

use std::any::Any;

use crate::error::{Error, Result};
use crate::mempool::Mempool;
use crate::port::{PortConfig, PortInfo};
use crate::queue::Queue;

pub mod bpf;

pub(crate) fn open(
    _cfg: &PortConfig,
    _pool: &Mempool,
) -> Result<(Vec<Queue>, PortInfo, Box<dyn Any + Send>)> {
    Err(Error::Unsupported(
        "the AF_XDP backend is not implemented yet".into(),
    ))
}
