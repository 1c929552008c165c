//! The options of the mlx5 backends that a [`PortConfig`](crate::PortConfig) carries: the mlx5
//! receive vocabulary (`dv`, re-exported as [`crate::dv::options`]) and, with feature `mlx5`,
//! the software device's options (`model`, re-exported by `dv::model`). Plain configuration
//! below the port's configuration, so that the configuration imports no backend.

pub(crate) mod dv;
#[cfg(feature = "mlx5")]
pub(crate) mod model;
