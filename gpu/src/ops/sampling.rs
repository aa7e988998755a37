//! Token selection on the device (`sampling.cu`): greedy argmax and the Gumbel-max sampler of
//! `oracle::decode::sampler` (temperature, top-k, top-p, min-p, Philox noise keyed by seed, step
//! and token), a thread-block cluster of CTAs per row of logits on Hopper ([`row_ctas`]; one CTA
//! before it). The kernel's header states the algorithm, its cost, and the one place it is not
//! the oracle's arithmetic to the bit. Rows are f32, or bf16 (the LM head's output, read as it is:
//! each element widens exactly to the f32 the oracle's row holds, so a bf16 row and its widened
//! f32 copy give the same token).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut, DeviceRepr, LaunchConfig, ValidAsZeroBits};
use half::bf16;

use super::{check_len, unsupported, Faults};
use crate::error::{Error, Result};
use crate::kernels::SAMPLING;
use crate::runtime::{launch_error, Gpu, Launch};

/// Threads per CTA: `THREADS` in sampling_common.cuh (512 keeps the 16 f64 mass bins of the top-p
/// search in registers without spills).
const THREADS: u32 = 512;

/// The most CTAs a row's cluster takes: 8, the largest cluster every GPU with clusters launches.
const MAX_ROW_CTAS: u32 = 8;

/// CTAs per row for `rows` rows on `sms` multiprocessors of compute capability `(major, _)`: as
/// many as keep the grid within one CTA an SM (a CTA holds 49K registers, so an SM runs one), up
/// to 8 (`MAX_ROW_CTAS`), in a power of two; one where the GPU has no clusters (before sm_90).
/// With more CTAs than SMs a greedy row's short slices wait in waves: 8 CTAs a row took the B128
/// sampler from 20 to 51 us under ncu (RESULTS run 121). The token does not depend on it (the
/// kernel's ROW SCAN).
pub fn row_ctas(rows: u32, sms: u32, (major, _): (i32, i32)) -> u32 {
    if major < 9 || rows == 0 {
        return 1;
    }
    let fit = (sms / rows).clamp(1, MAX_ROW_CTAS);
    1 << fit.ilog2()
}

/// One row's sampling parameters, laid out as `SamplingRow` in sampling_common.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingRow {
    /// Keys the Philox draws.
    pub seed: u64,
    /// Index of the token being drawn among the request's generated tokens (0 for the first).
    pub step: u64,
    /// `0` is greedy; otherwise finite and positive.
    pub temperature: f32,
    /// Keep the `top_k` largest logits; `0` (or at least the vocabulary) keeps all.
    pub top_k: u32,
    /// In `(0, 1]`; `1` keeps all.
    pub top_p: f32,
    /// In `[0, 1]`: drop tokens less likely than `min_p` times the likeliest; `0` keeps all.
    pub min_p: f32,
}

// SAFETY: `SamplingRow` is `repr(C)` plain data (two u64, four 4-byte fields: 32 bytes, no
// padding), the layout of the kernel's struct.
unsafe impl DeviceRepr for SamplingRow {}
// SAFETY: every field is an integer or a float, for which zero bits are a value (greedy, seed 0).
unsafe impl ValidAsZeroBits for SamplingRow {}

impl SamplingRow {
    /// Checks the parameters as `oracle::decode::sampler::SamplingParams::validate` does
    /// (temperature finite and `>= 0`, `top_p` in `(0, 1]`, `min_p` in `[0, 1]`), naming the field
    /// and the value. A `top_k` above `u32::MAX` keeps all, as it would on the host.
    pub fn new(temperature: f32, top_k: usize, top_p: f32, min_p: f32, seed: u64, step: u64) -> Result<Self> {
        let bad = |reason: String| Err(Error::Unsupported { entry: "sample_rows".to_string(), reason });
        if !temperature.is_finite() || temperature < 0.0 {
            return bad(format!("temperature must be finite and >= 0, got {temperature}"));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {top_p}"));
        }
        if !(0.0..=1.0).contains(&min_p) {
            return bad(format!("min_p must be in [0, 1], got {min_p}"));
        }
        let top_k = u32::try_from(top_k).unwrap_or(u32::MAX);
        Ok(Self { seed, step, temperature, top_k, top_p, min_p })
    }
}

/// The element types of the logits the sampler reads: f32, and bf16. Sealed: the entry a type
/// picks reads its buffer as that layout, so no other type may claim one.
pub trait Logit: DeviceRepr + sealed::Sealed {
    /// Whether the kernel's `_bf16` entries read these.
    const BF16: bool;
}
impl Logit for f32 {
    const BF16: bool = false;
}
impl Logit for bf16 {
    const BF16: bool = true;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
}

/// An entry of sampling.cu and its name, for the f32 and the bf16 rows.
struct Entries {
    f32: (CudaFunction, &'static str),
    bf16: (CudaFunction, &'static str),
}

impl Entries {
    fn load(gpu: &Gpu, f32: &'static str, bf16: &'static str) -> Result<Self> {
        Ok(Self { f32: (gpu.function(&SAMPLING, f32)?, f32), bf16: (gpu.function(&SAMPLING, bf16)?, bf16) })
    }

    fn of<T: Logit>(&self) -> (&CudaFunction, &'static str) {
        let entry = if T::BF16 { &self.bf16 } else { &self.f32 };
        (&entry.0, entry.1)
    }
}

/// `sampling.cu`, loaded.
pub struct Sampler {
    stream: Arc<CudaStream>,
    sms: u32,
    compute_capability: (i32, i32),
    argmax: Entries,
    sample: Entries,
}

impl Sampler {
    /// Loads `sampling.cu` (compiling it on first use).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            stream: gpu.stream().clone(),
            sms: u32::try_from(gpu.multiprocessors()?).unwrap_or(u32::MAX),
            compute_capability: gpu.info().compute_capability,
            argmax: Entries::load(gpu, "argmax_rows", "argmax_rows_bf16")?,
            sample: Entries::load(gpu, "sample_rows", "sample_rows_bf16")?,
        })
    }

    /// `tokens[r]` = the first index of row `r`'s largest logit (`-0 == +0`); `logits` is
    /// `[rows, vocab]`. A row with NaN, `+inf` or nothing finite is recorded in `faults`. Launch only.
    pub fn argmax<T: Logit>(
        &self,
        logits: &CudaView<'_, T>,
        vocab: usize,
        tokens: &mut CudaViewMut<'_, u32>,
        faults: &mut Faults,
    ) -> Result<()> {
        let (func, entry) = self.argmax.of::<T>();
        let (rows, vocab_u) = rows_of(entry, logits.len(), vocab)?;
        check_len(entry, "tokens", tokens.len(), rows as usize)?;
        if rows == 0 {
            return Ok(());
        }
        let ctas = row_ctas(rows, self.sms, self.compute_capability);
        let cfg = row_config(rows, ctas);
        let mut b = Launch::new(&self.stream, func);
        b.cluster_x(ctas);
        b.arg(logits).arg(&vocab_u).arg(tokens).arg(faults.word());
        // SAFETY: the arguments match `argmax_rows` (f32) and `argmax_rows_bf16` in sampling.cu,
        // the entry of T's rows; `ctas` CTAs per row of `vocab` logits, one cluster (none before
        // sm_90, where `ctas` is 1), sizes checked above.
        unsafe { b.launch(cfg) }.map_err(launch_error(entry, &cfg))?;
        Ok(())
    }

    /// Draws one token per row of `logits` (`[rows, vocab]`) with `params[r]`, into `tokens[r]`,
    /// and how many tokens survived top-k/top-p into `survivors[r]` (1 when greedy, 0 for a row
    /// recorded in `faults` for NaN, `+inf` or nothing finite). Launch only.
    pub fn sample<T: Logit>(
        &self,
        logits: &CudaView<'_, T>,
        vocab: usize,
        params: &CudaView<'_, SamplingRow>,
        tokens: &mut CudaViewMut<'_, u32>,
        survivors: &mut CudaViewMut<'_, u32>,
        faults: &mut Faults,
    ) -> Result<()> {
        let (func, entry) = self.sample.of::<T>();
        let (rows, vocab_u) = rows_of(entry, logits.len(), vocab)?;
        check_len(entry, "params", params.len(), rows as usize)?;
        check_len(entry, "tokens", tokens.len(), rows as usize)?;
        check_len(entry, "survivors", survivors.len(), rows as usize)?;
        if rows == 0 {
            return Ok(());
        }
        let ctas = row_ctas(rows, self.sms, self.compute_capability);
        let cfg = row_config(rows, ctas);
        let mut b = Launch::new(&self.stream, func);
        b.cluster_x(ctas);
        b.arg(logits).arg(&vocab_u).arg(params).arg(tokens).arg(survivors).arg(faults.word());
        // SAFETY: the arguments match `sample_rows` (f32) and `sample_rows_bf16` in sampling.cu,
        // the entry of T's rows; `ctas` CTAs per row of `vocab` logits, one cluster (none before
        // sm_90, where `ctas` is 1), sizes checked above.
        unsafe { b.launch(cfg) }.map_err(launch_error(entry, &cfg))?;
        Ok(())
    }
}

/// Rows of `len` logits of `vocab` each (`1 <= vocab < 2^31`, at most 2^31 - 1 rows; with
/// [`row_ctas`] CTAs a row the grid stays within max(rows, SMs) CTAs).
fn rows_of(entry: &str, len: usize, vocab: usize) -> Result<(u32, u32)> {
    if vocab == 0 || vocab > i32::MAX as usize {
        return Err(unsupported(entry, format!("vocab must be 1 to 2^31 - 1, got {vocab}")));
    }
    if !len.is_multiple_of(vocab) {
        return Err(unsupported(entry, format!("{len} logits are not whole rows of {vocab}")));
    }
    let rows = u32::try_from(len / vocab)
        .ok()
        .filter(|&r| r <= i32::MAX as u32)
        .ok_or_else(|| unsupported(entry, format!("{} rows is more than a grid holds", len / vocab)))?;
    Ok((rows, vocab as u32))
}

/// `ctas` consecutive CTAs a row (its cluster).
fn row_config(rows: u32, ctas: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (rows * ctas, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_struct_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<SamplingRow>(), 32);
        assert_eq!(std::mem::align_of::<SamplingRow>(), 8);
        let src = include_str!("../../kernels/sampling_common.cuh");
        let fields = [
            "unsigned long long seed;",
            "unsigned long long step;",
            "float temperature;",
            "unsigned top_k;",
            "float top_p;",
            "float min_p;",
        ];
        let mut at = src.find("struct SamplingRow {").expect("sampling_common.cuh defines SamplingRow");
        for f in fields {
            let next = src[at..].find(f).unwrap_or_else(|| panic!("SamplingRow lacks `{f}` in this order"));
            at += next;
        }
        assert!(src.contains(&format!("#define THREADS {THREADS}")), "THREADS differs from sampling_common.cuh");
    }

    #[test]
    fn parameters_are_checked_like_the_oracle_and_name_the_field() {
        for (t, p, m, needle) in [
            (-0.5, 1.0, 0.0, "temperature"),
            (f32::NAN, 1.0, 0.0, "temperature"),
            (f32::INFINITY, 1.0, 0.0, "temperature"),
            (1.0, 0.0, 0.0, "top_p"),
            (1.0, 1.5, 0.0, "top_p"),
            (1.0, f32::NAN, 0.0, "top_p"),
            (1.0, 1.0, -0.1, "min_p"),
            (1.0, 1.0, 1.5, "min_p"),
            (1.0, 1.0, f32::NAN, "min_p"),
        ] {
            let e = SamplingRow::new(t, 0, p, m, 0, 0).unwrap_err().to_string();
            assert!(e.contains(needle), "{t} {p} {m}: {e}");
        }
        let r = SamplingRow::new(0.7, usize::MAX, 0.9, 0.05, 5, 6).unwrap();
        assert_eq!((r.top_k, r.min_p, r.seed, r.step), (u32::MAX, 0.05, 5, 6));
    }

    #[test]
    fn logit_rows_must_be_whole() {
        assert_eq!(rows_of("k", 3 * 512, 512).unwrap(), (3, 512));
        assert!(rows_of("k", 1000, 512).unwrap_err().to_string().contains("not whole rows of 512"));
        assert!(rows_of("k", 0, 0).is_err());
        assert_eq!(rows_of("k", 0, 512).unwrap(), (0, 512));
        assert_eq!(row_config(3, 8).grid_dim, (24, 1, 1));
    }

    #[test]
    fn a_row_takes_the_sms_a_batch_leaves_up_to_eight_ctas() {
        let hopper = (9, 0);
        let ctas: Vec<u32> = [1, 16, 17, 32, 64, 66, 67, 128, 256].iter().map(|&r| row_ctas(r, 132, hopper)).collect();
        assert_eq!(ctas, vec![8, 8, 4, 4, 2, 2, 1, 1, 1]);
        assert_eq!((row_ctas(1, 132, (8, 0)), row_ctas(1, 132, (10, 0)), row_ctas(0, 132, hopper)), (1, 8, 1));
        // The grid stays within max(rows, SMs) CTAs, so any row count a grid holds still fits.
        for rows in [1, 5, 33, 131, 132, 133, 100_000] {
            assert!(rows * row_ctas(rows, 132, hopper) <= rows.max(132), "{rows} rows");
        }
    }
}
