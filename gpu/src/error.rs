//! The GPU crate's one error type.

/// Why a GPU operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No CUDA driver library could be loaded on this machine.
    #[error("no CUDA driver library (libcuda) on this machine")]
    NoDriver,
    /// No NVRTC library could be loaded, so kernels cannot be compiled.
    #[error("no NVRTC library (libnvrtc) on this machine")]
    NoNvrtc,
    /// No cuBLASLt library could be loaded, so the wide GEMMs cannot run.
    #[error(
        "no cuBLASLt library: the dynamic loader finds no libcublasLt.so.13 (a pip install keeps it in \
         site-packages/nvidia/cu13/lib: add that folder to LD_LIBRARY_PATH)"
    )]
    NoCublasLt,
    /// The driver loaded but reported no usable device.
    #[error("CUDA driver present but no device: {0}")]
    NoDevice(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// NVRTC refused a kernel source; the log holds the compiler's messages.
    #[error("NVRTC could not compile `{kernel}` for {arch} with {options:?}:\n{log}")]
    Compile {
        /// The kernel file.
        kernel: &'static str,
        /// The target architecture.
        arch: String,
        /// Every option passed.
        options: Vec<String>,
        /// The compiler log or the error.
        log: String,
    },
    /// A kernel launch failed; the launch shape is printed with the driver's reason.
    #[error("launch of `{entry}` failed (grid {grid:?}, block {block:?}, {smem} B dynamic shared memory): {source}")]
    Launch {
        /// The kernel entry point.
        entry: String,
        /// Grid dimensions.
        grid: (u32, u32, u32),
        /// Block dimensions.
        block: (u32, u32, u32),
        /// Dynamic shared memory bytes.
        smem: u32,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// A cuBLASLt call failed; the GEMM's shape is printed with the library's status.
    #[error("cuBLASLt {call} for {shape}: {source}")]
    Blas {
        /// The cuBLASLt function.
        call: &'static str,
        /// The GEMM, e.g. `M 128 x N 2048 x K 1024`.
        shape: String,
        /// cuBLASLt's status.
        source: cudarc::cublaslt::result::CublasError,
    },
    /// A kernel's inputs break a limit the kernel relies on (checked on the host before launch).
    #[error("`{entry}`: {reason}")]
    Unsupported {
        /// The kernel entry point or path.
        entry: String,
        /// The limit and the value given.
        reason: String,
    },
    /// Kernels met input they could not use (a token id, position or slot out of range, a logit
    /// row with NaN or nothing finite), masked it and recorded it; read back after a step.
    #[error("bad input found on the device: {0}")]
    DeviceFault(String),
    /// A CUDA-graph capture ended without a graph from the driver (`cuStreamEndCapture` gave none).
    #[error("CUDA graph capture on the GPU's stream recorded no graph")]
    EmptyGraph,
    /// A kernel-cache file could not be read or written.
    #[error("kernel cache {path}: {source}")]
    Cache {
        /// The cache file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The GPU crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

/// [`Error::Unsupported`] for `entry` (a kernel entry point or path) with the limit and value.
pub(crate) fn unsupported(entry: &str, reason: String) -> Error {
    Error::Unsupported { entry: entry.to_string(), reason }
}
