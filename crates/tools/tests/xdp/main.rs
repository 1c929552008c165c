//! AF_XDP through the tools and the library on veth pairs: honest counts, multi-buffer jumbo
//! frames, the live-frames send engine, receive timestamps, and AF_XDP on a machine without
//! rdma-core (the tools link no RDMA library).

mod honest;
mod jumbo;
mod live;
mod no_rdma;
mod rx_timestamps;
