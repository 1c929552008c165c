//! The mlx5 Direct Verbs control path: queries what the device allows (`mlx5dv_query_device`),
//! creates one queue pair's objects — CQs with `mlx5dv_create_cq` (compressed when asked and
//! supported), a RAW_PACKET QP for sending, a receive WQ with `mlx5dv_create_wq` (striding when
//! asked) — and exposes their ring memory with `mlx5dv_init_obj` as a [`QueueRings`](super::rings::QueueRings), the
//! contract with the data path.
//!
//! Sizing follows what libmlx5 does with the attributes (rdma-core providers/mlx5/verbs.c):
//! send WQEs sized for the inline header only, so the SQ has `tx_ring` WQEBBs
//! ([`check_tx_ring`]); a striding RQ asked with one data segment per stride and the receive CQ
//! holding a completion per stride ([`rq_sizing`], [`check_rx_cq`]). The minimum inline header
//! is a guess from the PCI id unless [`MIN_INLINE_ENV`] sets it ([`min_inline_for`]).
//!
//! The verbs objects are the [`crate::ibverbs`] owners, so their drop order is the same: a
//! [`KeepAlive`] holds the QP, WQ, both CQs and the memory region of one queue.
//!
//! # When the data path may ring the doorbells
//! libmlx5 itself never writes the RQ doorbell record of a RAW_PACKET QP before the QP reaches
//! RTR (the device could otherwise receive into a queue that is not set up). rawq receives on a
//! WQ, whose equivalent point is the RDY transition. `create_queue_rings` returns only after the
//! WQ is RDY and the send QP is in RTS, so **from its return on** the data path may post receive
//! WQEs and write `rq.dbrec`, and post send WQEs and write `sq.dbrec` / ring `sq.bf_reg`. No
//! traffic reaches the WQ until flow rules are installed on it (`crate::ibverbs::install_rules`),
//! so refilling the RQ before installing rules is the right order.
//!
//! The files: `device` (what `mlx5dv_query_device` reports, the minimum inline header),
//! `sizing` (ring limits checked before anything is created), `queue` (one queue's CQs, QP and
//! WQ and their rings), `port` (a port's device, PD, pool registration, queues and flow rules).

mod device;
mod port;
mod queue;
mod sizing;

pub(crate) use device::describe_dv;
pub use device::{is_mlx5, min_inline_for, query, DvDevice, MIN_INLINE_ENV};
pub use port::ControlPort;
pub use queue::{KeepAlive, QueueSpec};
pub use sizing::{
    check_rx_cq, check_tx_ring, rq_sizing, rq_sizing_scatter, scatter_segments, RqSizing,
    MAX_SCATTER, MAX_STRIDES,
};
