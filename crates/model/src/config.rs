//! The device's plain configuration types: its wire, its kernel netdev, the striding RQ geometry
//! and the mini-CQE formats (the model's own; rawq's `config.rs` has the driver's, and rawq's
//! glue converts one into the other when it opens a port on the model).

/// Striding (multi-packet) RQ geometry, as passed to `mlx5dv_create_wq` (mlx5dv.h
/// `struct mlx5dv_striding_rq_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Striding {
    /// log2 of the number of strides per WQE.
    pub log_num_strides: u8,
    /// log2 of the stride size in bytes.
    pub log_stride_size: u8,
    /// The device writes 2 bytes of zero padding before each packet.
    pub two_byte_shift: bool,
}

/// Mini-CQE format of a compressed CQ (mlx5dv.h `MLX5DV_CQE_RES_FORMAT_HASH` /
/// `MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MiniCqeFormat {
    /// RSS hash + byte count (cyclic RQs).
    Hash,
    /// Checksum + stride index + byte count (striding RQs).
    CsumStrideIdx,
}

/// What a modelled port's wire is connected to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelWire {
    /// Frames sent come back to the same port.
    Loopback,
    /// Frames sent are counted and discarded; nothing is received.
    Sink,
    /// An `AF_PACKET` socket bound to a Linux interface (opened in the calling thread's network
    /// namespace): frames sent go out of that interface, frames it receives come in.
    Bridge {
        /// Interface name.
        ifname: String,
    },
}

/// Where a port's kernel netdev is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetdevPath {
    /// A TAP interface (created beforehand, e.g. `ip tuntap add NAME mode tap`), attached with
    /// `TUNSETIFF` (`IFF_TAP | IFF_NO_PI`).
    Tap {
        /// Interface name.
        ifname: String,
    },
}
