//! Glue to the crates a Rust network program is built on, each behind its own cargo feature:
//!
//! * [`smoltcp`](mod@self::smoltcp) (feature `smoltcp`): a smoltcp `phy::Device` over a queue,
//!   so that smoltcp's TCP/UDP/ICMP sockets run over a rawq port;
//! * [`tokio`](mod@self::tokio) (feature `tokio`): [`AsyncQueue`](self::tokio::AsyncQueue), a
//!   queue whose receive bursts are awaited (the task sleeps in the runtime until frames come);
//! * serde (feature `serde`): `Serialize` / `Deserialize` on the stats, info and counter types,
//!   derived where the types are (nothing here).
//!
//! docs/backends.md ("Adapters") shows each at work.

// The links above lead to modules that exist only with their features (docs.rs builds them
// all); without them the docs of the other features build without the links' targets.
#![cfg_attr(
    not(all(feature = "smoltcp", feature = "tokio")),
    allow(rustdoc::broken_intra_doc_links)
)]

#[cfg(feature = "smoltcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "smoltcp")))]
pub mod smoltcp;

// Registers a descriptor with the runtime's reactor (tokio's `AsyncFd::register_with_interest`
// is unsafe for I/O safety): one `unsafe` block, with its SAFETY comment.
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
#[allow(unsafe_code)]
pub mod tokio;
