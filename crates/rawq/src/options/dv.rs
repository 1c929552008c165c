//! The mlx5 receive vocabulary of rawq, shared by the DV backend and the software device
//! (`Backend::Model`): what a port asks for ([`DvRxOptions`]: the RQ type [`RqType`] and the
//! CQE compression [`CqeComp`], as DPDK's mlx5 devargs choose them) and what it becomes on the
//! rings ([`Striding`] geometry, [`MiniCqeFormat`]). The one conversion from the first to the
//! second is here ([`DvRxOptions::striding`], [`CqeComp::format`]); the model's glue
//! (`crate::dv::model`) converts these once more into the device crate's own types.
//!
//! Plain configuration, built in every feature set ([`PortConfig::dv_rx`](crate::config::PortConfig::dv_rx)
//! carries it): it imports nothing but [`crate::error`].

use crate::error::{Error, Result};

/// Receive queue type of the mlx5 backends (`dv`, `model`), as DPDK's mlx5 `mprq_en` devarg
/// chooses it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RqType {
    /// One WQE per packet buffer (a cyclic RQ).
    #[default]
    Cyclic,
    /// A striding (multi-packet) RQ with 2^`log_num_strides` strides per WQE, each stride a
    /// pool buffer.
    Striding {
        /// log2 of the strides per WQE (3 or 4: 8 or 16 strides).
        log_num_strides: u8,
    },
}

impl std::str::FromStr for RqType {
    type Err = Error;
    /// `cyclic`, `striding` (8 strides per WQE) or `striding:N` (N = 8 or 16).
    fn from_str(s: &str) -> Result<RqType> {
        let bad = || {
            Error::Config(format!(
                "RQ type {s:?}: use cyclic, striding, striding:8 or striding:16"
            ))
        };
        match s.trim() {
            "cyclic" => Ok(RqType::Cyclic),
            "striding" => Ok(RqType::Striding { log_num_strides: 3 }),
            t => {
                let n: u32 = t
                    .strip_prefix("striding:")
                    .ok_or_else(bad)?
                    .parse()
                    .map_err(|_| bad())?;
                match n {
                    8 => Ok(RqType::Striding { log_num_strides: 3 }),
                    16 => Ok(RqType::Striding { log_num_strides: 4 }),
                    _ => Err(bad()),
                }
            }
        }
    }
}

/// Receive CQE compression of the mlx5 backends, as DPDK's mlx5 `rxq_cqe_comp_en` devarg
/// chooses it: off, or on with one mini-CQE format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeComp {
    /// Every packet gets a full 64-byte CQE.
    Off,
    /// Mini-CQEs carry the RSS hash (cyclic RQ only: they have no stride index).
    Hash,
    /// Mini-CQEs carry the checksum and the stride index.
    Csum,
}

impl std::str::FromStr for CqeComp {
    type Err = Error;
    fn from_str(s: &str) -> Result<CqeComp> {
        match s.trim() {
            "off" => Ok(CqeComp::Off),
            "hash" => Ok(CqeComp::Hash),
            "csum" => Ok(CqeComp::Csum),
            _ => Err(Error::Config(format!(
                "CQE compression {s:?}: use off, hash or csum"
            ))),
        }
    }
}

/// How the mlx5 DV backend sets up its receive side ([`PortConfig::dv_rx`](crate::config::PortConfig::dv_rx)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DvRxOptions {
    /// Cyclic or striding RQ.
    pub rq: RqType,
    /// CQE compression; `None`: the device's choice for the RQ type (hash for a cyclic RQ,
    /// csum for a striding one), off when the device has neither.
    pub cqe_comp: Option<CqeComp>,
}

impl DvRxOptions {
    /// Checks the combination: hash mini-CQEs have no stride index, so a striding RQ cannot use
    /// them.
    ///
    /// # Errors
    /// [`Error::Config`] for a striding RQ with hash compression, saying what to use.
    pub fn check(&self) -> Result<()> {
        if matches!(self.rq, RqType::Striding { .. }) && self.cqe_comp == Some(CqeComp::Hash) {
            return Err(Error::Config(
                "a striding RQ cannot use hash CQE compression (hash mini-CQEs carry no stride \
                 index): use --cqe-comp csum or off"
                    .into(),
            ));
        }
        Ok(())
    }

    /// log2 of the stride size for pool buffers of `buf_size` bytes: the largest power of two
    /// that fits a buffer behind rawq's buffer header (half the buffer), within the mlx5
    /// limits of 2^6..2^13 bytes.
    pub fn log_stride_size(buf_size: u32) -> u8 {
        let half = (buf_size / 2).max(64);
        (31 - half.leading_zeros()).clamp(6, 13) as u8
    }
}

impl CqeComp {
    /// The mini-CQE format this compression asks for; `None` for [`CqeComp::Off`].
    pub fn format(self) -> Option<MiniCqeFormat> {
        match self {
            CqeComp::Off => None,
            CqeComp::Hash => Some(MiniCqeFormat::Hash),
            CqeComp::Csum => Some(MiniCqeFormat::CsumStrideIdx),
        }
    }
}

impl DvRxOptions {
    /// The striding RQ geometry these options ask for, over pool buffers of `buf_size` bytes
    /// (each stride a buffer: [`DvRxOptions::log_stride_size`]); `None` for a cyclic RQ.
    pub fn striding(&self, buf_size: u32) -> Option<Striding> {
        match self.rq {
            RqType::Cyclic => None,
            RqType::Striding { log_num_strides } => Some(Striding {
                log_num_strides,
                log_stride_size: DvRxOptions::log_stride_size(buf_size),
                two_byte_shift: false,
            }),
        }
    }
}

/// Striding (multi-packet) RQ geometry, as passed to `mlx5dv_create_wq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Striding {
    /// log2 of the number of strides per WQE.
    pub log_num_strides: u8,
    /// log2 of the stride size in bytes.
    pub log_stride_size: u8,
    /// The device writes 2 bytes of zero padding before each packet.
    pub two_byte_shift: bool,
}

/// Mini-CQE format of a compressed CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MiniCqeFormat {
    /// RSS hash + byte count (cyclic RQs).
    Hash,
    /// Checksum + stride index + byte count (striding RQs).
    CsumStrideIdx,
}

#[cfg(test)]
mod dv_rx_tests {
    use super::*;

    #[test]
    fn rq_and_cqe_comp_parse_and_combine() {
        assert_eq!("cyclic".parse::<RqType>().unwrap(), RqType::Cyclic);
        assert_eq!(
            "striding:16".parse::<RqType>().unwrap(),
            RqType::Striding { log_num_strides: 4 }
        );
        assert!("striding:4".parse::<RqType>().is_err());
        assert_eq!("csum".parse::<CqeComp>().unwrap(), CqeComp::Csum);
        assert!("zip".parse::<CqeComp>().is_err());
        let bad = DvRxOptions {
            rq: RqType::Striding { log_num_strides: 3 },
            cqe_comp: Some(CqeComp::Hash),
        };
        assert!(bad
            .check()
            .unwrap_err()
            .to_string()
            .contains("stride index"));
        assert_eq!(DvRxOptions::log_stride_size(2048), 10);
        assert_eq!(DvRxOptions::log_stride_size(512), 8);
    }
}
