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
//! `pdl.cuh`'s `pdl_wait()` has thread 0 of each CTA store the global timer before and after the
//! wait into its own record of its launch's slot (layout in `pdl.cuh`): plain stores, no
//! reductions, so a kernel's end waits on nothing of the trace's. A slot is the launch's
//! `%gridid` modulo [`SLOTS`]; a graph node keeps its id at every replay (seen on the H100 and
//! the H200, RESULTS runs 220-221), so a window that replays a graph twice keeps the later
//! replay. Each module is told its number when it is loaded, so a slot names its kernel file.
//! cuBLASLt's launches are not ours and are not stamped: their time falls into the gap after the
//! launch before them. A kernel may also mark points of a CTA's path (`step_trace_mark(k)`, k
//! below [`MARKS`], for the first [`MARK_CTAS`] CTAs; the decode GEMMs and attention mark
//! theirs), which the reader gives as times after each CTA's release ([`LaunchTrace::marks`]):
//! where a launch's time on the step's path goes inside it. Each record also holds the CTA's SM
//! (`%smid`, above 24 bits of its wait, which saturates at 16.8 ms), so that the reader can group
//! the last mark by how many of the launch's CTAs an SM held ([`LaunchTrace::by_sm_load`]): an SM's
//! share of a wave is one cause of a launch's slowest CTAs. It also says which CTAs the hardware
//! put together on an SM ([`LaunchTrace::sm_neighbours`]): whether two CTAs that read the same
//! bytes (a skinny GEMM's slab of x) can meet in the SM's L1. The stamps still cost each CTA a
//! store and two timer reads, and each mark a store and one; compare the traced step's time with an
//! untraced run's. The decode bench (`asynct bench`, the server's `bench::step_timeline`) turns the
//! launches into a step's timeline.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaModule, CudaSlice, CudaStream, DevicePtr};

use crate::error::{Error, Result};

/// Launch slots (`pdl.cuh`'s `STEP_TRACE_SLOTS`): launch ids are folded modulo this.
pub const SLOTS: usize = 1024;
/// CTAs of a launch that get a record (`STEP_TRACE_CTAS`); the rest are not stamped.
pub const CTAS: usize = 8192;
/// CTAs of a launch whose marks are kept (`STEP_TRACE_MARK_CTAS`).
pub const MARK_CTAS: usize = 1024;
/// Marks a CTA may set (`StepTraceMarks::at`).
pub const MARKS: usize = 4;
/// Bytes of a slot's header, of a CTA's record and of its marks (`StepTraceHeader`,
/// `StepTraceCta`, `StepTraceMarks`).
const HEADER_BYTES: usize = 64;
const RECORD_BYTES: usize = 16;
const MARKS_BYTES: usize = 4 * MARKS;
/// Bits of a record's wait time (`STEP_TRACE_WAIT_BITS`); the CTA's SM sits above them.
const WAIT_BITS: u32 = 24;
/// Where a slot's marks begin: after its header and its CTAs' records.
const MARKS_AT: usize = HEADER_BYTES + CTAS * RECORD_BYTES;
const SLOT_BYTES: usize = MARKS_AT + MARK_CTAS * MARKS_BYTES;

/// Whether the environment asks for the trace: `ASYNCT_STEP_TRACE=1` on, unset or `0` off, any
/// other value refused by name.
fn requested() -> Result<bool> {
    match std::env::var("ASYNCT_STEP_TRACE").as_deref() {
        Err(_) | Ok("0") => Ok(false),
        Ok("1") => Ok(true),
        Ok(other) => Err(Error::Unsupported {
            entry: "ASYNCT_STEP_TRACE".to_string(),
            reason: format!("must be 0 or 1, not {other:?}"),
        }),
    }
}

/// The NVRTC options that compile the stamps in, where the trace is asked for (a refused value
/// compiles none; the device refuses it when it opens, [`StepTrace::from_env`]).
pub(crate) fn compile_options() -> Vec<String> {
    match requested() {
        Ok(true) => vec!["-DASYNCT_STEP_TRACE".to_string()],
        _ => Vec::new(),
    }
}

/// One trace window's launches, in launch order, and the slots dropped for holding the stamps of
/// more than one launch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceWindow {
    /// The launches.
    pub launches: Vec<LaunchTrace>,
    /// Slots two launches wrote (the window was too long for [`SLOTS`]).
    pub dropped_slots: usize,
}

/// One launch as its CTAs stamped it: global-timer nanoseconds (one clock for the whole device).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchTrace {
    /// The kernel file the launch came from (`gemm_skinny.cu`).
    pub kernel: &'static str,
    /// The context's launch number (`%gridid`; a graph node's is the same at every replay).
    pub grid_id: u64,
    /// CTAs in the grid.
    pub ctas: u32,
    /// Threads in a CTA.
    pub threads: u32,
    /// CTAs whose stamps are here (all, up to [`CTAS`]).
    pub stamped: u32,
    /// First and last arrival at the wait.
    pub arrive: (u64, u64),
    /// First and last release from it.
    pub release: (u64, u64),
    /// The release by which half the stamped CTAs were out.
    pub release_median: u64,
    /// Each mark a kernel sets (`step_trace_mark` in `pdl.cuh`): over the CTAs that set it, the
    /// median and the largest time from a CTA's own release to it; `None` where none set it.
    pub marks: [Option<MarkTimes>; MARKS],
    /// The kernel's last mark (the highest it sets) by how many of the launch's CTAs ran on a
    /// CTA's SM, fewest first: whether the slowest CTAs are those that shared their SM with more.
    pub by_sm_load: Vec<SmLoad>,
    /// How far apart in the grid the CTAs that shared an SM were; `None` where none did.
    pub sm_neighbours: Option<SmNeighbours>,
}

/// Which of a launch's CTAs shared an SM: over each SM's CTAs in grid order (all waves), the
/// distance from each to the next, the most common one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmNeighbours {
    /// The most common distance (the smallest of those as common).
    pub distance: u32,
    /// Pairs of CTAs next to each other on an SM at that distance.
    pub pairs_at: u32,
    /// Such pairs at any distance.
    pub pairs: u32,
}

/// The CTAs that ran on SMs holding `ctas_on_sm` of their launch's CTAs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmLoad {
    /// CTAs of the launch an SM held, over the launch (all waves).
    pub ctas_on_sm: u32,
    /// SMs that held that many.
    pub sms: u32,
    /// Their CTAs' last mark, after each CTA's release.
    pub last_mark: MarkTimes,
}

/// One mark of a launch, nanoseconds after each CTA's release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkTimes {
    /// The median CTA's.
    pub median: u64,
    /// The slowest CTA's: the one the next launch waits for.
    pub max: u64,
}

/// The device buffer the stamps land in, and which module has which number.
pub struct StepTrace {
    buffer: Mutex<CudaSlice<u8>>,
    /// The kernel file of each module number, in load order.
    modules: Mutex<Vec<&'static str>>,
}

impl StepTrace {
    /// The trace where the environment asks for it, `None` where it does not.
    pub(crate) fn from_env(stream: &Arc<CudaStream>) -> Result<Option<Self>> {
        if !requested()? {
            return Ok(None);
        }
        let buffer = stream.alloc_zeros::<u8>(SLOTS * SLOT_BYTES)?;
        Ok(Some(Self { buffer: Mutex::new(buffer), modules: Mutex::new(Vec::new()) }))
    }

    /// Points `module`'s stamps (kernel file `kernel`) at the buffer, under a number of its own.
    pub(crate) fn attach(
        &self,
        module: &Arc<CudaModule>,
        kernel: &'static str,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let mut modules = self.modules.lock().expect("trace module lock is never poisoned by a panic here");
        let buffer = self.buffer.lock().expect("trace buffer lock is never poisoned by a panic here");
        let (base, _record) = buffer.device_ptr(stream);
        // `StepTraceTarget`: the base pointer, then the module's number (padded to 16 bytes).
        let mut target = [0u8; 16];
        target[..8].copy_from_slice(&base.to_ne_bytes());
        target[8..12].copy_from_slice(&(modules.len() as u32).to_ne_bytes());
        let mut symbol = module.get_global("asynct_step_trace", stream)?;
        stream.memcpy_htod(&target, &mut symbol)?;
        modules.push(kernel);
        Ok(())
    }

    /// Empties the buffer: the launches from here on are the next [`StepTrace::read`]'s.
    pub(crate) fn reset(&self, stream: &Arc<CudaStream>) -> Result<()> {
        let mut buffer = self.buffer.lock().expect("trace buffer lock is never poisoned by a panic here");
        stream.memset_zeros(&mut *buffer)?;
        Ok(())
    }

    /// The launches stamped since the last reset (synchronising the stream).
    pub(crate) fn read(&self, stream: &Arc<CudaStream>) -> Result<TraceWindow> {
        let bytes =
            stream.clone_dtoh(&*self.buffer.lock().expect("trace buffer lock is never poisoned by a panic here"))?;
        let modules = self.modules.lock().expect("trace module lock is never poisoned by a panic here");
        Ok(parse(&bytes, &modules))
    }
}

/// The median and the largest of `after`; `None` where it is empty.
fn mark_times(mut after: Vec<u64>) -> Option<MarkTimes> {
    after.sort_unstable();
    after.last().map(|&max| MarkTimes { median: after[(after.len() - 1) / 2], max })
}

/// Marks `(CTA, ns after its release)` of a launch whose CTA i ran on SM `sms[i]`, grouped by how
/// many of the launch's CTAs that SM held, fewest first.
fn group_by_sm_load(sms: &[u32], marks: impl Iterator<Item = (usize, u64)>) -> Vec<SmLoad> {
    let mut on_sm = HashMap::<u32, u32>::new();
    for &sm in sms {
        *on_sm.entry(sm).or_default() += 1;
    }
    // By CTAs an SM held: how many SMs held so many, and their CTAs' marks.
    let mut by_load = BTreeMap::<u32, (u32, Vec<u64>)>::new();
    for &n in on_sm.values() {
        by_load.entry(n).or_default().0 += 1;
    }
    for (cta, after) in marks {
        by_load.get_mut(&on_sm[&sms[cta]]).expect("every SM's load is a key").1.push(after);
    }
    by_load
        .into_iter()
        .filter_map(|(ctas_on_sm, (sms, after))| Some(SmLoad { ctas_on_sm, sms, last_mark: mark_times(after)? }))
        .collect()
}

/// The neighbours on an SM of a launch whose CTA i ran on SM `sms[i]`.
fn sm_neighbours(sms: &[u32]) -> Option<SmNeighbours> {
    let mut last_on = HashMap::<u32, usize>::new();
    let mut at_distance = BTreeMap::<u32, u32>::new();
    for (cta, &sm) in sms.iter().enumerate() {
        if let Some(before) = last_on.insert(sm, cta) {
            *at_distance.entry((cta - before) as u32).or_default() += 1;
        }
    }
    let pairs = at_distance.values().sum();
    // The first of the most common: max_by_key keeps the last of equals, so walk from the top.
    let (&distance, &pairs_at) = at_distance.iter().rev().max_by_key(|&(_, &n)| n)?;
    Some(SmNeighbours { distance, pairs_at, pairs })
}

/// The window `bytes` holds (module numbers naming `modules`).
pub fn parse(bytes: &[u8], modules: &[&'static str]) -> TraceWindow {
    let u64_at = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().expect("4 bytes"));
    let mut launches = Vec::new();
    let mut dropped_slots = 0;
    for slot in bytes.chunks_exact(SLOT_BYTES) {
        let grid_plus_one = u64_at(slot, 0);
        let Some(&kernel) = modules.get(u32_at(slot, 8) as usize).filter(|_| grid_plus_one != 0) else {
            continue;
        };
        let grid_id = grid_plus_one - 1;
        let (threads, ctas) = (u32_at(slot, 12), u32_at(slot, 16));
        let expected = (ctas as usize).min(CTAS);
        let mut stamps = Vec::with_capacity(expected); // (arrive, release, SM)
        let mut foreign = false;
        // Every record, past the grid's CTAs too: a larger launch's leftovers mark a shared slot.
        for (i, r) in slot[HEADER_BYTES..MARKS_AT].chunks_exact(RECORD_BYTES).enumerate() {
            let arrive = u64_at(r, 0);
            if arrive == 0 {
                continue;
            }
            if i >= expected || u32_at(r, 12) != grid_id as u32 {
                foreign = true;
                continue;
            }
            let waited_sm = u32_at(r, 8);
            stamps.push((arrive, arrive + u64::from(waited_sm & ((1 << WAIT_BITS) - 1)), waited_sm >> WAIT_BITS));
        }
        if foreign || stamps.len() != expected {
            dropped_slots += 1;
            continue;
        }
        // Mark k of CTA i after its release, where it set one. A mark holds the global timer's
        // low 32 bits: its distance from the CTA's release is their difference modulo 2^32 (a
        // CTA is never 4 s long). Stamps are in CTA order here (a slot kept holds every CTA's).
        let mark_after = |i: usize, k: usize| {
            let at = u32_at(slot, MARKS_AT + i * MARKS_BYTES + 4 * k);
            (at != 0).then(|| u64::from(at.wrapping_sub(stamps[i].1 as u32)))
        };
        let marked = stamps.len().min(MARK_CTAS);
        let marks: [Option<MarkTimes>; MARKS] =
            std::array::from_fn(|k| mark_times((0..marked).filter_map(|i| mark_after(i, k)).collect()));
        let sms: Vec<u32> = stamps.iter().map(|s| s.2).collect();
        let by_sm_load = (0..MARKS).rev().find(|&k| marks[k].is_some()).map_or(Vec::new(), |last| {
            group_by_sm_load(&sms, (0..marked).filter_map(|i| Some((i, mark_after(i, last)?))))
        });
        let mut releases: Vec<u64> = stamps.iter().map(|s| s.1).collect();
        releases.sort_unstable();
        launches.push(LaunchTrace {
            kernel,
            grid_id,
            ctas,
            threads,
            stamped: stamps.len() as u32,
            arrive: (stamps.iter().map(|s| s.0).min().unwrap_or(0), stamps.iter().map(|s| s.0).max().unwrap_or(0)),
            release: (releases[0], releases[releases.len() - 1]),
            release_median: releases[(releases.len() - 1) / 2],
            marks,
            by_sm_load,
            sm_neighbours: sm_neighbours(&sms),
        });
    }
    // Each launch on the stream is released only once the one before it has finished, so
    // release order is launch order, whatever numbers %gridid hands out.
    launches.sort_by_key(|l| (l.release.0, l.grid_id));
    TraceWindow { launches, dropped_slots }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes launch `grid` of module `module` into its slot: `(arrive, release)` per CTA, CTA i
    /// on SM i.
    fn stamp(bytes: &mut [u8], grid: u64, module: u32, threads: u32, ctas: u32, stamps: &[(u64, u64)]) {
        let on_sms: Vec<_> =
            stamps.iter().enumerate().map(|(i, &(arrive, release))| (arrive, release, i as u32)).collect();
        stamp_on(bytes, grid, module, threads, ctas, &on_sms);
    }

    /// As [`stamp`], with each CTA's SM: `(arrive, release, sm)`.
    fn stamp_on(bytes: &mut [u8], grid: u64, module: u32, threads: u32, ctas: u32, stamps: &[(u64, u64, u32)]) {
        let slot = &mut bytes[(grid as usize % SLOTS) * SLOT_BYTES..][..SLOT_BYTES];
        slot[0..8].copy_from_slice(&(grid + 1).to_ne_bytes());
        for (at, v) in [(8, module), (12, threads), (16, ctas)] {
            slot[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        }
        for (i, &(arrive, release, sm)) in stamps.iter().enumerate() {
            let r = &mut slot[HEADER_BYTES + i * RECORD_BYTES..][..RECORD_BYTES];
            r[0..8].copy_from_slice(&arrive.to_ne_bytes());
            r[8..12].copy_from_slice(&((release - arrive) as u32 | sm << WAIT_BITS).to_ne_bytes());
            r[12..16].copy_from_slice(&(grid as u32).to_ne_bytes());
        }
    }

    #[test]
    fn slots_read_back_as_launches_in_release_order_and_mixed_or_partial_slots_are_dropped() {
        let mut bytes = vec![0u8; 4 * SLOT_BYTES];
        stamp(&mut bytes, 1, 0, 256, 3, &[(100, 150), (120, 160), (90, 155)]);
        stamp(&mut bytes, 2, 1, 128, 1, &[(80, 95)]);
        // Launch 3's slot, overwritten in part by launch 3 + SLOTS.
        stamp(&mut bytes, 3, 1, 128, 2, &[(1, 2), (3, 4)]);
        stamp(&mut bytes, 3 + SLOTS as u64, 1, 128, 1, &[(5, 6)]);
        // A launch one of whose CTAs left no stamp.
        stamp(&mut bytes, 0, 0, 128, 2, &[(7, 8)]);
        let window = parse(&bytes, &["a.cu", "b.cu"]);
        assert_eq!(window.dropped_slots, 2);
        let b = LaunchTrace {
            kernel: "b.cu",
            grid_id: 2,
            ctas: 1,
            threads: 128,
            stamped: 1,
            arrive: (80, 80),
            release: (95, 95),
            release_median: 95,
            marks: [None; MARKS],
            by_sm_load: Vec::new(),
            sm_neighbours: None,
        };
        let a = LaunchTrace {
            kernel: "a.cu",
            grid_id: 1,
            ctas: 3,
            threads: 256,
            stamped: 3,
            arrive: (90, 120),
            release: (150, 160),
            release_median: 155,
            marks: [None; MARKS],
            by_sm_load: Vec::new(),
            sm_neighbours: None,
        };
        assert_eq!(window.launches, vec![b, a]);
    }

    /// Sets mark `k` of CTA `cta` of launch `grid` to the timer's low 32 bits at `at`.
    fn mark(bytes: &mut [u8], grid: u64, cta: usize, k: usize, at: u64) {
        let slot = &mut bytes[(grid as usize % SLOTS) * SLOT_BYTES..][..SLOT_BYTES];
        let m = MARKS_AT + cta * MARKS_BYTES + 4 * k;
        slot[m..m + 4].copy_from_slice(&(at as u32).to_ne_bytes());
    }

    #[test]
    fn marks_read_back_after_each_ctas_own_release_across_the_timers_wrap() {
        let mut bytes = vec![0u8; 2 * SLOT_BYTES];
        // Releases at 150, 160 and just below 2^32, so that the third CTA's marks wrap: mark 0
        // comes 20, 40 and 30 ns after them.
        let wrap = (1u64 << 32) - 5;
        stamp(&mut bytes, 1, 0, 256, 3, &[(100, 150), (120, 160), (wrap - 20, wrap)]);
        mark(&mut bytes, 1, 0, 0, 170);
        mark(&mut bytes, 1, 1, 0, 200);
        mark(&mut bytes, 1, 2, 0, wrap + 30);
        mark(&mut bytes, 1, 2, 3, wrap + 1000);
        let window = parse(&bytes, &["a.cu"]);
        let marks = window.launches[0].marks;
        assert_eq!(marks[0], Some(MarkTimes { median: 30, max: 40 }));
        assert_eq!(marks[3], Some(MarkTimes { median: 1000, max: 1000 }));
        assert_eq!((marks[1], marks[2]), (None, None));
        // Each CTA on an SM of its own: one group, of mark 3 (the last one set), whose only
        // CTA to set it is the third.
        let one = SmLoad { ctas_on_sm: 1, sms: 3, last_mark: MarkTimes { median: 1000, max: 1000 } };
        assert_eq!(window.launches[0].by_sm_load, vec![one]);
    }

    #[test]
    fn the_last_mark_is_grouped_by_how_many_of_the_launchs_ctas_shared_an_sm() {
        let mut bytes = vec![0u8; 2 * SLOT_BYTES];
        // Five CTAs released at 100: three on SM 7, one each on SMs 2 and 9.
        let on = [7, 2, 7, 9, 7];
        let stamps: Vec<_> = on.iter().map(|&sm| (90, 100, sm)).collect();
        stamp_on(&mut bytes, 1, 0, 128, 5, &stamps);
        for (cta, (m1, m2)) in [(10, 50), (12, 30), (11, 70), (13, 20), (14, 60)].into_iter().enumerate() {
            mark(&mut bytes, 1, cta, 1, 100 + m1);
            mark(&mut bytes, 1, cta, 2, 100 + m2);
        }
        let l = &parse(&bytes, &["a.cu"]).launches[0];
        assert_eq!(l.release, (100, 100));
        assert_eq!(l.marks[2], Some(MarkTimes { median: 50, max: 70 }));
        let alone = SmLoad { ctas_on_sm: 1, sms: 2, last_mark: MarkTimes { median: 20, max: 30 } };
        let three = SmLoad { ctas_on_sm: 3, sms: 1, last_mark: MarkTimes { median: 60, max: 70 } };
        assert_eq!(l.by_sm_load, vec![alone, three]);
        // SM 7 held CTAs 0, 2 and 4: two pairs, both 2 apart.
        assert_eq!(l.sm_neighbours, Some(SmNeighbours { distance: 2, pairs_at: 2, pairs: 2 }));
    }

    #[test]
    fn neighbours_on_an_sm_are_the_most_common_distance_in_the_grid_the_smaller_of_equals() {
        // Eight CTAs on four SMs: 0 and 4, 1 and 5 share SMs (4 apart), 2 and 3 one SM (1 apart),
        // 6 and 7 another (1 apart).
        assert_eq!(sm_neighbours(&[0, 1, 2, 2, 0, 1, 3, 3]), Some(SmNeighbours { distance: 1, pairs_at: 2, pairs: 4 }));
        // Three on one SM, one apart then three.
        assert_eq!(sm_neighbours(&[5, 5, 1, 2, 5]), Some(SmNeighbours { distance: 1, pairs_at: 1, pairs: 2 }));
        assert_eq!(sm_neighbours(&[0, 1, 2]), None);
        assert_eq!(sm_neighbours(&[]), None);
    }

    #[test]
    fn the_device_layout_is_the_one_parsed_here() {
        let src = crate::kernels::HP1_ROWS.source;
        assert!(
            src.contains("sizeof(StepTraceHeader) == 64 && sizeof(StepTraceCta) == 16 && sizeof(StepTraceMarks) == 16")
        );
        assert!(src.contains(&format!("STEP_TRACE_SLOTS = {SLOTS};")));
        assert!(src.contains(&format!("STEP_TRACE_CTAS = {CTAS};")));
        assert!(src.contains(&format!("STEP_TRACE_MARK_CTAS = {MARK_CTAS};")));
        assert!(src.contains(&format!("STEP_TRACE_MARKS = {MARKS};")));
        assert!(src.contains(&format!("STEP_TRACE_WAIT_BITS = {WAIT_BITS};")));
    }
}
