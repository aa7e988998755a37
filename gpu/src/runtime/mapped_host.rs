//! Page-locked host memory mapped into the device's address space, which a kernel writes
//! directly (`step_results.cu`: a step's tokens and fault word without a copy on the stream).

use cudarc::driver::{sys, DeviceRepr, PinnedHostSlice, ValidAsZeroBits};

use crate::error::Result;
use crate::runtime::Gpu;

/// Page-locked host memory that kernels write at `device`, its address in the device's space.
pub struct MappedHost<T> {
    host: PinnedHostSlice<T>,
    /// The address kernels write it at.
    pub device: u64,
}

impl<T: DeviceRepr + ValidAsZeroBits> MappedHost<T> {
    /// `n` zeroed values (at least 1), mapped.
    pub fn new(gpu: &Gpu, n: usize) -> Result<Self> {
        let mut host = gpu.pinned_with_flags::<T>(n, sys::CU_MEMHOSTALLOC_DEVICEMAP)?;
        let ptr = host.as_mut_ptr()?;
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is the start of a live page-locked allocation made with DEVICEMAP.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, ptr.cast(), 0) }.result()?;
        Ok(Self { host, device })
    }

    /// The values, as the last launch that wrote them left them once it has completed (wait for
    /// an event recorded after it first).
    pub fn as_slice(&self) -> Result<&[T]> {
        Ok(self.host.as_slice()?)
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.host.len()
    }

    /// Whether it holds no value (never: at least one is allocated).
    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }
}
