//! The race a decode launch that says [`Settled::OlderKeys`] must survive. In a step, the kernel
//! just before the attention (the QKV GEMM's epilogue) writes each row's newest key and value
//! while the attention's CTAs start (PDL), and split-K's small-grid entries load their older keys
//! before they wait for it (`hp1_attention.cuh`'s EARLY K). Here that predecessor is the copy
//! kernel (`copy_list.cu`): the newest rows are NaN until it writes them, and a large copy ahead
//! of theirs keeps it running while the attention's CTAs load. A launch that kept a row it read
//! before the wait gives NaN or other bits than a launch that waited first.

use std::sync::Mutex;

use cudarc::driver::CudaSlice;
use half::bf16;

use gpu::attention::{AttnBuffers, GateParams, Hp1Attention, Settled};
use gpu::runtime::copy_list::MAX_ENTRIES;
use gpu::runtime::CopyList;
use gpu::Gpu;

use crate::case::CaseData;
use crate::error::{Error, Result};
use crate::gpu_paths::same_bits;

/// Bytes the copy kernel moves before the newest rows, so that it is still running when the
/// attention's CTAs load their keys (one CTA copies it in rounds of 32 KB).
const DELAY_BYTES: usize = 1 << 20;

/// The copy kernel's list and its delay's bytes and destination, made once a device (page-locked
/// areas and a megabyte block are slow to allocate per case).
struct Copier {
    copies: CopyList,
    zeros: Vec<u8>,
    delay: CudaSlice<u8>,
}

/// Whether `data` is a batch of decode rows (one query a sequence), the only rows the claim of
/// [`Settled::OlderKeys`] holds for: a prefill chunk's rows read keys the step writes.
pub fn decode_rows(data: &CaseData) -> bool {
    data.meta.query_start_loc.windows(2).all(|w| w[1] - w[0] == 1)
}

/// The cache token rows of each sequence's newest key (sequences without keys have none).
fn newest_rows(data: &CaseData) -> Vec<usize> {
    let (_, block_size, _, _) = data.f32.key_cache.dim();
    let m = &data.meta;
    (0..m.seq_lens.len())
        .filter(|&s| m.seq_lens[s] > 0)
        .map(|s| {
            let t = m.seq_lens[s] as usize - 1;
            m.block_table[[s, t / block_size]] as usize * block_size + t % block_size
        })
        .collect()
}

/// Poisons the newest key and value rows of up to 31 of `data`'s decode rows (the copy list's
/// entries, one for the delay and two a row), has the copy kernel write them back behind
/// a megabyte (`DELAY_BYTES`) of other copying, and launches `attention` right after it with
/// [`Settled::OlderKeys`] on a NaN-poisoned output. `expected` is the output of a launch that
/// waited first; any other bit is an error. Leaves the caches as they were.
pub fn check_older_keys(
    gpu: &Gpu,
    data: &CaseData,
    attention: &Hp1Attention,
    bufs: &mut AttnBuffers,
    gate: &GateParams,
    expected: &[bf16],
) -> Result<()> {
    let (_, _, kv_heads, head_dim) = data.f32.key_cache.dim();
    let width = kv_heads * head_dim;
    let mut rows = newest_rows(data);
    rows.truncate((MAX_ENTRIES - 1) / 2);
    if rows.is_empty() {
        return Ok(());
    }
    let bits = data.bf16();
    let span = |row: usize| row * width..(row + 1) * width;
    let fresh: Vec<bf16> = (rows.iter().map(|&r| &bits.key_cache[span(r)]))
        .chain(rows.iter().map(|&r| &bits.value_cache[span(r)]))
        .flatten()
        .copied()
        .collect();
    let fresh = gpu.upload(&fresh)?;
    let copier = gpu.shared(|g| {
        let (copies, delay) = (CopyList::new(g, DELAY_BYTES)?, g.zeros(DELAY_BYTES)?);
        Ok(Mutex::new(Copier { copies, zeros: vec![0; DELAY_BYTES], delay }))
    })?;
    let mut copier = copier.lock().expect("the copier's lock is never poisoned by a panic here");
    let Copier { copies, zeros, delay } = &mut *copier;
    let nan = vec![bf16::NAN; width];
    copies.begin();
    copies.stage(zeros, delay)?;
    {
        let (mut key, mut value) = bufs.caches_mut();
        for (i, &row) in rows.iter().enumerate() {
            for (cache, from) in [(&mut key, i), (&mut value, rows.len() + i)] {
                let mut dst = cache.slice_mut(span(row));
                gpu.stream().memcpy_htod(&nan, &mut dst).map_err(gpu::Error::from)?;
                copies.gather(&fresh.slice(span(from)), &mut dst)?;
            }
        }
    }
    bufs.poison_output(gpu)?;
    copies.end()?;
    attention.run(bufs.operands(Settled::OlderKeys), gate)?;
    if !same_bits(&bufs.download_output(gpu)?, expected) {
        return Err(Error::Path {
            path: attention.plan().path.name().to_string(),
            reason: format!(
                "with {} rows' newest keys written by the kernel before it, a launch reading the older keys \
                 before the wait (Settled::OlderKeys) changed the output bits",
                rows.len()
            ),
        });
    }
    Ok(())
}
