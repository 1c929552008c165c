//! Tests on real hardware: they run when `RAWQ_TEST_DEVICE` names an mlx5 device and print
//! "skipped" otherwise.

mod dv_control;
mod loopback;
