//! Timing the prefill paths of SPEC section 6 on one batch step: fake decode, the MMA and WGMMA
//! tensor-core prefills, and the step dispatcher's choice, on the same buffers.
//!
//! A step is `batch` sequences of `prefix` cached tokens and `query` new ones each: the SPEC
//! section 7 grid is full causal prefills (prefix 0), the crossover is chunks after a long prefix
//! (chunked prefill), which is where the dispatcher's
//! [`FAKE_DECODE_MAX_QUERY`](gpu::attention::FAKE_DECODE_MAX_QUERY) decides.
//!
//! What each path's time covers:
//! - `fake-decode`: the attention launch of the decode-path [`Plan::auto`] over one row per query
//!   token, the row metadata built beforehand: what each layer pays (the rows are built once per
//!   step and shared by all layers).
//! - `fake-decode+rows`: the same with `build_rows` before every launch: a one-layer step.
//! - `prefill-mma`, `prefill-wgmma`: [`Hp1Prefill::run`] (WGMMA only where it runs: sm_90).
//! - `auto`: whatever [`prefill_path`] picks, timed as above.
//!
//! Each path is timed in a CUDA graph (the figure reported) and back-to-back, by `super::timing`,
//! with inputs cycled through copies by the anchor's rule: at (32, 256) q, K and V are 34 MB,
//! which an H200's 60 MB L2 would largely hold from one launch to the next, and the anchor is
//! timed the same way. A path that fails (a kernel that does not compile, a launch refused, a
//! graph not captured) is recorded with its error and the others still run.

use std::sync::Arc;

use gpu::attention::{
    prefill_path, AttnBuffers, GateParams, Hp1Attention, Hp1Prefill, Plan, PrefillKernel, PrefillPath, PrefillPlan,
    Settled, StepGeometry,
};
use gpu::Gpu;

use super::data::{gate_params, BatchData};
use super::timing::{copies, Figures, Timing};

/// The shape of one timed step: `batch` sequences, each `prefix` cached tokens and `query` new.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PrefillShape {
    /// Sequences.
    pub batch: usize,
    /// Tokens already cached per sequence.
    pub prefix: usize,
    /// New tokens per sequence (query rows).
    pub query: usize,
}

impl PrefillShape {
    /// A full causal prefill of `length` tokens per sequence.
    pub fn prefill(batch: usize, length: usize) -> Self {
        Self { batch, prefix: 0, query: length }
    }

    /// `B{batch}_T{query}` for a full prefill (the anchor's `prefill` keys), else
    /// `B{batch}_P{prefix}_Q{query}`.
    pub fn key(&self) -> String {
        match self.prefix {
            0 => format!("B{}_T{}", self.batch, self.query),
            p => format!("B{}_P{p}_Q{}", self.batch, self.query),
        }
    }
}

/// The most query rows a named prefill point may ask for: a mistyped name is refused rather than
/// left to allocate past the device.
pub const MAX_NAMED_ROWS: usize = 1 << 20;

/// The shape of a full prefill named as [`PrefillShape::key`] names it (`B256_T64`), so
/// `--point` can ask for one off the grid; `None` where the name is not a full prefill's, an
/// error where a size is zero or the rows pass [`MAX_NAMED_ROWS`].
pub fn parse_prefill_key(key: &str) -> Option<Result<PrefillShape, String>> {
    let (batch, length) = key.strip_prefix('B')?.split_once("_T")?;
    let (batch, length) = (batch.parse::<usize>().ok()?, length.parse::<usize>().ok()?);
    if batch == 0 || length == 0 || batch.checked_mul(length).is_none_or(|rows| rows > MAX_NAMED_ROWS) {
        return Some(Err(format!(
            "prefill point {key}: at least one sequence and token, at most {MAX_NAMED_ROWS} rows"
        )));
    }
    Some(Ok(PrefillShape::prefill(batch, length)))
}

/// One path's result at one step.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PrefillTime {
    /// `fake-decode`, `fake-decode+rows`, `prefill-mma`, `prefill-wgmma` or `auto`.
    pub name: String,
    /// What ran: the decode plan (e.g. `split-k-sparse-g16-h2`) for fake decode, the kernel
    /// entry (e.g. `hp1_prefill_mma_d128`) for a prefill.
    pub ran: String,
    /// Back-to-back: median ms per launch of `reps` launches from the host, beside the reported
    /// figure; absent when the path failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eager_ms: Option<f64>,
    /// Graph-timed: median ms per launch in a CUDA graph of `calls` launches, the figure
    /// reported and compared with the anchor; absent with `--no-graph` or when the path failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_ms: Option<f64>,
    /// Causal TFLOP/s ([`BatchData::causal_flops`] over `graph_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_tflops: Option<f64>,
    /// Why a figure is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every prefill path at one step.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PrefillPoint {
    /// [`PrefillShape::key`].
    pub key: String,
    /// The step.
    pub shape: PrefillShape,
    /// Query rows of the step.
    pub rows: usize,
    /// [`BatchData::causal_flops`].
    pub causal_flops: f64,
    /// The gate's zero fraction on a sample of rows.
    pub zero_fraction: f64,
    /// Paths not run, with the reason (e.g. WGMMA off Hopper).
    pub skipped: Vec<String>,
    /// Each path's time.
    pub paths: Vec<PrefillTime>,
}

impl PrefillPoint {
    /// The graph-timed figure of the path named `name`, if it has one.
    pub fn graph_ms(&self, name: &str) -> Option<f64> {
        self.paths.iter().find(|t| t.name == name).and_then(|t| t.graph_ms)
    }
}

/// A loaded launch of one path.
enum Launcher {
    /// Fake decode; `rows` rebuilds the row metadata before every launch.
    FakeDecode { attn: Hp1Attention, rows: bool },
    /// A tensor-core prefill.
    Prefill(Hp1Prefill),
}

/// What a path will run, before anything is loaded.
enum Choice {
    FakeDecode(Plan, bool),
    Prefill(PrefillPlan),
}

impl Choice {
    fn from_step(plan: PrefillPath) -> Self {
        match plan {
            PrefillPath::FakeDecode(p) => Self::FakeDecode(p, false),
            PrefillPath::Prefill(p) => Self::Prefill(p),
        }
    }

    fn workspace_len(&self) -> usize {
        match self {
            Self::FakeDecode(p, _) => p.workspace_len,
            Self::Prefill(_) => 0,
        }
    }

    fn ran(&self, gate: &GateParams) -> String {
        match self {
            Self::FakeDecode(p, _) => format!("{}-{}", p.path.name(), p.form.name()),
            Self::Prefill(p) => p.entry_for(gate).to_string(),
        }
    }

    fn load(self, gpu: &Gpu) -> gpu::Result<Launcher> {
        Ok(match self {
            Self::FakeDecode(plan, rows) => Launcher::FakeDecode { attn: Hp1Attention::new(gpu, plan)?, rows },
            Self::Prefill(plan) => Launcher::Prefill(Hp1Prefill::new(gpu, plan)?),
        })
    }
}

/// Times fake decode, MMA, WGMMA (where the device runs it) and the dispatcher's choice at
/// `shape`, back-to-back and in a CUDA graph; `only` keeps the paths whose name contains it.
/// Errors only where no path can run (the plans or the buffers); a path's own failure is
/// recorded in its [`PrefillTime`].
pub fn measure(
    gpu: &Arc<Gpu>,
    shape: PrefillShape,
    timing: &Timing,
    only: Option<&str>,
) -> Result<PrefillPoint, String> {
    let e = |x: gpu::Error| x.to_string();
    let seed = 0x9f11 + shape.batch as u64 * 131 + shape.prefix as u64 * 7 + shape.query as u64;
    let data = BatchData::new(&vec![(shape.prefix, shape.query); shape.batch], seed);
    let geometry = data.geometry();
    let step = StepGeometry { base: geometry, max_seqs: shape.batch, max_query_len: shape.query };
    let cc = gpu.info().compute_capability;
    let fake = Plan::auto(geometry).map_err(e)?;
    let mut choices = vec![
        ("fake-decode", Choice::FakeDecode(fake.clone(), false)),
        ("fake-decode+rows", Choice::FakeDecode(fake, true)),
        ("prefill-mma", Choice::Prefill(PrefillPlan::new(step, PrefillKernel::Mma).map_err(e)?)),
    ];
    let mut skipped = Vec::new();
    if PrefillKernel::Wgmma.runs_on(cc) {
        choices.push(("prefill-wgmma", Choice::Prefill(PrefillPlan::new(step, PrefillKernel::Wgmma).map_err(e)?)));
    } else {
        skipped.push(format!("prefill-wgmma: compute capability {}.{} is not 9.0", cc.0, cc.1));
    }
    choices.push(("auto", Choice::from_step(prefill_path(step, cc).map_err(e)?)));
    choices.retain(|(name, _)| only.is_none_or(|o| name.contains(o)));

    let workspace = choices.iter().map(|(_, c)| c.workspace_len()).max().unwrap_or(0);
    let copies = copies(data.qkv_bytes());
    let mut bufs = Vec::with_capacity(copies);
    for _ in 0..copies {
        let mut b = AttnBuffers::upload(gpu, geometry, &data.host()).map_err(e)?;
        b.reserve_workspace(gpu, workspace).map_err(e)?;
        bufs.push(b);
    }
    let gate = gate_params();
    let flops = data.causal_flops();
    let mut paths = Vec::new();
    for (name, choice) in choices {
        let ran = choice.ran(&gate);
        // Fake decode's row metadata is built once per step, before the layers that share it.
        let loaded = choice.load(gpu).and_then(|launcher| match &launcher {
            Launcher::FakeDecode { attn, .. } => {
                bufs.iter_mut().try_for_each(|b| attn.build_rows(b.row_operands())).map(|()| launcher)
            }
            Launcher::Prefill(_) => Ok(launcher),
        });
        let figures = match loaded {
            Err(error) => Figures::failed(error.to_string()),
            Ok(Launcher::FakeDecode { attn, rows }) => timing.measure(gpu, |i| {
                let b = &mut bufs[i % copies];
                if rows {
                    attn.build_rows(b.row_operands())?;
                }
                attn.run(b.operands(Settled::Nothing), &gate)
            }),
            Ok(Launcher::Prefill(prefill)) => {
                timing.measure(gpu, |i| prefill.run(bufs[i % copies].prefill_operands(), &gate))
            }
        };
        let Figures { eager_ms, graph_ms, error } = figures;
        let graph_tflops = graph_ms.map(|ms| flops / ms / 1e9);
        paths.push(PrefillTime { name: name.into(), ran, eager_ms, graph_ms, graph_tflops, error });
    }
    Ok(PrefillPoint {
        key: shape.key(),
        shape,
        rows: data.num_tokens(),
        causal_flops: flops,
        zero_fraction: data.zero_fraction(4, 4),
        skipped,
        paths,
    })
}

/// The crossover measurement: chunks of several query lengths after one prefix.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Crossover {
    /// Sequences per step.
    pub batch: usize,
    /// Cached tokens per sequence before the chunk.
    pub prefix: usize,
    /// The dispatcher's threshold (`gpu::attention::FAKE_DECODE_MAX_QUERY`) in this build.
    pub fake_decode_max_query: usize,
    /// [`fake_decode_wins_up_to`] of the points.
    pub measured_max_query: Option<usize>,
    /// One step per query length.
    pub points: Vec<PrefillPoint>,
}

/// The step shapes of the crossover: `batch` sequences, `prefix` cached tokens, each query.
pub fn crossover_shapes(batch: usize, prefix: usize, queries: &[usize]) -> Vec<PrefillShape> {
    queries.iter().map(|&query| PrefillShape { batch, prefix, query }).collect()
}

/// The longest query up to which per-layer fake decode (`fake-decode`) is at least as fast as
/// the fastest tensor-core prefill, by graph-timed figures, at every measured query length
/// (points in increasing query order); `None` when it loses at the shortest, or a time is
/// missing there.
pub fn fake_decode_wins_up_to(points: &[PrefillPoint]) -> Option<usize> {
    let mut best = None;
    for p in points {
        let tensor = ["prefill-mma", "prefill-wgmma"].iter().filter_map(|n| p.graph_ms(n)).min_by(f64::total_cmp);
        match (p.graph_ms("fake-decode"), tensor) {
            (Some(fake), Some(tc)) if fake <= tc => best = Some(p.shape.query),
            _ => break,
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(query: usize, times: &[(&str, Option<f64>)]) -> PrefillPoint {
        PrefillPoint {
            key: String::new(),
            shape: PrefillShape { batch: 8, prefix: 4096, query },
            rows: 8 * query,
            causal_flops: 1.0,
            zero_fraction: 0.7,
            skipped: Vec::new(),
            paths: times
                .iter()
                .map(|&(name, ms)| PrefillTime {
                    name: name.into(),
                    ran: String::new(),
                    eager_ms: None,
                    graph_ms: ms,
                    graph_tflops: None,
                    error: None,
                })
                .collect(),
        }
    }

    #[test]
    fn the_crossover_is_the_last_query_of_the_run_of_fake_decode_wins() {
        let p = |q, fake, mma, wgmma| {
            point(q, &[("fake-decode", fake), ("prefill-mma", mma), ("prefill-wgmma", wgmma), ("auto", Some(0.0))])
        };
        let points = [
            p(16, Some(1.0), Some(2.0), Some(1.5)),
            p(32, Some(1.0), Some(2.0), Some(1.0)),
            p(64, Some(2.0), Some(2.0), Some(1.9)),
            p(128, Some(1.0), Some(2.0), Some(2.0)),
        ];
        // Ties go to fake decode; WGMMA beating it at 64 ends the run even though it wins at 128.
        assert_eq!(fake_decode_wins_up_to(&points), Some(32));
        // Without WGMMA (off Hopper) MMA alone is the bar.
        let no_wgmma = [p(16, Some(1.0), Some(2.0), None), p(32, Some(3.0), Some(2.0), None)];
        assert_eq!(fake_decode_wins_up_to(&no_wgmma), Some(16));
        // A missing time at the shortest query gives no crossover, not a guess.
        assert_eq!(fake_decode_wins_up_to(&[p(16, None, Some(2.0), None)]), None);
        assert_eq!(fake_decode_wins_up_to(&[p(16, Some(3.0), Some(2.0), Some(2.5))]), None);
    }

    #[test]
    fn named_points_parse_back_to_their_shapes_and_refuse_bad_sizes() {
        for shape in [PrefillShape::prefill(256, 64), PrefillShape::prefill(1, 16384)] {
            assert_eq!(parse_prefill_key(&shape.key()), Some(Ok(shape)));
        }
        for bad in ["B0_T64", "B64_T0", "B2048_T1024", "B99999999999999999_T99999999999"] {
            assert!(matches!(parse_prefill_key(bad), Some(Err(_))), "{bad}");
        }
        for other in ["B8_P4096_Q16", "B128_L4096", "B_T64", "B4_T", "b4_T64", "B4_T64x"] {
            assert_eq!(parse_prefill_key(other), None, "{other}");
        }
    }

    #[test]
    fn keys_match_the_anchor_for_full_prefills() {
        assert_eq!(PrefillShape::prefill(32, 256).key(), "B32_T256");
        assert_eq!(PrefillShape { batch: 8, prefix: 4096, query: 16 }.key(), "B8_P4096_Q16");
        let shapes = crossover_shapes(8, 4096, &[16, 64]);
        assert_eq!(shapes.iter().map(PrefillShape::key).collect::<Vec<_>>(), ["B8_P4096_Q16", "B8_P4096_Q64"]);
    }
}
