//! The step trace: when each of our kernel launches was released from its wait on the launch
//! before it, measured inside the graphs the engine replays.
//!
//! Why: a decode step is a chain of short kernels under programmatic dependent launch (PDL), so a
//! kernel's time alone (ncu) is not its share of the step: part of it overlaps its predecessor's
//! tail. What the step pays for a launch is the time from its release (the moment its first CTA
//! leaves `griddepcontrol.wait`, i.e. its predecessor has finished) to the next launch's release.
//! No profiler timeline is available on the device machine, so the kernels stamp it themselves.
//!
//! How: with `ASYNCT_STEP_TRACE=1` in the environment when a [`crate::Gpu`] opens, every kernel is
//! compiled with the macro `ASYNCT_STEP_TRACE` (a separate cubin in the cache), under which
//! `pdl.cuh`'s `pdl_wait()` folds, from thread 0 of each CTA, the global timer before and after
//! the wait into its launch's slot of a device buffer (layout in `pdl.cuh`). Each module gets
//! its own region of the buffer (its `asynct_step_trace` pointer, set when it is loaded), so a
//! slot names its kernel file. cuBLASLt's launches are not ours and are not stamped: their time
//! falls into the gap after the launch before them. The stamps cost each CTA a few reductions
//! that nothing waits on; compare the traced step's time with an untraced run's.
//! The decode bench (`asynct bench`, the server's `bench::step_timeline`) turns the launches into
//! a step's timeline.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaModule, CudaSlice, CudaStream, DevicePtr};

use crate::error::{Error, Result};

/// Slots a module's region holds (`pdl.cuh`'s `STEP_TRACE_SLOTS`): launch ids are folded modulo
/// this, so a trace window of fewer launches than this never puts two launches of a module in one
/// slot.
pub const SLOTS: usize = 65536;
/// Bytes of one slot (`pdl.cuh`'s `StepTraceSlot`).
const SLOT_BYTES: usize = 64;
/// Modules a trace can tell apart; a module loaded past them is not stamped.
const MAX_MODULES: usize = 32;

/// Whether the environment asks for the trace (`ASYNCT_STEP_TRACE=1`); another value than `1` or
/// `0` is refused when the device opens ([`StepTrace::from_env`]).
pub fn requested() -> bool {
    std::env::var("ASYNCT_STEP_TRACE").is_ok_and(|v| v == "1")
}

/// The NVRTC options that compile the stamps in, where the trace is requested.
pub(crate) fn compile_options() -> Vec<String> {
    if requested() {
        vec!["-DASYNCT_STEP_TRACE".to_string()]
    } else {
        Vec::new()
    }
}

/// One launch as its CTAs stamped it: global-timer nanoseconds (one clock for the whole device).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchTrace {
    /// The kernel file the launch came from (`gemm_skinny.cu`).
    pub kernel: &'static str,
    /// The context's launch number (`%gridid`).
    pub grid_id: u64,
    /// CTAs in the grid.
    pub ctas: u32,
    /// Threads in a CTA.
    pub threads: u32,
    /// Calls of `pdl_wait()` (a CTA that waits twice counts twice).
    pub waits: u32,
    /// First and last arrival at the wait.
    pub arrive: (u64, u64),
    /// First and last release from it.
    pub release: (u64, u64),
}

/// The device buffer the stamps land in, and which module owns which region.
pub struct StepTrace {
    buffer: Mutex<CudaSlice<u8>>,
    /// The kernel file of each region, in load order.
    regions: Mutex<Vec<&'static str>>,
}

impl StepTrace {
    /// The trace where the environment asks for it, `None` where it does not.
    pub(crate) fn from_env(stream: &Arc<CudaStream>) -> Result<Option<Self>> {
        match std::env::var("ASYNCT_STEP_TRACE").as_deref() {
            Err(_) | Ok("0") => Ok(None),
            Ok("1") => {
                let buffer = stream.alloc_zeros::<u8>(MAX_MODULES * SLOTS * SLOT_BYTES)?;
                Ok(Some(Self { buffer: Mutex::new(buffer), regions: Mutex::new(Vec::new()) }))
            }
            Ok(other) => Err(Error::Unsupported {
                entry: "ASYNCT_STEP_TRACE".to_string(),
                reason: format!("must be 0 or 1, not {other:?}"),
            }),
        }
    }

    /// Points `module`'s stamps (kernel file `kernel`) at a region of its own.
    pub(crate) fn attach(
        &self,
        module: &Arc<CudaModule>,
        kernel: &'static str,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let mut regions = self.regions.lock().expect("trace region lock is never poisoned by a panic here");
        if regions.len() == MAX_MODULES {
            return Ok(());
        }
        let buffer = self.buffer.lock().expect("trace buffer lock is never poisoned by a panic here");
        let (base, _record) = buffer.device_ptr(stream);
        let region = base + (regions.len() * SLOTS * SLOT_BYTES) as u64;
        let mut symbol = module.get_global("asynct_step_trace", stream)?;
        stream.memcpy_htod(&region.to_ne_bytes(), &mut symbol)?;
        regions.push(kernel);
        Ok(())
    }

    /// Empties every region: the launches from here on are the next [`StepTrace::read`]'s.
    pub(crate) fn reset(&self, stream: &Arc<CudaStream>) -> Result<()> {
        let mut buffer = self.buffer.lock().expect("trace buffer lock is never poisoned by a panic here");
        stream.memset_zeros(&mut *buffer)?;
        Ok(())
    }

    /// The launches stamped since the last reset, in launch order (synchronising the stream),
    /// and how many slots held more than one launch (dropped: the window was too long).
    pub(crate) fn read(&self, stream: &Arc<CudaStream>) -> Result<(Vec<LaunchTrace>, usize)> {
        let bytes =
            stream.clone_dtoh(&*self.buffer.lock().expect("trace buffer lock is never poisoned by a panic here"))?;
        let regions = self.regions.lock().expect("trace region lock is never poisoned by a panic here");
        Ok(parse(&bytes, &regions))
    }
}

/// The launches in `bytes` (regions in `regions`' order), in launch order, and the count of slots
/// that two launches shared.
pub fn parse(bytes: &[u8], regions: &[&'static str]) -> (Vec<LaunchTrace>, usize) {
    let u64_at = |s: &[u8], i: usize| u64::from_ne_bytes(s[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let u32_at = |s: &[u8], i: usize| u32::from_ne_bytes(s[48 + 4 * i..52 + 4 * i].try_into().expect("4 bytes"));
    let mut launches = Vec::new();
    let mut shared = 0;
    for (r, &kernel) in regions.iter().enumerate() {
        let region = &bytes[r * SLOTS * SLOT_BYTES..(r + 1) * SLOTS * SLOT_BYTES];
        for slot in region.chunks_exact(SLOT_BYTES) {
            let grid_hi = u64_at(slot, 0);
            if grid_hi == 0 {
                continue;
            }
            let grid_lo = !u64_at(slot, 1);
            if grid_lo + 1 != grid_hi {
                shared += 1;
                continue;
            }
            launches.push(LaunchTrace {
                kernel,
                grid_id: grid_lo,
                ctas: u32_at(slot, 2),
                threads: u32_at(slot, 1),
                waits: u32_at(slot, 0),
                arrive: (!u64_at(slot, 3), u64_at(slot, 2)),
                release: (!u64_at(slot, 5), u64_at(slot, 4)),
            });
        }
    }
    // Each launch on the stream is released only once the one before it has finished, so
    // release order is launch order, whatever numbers %gridid hands out.
    launches.sort_by_key(|l| (l.release.0, l.grid_id));
    (launches, shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot as `pdl.cuh` leaves it after CTAs of launch `grid` stamped `(arrive, release)`.
    fn slot(grid: &[u64], stamps: &[(u64, u64)], threads: u32, ctas: u32) -> Vec<u8> {
        let mut s = vec![0u8; SLOT_BYTES];
        let put = |s: &mut Vec<u8>, i: usize, v: u64| s[8 * i..8 * i + 8].copy_from_slice(&v.to_ne_bytes());
        put(&mut s, 0, grid.iter().map(|g| g + 1).max().unwrap());
        put(&mut s, 1, grid.iter().map(|g| !g).max().unwrap());
        put(&mut s, 2, stamps.iter().map(|t| t.0).max().unwrap());
        put(&mut s, 3, stamps.iter().map(|t| !t.0).max().unwrap());
        put(&mut s, 4, stamps.iter().map(|t| t.1).max().unwrap());
        put(&mut s, 5, stamps.iter().map(|t| !t.1).max().unwrap());
        for (i, v) in [stamps.len() as u32, threads, ctas].into_iter().enumerate() {
            s[48 + 4 * i..52 + 4 * i].copy_from_slice(&v.to_ne_bytes());
        }
        s
    }

    #[test]
    fn slots_read_back_as_launches_in_launch_order_and_shared_slots_are_dropped() {
        let mut bytes = vec![0u8; 2 * SLOTS * SLOT_BYTES];
        let at = |region: usize, grid: u64| (region * SLOTS + grid as usize % SLOTS) * SLOT_BYTES;
        bytes[at(0, 7)..at(0, 7) + SLOT_BYTES].copy_from_slice(&slot(&[7], &[(100, 150), (120, 160)], 256, 2));
        bytes[at(1, 5)..at(1, 5) + SLOT_BYTES].copy_from_slice(&slot(&[5], &[(90, 95)], 128, 1));
        let two = 9 + SLOTS as u64;
        bytes[at(1, 9)..at(1, 9) + SLOT_BYTES].copy_from_slice(&slot(&[9, two], &[(1, 2), (3, 4)], 128, 1));
        let (launches, shared) = parse(&bytes, &["a.cu", "b.cu"]);
        assert_eq!(shared, 1);
        assert_eq!(
            launches,
            vec![
                LaunchTrace {
                    kernel: "b.cu",
                    grid_id: 5,
                    ctas: 1,
                    threads: 128,
                    waits: 1,
                    arrive: (90, 90),
                    release: (95, 95)
                },
                LaunchTrace {
                    kernel: "a.cu",
                    grid_id: 7,
                    ctas: 2,
                    threads: 256,
                    waits: 2,
                    arrive: (100, 120),
                    release: (150, 160)
                },
            ]
        );
    }

    #[test]
    fn the_device_layout_is_the_one_parsed_here() {
        let src = crate::kernels::HP1_ROWS.source;
        assert!(src.contains("static_assert(sizeof(StepTraceSlot) == 64"));
        assert!(src.contains(&format!("STEP_TRACE_SLOTS = {SLOTS};")));
    }
}
