//! A batch of small copies to the device as one upload and one launch (`copy_list.cu`): the host
//! packs every source into a block of page-locked memory beside a list of (destination, source,
//! words) entries, copies the block to the device once, and the kernel copies each entry's words
//! where they belong. A copy on the stream costs about 3 us of device time however few its
//! bytes; a step's inputs were nine of them (RESULTS run 224).
//!
//! [`CopyPlan`] is the block's layout, built on the host and tested here; [`CopyList`] owns the
//! page-locked areas, the device block and the kernel. Entries are of two phases: phase 1 runs
//! after every entry of phase 0, so it may overwrite what phase 0 wrote (a pending token over
//! its placeholder id, [`CopyList::gather`]); the sources of phase-1 entries are device buffers.
//!
//! A batch's area is not written again before its copy has run: [`AREAS`] areas are used in turn
//! and [`CopyList::begin`] waits for the copy of the batch that last used the next one, which
//! with at most two steps queued ahead and at most two batches a step is already over.

use std::sync::Arc;

use cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, PinnedHostSlice,
};

use crate::error::{Error, Result};
use crate::kernels::COPY_LIST;
use crate::runtime::{launch_error, Gpu, Launch};

/// Entries a batch may hold (the kernel reads the count from the block's header).
pub const MAX_ENTRIES: usize = 64;
/// Page-locked areas used in turn.
pub const AREAS: usize = 4;
/// The block's header: the entry count (u32) and padding to 16 bytes, then the entries.
const HEADER: usize = 16;
const ENTRY_BYTES: usize = 24;
/// Where the payload starts in the block.
pub const PAYLOAD: usize = HEADER + MAX_ENTRIES * ENTRY_BYTES;
const ENTRY: &str = "copy_list";
/// `copy_list.cu`'s COPY_LIST_THREADS.
const THREADS: u32 = 512;

fn refuse(reason: String) -> Error {
    Error::Unsupported { entry: ENTRY.into(), reason }
}

/// One copy of the batch: `words` 4-byte words from `src` to `dst`, device addresses, or for a
/// source in the block its offset there (`src_in_block`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyEntry {
    /// Device address written.
    pub dst: u64,
    /// Device address read, or the offset in the block where `src_in_block`.
    pub src: u64,
    /// Whether `src` is an offset in the block (a staged source) rather than an address.
    pub src_in_block: bool,
    /// 4-byte words copied.
    pub words: u32,
    /// 0 for a staged source, 1 for a device buffer's (run after every phase-0 entry).
    pub phase: u32,
}

/// A batch's block as the host builds it: the entries and the payload bytes, before the block's
/// device address is known.
#[derive(Debug, Default)]
pub struct CopyPlan {
    entries: Vec<CopyEntry>,
    payload: Vec<u8>,
}

impl CopyPlan {
    /// Adds a copy of `src` (its bytes a whole number of 4-byte words) to `dst`, a device address
    /// with room for `dst_len` values; the bytes go into the payload at an 8-byte boundary.
    pub fn stage<T: DeviceRepr>(&mut self, src: &[T], dst: u64, dst_len: usize) -> Result<()> {
        let bytes = std::mem::size_of_val(src);
        if src.is_empty() {
            return Ok(());
        }
        if src.len() > dst_len {
            return Err(refuse(format!("{} values into a buffer of {dst_len}", src.len())));
        }
        let at = self.payload.len().next_multiple_of(8);
        self.check(CopyEntry { dst, src: (PAYLOAD + at) as u64, src_in_block: true, words: words(bytes)?, phase: 0 })?;
        self.payload.resize(at, 0);
        // SAFETY: `T: DeviceRepr` is plain data copied to the device byte for byte; these are
        // exactly its `bytes` bytes.
        self.payload.extend_from_slice(unsafe { std::slice::from_raw_parts(src.as_ptr().cast::<u8>(), bytes) });
        Ok(())
    }

    /// Adds a copy of `len` values of `T` from the device address `src` to `dst`, after every
    /// staged copy.
    pub fn gather<T>(&mut self, src: u64, dst: u64, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let words = words(len * std::mem::size_of::<T>())?;
        self.check(CopyEntry { dst, src, src_in_block: false, words, phase: 1 })
    }

    /// Adds `e` to the entries where the batch has room and its addresses are aligned.
    fn check(&mut self, e: CopyEntry) -> Result<()> {
        if self.entries.len() == MAX_ENTRIES {
            return Err(refuse(format!("more than {MAX_ENTRIES} copies in one batch")));
        }
        if !e.dst.is_multiple_of(4) || (!e.src_in_block && !e.src.is_multiple_of(4)) {
            return Err(refuse(format!("addresses {:#x} <- {:#x} not on 4-byte boundaries", e.dst, e.src)));
        }
        self.entries.push(e);
        Ok(())
    }

    /// The batch's copies, in the order they were added.
    pub fn entries(&self) -> &[CopyEntry] {
        &self.entries
    }

    /// The block's length in bytes.
    pub fn len(&self) -> usize {
        PAYLOAD + self.payload.len()
    }

    /// Writes the block into `out` ([`CopyPlan::len`] bytes) with its sources resolved against
    /// `block`, its device address. Entry slots past the count are left as they were: the kernel
    /// reads only the count's.
    pub fn write(&self, block: u64, out: &mut [u8]) {
        out[..4].copy_from_slice(&(self.entries.len() as u32).to_ne_bytes());
        for (i, e) in self.entries.iter().enumerate() {
            let src = if e.src_in_block { block + e.src } else { e.src };
            let at = HEADER + i * ENTRY_BYTES;
            out[at..at + 8].copy_from_slice(&e.dst.to_ne_bytes());
            out[at + 8..at + 16].copy_from_slice(&src.to_ne_bytes());
            out[at + 16..at + 20].copy_from_slice(&e.words.to_ne_bytes());
            out[at + 20..at + 24].copy_from_slice(&e.phase.to_ne_bytes());
        }
        out[PAYLOAD..].copy_from_slice(&self.payload);
    }

    /// Forgets every copy, keeping the memory for the next batch.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.payload.clear();
    }

    /// Whether the batch holds no copy.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn words(bytes: usize) -> Result<u32> {
    if !bytes.is_multiple_of(4) {
        return Err(refuse(format!("{bytes} bytes are not whole 4-byte words")));
    }
    u32::try_from(bytes / 4).map_err(|_| refuse(format!("{bytes} bytes in one copy")))
}

/// The page-locked areas, the device block and `copy_list.cu`, for batches of up to `bytes`.
pub struct CopyList {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    areas: Vec<PinnedHostSlice<u8>>,
    copied: Vec<CudaEvent>,
    area: usize,
    block: CudaSlice<u8>,
    plan: CopyPlan,
}

impl CopyList {
    /// Areas and a device block of [`PAYLOAD`] + `payload` bytes.
    pub fn new(gpu: &Gpu, payload: usize) -> Result<Self> {
        let len = PAYLOAD + payload;
        let areas = (0..AREAS).map(|_| gpu.pinned(len)).collect::<Result<Vec<_>>>()?;
        let copied = (0..AREAS).map(|_| gpu.context().new_event(None)).collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Self {
            stream: gpu.stream().clone(),
            func: gpu.function(&COPY_LIST, ENTRY)?,
            areas,
            copied,
            area: 0,
            block: gpu.zeros(len)?,
            plan: CopyPlan::default(),
        })
    }

    /// Starts a batch (forgetting one begun and not ended).
    pub fn begin(&mut self) {
        self.plan.clear();
    }

    /// Adds the copy of `src` into `dst`.
    pub fn stage<T: DeviceRepr, Dst: DevicePtrMut<T>>(&mut self, src: &[T], dst: &mut Dst) -> Result<()> {
        let len = dst.len();
        let (ptr, _record) = dst.device_ptr_mut(&self.stream);
        self.plan.stage(src, ptr, len)
    }

    /// Adds the copy of `src`, a device buffer, into `dst`, after every staged copy.
    pub fn gather<T, Src: DevicePtr<T>, Dst: DevicePtrMut<T>>(&mut self, src: &Src, dst: &mut Dst) -> Result<()> {
        if src.len() > dst.len() {
            return Err(refuse(format!("{} values into a buffer of {}", src.len(), dst.len())));
        }
        let (from, _r) = src.device_ptr(&self.stream);
        let (to, _w) = dst.device_ptr_mut(&self.stream);
        self.plan.gather::<T>(from, to, src.len())
    }

    /// Queues the batch: the block's copy, then the launch that spreads it. Nothing is queued
    /// for an empty batch.
    pub fn end(&mut self) -> Result<()> {
        if self.plan.is_empty() {
            return Ok(());
        }
        self.upload()?;
        self.spread()
    }

    /// Queues the block's copy alone, for a CUDA graph that holds [`CopyList::spread`] as its
    /// first launch. An empty batch uploads its count of 0, so that launch then copies nothing.
    pub fn upload(&mut self) -> Result<()> {
        let base = self.block.device_ptr(&self.stream).0;
        let len = self.plan.len();
        if len > self.block.len() {
            return Err(refuse(format!("a batch of {len} bytes in a block of {}", self.block.len())));
        }
        self.area = (self.area + 1) % AREAS;
        self.copied[self.area].synchronize()?;
        let area = &mut self.areas[self.area].as_mut_slice()?[..len];
        self.plan.write(base, area);
        self.stream.memcpy_htod(area, &mut self.block.slice_mut(..len))?;
        self.copied[self.area].record(&self.stream)?;
        self.plan.clear();
        Ok(())
    }

    /// Queues (or, under capture, records) the launch that copies the entries of the block last
    /// uploaded.
    pub fn spread(&self) -> Result<()> {
        let cfg = cudarc::driver::LaunchConfig { grid_dim: (1, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut b = Launch::new(&self.stream, &self.func);
        b.arg(&self.block);
        // SAFETY: the argument matches `copy_list` in copy_list.cu; every entry of an uploaded
        // block was checked on the host (lengths against their buffers, 4-byte alignment, the
        // count), and a block never uploaded holds a count of 0.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_holds_its_count_entries_and_payload_with_sources_resolved() {
        let mut p = CopyPlan::default();
        p.stage(&[1u32, 2, 3], 0x1000, 3).unwrap();
        p.stage(&[7i64], 0x2000, 4).unwrap();
        p.gather::<u32>(0x3000, 0x1004, 1).unwrap();
        p.stage::<u32>(&[], 0x4000, 0).unwrap();
        assert_eq!(p.entries().len(), 3, "an empty source adds nothing");
        let mut b = vec![0u8; p.len()];
        p.write(0x10_0000, &mut b);
        assert_eq!(u32::from_ne_bytes(b[..4].try_into().unwrap()), 3);
        let entry = |i: usize| {
            let at = HEADER + i * ENTRY_BYTES;
            let u64_at = |o: usize| u64::from_ne_bytes(b[at + o..at + o + 8].try_into().unwrap());
            let u32_at = |o: usize| u32::from_ne_bytes(b[at + o..at + o + 4].try_into().unwrap());
            (u64_at(0), u64_at(8), u32_at(16), u32_at(20))
        };
        // The second source starts at the next 8-byte boundary of the payload.
        assert_eq!(entry(0), (0x1000, 0x10_0000 + PAYLOAD as u64, 3, 0));
        assert_eq!(entry(1), (0x2000, 0x10_0000 + PAYLOAD as u64 + 16, 2, 0));
        assert_eq!(entry(2), (0x1004, 0x3000, 1, 1));
        assert_eq!(&b[PAYLOAD..PAYLOAD + 12], &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(&b[PAYLOAD + 16..], &7i64.to_ne_bytes());
        p.clear();
        assert!(p.is_empty() && p.len() == PAYLOAD, "a cleared batch holds nothing");
    }

    #[test]
    fn the_kernel_agrees_on_the_layout_and_the_launch() {
        for (name, value) in [
            ("COPY_LIST_HEADER", HEADER),
            ("COPY_LIST_MAX_ENTRIES", MAX_ENTRIES),
            ("COPY_LIST_THREADS", THREADS as usize),
        ] {
            let line = format!("constexpr int {name} = {value};");
            assert!(COPY_LIST.source.contains(&line), "copy_list.cu lacks `{line}`");
        }
        assert!(PAYLOAD.is_multiple_of(16), "the payload starts on a 16-byte boundary");
    }

    #[test]
    fn a_batch_refuses_short_buffers_odd_sizes_misaligned_addresses_and_too_many_copies() {
        let mut p = CopyPlan::default();
        let err = p.stage(&[1u32, 2], 0x1000, 1).unwrap_err().to_string();
        assert!(err.contains("2 values into a buffer of 1"), "{err}");
        let err = p.stage(&[1u16], 0x1000, 1).unwrap_err().to_string();
        assert!(err.contains("2 bytes are not whole 4-byte words"), "{err}");
        let err = p.gather::<u32>(0x3002, 0x1000, 1).unwrap_err().to_string();
        assert!(err.contains("not on 4-byte boundaries"), "{err}");
        for i in 0..MAX_ENTRIES {
            p.stage(&[i as u32], 0x1000 + 4 * i as u64, 1).unwrap();
        }
        let err = p.stage(&[0u32], 0x1000, 1).unwrap_err().to_string();
        assert!(err.contains("more than 64 copies"), "{err}");
        assert_eq!(p.entries().len(), MAX_ENTRIES, "refused copies leave the batch as it was");
    }
}
