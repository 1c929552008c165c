//! The device's free-running clock, as a reader outside the device sees it.

/// A clock of `khz` kHz that counted 0 at an instant (the device's epoch): what the model's CQE
/// timestamps count (mlx5dv.h `struct mlx5_cqe64` `timestamp`), readable from any thread
/// without the device's lock.
#[derive(Clone, Copy, Debug)]
pub struct DeviceClock {
    epoch: std::time::Instant,
    khz: u64,
}

impl DeviceClock {
    /// A clock of `khz` kHz that counted 0 at `epoch`.
    pub fn since(epoch: std::time::Instant, khz: u64) -> DeviceClock {
        DeviceClock { epoch, khz }
    }

    /// When the clock counted 0.
    pub fn epoch(&self) -> std::time::Instant {
        self.epoch
    }

    /// The clock's frequency in kHz.
    pub fn khz(&self) -> u64 {
        self.khz
    }
}
