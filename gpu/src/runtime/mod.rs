//! The device, its stream, and kernels loaded once.
//!
//! [`Gpu`] is what every kernel wrapper is handed: the context of device 0, one stream on which
//! all of an engine's work is ordered (a stream of its own, not the legacy default stream, so
//! CUDA-graph capture works), and a table of loaded modules so each `.cu` file is compiled and
//! loaded once per process. Launch errors come back as [`Error::Launch`] with the launch shape.
//! Work on other streams must be ordered by hand: cudarc's event tracking is off. [`graph`]
//! captures the stream's launches into a replayable [`Graph`]; [`copy_list`] queues a batch of
//! copies to the device as one upload through page-locked memory and one launch, so they never
//! wait for it. Per-device state that others define (the cuBLASLt handle and its workspace,
//! `crate::gemm::CublasLt::shared`) is opened once per device too, in [`Gpu::shared`]'s slots, so
//! this module names none of their types.

pub mod copy_list;
pub mod cubin;
pub mod graph;
pub mod kernel_cache;
pub mod launch;
pub mod mapped_host;
mod nvrtc;
pub mod step_trace;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PinnedHostSlice,
    ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use crate::device::{probe, DeviceInfo};
use crate::error::{Error, Result};
pub use copy_list::CopyList;
pub use graph::Graph;
pub use kernel_cache::{nvrtc_available, Kernel};
pub use launch::{programmatic, with_programmatic, KernelArg, Launch};
pub use mapped_host::MappedHost;
pub use step_trace::{LaunchTrace, MarkTimes, SmLoad, SmNeighbours, TraceWindow};

/// Device 0 with one stream and a module table.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    arch: &'static str,
    modules: Mutex<HashMap<&'static str, Arc<CudaModule>>>,
    /// [`Gpu::shared`]'s values, one per type.
    shared: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// Where the kernels stamp their launches, when the environment asks ([`step_trace`]).
    trace: Option<step_trace::StepTrace>,
    /// The preferred shared-memory carveout every entry point gets ([`parse_carveout`]).
    carveout: Option<i32>,
}

/// `ASYNCT_CARVEOUT`'s value, for a measurement: the percent of an SM's unified L1 and shared
/// memory that every entry point [`Gpu::function`] hands out prefers as shared memory
/// (`CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`); unset, the driver picks per kernel.
/// It asks whether consecutive kernels of different splits lose a programmatic launch's overlap
/// (RESULTS run 307's reading); no one split beat the driver's choice at 1 or 32 decode rows
/// (runs 311-312: L1 lost under the kernels that need less shared memory costs more).
pub fn parse_carveout(value: Option<&str>) -> Result<Option<i32>> {
    let Some(v) = value else { return Ok(None) };
    match v.parse::<i32>() {
        Ok(p) if (0..=100).contains(&p) => Ok(Some(p)),
        _ => Err(Error::Unsupported {
            entry: "ASYNCT_CARVEOUT".to_string(),
            reason: format!("must be a percent from 0 to 100, not {v:?}"),
        }),
    }
}

impl Gpu {
    /// Opens device 0, or says why there is none.
    pub fn new() -> Result<Arc<Self>> {
        let info = probe()?;
        let ctx = CudaContext::new(0)?;
        // SAFETY: nothing has been allocated or launched on this context yet. All of an engine's
        // work is ordered on its one stream, so cudarc's per-buffer events (which order work across
        // streams) buy nothing; they would cost host time on every launch and break graph capture.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        launch::configure(info.compute_capability);
        let arch: &'static str = Box::leak(info.nvrtc_arch().into_boxed_str());
        let trace = step_trace::StepTrace::from_env(&stream)?;
        let carveout = parse_carveout(std::env::var("ASYNCT_CARVEOUT").ok().as_deref())?;
        Ok(Arc::new(Self {
            ctx,
            stream,
            info,
            arch,
            modules: Mutex::new(HashMap::new()),
            shared: Mutex::new(HashMap::new()),
            trace,
            carveout,
        }))
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The NVRTC target, e.g. `sm_90a`.
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    /// The context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream all work is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Starts a step-trace window: the launches queued from here on are what
    /// [`Gpu::step_trace`] returns. `false` (and nothing done) where the kernels do not stamp
    /// their launches ([`step_trace`]; `ASYNCT_STEP_TRACE=1`).
    pub fn start_step_trace(&self) -> Result<bool> {
        self.trace.as_ref().map_or(Ok(false), |t| t.reset(&self.stream).map(|()| true))
    }

    /// The launches stamped since [`Gpu::start_step_trace`] (synchronising the stream); `None`
    /// where the trace is off.
    pub fn step_trace(&self) -> Result<Option<TraceWindow>> {
        self.trace.as_ref().map(|t| t.read(&self.stream)).transpose()
    }

    /// The entry point `entry` of `kernel`, compiling and loading the module on first use.
    pub fn function(&self, kernel: &Kernel, entry: &str) -> Result<CudaFunction> {
        use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
        let f = self.module(kernel, &mut || {})?.load_function(entry)?;
        if let Some(percent) = self.carveout {
            f.set_attribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent)?;
        }
        Ok(f)
    }

    /// Loads every one of `kernels` now, compiling those the disk cache lacks; before each
    /// compile, `compiling(n, total, kernel)` says which (`n` counts from 1 over `kernels`), so
    /// a first start can show what it waits for. Later [`Gpu::function`] calls find them loaded.
    pub fn load_kernels(&self, kernels: &[Kernel], compiling: &mut dyn FnMut(usize, usize, &Kernel)) -> Result<()> {
        for (i, kernel) in kernels.iter().enumerate() {
            self.module(kernel, &mut || compiling(i + 1, kernels.len(), kernel))?;
        }
        Ok(())
    }

    /// `kernel`'s module, loaded from its cubin (compiled through the cache) on first use.
    fn module(&self, kernel: &Kernel, before_compile: &mut dyn FnMut()) -> Result<Arc<CudaModule>> {
        let mut modules = self.modules.lock().expect("module table lock is never poisoned by a panic here");
        if let Some(m) = modules.get(kernel.name) {
            return Ok(m.clone());
        }
        let cubin = kernel_cache::compile_reporting(kernel, self.arch, before_compile)?;
        let m = self.ctx.load_module(Ptx::from_binary(cubin))?;
        if let Some(trace) = &self.trace {
            trace.attach(&m, kernel.name, &self.stream)?;
        }
        modules.insert(kernel.name, m.clone());
        Ok(m)
    }

    /// The device's one `T`, made by `open` on first use (under the lock, so only once) and
    /// shared by every caller after; a failed `open` stores nothing. `open` must not call
    /// `shared` itself.
    pub fn shared<T: Any + Send + Sync>(&self, open: impl FnOnce(&Self) -> Result<T>) -> Result<Arc<T>> {
        let mut slots = self.shared.lock().expect("shared slot lock is never poisoned by a panic here");
        if let Some(value) = slots.get(&TypeId::of::<T>()) {
            return Ok(value.clone().downcast::<T>().expect("each slot holds the type it is keyed by"));
        }
        let value = Arc::new(open(self)?);
        slots.insert(TypeId::of::<T>(), value.clone());
        Ok(value)
    }

    /// Streaming multiprocessors on the device (the GEMM plans size their grids from it).
    pub fn multiprocessors(&self) -> Result<usize> {
        use cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
        Ok(self.ctx.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize)
    }

    /// `(free, total)` bytes of device memory now (after the stream's pending frees).
    pub fn memory(&self) -> Result<(usize, usize)> {
        self.stream.synchronize()?;
        self.ctx.bind_to_thread()?;
        Ok(cudarc::driver::result::mem_get_info()?)
    }

    /// Raises `f`'s dynamic shared-memory limit to `bytes` (needed above 48 KiB), never lowering
    /// it: the plans of one entry point share its function, so a plan loaded later with less
    /// (another K, another M) must leave room for the launches of one loaded before it.
    pub fn set_max_dynamic_smem(&self, f: &CudaFunction, bytes: u32) -> Result<()> {
        use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
        if f.get_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)? < bytes {
            f.set_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)?;
        }
        Ok(())
    }

    /// Copies `host` to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        Ok(self.stream.clone_htod(host)?)
    }

    /// Copies a device buffer back (synchronising the stream).
    pub fn download<T: DeviceRepr>(&self, dev: &CudaSlice<T>) -> Result<Vec<T>> {
        Ok(self.stream.clone_dtoh(dev)?)
    }

    /// `n` (at least 1) zeroed values of page-locked host memory (cached: the host reads it
    /// back), the destination of a copy from the device that is enqueued, not waited for.
    pub fn pinned<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<PinnedHostSlice<T>> {
        self.pinned_with_flags(n, 0)
    }

    /// [`Gpu::pinned`] allocated with `flags` (`cuMemHostAlloc`'s, e.g. mapped into the device's
    /// address space: [`MappedHost`]).
    pub(crate) fn pinned_with_flags<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        n: usize,
        flags: u32,
    ) -> Result<PinnedHostSlice<T>> {
        // SAFETY: every value is zeroed below before anything reads it (T is valid as zero bits).
        let n = n.max(1);
        let mut host = unsafe { self.ctx.alloc_pinned_with_flags::<T>(n, flags) }?;
        // SAFETY: zero bytes are a valid T.
        unsafe { std::ptr::write_bytes(host.as_mut_ptr()?, 0, n) };
        Ok(host)
    }

    /// A zeroed device buffer of `n` elements.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        Ok(self.stream.alloc_zeros(n.max(1))?)
    }

    /// Milliseconds the stream spends on the work `enqueue` puts on it, measured by CUDA events
    /// recorded before and after (waits for that work to finish).
    pub fn time_ms(&self, enqueue: impl FnOnce() -> Result<()>) -> Result<f64> {
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.ctx.new_event(flags)?;
        let end = self.ctx.new_event(flags)?;
        start.record(&self.stream)?;
        enqueue()?;
        end.record(&self.stream)?;
        end.synchronize()?;
        Ok(start.elapsed_ms(&end)? as f64)
    }

    /// Waits for all work on the stream; surfaces any asynchronous kernel fault.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }
}

/// Fails unless buffer `what` starts on a 16-byte boundary: the kernels load 16-byte vectors,
/// and a view cut at an odd offset would fault or read the wrong bytes.
pub(crate) fn check_aligned<T, P: DevicePtr<T>>(stream: &CudaStream, entry: &str, what: &str, buf: &P) -> Result<()> {
    let (ptr, _record) = buf.device_ptr(stream);
    if ptr % 16 == 0 {
        Ok(())
    } else {
        Err(crate::error::unsupported(entry, format!("`{what}` must start on a 16-byte boundary, starts at {ptr:#x}")))
    }
}

/// Maps a launch's driver error to [`Error::Launch`] with the launch shape.
pub fn launch_error<'a>(entry: &'a str, cfg: &LaunchConfig) -> impl FnOnce(cudarc::driver::DriverError) -> Error + 'a {
    let cfg = *cfg;
    move |source| Error::Launch {
        entry: entry.to_string(),
        grid: cfg.grid_dim,
        block: cfg.block_dim,
        smem: cfg.shared_mem_bytes,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carveout_is_a_percent_or_unset() {
        assert_eq!(parse_carveout(None).unwrap(), None);
        assert_eq!(parse_carveout(Some("0")).unwrap(), Some(0));
        assert_eq!(parse_carveout(Some("100")).unwrap(), Some(100));
        for bad in ["101", "-1", "", "max", "50%"] {
            let e = parse_carveout(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("ASYNCT_CARVEOUT") && e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }
}
