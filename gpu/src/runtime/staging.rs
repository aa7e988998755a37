//! Page-locked staging for host-to-device copies that must not wait for the device.
//!
//! A copy from pageable host memory may synchronise with its stream before it starts (CUDA's API
//! synchronisation rules: the driver stages pageable bytes itself and may wait to do so), which
//! would make the host wait for all the work queued before it: with a step in flight, the next
//! step's inputs could not be queued until the device had finished it. Here the host writes the
//! bytes into page-locked memory and queues the DMA from there, which never waits.
//!
//! Copies come in batches (one step's inputs). Two areas are used in turn, a batch each; before
//! an area is written again, the event recorded behind its last batch is waited for, so no byte
//! is overwritten while a queued copy has still to read it. With at most one batch queued ahead
//! of the device, that wait is already over.

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaStream, DevicePtrMut, DeviceRepr, PinnedHostSlice, ValidAsZeroBits};

use crate::error::{Error, Result};
use crate::runtime::Gpu;

fn refuse(reason: String) -> Error {
    Error::Unsupported { entry: "staged copy".into(), reason }
}

/// Two page-locked areas of `T` for batches of copies to the device.
pub struct Staging<T> {
    stream: Arc<CudaStream>,
    areas: [PinnedHostSlice<T>; 2],
    copied: [CudaEvent; 2],
    area: usize,
    used: usize,
}

impl<T: DeviceRepr + ValidAsZeroBits + Copy> Staging<T> {
    /// Two areas of `len` values each (at least 1).
    pub fn new(gpu: &Gpu, len: usize) -> Result<Self> {
        let event = || gpu.context().new_event(None);
        Ok(Self {
            stream: gpu.stream().clone(),
            areas: [gpu.pinned(len)?, gpu.pinned(len)?],
            copied: [event()?, event()?],
            area: 0,
            used: 0,
        })
    }

    /// Starts a batch in the other area, once the copies of that area's last batch have run.
    pub fn begin(&mut self) -> Result<()> {
        self.area ^= 1;
        self.copied[self.area].synchronize()?;
        self.used = 0;
        Ok(())
    }

    /// Queues the copy of `src` into `dst` through the batch's area; refuses a batch past the
    /// area's length.
    pub fn copy<Dst: DevicePtrMut<T>>(&mut self, src: &[T], dst: &mut Dst) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let area = &mut self.areas[self.area];
        let end = self.used + src.len();
        if end > area.len() {
            return Err(refuse(format!("{} values after {}, in an area of {}", src.len(), self.used, area.len())));
        }
        if dst.len() < src.len() {
            return Err(refuse(format!("{} values into a buffer of {}", src.len(), dst.len())));
        }
        // The area's own event is never recorded (event tracking is off): this does not wait.
        let host = &mut area.as_mut_slice()?[self.used..end];
        host.copy_from_slice(src);
        self.stream.memcpy_htod(host, dst)?;
        self.used = end;
        Ok(())
    }

    /// Ends the batch: the area is not written again before its copies have run.
    pub fn end(&mut self) -> Result<()> {
        Ok(self.copied[self.area].record(&self.stream)?)
    }
}
