//! The GPU crate's one error type.

/// Why a GPU operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No CUDA driver library could be loaded on this machine.
    #[error("no CUDA driver library (libcuda) on this machine")]
    NoDriver,
    /// The driver loaded but reported no usable device.
    #[error("CUDA driver present but no device: {0}")]
    NoDevice(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
}

/// The GPU crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
