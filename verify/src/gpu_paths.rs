//! The GPU's HP1 attention paths as [`Path`]s, so every property written over a [`Case`] runs
//! on the kernels too: decode and split-K, each with dense and sparse-index PV, fake decode
//! (prefill batches through the row metadata and the dispatcher's choice), the dispatcher on
//! any batch padded to its bucket, the MMA and WGMMA prefills, and the step dispatcher that
//! chooses among fake decode, MMA and WGMMA.
//!
//! A run uploads the case's bf16-exact inputs as bf16 (exactly the values the oracle reads),
//! fills the device output with NaN, builds the row metadata and launches, then downloads the
//! bf16 output and widens it. [`run_gpu`] is the same run with the raw bits and the plan kept,
//! for the bitwise properties (split-K against decode, G = 8 against G = 16, two runs, a
//! sequence alone against its batch).

use std::sync::Arc;

use gpu::attention::{
    bucket, dispatch, prefill_path, AttentionPath, AttnBuffers, Form, GateParams, Geometry, GroupSize, HostInputs,
    Hp1Attention, Hp1Prefill, Plan, PrefillKernel, PrefillPath, PrefillPlan, Pv, Settled, StepGeometry, HEAD_DIMS,
    MAX_FIR_K,
};
use gpu::Gpu;
use half::bf16;
use ndarray::{Array3, ShapeError};

use crate::case::{Case, CaseData};
use crate::error::{Error, Result};
use crate::path::Path;
use crate::settled_keys::{check_older_keys, decode_rows};

/// SPEC section 4's bound for a path whose weights stay f32 (the output is rounded to bf16).
pub const GPU_TOLERANCE: f64 = 4e-3;
/// SPEC section 4's bound for a path that rounds P to bf16 for a tensor-core PV.
pub const TENSOR_CORE_TOLERANCE: f64 = 1e-2;

/// How a run picks its plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanChoice {
    /// [`Plan::auto`]: the dispatcher.
    Auto,
    /// This path with the dispatcher's form.
    Path(AttentionPath),
    /// This path and this group size, one head per CTA, one QK round at a time.
    Forced(AttentionPath, GroupSize),
    /// This path and form.
    Exact(AttentionPath, Form),
    /// This plan as it is.
    Plan(Plan),
}

/// What one GPU run produced.
#[derive(Clone, Debug)]
pub struct GpuRun {
    /// The plan that ran.
    pub plan: Plan,
    /// `[num_tokens, Hq, D]` output bits (padding rows dropped).
    pub out: Vec<bf16>,
    /// `row_len` as the device built it, `[rows]` (padding rows included).
    pub row_len: Vec<i32>,
    /// `row_seq` as the device built it, `[rows]`.
    pub row_seq: Vec<i32>,
}

impl GpuRun {
    /// The output as `[num_tokens, Hq, D]` f64.
    pub fn widen(&self, shape: (usize, usize, usize)) -> Result<Array3<f64>> {
        widen_bits(&self.out, shape)
            .map_err(|e| Error::Path { path: self.plan.path.name().to_string(), reason: e.to_string() })
    }
}

/// Output bits as the `shape` (`[num_tokens, Hq, D]`) f64 array the oracle comparison takes.
pub fn widen_bits(bits: &[bf16], shape: (usize, usize, usize)) -> std::result::Result<Array3<f64>, ShapeError> {
    Array3::from_shape_vec(shape, bits.iter().map(|x| x.to_f64()).collect())
}

/// Whether the kernels handle `case`'s shapes: `D` in [`HEAD_DIMS`], a power-of-two block size,
/// `fir_k <= MAX_FIR_K` (the plan and the launch refuse anything else with an error).
pub fn gpu_supports(case: &Case) -> bool {
    HEAD_DIMS.contains(&case.head_dim) && case.block_size.is_power_of_two() && case.fir_k <= MAX_FIR_K
}

/// The static facts of `data` with `rows` query rows (at least its own).
pub fn geometry(data: &CaseData, rows: usize) -> Geometry {
    let (num_tokens, num_heads, head_dim) = data.out_shape();
    let (_, block_size, num_kv_heads, _) = data.f32.key_cache.dim();
    Geometry {
        rows: rows.max(num_tokens),
        num_heads,
        num_kv_heads,
        head_dim,
        block_size,
        max_blocks_per_seq: data.meta.block_table.ncols(),
    }
}

/// The case's inputs in the types the device takes, lent from the case (its q, k and v from
/// [`CaseData::bf16`], converted once however many paths run it).
pub struct HostCase<'a> {
    data: &'a CaseData,
    block_table: Vec<i32>,
    gate: GateParams,
}

impl<'a> HostCase<'a> {
    /// Lends `data` (every q, k and v value is a bf16, so the conversion is exact).
    pub fn new(data: &'a CaseData) -> Self {
        let p = data.f32.params;
        Self {
            data,
            block_table: data.meta.block_table.iter().copied().collect(),
            gate: GateParams {
                scale: p.scale,
                fir_k: p.fir_k,
                relu_pre: p.relu_pre,
                clip_min: p.clip_min,
                clip_max: p.clip_max,
            },
        }
    }

    /// The views [`AttnBuffers::upload`] takes.
    pub fn inputs(&self) -> HostInputs<'_> {
        let bits = self.data.bf16();
        HostInputs {
            q: &bits.q,
            key_cache: &bits.key_cache,
            value_cache: &bits.value_cache,
            block_table: &self.block_table,
            seq_lens: &self.data.meta.seq_lens,
            query_start_loc: &self.data.meta.query_start_loc,
            sigma: &self.data.f32.sigma,
            gamma: &self.data.f32.gamma,
        }
    }

    /// The gate parameters.
    pub fn gate(&self) -> GateParams {
        self.gate
    }
}

/// The plan `choice` gives for `geometry`.
pub fn make_plan(geometry: Geometry, choice: PlanChoice) -> gpu::Result<Plan> {
    match choice {
        PlanChoice::Auto => Plan::auto(geometry),
        PlanChoice::Path(path) => {
            let (_, form) = dispatch(&geometry);
            Plan::with_form(geometry, path, form)
        }
        PlanChoice::Forced(path, group) => Plan::new(geometry, path, group),
        PlanChoice::Exact(path, form) => Plan::with_form(geometry, path, form),
        PlanChoice::Plan(plan) => Ok(plan),
    }
}

/// Bit-for-bit equality (bf16's `==` would let +0 equal -0 and refuse NaN = NaN).
pub fn same_bits(a: &[bf16], b: &[bf16]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Runs HP1 attention for `data` on the GPU over `rows` query rows (the batch padded to that
/// many; at least its own): upload, plan, NaN-poisoned output, row metadata, attention, download.
///
/// The launch forms run, each on a freshly poisoned output: right after the row metadata
/// ([`Settled::Nothing`], as every caller may launch); after another attention launch, so that
/// it reads the metadata while that one finishes ([`Settled::Rows`], as the engine launches);
/// and, for a batch of decode rows, after a kernel that writes their newest keys
/// ([`Settled::OlderKeys`], [`check_older_keys`]). Their outputs must be the same bits, or this
/// is an error.
pub fn run_gpu(gpu: &Gpu, data: &CaseData, rows: usize, choice: PlanChoice) -> Result<GpuRun> {
    let host = HostCase::new(data);
    let geometry = geometry(data, rows);
    let plan = make_plan(geometry, choice)?;
    let attention = Hp1Attention::new(gpu, plan.clone())?;
    let mut bufs = AttnBuffers::upload(gpu, geometry, &host.inputs())?;
    bufs.reserve_workspace(gpu, plan.workspace_len)?;
    bufs.poison_output(gpu)?;
    attention.build_rows(bufs.row_operands())?;
    attention.run(bufs.operands(Settled::Nothing), &host.gate())?;
    let mut out = bufs.download_output(gpu)?;
    bufs.poison_output(gpu)?;
    attention.run(bufs.operands(Settled::Nothing), &host.gate())?;
    attention.run(bufs.operands(Settled::Rows), &host.gate())?;
    if !same_bits(&bufs.download_output(gpu)?, &out) {
        return Err(Error::Path {
            path: plan.path.name().to_string(),
            reason: "reading the row metadata before the wait for the kernel before changed the output bits".into(),
        });
    }
    if decode_rows(data) {
        check_older_keys(gpu, data, &attention, &mut bufs, &host.gate(), &out)?;
    }
    let (num_tokens, heads, dim) = data.out_shape();
    out.truncate(num_tokens * heads * dim);
    let (row_seq, row_len) = bufs.download_rows(gpu)?;
    Ok(GpuRun { plan, out, row_len, row_seq })
}

/// The step's static prefill facts for `data`: its sequences and its longest query.
pub fn step_geometry(data: &CaseData) -> StepGeometry {
    let qsl = &data.meta.query_start_loc;
    let max_query_len = qsl.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0);
    StepGeometry { base: geometry(data, 0), max_seqs: data.meta.seq_lens.len(), max_query_len: max_query_len.max(1) }
}

/// Runs a step plan for `data`: a tensor-core prefill over the batch as it is, or fake decode
/// through the row metadata; upload, NaN-poisoned output, launch, download. Returns the output
/// bits `[num_tokens, Hq, D]`.
pub fn run_step(gpu: &Gpu, data: &CaseData, plan: &PrefillPath) -> Result<Vec<bf16>> {
    let prefill = match plan {
        PrefillPath::FakeDecode(plan) => {
            return run_gpu(gpu, data, plan.geometry.rows, PlanChoice::Plan(plan.clone())).map(|r| r.out)
        }
        PrefillPath::Prefill(p) => p,
    };
    let host = HostCase::new(data);
    let attention = Hp1Prefill::new(gpu, prefill.clone())?;
    let mut bufs = AttnBuffers::upload(gpu, prefill.geometry.base, &host.inputs())?;
    bufs.poison_output(gpu)?;
    attention.run(bufs.prefill_operands(), &host.gate())?;
    let mut out = bufs.download_output(gpu)?;
    let (num_tokens, heads, dim) = data.out_shape();
    out.truncate(num_tokens * heads * dim);
    Ok(out)
}

/// Which GPU path a [`GpuPath`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuPathKind {
    /// This path on the batch as it is, group size and heads per CTA by the dispatcher's rule.
    Forced(AttentionPath),
    /// A batch holding a prefill, through the row metadata and the dispatcher's choice.
    FakeDecode,
    /// The dispatcher on the batch padded to its bucket.
    Auto,
    /// A tensor-core prefill kernel on the batch as it is (decode rows are one-row queries).
    Prefill(PrefillKernel),
    /// The step dispatcher: fake decode, MMA or WGMMA by the batch's longest query.
    Step,
}

/// One GPU path under test.
pub struct GpuPath {
    gpu: Arc<Gpu>,
    kind: GpuPathKind,
}

impl GpuPath {
    /// `kind` on `gpu`.
    pub fn new(gpu: &Arc<Gpu>, kind: GpuPathKind) -> Self {
        Self { gpu: gpu.clone(), kind }
    }
}

impl Path for GpuPath {
    fn name(&self) -> String {
        match self.kind {
            GpuPathKind::Forced(path) => format!("gpu-{}", path.name()),
            GpuPathKind::FakeDecode => "gpu-fake-decode".into(),
            GpuPathKind::Auto => "gpu-auto-bucketed".into(),
            GpuPathKind::Prefill(kernel) => format!("gpu-{}", kernel.name()),
            GpuPathKind::Step => "gpu-step-dispatch".into(),
        }
    }

    fn supports(&self, case: &Case) -> bool {
        let prefill = case.seqs.iter().any(|s| s.query_len > 1);
        let cc = self.gpu.info().compute_capability;
        gpu_supports(case)
            && match self.kind {
                GpuPathKind::FakeDecode => prefill,
                GpuPathKind::Prefill(kernel) => kernel.runs_on(cc) && kernel.head_dims().contains(&case.head_dim),
                _ => true,
            }
    }

    fn tolerance(&self) -> f64 {
        match self.kind {
            GpuPathKind::Prefill(_) | GpuPathKind::Step => TENSOR_CORE_TOLERANCE,
            _ => GPU_TOLERANCE,
        }
    }

    fn parallel(&self) -> bool {
        false
    }

    fn run(&self, data: &CaseData, out: &mut Array3<f64>) -> Result<()> {
        let num_tokens = data.out_shape().0;
        let path_err = |reason: String| Error::Path { path: self.name(), reason };
        let (rows, choice) = match self.kind {
            GpuPathKind::Forced(path) => (num_tokens, PlanChoice::Path(path)),
            GpuPathKind::FakeDecode => (num_tokens, PlanChoice::Auto),
            GpuPathKind::Auto => (bucket(num_tokens), PlanChoice::Auto),
            GpuPathKind::Prefill(kernel) => {
                let plan = PrefillPlan::new(step_geometry(data), kernel).map_err(|e| self.named(e.into()))?;
                return self.finish(data, &PrefillPath::Prefill(plan), out);
            }
            GpuPathKind::Step => {
                let cc = self.gpu.info().compute_capability;
                let plan = prefill_path(step_geometry(data), cc).map_err(|e| self.named(e.into()))?;
                return self.finish(data, &plan, out);
            }
        };
        let run = run_gpu(&self.gpu, data, rows, choice).map_err(|e| self.named(e))?;
        let got = run.widen(data.out_shape())?;
        if got.dim() != out.dim() {
            return Err(path_err(format!("output has shape {:?}, expected {:?}", got.shape(), out.shape())));
        }
        out.assign(&got);
        Ok(())
    }
}

impl GpuPath {
    /// A GPU call's failure as this path's; an error that names its path already passes as it is.
    fn named(&self, e: Error) -> Error {
        match e {
            Error::Gpu(e) => Error::Path { path: self.name(), reason: e.to_string() },
            e => e,
        }
    }

    /// Runs `plan` on `data` and widens its output into `out`.
    fn finish(&self, data: &CaseData, plan: &PrefillPath, out: &mut Array3<f64>) -> Result<()> {
        let bits = run_step(&self.gpu, data, plan).map_err(|e| self.named(e))?;
        let got = widen_bits(&bits, data.out_shape())
            .map_err(|e| Error::Path { path: self.name(), reason: e.to_string() })?;
        out.assign(&got);
        Ok(())
    }
}

/// Every GPU path: decode and split-K with dense and sparse PV, fake decode, the dispatcher,
/// the MMA and WGMMA prefills and the step dispatcher.
pub fn gpu_paths(gpu: &Arc<Gpu>) -> Vec<Box<dyn Path>> {
    let mut kinds: Vec<GpuPathKind> = [Pv::Dense, Pv::Sparse]
        .into_iter()
        .flat_map(|pv| [AttentionPath::Decode(pv), AttentionPath::SplitK(pv)])
        .map(GpuPathKind::Forced)
        .collect();
    kinds.extend([GpuPathKind::FakeDecode, GpuPathKind::Auto]);
    kinds.extend(prefill_kinds());
    kinds.into_iter().map(|k| Box::new(GpuPath::new(gpu, k)) as Box<dyn Path>).collect()
}

/// The tensor-core prefill paths and the step dispatcher.
pub fn prefill_kinds() -> [GpuPathKind; 3] {
    [GpuPathKind::Prefill(PrefillKernel::Mma), GpuPathKind::Prefill(PrefillKernel::Wgmma), GpuPathKind::Step]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::tests::small;

    fn kernel_case() -> Case {
        Case { head_dim: 64, block_size: 4, ..small() }
    }

    #[test]
    fn the_host_case_is_the_case_data_in_bf16_exactly() {
        let data = kernel_case().materialise().unwrap();
        let host = HostCase::new(&data);
        let inputs = host.inputs();
        for (b, &x) in inputs.q.iter().zip(data.f32.q.iter()) {
            assert_eq!(b.to_f32().to_bits(), x.to_bits());
        }
        for (b, &x) in inputs.key_cache.iter().zip(data.f32.key_cache.iter()) {
            assert!(b.to_f32() == x || (b.is_nan() && x.is_nan()), "{b} vs {x}");
        }
        assert_eq!(inputs.value_cache.len(), data.f32.value_cache.len());
        assert_eq!(inputs.block_table, data.meta.block_table.as_slice().unwrap());
        assert_eq!((inputs.seq_lens, inputs.query_start_loc), (&[5, 7][..], &[0, 1, 5][..]));
        let gate = host.gate();
        assert_eq!((gate.fir_k, gate.relu_pre, gate.clip_max), (3, true, 1.0));
        gate.validate().unwrap();
    }

    #[test]
    fn the_geometry_holds_the_static_facts_and_at_least_the_batch() {
        let data = kernel_case().materialise().unwrap();
        let g = geometry(&data, 1);
        assert_eq!((g.rows, g.num_heads, g.num_kv_heads, g.head_dim, g.block_size), (5, 4, 2, 64, 4));
        assert_eq!(g.max_blocks_per_seq, 2, "7 tokens in blocks of 4");
        assert_eq!(geometry(&data, bucket(5)).rows, 8);
        g.validate().unwrap();
    }

    #[test]
    fn only_kernel_shapes_are_supported() {
        assert!(gpu_supports(&kernel_case()));
        assert!(!gpu_supports(&small()), "D = 8");
        assert!(!gpu_supports(&Case { head_dim: 96, ..kernel_case() }));
        assert!(!gpu_supports(&Case { block_size: 3, ..kernel_case() }));
        assert!(!gpu_supports(&Case { fir_k: 9, ..kernel_case() }));
    }
}
