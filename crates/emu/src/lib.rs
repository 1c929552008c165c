//! rawq-emu: an emulated mlx5 NIC for unmodified libibverbs + libmlx5 (rdma-core 44).
//!
//! `librawq_emu.so`, preloaded (`LD_PRELOAD`) with `$SYSFS_PATH` pointing at the tree
//! [`discovery::sysfs`] writes, plays the kernel side of `/dev/infiniband/uverbs0`; the
//! device model (crate `rawq-model`, [`rawq_model::hw`]) plays the hardware, in the same process, over the
//! rings libmlx5 allocates. `scripts/emu.sh` sets it all up.
//!
//! The crate is shaped like the kernel side it emulates (and like the kernel's soft-RoCE,
//! `drivers/infiniband/sw/rxe`):
//!
//! * [`discovery`]: the sysfs tree; the device node is answered by the interposer
//!   (`interpose.c` for the libc entry points, [`interpose`] for their Rust side).
//! * [`cmd`]: the uverbs write() decoder, one entry point per command, validating like
//!   `uverbs_cmd.c` and `mlx5_ib`.
//! * [`objects`]: the handle tables; [`device`]: the device and its open files.
//! * [`mmap`]: UAR and clock pages; [`events`]: completion channels and async events;
//!   [`rings`]: the application's rings handed to the model.
//! * [`caps`]: every limit and capability, read by all of the above.
//!
//! Nothing starts when the library is loaded (it may be preloaded into a shell, cargo or
//! rustc): the device is made at the first open of its node.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cable;
pub mod caps;
pub mod cmd;
pub mod config;
pub mod device;
pub mod discovery;
pub mod events;
pub mod interpose;
pub mod link;
pub mod logger;
pub mod mmap;
pub mod objects;
pub mod pin;
pub mod rings;
pub mod rxgen;
mod sys;
#[allow(missing_docs)]
pub mod uapi;
pub mod umem;

/// An errno value.
pub type Errno = i32;
