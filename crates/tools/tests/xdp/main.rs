//! AF_XDP through the tools and the library on veth pairs: honest counts, multi-buffer jumbo
//! frames, the live-frames send engine and receive timestamps.

mod honest;
mod jumbo;
mod live;
mod rx_timestamps;
