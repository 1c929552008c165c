//! What rawq's tools share: output that never panics (`out`), the checks of `--cores`, the link
//! watch that pktgen and fwd both run (`--on-link-down`), and the ledger each run's summary is
//! built from.
//!
//! The tools themselves are the binaries in `src/bin/`: `rawq-pktgen`, `rawq-fwd` and
//! `rawq-devinfo`.

#[macro_use]
pub mod out;
pub mod cpus;
pub mod fault;
pub mod generate;
pub mod ledger;
pub mod linkwatch;
