//! Every kernel launch of the crate, through `cuLaunchKernelEx`, with programmatic dependent
//! launch (PDL) where the device has it.
//!
//! Why: a decode step is hundreds of short dependent kernels, and each pays a launch gap, a ramp
//! and a tail on top of its bytes. With the programmatic-serialisation attribute a kernel may be
//! scheduled while its predecessor on the stream still runs; it does whatever does not depend on
//! that predecessor (a GEMM prefetches its weights into L2), then waits in `griddepcontrol.wait`
//! (`pdl.cuh`) until the predecessor has finished and its writes are visible. Every kernel of the
//! crate calls `pdl_wait()` before it touches a buffer another kernel writes, so the attribute is
//! safe on all of them; kernels launched by others (cuBLASLt) are ordered as usual. Stream capture
//! keeps the attribute as a programmatic edge of the graph.
//!
//! PDL needs compute capability 9.0; it is on by default there and off below (the device code's
//! `griddepcontrol` is compiled out before sm_90). `ASYNCT_PDL=0` turns it off, to measure what it
//! buys. [`Launch`] mirrors cudarc's launch builder (`arg` then `launch`), which cannot pass launch
//! attributes.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DriverError, LaunchConfig,
};

/// Whether the device and the environment allow PDL at all.
static AVAILABLE: AtomicBool = AtomicBool::new(false);
/// Whether launches carry the attribute now.
static PROGRAMMATIC: AtomicBool = AtomicBool::new(false);

/// Whether launches carry the programmatic-serialisation attribute.
pub fn programmatic() -> bool {
    PROGRAMMATIC.load(Ordering::Relaxed)
}

/// Sets PDL for the device of compute capability `(major, minor)`: on from 9.0 unless the
/// environment says `ASYNCT_PDL=0`. Called when a [`crate::Gpu`] opens.
pub(crate) fn configure(compute_capability: (i32, i32)) {
    let off = std::env::var("ASYNCT_PDL").is_ok_and(|v| v == "0");
    AVAILABLE.store(compute_capability.0 >= 9 && !off, Ordering::Relaxed);
    PROGRAMMATIC.store(compute_capability.0 >= 9 && !off, Ordering::Relaxed);
}

/// Runs `f` with PDL `on` where it is available, then restores the setting. A CUDA graph keeps
/// each launch's attribute, so a graph captured inside keeps `on` at every replay: this is how
/// a decode graph gets PDL or not by its batch bucket. The engine launches from one thread.
pub fn with_programmatic<R>(on: bool, f: impl FnOnce() -> R) -> R {
    let before = PROGRAMMATIC.swap(on && AVAILABLE.load(Ordering::Relaxed), Ordering::Relaxed);
    let out = f();
    PROGRAMMATIC.store(before, Ordering::Relaxed);
    out
}

/// One kernel argument: a device buffer (its address) or a scalar (its bytes, at most 8).
pub trait KernelArg {
    /// The argument's value as the 8-byte slot `cuLaunchKernelEx` reads its bytes from.
    fn slot(self, stream: &CudaStream) -> u64;
}

macro_rules! scalar_arg {
    ($($t:ty),*) => {$(
        impl KernelArg for &$t {
            fn slot(self, _: &CudaStream) -> u64 {
                let mut slot = [0u8; 8];
                let bytes = self.to_ne_bytes();
                slot[..bytes.len()].copy_from_slice(&bytes);
                u64::from_ne_bytes(slot)
            }
        }
    )*};
}
scalar_arg!(i32, u32, i64, u64, f32);

macro_rules! buffer_arg {
    ($($t:ty),*) => {$(
        impl<T> KernelArg for $t {
            fn slot(self, stream: &CudaStream) -> u64 {
                // Event tracking is off on the crate's context, so the record guard does nothing.
                let (ptr, _record) = self.device_ptr(stream);
                ptr
            }
        }
    )*};
}
buffer_arg!(&CudaSlice<T>, &mut CudaSlice<T>, &CudaView<'_, T>, &mut CudaViewMut<'_, T>);

/// A kernel launch being built: its function, stream and argument slots.
pub struct Launch<'a> {
    func: &'a CudaFunction,
    stream: &'a CudaStream,
    slots: Vec<u64>,
    /// The tensor-map arguments (128 bytes each, too wide for a slot) and their positions.
    maps: Vec<(usize, Box<sys::CUtensorMap>)>,
    /// CTAs per thread-block cluster along x; 1 launches no clusters.
    cluster_x: u32,
}

impl<'a> Launch<'a> {
    /// A launch of `func` on `stream`, no arguments yet.
    pub fn new(stream: &'a CudaStream, func: &'a CudaFunction) -> Self {
        Self { func, stream, slots: Vec::with_capacity(32), maps: Vec::new(), cluster_x: 1 }
    }

    /// Appends a `const __grid_constant__` tensor-map parameter (`tma.cuh`'s TensorMap).
    pub fn arg_tensor_map(&mut self, map: sys::CUtensorMap) -> &mut Self {
        self.maps.push((self.slots.len(), Box::new(map)));
        self.slots.push(0);
        self
    }

    /// Groups the grid's CTAs into clusters of `x` consecutive CTAs along x (sm_90 and later;
    /// the grid's x a multiple of `x`, at most 8 for every GPU to take it); 1 is no clusters.
    pub fn cluster_x(&mut self, x: u32) -> &mut Self {
        self.cluster_x = x;
        self
    }

    /// Appends the next argument.
    pub fn arg(&mut self, a: impl KernelArg) -> &mut Self {
        self.slots.push(a.slot(self.stream));
        self
    }

    /// The argument slots, unlaunched: a megakernel op that runs this entry's body takes them
    /// as its descriptor ([`crate::mega`]). Tensor maps have no slot form: no megakernel body
    /// takes one.
    pub fn into_slots(self) -> Vec<u64> {
        debug_assert!(self.maps.is_empty(), "a launch with tensor maps has no slot form");
        self.slots
    }

    /// Launches with `cfg`, with the PDL attribute when [`programmatic`] and the cluster size of
    /// [`Launch::cluster_x`].
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and size, and every
    /// buffer must hold what the kernel reads and writes at this launch shape.
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), DriverError> {
        self.stream.context().bind_to_thread()?;
        let mut params: Vec<*mut c_void> = self.slots.iter_mut().map(|s| s as *mut u64 as *mut c_void).collect();
        for (at, map) in &mut self.maps {
            params[*at] = &mut **map as *mut sys::CUtensorMap as *mut c_void;
        }
        // SAFETY: zero is a valid bit pattern of this plain C union; the one field set in each
        // attribute below is the one its id names.
        let mut attrs: [sys::CUlaunchAttribute; 2] = [std::mem::zeroed(), std::mem::zeroed()];
        let mut used = 0;
        if programmatic() {
            attrs[used].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[used].value.programmaticStreamSerializationAllowed = 1;
            used += 1;
        }
        if self.cluster_x > 1 {
            attrs[used].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[used].value.clusterDim.x = self.cluster_x;
            attrs[used].value.clusterDim.y = 1;
            attrs[used].value.clusterDim.z = 1;
            used += 1;
        }
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: used as u32,
        };
        // SAFETY: `params` points at one live slot per argument (the caller vouches for their
        // meaning); `config` and `attrs` outlive the call, which copies them.
        sys::cuLaunchKernelEx(&config, self.func.cu_function(), params.as_mut_ptr(), std::ptr::null_mut()).result()
    }
}
