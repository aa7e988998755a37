//! The plan of a tensor-core prefill launch (the MMA and WGMMA paths of SPEC section 6) and the
//! step dispatcher that chooses among fake decode, MMA and WGMMA. Pure host code, tested on
//! the CPU.
//!
//! A prefill kernel gives each CTA one tile of `tile_rows` query rows of one sequence and
//! `heads_per_cta` query heads, and walks that tile's keys in tiles of 64 on the tensor cores.
//! MMA: 64 rows of one head (4 warps). WGMMA: two warpgroups sharing each K and V tile, either
//! on the two heads of one kv head over 64 rows (`Hq / Hkv` even: both heads read the same K and
//! V) or on 128 rows of one head. The grid is `(Hq / heads_per_cta, tile_slots)` (heads vary
//! fastest, so the launch follows the kernels' tile order: every sequence's last tile, the one
//! with the most keys, first), where
//! `tile_slots` bounds the tile count of any batch of at most `rows` query rows in at most
//! `max_seqs` sequences (`ceil(rows / tile_rows) + max_seqs`: each sequence adds at most one
//! partial tile); the CTAs past the batch's real tile count exit at once. So, as for the decode
//! paths, the grid comes from static facts and the kernel reads the real lengths from device
//! buffers.
//!
//! The dispatcher ([`prefill_path`]) takes a [`StepGeometry`]: the decode-path [`Geometry`] plus
//! the step's static prefill facts (the most sequences, the longest query a sequence may bring:
//! the scheduler's prefill chunk) and the device's compute capability. A step whose queries are
//! all short runs as fake decode (the decode kernels over one row per query token, whose split-K
//! fills the GPU with few rows); longer prefills run on WGMMA on Hopper (`sm_90`) for the head
//! dims it is built for, else on MMA on any GPU from `sm_80`, else as fake decode.
//! [`FAKE_DECODE_MAX_QUERY`] is the crossover, measured by `asynct-bench --prefill-crossover`
//! on an H200 (8 sequences after 4096 cached tokens, D 128, Hq/Hkv 8/4): fake decode grows with
//! the rows (144, 268, 523 us at queries 16, 32, 64) while the tensor-core prefills do not
//! (WGMMA 141, 136, 137 us; MMA 188, 183, 202 us), so they tie at 16 and the tensor cores win
//! from there up.

use super::launch::GateParams;
use super::plan::{Geometry, Plan};
use crate::error::{Error, Result};

/// The longest query (tokens per sequence in the step) that still runs as fake decode.
pub const FAKE_DECODE_MAX_QUERY: usize = 16;
/// Keys per tile of both tensor-core kernels.
pub const KEY_TILE: usize = 64;
/// The FIR taps the specialised prefill entries are compiled for (with `relu_pre`, gating in the
/// unit form): the model's configuration (SPEC section 1).
pub const SPECIALISED_FIR_K: usize = 3;

/// The tensor-core prefill kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrefillKernel {
    /// `mma.sync` m16n8k16 (`hp1_prefill_mma.cu`), sm_80 and newer.
    Mma,
    /// Hopper `wgmma.mma_async` (`hp1_prefill_wgmma.cu`), sm_90a only.
    Wgmma,
}

impl PrefillKernel {
    /// A short stable name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Mma => "prefill-mma",
            Self::Wgmma => "prefill-wgmma",
        }
    }

    /// Query heads per CTA for `g`: WGMMA pairs the two heads of a kv head where `Hq / Hkv` is
    /// even; MMA runs one.
    pub fn heads_per_cta(&self, g: &Geometry) -> usize {
        match self {
            Self::Wgmma if (g.num_heads / g.num_kv_heads).is_multiple_of(2) => 2,
            _ => 1,
        }
    }

    /// Query rows per CTA (the kernel's `BM`) with `heads_per_cta` heads.
    pub fn tile_rows(&self, heads_per_cta: usize) -> usize {
        match self {
            Self::Mma => 64,
            Self::Wgmma => 128 / heads_per_cta,
        }
    }

    /// Threads per CTA.
    pub fn threads(&self) -> u32 {
        match self {
            Self::Mma => 128,
            Self::Wgmma => 256,
        }
    }

    /// The head dims the kernel is instantiated for.
    pub fn head_dims(&self) -> &'static [usize] {
        match self {
            Self::Mma => &[64, 128, 256],
            Self::Wgmma => &[64, 128],
        }
    }

    /// Dynamic shared memory per CTA for head dim `d`, as each kernel's header states: two
    /// stages of K and V tiles of [`KEY_TILE`] rows and the Q tiles, all bf16. MMA stages Q in
    /// the second V buffer while `d <= 128` (its Q then lives in registers); WGMMA keeps a
    /// 64-row Q tile per warpgroup in shared memory and adds 1024 bytes to align its swizzled
    /// tiles to 1024.
    pub fn shared_bytes(&self, d: usize) -> usize {
        let tile = KEY_TILE * d * 2;
        match self {
            Self::Mma if d <= 128 => 4 * tile,
            Self::Mma => 5 * tile,
            Self::Wgmma => 6 * tile + 1024,
        }
    }

    /// Whether the kernel has entries specialised for the model's gate.
    pub fn has_specialised(&self) -> bool {
        matches!(self, Self::Wgmma)
    }

    /// The oldest compute capability that runs it.
    fn min_capability(&self) -> (i32, i32) {
        match self {
            Self::Mma => (8, 0),
            Self::Wgmma => (9, 0),
        }
    }

    /// Whether a device of compute capability `cc` runs it (wgmma exists on sm_90 alone; its
    /// successors drop it).
    pub fn runs_on(&self, cc: (i32, i32)) -> bool {
        match self {
            Self::Mma => cc >= self.min_capability(),
            Self::Wgmma => cc == self.min_capability(),
        }
    }
}

/// The static facts of a batch step that may hold prefills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepGeometry {
    /// The decode-path facts: `rows` is the step's query-row count (or its bucket).
    pub base: Geometry,
    /// The most sequences the step holds (rows of the block table).
    pub max_seqs: usize,
    /// The longest query any sequence of the step may bring (the scheduler's prefill chunk).
    pub max_query_len: usize,
}

/// A tensor-core prefill launch, decided once per step geometry and reused by every layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefillPlan {
    /// What it was made for.
    pub geometry: StepGeometry,
    /// The kernel.
    pub kernel: PrefillKernel,
    /// The `extern "C"` entry of the general gate, e.g. `hp1_prefill_mma_d128`.
    pub entry: String,
    /// The entry specialised for [`SPECIALISED_FIR_K`] taps and `relu_pre`, e.g.
    /// `hp1_prefill_wgmma_d128_f3_relu`, where the kernel has one.
    pub specialised_entry: Option<String>,
    /// Query heads per CTA.
    pub heads_per_cta: usize,
    /// Query rows per CTA.
    pub tile_rows: usize,
    /// `(Hq / heads_per_cta, tile_slots)`.
    pub grid: (u32, u32),
    /// Threads per CTA.
    pub block: u32,
    /// Dynamic shared memory per CTA in bytes.
    pub shared_bytes: u32,
}

impl PrefillPlan {
    /// A plan for `kernel` (tests and benchmarks force one; [`prefill_path`] picks one). Refuses a
    /// head dim the kernel is not built for, naming the ones it is.
    pub fn new(geometry: StepGeometry, kernel: PrefillKernel) -> Result<Self> {
        let g = geometry.base;
        g.validate()?;
        if !kernel.head_dims().contains(&g.head_dim) {
            return Err(unsupported(
                kernel,
                format!("head_dim must be one of {:?}, got {}", kernel.head_dims(), g.head_dim),
            ));
        }
        if geometry.max_seqs == 0 || geometry.max_query_len == 0 {
            return Err(unsupported(
                kernel,
                format!("max_seqs and max_query_len must be at least 1, got {geometry:?}"),
            ));
        }
        let heads_per_cta = kernel.heads_per_cta(&g);
        let tile_rows = kernel.tile_rows(heads_per_cta);
        let slots = g.rows.div_ceil(tile_rows).checked_add(geometry.max_seqs);
        let slots = match slots {
            Some(n) if n <= 65535 => n as u32,
            _ => return Err(unsupported(kernel, format!("{geometry:?} needs more than 65535 query tiles"))),
        };
        let head_ctas = u32::try_from(g.num_heads / heads_per_cta)
            .ok()
            .filter(|&h| h <= i32::MAX as u32)
            .ok_or_else(|| unsupported(kernel, format!("at most 2^31 - 1 head CTAs, got {}", g.num_heads)))?;
        let entry = match kernel {
            PrefillKernel::Mma => format!("hp1_prefill_mma_d{}", g.head_dim),
            PrefillKernel::Wgmma => format!("hp1_prefill_wgmma_d{}_h{heads_per_cta}", g.head_dim),
        };
        Ok(Self {
            geometry,
            kernel,
            specialised_entry: kernel.has_specialised().then(|| format!("{entry}_f{SPECIALISED_FIR_K}_relu")),
            entry,
            heads_per_cta,
            tile_rows,
            grid: (head_ctas, slots),
            block: kernel.threads(),
            shared_bytes: kernel.shared_bytes(g.head_dim) as u32,
        })
    }
}

impl PrefillPlan {
    /// The entry a launch with `gate` runs: the specialised one when the gate is exactly its
    /// configuration and has the unit form ([`GateParams::has_unit_form`]), which the
    /// specialised entries gate in, else the general one. The two round differently (the unit
    /// form is the same value in exact arithmetic); each is held against the oracle.
    pub fn entry_for(&self, gate: &GateParams) -> &str {
        match &self.specialised_entry {
            Some(entry) if gate.fir_k == SPECIALISED_FIR_K && gate.relu_pre && gate.has_unit_form() => entry,
            _ => &self.entry,
        }
    }
}

/// What the dispatcher picked for a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefillPath {
    /// Every query row as a decode row (the decode-path [`Plan`] of [`Plan::auto`]).
    FakeDecode(Plan),
    /// A tensor-core prefill kernel.
    Prefill(PrefillPlan),
}

impl PrefillPath {
    /// The path's name, e.g. `fake-decode` or `prefill-wgmma`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::FakeDecode(_) => "fake-decode",
            Self::Prefill(p) => p.kernel.name(),
        }
    }
}

/// The dispatcher: fake decode for short queries (at most [`FAKE_DECODE_MAX_QUERY`]) and on
/// GPUs without tensor-core support; else WGMMA where the device and head dim allow, else MMA.
pub fn prefill_path(geometry: StepGeometry, compute_capability: (i32, i32)) -> Result<PrefillPath> {
    let pick = [PrefillKernel::Wgmma, PrefillKernel::Mma]
        .into_iter()
        .find(|k| k.runs_on(compute_capability) && k.head_dims().contains(&geometry.base.head_dim));
    match pick {
        Some(kernel) if geometry.max_query_len > FAKE_DECODE_MAX_QUERY => {
            Ok(PrefillPath::Prefill(PrefillPlan::new(geometry, kernel)?))
        }
        _ => Ok(PrefillPath::FakeDecode(Plan::auto(geometry.base)?)),
    }
}

fn unsupported(kernel: PrefillKernel, reason: String) -> Error {
    Error::Unsupported { entry: kernel.name().to_string(), reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(rows: usize, seqs: usize, query: usize, head_dim: usize) -> StepGeometry {
        let base = Geometry { rows, num_heads: 8, num_kv_heads: 4, head_dim, block_size: 16, max_blocks_per_seq: 1024 };
        StepGeometry { base, max_seqs: seqs, max_query_len: query }
    }

    const HOPPER: (i32, i32) = (9, 0);
    const AMPERE: (i32, i32) = (8, 6);

    #[test]
    fn the_dispatcher_picks_by_query_length_device_and_head_dim() {
        for (g, cc, want) in [
            (step(8192, 1, 8192, 128), HOPPER, "prefill-wgmma"),
            (step(8192, 1, 8192, 128), AMPERE, "prefill-mma"),
            (step(8192, 1, 8192, 128), (7, 5), "fake-decode"),
            (step(8192, 1, 8192, 128), (10, 0), "prefill-mma"),
            (step(8192, 1, 8192, 256), HOPPER, "prefill-mma"),
            (step(8192, 1, 8192, 64), HOPPER, "prefill-wgmma"),
            (step(64, 1, FAKE_DECODE_MAX_QUERY, 128), HOPPER, "fake-decode"),
            (step(65, 1, FAKE_DECODE_MAX_QUERY + 1, 128), HOPPER, "prefill-wgmma"),
            (step(32, 32, 1, 128), HOPPER, "fake-decode"),
        ] {
            assert_eq!(prefill_path(g, cc).unwrap().name(), want, "{g:?} on {cc:?}");
        }
    }

    #[test]
    fn the_grid_bounds_the_tiles_of_any_batch_within_the_geometry() {
        let g = step(300, 5, 300, 128);
        let plan = PrefillPlan::new(g, PrefillKernel::Mma).unwrap();
        assert_eq!(plan.entry, "hp1_prefill_mma_d128");
        assert_eq!((plan.grid, plan.block), ((8, 5 + 5), 128));
        // Every split of 300 rows over up to 5 sequences fits in the slots.
        let tiles = |lens: &[usize]| lens.iter().map(|l| l.div_ceil(64)).sum::<usize>();
        for lens in [&[300][..], &[1, 1, 1, 1, 296], &[60, 60, 60, 60, 60], &[65, 65, 65, 65, 40]] {
            assert_eq!(lens.iter().sum::<usize>(), 300);
            assert!(tiles(lens) <= plan.grid.1 as usize, "{lens:?}");
        }
        assert_eq!(plan.shared_bytes, 64 << 10, "K and V double buffers, Q staged in one");
        let wide = PrefillPlan::new(step(300, 5, 300, 256), PrefillKernel::Mma).unwrap();
        assert_eq!(wide.shared_bytes, 160 << 10, "and a Q tile of its own at D = 256");
        let wgmma = PrefillPlan::new(g, PrefillKernel::Wgmma).unwrap();
        assert_eq!(wgmma.shared_bytes, (96 << 10) + 1024);
        // Hq / Hkv = 2: two heads of 64 rows per CTA, half the head CTAs.
        assert_eq!((wgmma.heads_per_cta, wgmma.tile_rows, wgmma.grid, wgmma.block), (2, 64, (4, 10), 256));
        // An odd ratio: 128 rows of one head per CTA.
        let odd = StepGeometry { base: Geometry { num_heads: 6, num_kv_heads: 2, ..g.base }, ..g };
        let wgmma = PrefillPlan::new(odd, PrefillKernel::Wgmma).unwrap();
        assert_eq!((wgmma.heads_per_cta, wgmma.tile_rows, wgmma.grid), (1, 128, (6, 3 + 5)));
        assert_eq!(wgmma.entry, "hp1_prefill_wgmma_d128_h1");
    }

    #[test]
    fn unsupported_prefill_shapes_are_refused_with_the_value() {
        let err = PrefillPlan::new(step(64, 1, 64, 256), PrefillKernel::Wgmma).unwrap_err().to_string();
        assert!(err.contains("prefill-wgmma") && err.contains("[64, 128], got 256"), "{err}");
        let err = PrefillPlan::new(step(64, 0, 64, 128), PrefillKernel::Mma).unwrap_err().to_string();
        assert!(err.contains("at least 1"), "{err}");
        let err = PrefillPlan::new(step(64, 1, 64, 96), PrefillKernel::Mma).unwrap_err().to_string();
        assert!(err.contains("got 96"), "{err}");
        // The tile slots are the grid's y dimension: at most 65535.
        PrefillPlan::new(step(64 * 65000, 535, 64, 128), PrefillKernel::Mma).unwrap();
        let err = PrefillPlan::new(step(64 * 65000, 536, 64, 128), PrefillKernel::Mma).unwrap_err().to_string();
        assert!(err.contains("more than 65535 query tiles"), "{err}");
    }

    #[test]
    fn the_model_gate_takes_the_specialised_entry_where_there_is_one() {
        let gate = GateParams { scale: 0.125, fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0 };
        let wgmma = PrefillPlan::new(step(300, 5, 300, 128), PrefillKernel::Wgmma).unwrap();
        assert_eq!(wgmma.entry_for(&gate), "hp1_prefill_wgmma_d128_h2_f3_relu");
        assert_eq!(wgmma.entry_for(&GateParams { fir_k: 4, ..gate }), "hp1_prefill_wgmma_d128_h2");
        assert_eq!(wgmma.entry_for(&GateParams { relu_pre: false, ..gate }), "hp1_prefill_wgmma_d128_h2");
        // Without the unit form (a scale of 0 or below, subnormal, or bounds over it past f32).
        for scale in [0.0, -0.125, f32::MIN_POSITIVE / 2.0, 1e-38] {
            assert_eq!(wgmma.entry_for(&GateParams { scale, ..gate }), "hp1_prefill_wgmma_d128_h2", "scale {scale}");
        }
        assert_eq!(wgmma.entry_for(&GateParams { scale: 1e-6, clip_max: 1e36, ..gate }), "hp1_prefill_wgmma_d128_h2");
        assert_eq!(
            wgmma.entry_for(&GateParams { scale: 1e-6, clip_max: 1e30, ..gate }),
            "hp1_prefill_wgmma_d128_h2_f3_relu"
        );
        let mma = PrefillPlan::new(step(300, 5, 300, 128), PrefillKernel::Mma).unwrap();
        assert_eq!(mma.entry_for(&gate), "hp1_prefill_mma_d128");
    }

    #[test]
    fn wgmma_runs_on_hopper_alone() {
        assert!(PrefillKernel::Wgmma.runs_on(HOPPER));
        assert!(!PrefillKernel::Wgmma.runs_on(AMPERE) && !PrefillKernel::Wgmma.runs_on((10, 0)));
        assert!(PrefillKernel::Mma.runs_on(AMPERE) && !PrefillKernel::Mma.runs_on((7, 5)));
    }
}
