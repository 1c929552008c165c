//! What rawq's tools share: the link watch that pktgen and fwd both run (`--on-link-down`), and
//! the ledger each run's summary is built from.
//!
//! The tools themselves are the binaries in `src/bin/`: `rawq-pktgen`, `rawq-fwd` and
//! `rawq-devinfo`.

pub mod ledger;
pub mod linkwatch;
