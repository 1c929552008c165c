//! The model's own error type: what a device call refuses. rawq converts it into `rawq::Error`
//! where its glue calls the model; the emulator maps it to the kernel's errno.

use std::io;

/// A refusal of the device model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value or a device-object argument is out of range or inconsistent.
    #[error("bad configuration: {0}")]
    Config(String),

    /// A named thing (an interface the wire or netdev is to use) does not exist.
    #[error("{kind} {name:?} not found; available: {available}")]
    NotFound {
        /// "interface" or "TAP interface".
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// What exists instead, or how to make it.
        available: String,
    },

    /// The device does not support something asked of it.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// An operating-system call failed (the wire's socket, the netdev, ring memory).
    #[error("{op} failed: {source}")]
    Os {
        /// The operation that failed.
        op: &'static str,
        /// The underlying OS error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// An OS error from `op`.
    pub fn os(op: &'static str, source: io::Error) -> Error {
        Error::Os { op, source }
    }

    /// Like [`Error::os`] for the errno of the last failed libc call.
    pub fn last_os(op: &'static str) -> Error {
        Error::os(op, io::Error::last_os_error())
    }
}

/// `Result` with the model's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
