//! Timing the GEMMs of asynct-0.5b (`asynct-bench --gemm`): each weight shape at M of 1, 8, 32,
//! 64 and 128, every skinny instantiation of that M and cuBLASLt, the default plan's marked
//! ([`crate::gemm_default`]; the table and the JSON name it `dispatcher`, as since issue 9);
//! with `--prefill`, at the prefill step's M of 2,048 and 8,448 (the default step budget, 8,192
//! chunk rows beside 256 decode rows), the WGMMA kernel against cuBLASLt, in TFLOP/s too.
//!
//! Method ([`super::timing`]): one CUDA graph of `calls` GEMMs replayed `trials` times, the
//! median per call reported, with back-to-back launches beside it. The weight is cycled through
//! enough device copies to exceed twice the L2 (one copy of the 311 MB LM head, 61 of the 2 MB
//! o_proj), so every call reads its W from HBM as a decode step does; x and y stay one buffer each
//! (in a model they are the previous and next kernels' activations, in L2). The figure of merit is
//! the effective bandwidth: the fewest bytes the GEMM moves (W, x and y once each,
//! `GemmShape::min_bytes`) over the graph time. Issue 9's goal is 3.3 TB/s at M = 1 to 32, about
//! 77% of the 4.27 TB/s an H200 copies at; [`table`] says where the dispatcher meets it.
//!
//! Each plan's output on the first weight copy is also kept and compared bit for bit with every
//! other plan's at the same point ([`order_classes`]): plans in one class add each output's
//! products in the same order. The skinny instantiations and the warpgroup form share one order
//! by design; whether the WGMMA kernel (one accumulator over K's k16 slices in increasing order)
//! and cuBLASLt's pinned algorithm share another is a question about cuBLASLt that only the device
//! answers, and the answer decides whether decode rows could move to that order (RESULTS,
//! session 33).

use std::sync::Arc;

use gpu::gemm::{EpilogueKind, Gemm, GemmPlan, GemmShape};
use gpu::Gpu;
use half::bf16;
use model::gpu_backend::linear::{DECODE_PIN_AT, HEAD_PIN_AT};

use super::timing::{copies, Figures, Timing};
use crate::gemm_default::default_plan;
use crate::rng::Counter;

/// asynct-0.5b's weights `(name, N, K)`: q/k/v fused, o, gate/up fused, down, the LM head.
pub const WEIGHTS: [(&str, usize, usize); 5] = [
    ("qkv", 2048, 1024),
    ("o_proj", 1024, 1024),
    ("gate_up", 6144, 1024),
    ("down", 1024, 3072),
    ("lm_head", 151_936, 1024),
];
/// The batch sizes timed.
pub const M_GRID: [usize; 5] = [1, 8, 32, 64, 128];
/// The prefill steps' rows timed (`--prefill`).
pub const PREFILL_M_GRID: [usize; 2] = [2048, 8448];
/// The widest M a `--point` may name: past any step's rows, and small enough that x and y of the
/// widest weight fit an H100 (65,536 x 151,936 bf16 outputs are 20 GB); where they do not fit,
/// the allocation's error fails the point, as for any weight.
pub const MAX_POINT_M: usize = 1 << 16;
/// The widest M at which the skinny kernel (slabs of 64 rows) is still timed.
const SKINNY_TIMED_MAX_M: usize = 512;
/// Issue 9's goal for the dispatcher at M up to [`GOAL_MAX_M`], effective TB/s.
pub const GOAL_TBPS: f64 = 3.3;
/// The widest M the goal applies to.
pub const GOAL_MAX_M: usize = 32;

/// One plan's time at one point.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GemmTime {
    /// The plan, e.g. `skinny-m8-r64` or `cublaslt`.
    pub name: String,
    /// Whether the default plan ([`crate::gemm_default::default_plan`]) is this one at this shape.
    pub dispatcher: bool,
    /// cuBLASLt's pinned algorithm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub algo: Option<String>,
    /// Back-to-back ms per call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eager_ms: Option<f64>,
    /// Graph-timed ms per call, the figure reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_ms: Option<f64>,
    /// `min_bytes` over `graph_ms`, TB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_tbps: Option<f64>,
    /// `2 M N K` over `graph_ms`, TFLOP/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_tflops: Option<f64>,
    /// Why a figure is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every plan at one weight shape and M.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GemmPoint {
    /// The weight, e.g. `qkv`.
    pub weight: String,
    /// Rows of x.
    pub m: usize,
    /// Rows of W.
    pub n: usize,
    /// Columns of x and W.
    pub k: usize,
    /// The fewest bytes the GEMM moves.
    pub bytes: usize,
    /// Weight copies cycled through.
    pub copies: usize,
    /// Each plan's time.
    pub paths: Vec<GemmTime>,
    /// The plans grouped by their outputs' bits on the same x and W ([`order_classes`]).
    pub order_classes: Vec<Vec<String>>,
}

impl GemmPoint {
    /// The key `--point` selects it by, e.g. `qkv_M8`.
    pub fn key(weight: &str, m: usize) -> String {
        format!("{weight}_M{m}")
    }

    /// The weight and M a key names (the inverse of [`GemmPoint::key`]), for a `--point` off
    /// [`M_GRID`]; `None` where `key` is not of that form, its weight not one of [`WEIGHTS`] or
    /// its M not 1 to [`MAX_POINT_M`].
    pub fn parse_key(key: &str) -> Option<(&'static str, usize)> {
        let (weight, m) = key.rsplit_once("_M")?;
        let weight = WEIGHTS.iter().find(|w| w.0 == weight)?.0;
        let m = m.parse().ok().filter(|m| (1..=MAX_POINT_M).contains(m))?;
        Some((weight, m))
    }

    /// The dispatcher's plan's time.
    pub fn dispatcher(&self) -> Option<&GemmTime> {
        self.paths.iter().find(|t| t.dispatcher)
    }

    /// The fastest skinny instantiation (graph-timed).
    pub fn best_skinny(&self) -> Option<&GemmTime> {
        self.paths
            .iter()
            .filter(|t| t.name.starts_with("skinny") && t.graph_ms.is_some())
            .min_by(|a, b| a.graph_ms.unwrap_or(f64::NAN).total_cmp(&b.graph_ms.unwrap_or(f64::NAN)))
    }

    /// cuBLASLt's time.
    pub fn cublaslt(&self) -> Option<&GemmTime> {
        self.paths.iter().find(|t| t.name == "cublaslt")
    }
}

/// Every plan timed at `shape` on a device of compute capability `cc` with `sms` SMs: each skinny
/// instantiation for its M (past 64 in slabs, up to `SKINNY_TIMED_MAX_M`), the shared-x form where
/// it takes the shape, on sm_90 the warpgroup and wide forms (up to `SKINNY_TIMED_MAX_M`; the wide
/// form's W the class-step copy) and the WGMMA
/// kernel where the shape fits them, cuBLASLt, cuBLASLt pinned as the LM head pins it
/// (`cublaslt-at-m64`), and pinned at the decode rows' reference allowed to split K
/// (`cublaslt-split-at-m64`).
fn plans(shape: GemmShape, cc: (i32, i32), sms: usize) -> Result<Vec<GemmPlan>, String> {
    let mut plans: Vec<GemmPlan> = if shape.m <= SKINNY_TIMED_MAX_M {
        let plain = gpu::gemm::SKINNY_ROWS.into_iter().filter_map(|rows| GemmPlan::skinny_rows(shape, rows).ok());
        plain.chain(GemmPlan::skinny_shared_x(shape, EpilogueKind::Store, sms).ok()).collect()
    } else {
        Vec::new()
    };
    if gpu::gemm::wgmma_runs_on(cc) {
        if shape.m <= SKINNY_TIMED_MAX_M {
            plans.extend(GemmPlan::skinny_wgmma(shape, EpilogueKind::Store).ok());
            plans.extend(GemmPlan::skinny_wide(shape, EpilogueKind::Store).ok());
            plans.extend(GemmPlan::skinny_classes(shape, EpilogueKind::Store).ok());
            plans.extend(GemmPlan::skinny_classes_wg(shape, EpilogueKind::Store).ok());
        }
        plans.extend(GemmPlan::wgmma_epilogue(shape, EpilogueKind::Store).ok());
    }
    plans.push(GemmPlan::cublaslt(shape).map_err(|e| e.to_string())?);
    plans.push(GemmPlan::cublaslt_pinned(shape, HEAD_PIN_AT).map_err(|e| e.to_string())?);
    plans.push(GemmPlan::cublaslt_pinned_split(shape, DECODE_PIN_AT).map_err(|e| e.to_string())?);
    Ok(plans)
}

/// `n` bf16 values uniform in `[-scale, scale)` (never zeros: they can run faster than data).
fn uniform(seed: u64, n: usize, scale: f64) -> Vec<bf16> {
    use rayon::prelude::*;
    let c = Counter::new(seed, 0);
    (0..n).into_par_iter().map(|i| bf16::from_f64(scale * c.uniform(&[i as u64]))).collect()
}

/// Times every plan of weight `name` (`n` x `k`) at each M of `ms`, keeping the plans whose name
/// contains `only`. A plan that cannot be loaded or launched keeps its error in its
/// [`GemmTime`]; only a failed allocation or upload fails the whole weight.
pub fn measure(
    gpu: &Arc<Gpu>,
    (name, n, k): (&str, usize, usize),
    ms: &[usize],
    timing: &Timing,
    only: Option<&str>,
) -> Result<Vec<GemmPoint>, String> {
    let e = |x: gpu::Error| x.to_string();
    let sms = gpu.multiprocessors().map_err(e)?;
    let w_host = uniform(0x9e77 + n as u64 * 7 + k as u64, n * k, 1.0 / 16.0);
    let copies = copies(n * k * 2);
    let weights = (0..copies).map(|_| gpu.upload(&w_host).map_err(e)).collect::<Result<Vec<_>, _>>()?;
    // The wide form's copies, made when a plan first asks for them.
    let mut class_steps = Vec::new();
    let mut points = Vec::new();
    for &m in ms {
        let shape = GemmShape { m, n, k };
        let chosen = default_plan(shape, sms, gpu::gemm::wgmma_runs_on(gpu.info().compute_capability)).map_err(e)?;
        let x = gpu.upload(&uniform(0x5eed + m as u64, m * k, 1.0)).map_err(e)?;
        let mut y = gpu.zeros::<bf16>(m * n).map_err(e)?;
        let mut paths = Vec::new();
        let mut outputs = Vec::new();
        for plan in plans(shape, gpu.info().compute_capability, sms)? {
            let plan_name = plan.name();
            if only.is_some_and(|o| !plan_name.contains(o)) {
                continue;
            }
            let dispatcher = plan == chosen;
            if plan.reads_class_steps() && class_steps.is_empty() {
                let host = gpu::gemm::layout::to_class_steps(&w_host, k);
                for _ in 0..copies {
                    class_steps.push(gpu.upload(&host).map_err(e)?);
                }
            }
            let weights = if plan.reads_class_steps() { &class_steps } else { &weights };
            let (algo, figures) = match Gemm::new(gpu, plan) {
                Ok(gemm) => {
                    let figures = timing
                        .measure(gpu, |i| gemm.run(&x.as_view(), &weights[i % copies].as_view(), &mut y.as_view_mut()));
                    if figures.error.is_none() {
                        // One more run on the first weight copy into a poisoned buffer (NaN bits), so
                        // an output the plan leaves unwritten cannot pass for one another plan wrote.
                        let mut out = gpu.upload(&vec![bf16::from_bits(0xffff); m * n]).map_err(e)?;
                        gemm.run(&x.as_view(), &weights[0].as_view(), &mut out.as_view_mut()).map_err(e)?;
                        let bits = gpu.download(&out).map_err(e)?.iter().map(|v| v.to_bits()).collect();
                        outputs.push((plan_name.clone(), bits));
                    }
                    (gemm.algorithm().map(|a| a.to_string()), figures)
                }
                Err(err) => (None, Figures::failed(err.to_string())),
            };
            let bytes = shape.min_bytes() as f64;
            paths.push(GemmTime {
                name: plan_name,
                dispatcher,
                algo,
                eager_ms: figures.eager_ms,
                graph_ms: figures.graph_ms,
                graph_tbps: figures.graph_ms.map(|ms| bytes / ms / 1e9),
                graph_tflops: figures.graph_ms.map(|ms| 2.0 * (m * n * k) as f64 / ms / 1e9),
                error: figures.error,
            });
        }
        let order_classes = order_classes(&outputs);
        points.push(GemmPoint {
            weight: name.to_string(),
            m,
            n,
            k,
            bytes: shape.min_bytes(),
            copies,
            paths,
            order_classes,
        });
    }
    Ok(points)
}

/// The plans grouped by equal outputs, bit for bit: each class lists its plans in the order
/// given, and the classes come in the order of their first plan.
pub fn order_classes(outputs: &[(String, Vec<u16>)]) -> Vec<Vec<String>> {
    let mut classes: Vec<(&[u16], Vec<String>)> = Vec::new();
    for (name, bits) in outputs {
        match classes.iter_mut().find(|(first, _)| *first == bits.as_slice()) {
            Some((_, members)) => members.push(name.clone()),
            None => classes.push((bits, vec![name.clone()])),
        }
    }
    classes.into_iter().map(|(_, members)| members).collect()
}

/// One line a point: the plans whose outputs agree bit for bit, class by class.
pub fn orders_table(points: &[GemmPoint]) -> String {
    let mut s = String::from("GEMM orders: the plans whose outputs agree bit for bit, each class in braces\n");
    for p in points {
        let classes: Vec<String> = p.order_classes.iter().map(|c| format!("{{{}}}", c.join(", "))).collect();
        s += &format!("{:<12} {}\n", GemmPoint::key(&p.weight, p.m), classes.join(" "));
    }
    s
}

/// Microseconds and TB/s of a time, `-` where there is none.
fn figure(t: Option<&GemmTime>) -> (String, String, String) {
    let Some(t) = t else { return ("-".into(), "-".into(), "-".into()) };
    let us = t.graph_ms.map_or("-".into(), |ms| format!("{:.2}", ms * 1e3));
    let tbps = t.graph_tbps.map_or("-".into(), |v| format!("{v:.2}"));
    (t.name.clone(), us, tbps)
}

/// The table of every point: the dispatcher's plan, the best skinny instantiation and cuBLASLt,
/// graph-timed, and whether the dispatcher meets the goal where it applies; then a closing line
/// that counts the points meeting it.
pub fn table(points: &[GemmPoint]) -> String {
    let mut s = format!(
        "GEMM, us per call in a CUDA graph, effective TB/s = (N K + M K + M N) * 2 bytes / time; \
         goal: dispatcher >= {GOAL_TBPS} TB/s at M <= {GOAL_MAX_M}\n"
    );
    s += &format!(
        "{:<8} {:>6} {:>5} {:>4}  {:<14} {:>9} {:>5}  {:<14} {:>9} {:>5}  {:>9} {:>5}  {}\n",
        "weight", "N", "K", "M", "dispatcher", "us", "TB/s", "best skinny", "us", "TB/s", "cuBLASLt", "TB/s", "goal"
    );
    let (mut met, mut judged) = (0, 0);
    for p in points {
        let (d_name, d_us, d_tbps) = figure(p.dispatcher());
        let (b_name, b_us, b_tbps) = figure(p.best_skinny());
        let (_, c_us, c_tbps) = figure(p.cublaslt());
        let goal = match p.dispatcher().and_then(|t| t.graph_tbps) {
            _ if p.m > GOAL_MAX_M => "",
            Some(v) if v >= GOAL_TBPS => {
                judged += 1;
                met += 1;
                "met"
            }
            _ => {
                judged += 1;
                "MISSED"
            }
        };
        s += &format!(
            "{:<8} {:>6} {:>5} {:>4}  {d_name:<14} {d_us:>9} {d_tbps:>5}  {b_name:<14} {b_us:>9} {b_tbps:>5}  \
             {c_us:>9} {c_tbps:>5}  {goal}\n",
            p.weight, p.n, p.k, p.m
        );
    }
    s += &format!("goal {GOAL_TBPS} TB/s at M <= {GOAL_MAX_M}: met at {met} of {judged} points");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(name: &str, dispatcher: bool, graph_ms: Option<f64>, bytes: usize) -> GemmTime {
        GemmTime {
            name: name.into(),
            dispatcher,
            algo: None,
            eager_ms: graph_ms,
            graph_ms,
            graph_tbps: graph_ms.map(|ms| bytes as f64 / ms / 1e9),
            graph_tflops: None,
            error: None,
        }
    }

    #[test]
    fn the_table_judges_the_dispatcher_at_small_m_only() {
        let point = |m: usize, ms: f64| {
            let bytes = GemmShape { m, n: 2048, k: 1024 }.min_bytes();
            GemmPoint {
                weight: "qkv".into(),
                m,
                n: 2048,
                k: 1024,
                bytes,
                copies: 29,
                paths: vec![
                    time("skinny-m8-r8", true, Some(ms), bytes),
                    time("skinny-m8-r16", false, Some(ms / 2.0), bytes),
                    time("cublaslt", false, None, bytes),
                ],
                order_classes: Vec::new(),
            }
        };
        // 4.2 MB in 1 us is 4.2 TB/s (met); in 2 us 2.1 TB/s (missed); M = 64 is not judged.
        let t = table(&[point(1, 1e-3), point(8, 2e-3), point(64, 1e-3)]);
        assert!(t.ends_with("met at 1 of 2 points"), "{t}");
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[2].contains("skinny-m8-r8") && lines[2].ends_with("met"), "{}", lines[2]);
        assert!(lines[3].ends_with("MISSED") && lines[3].contains("skinny-m8-r16"), "{}", lines[3]);
        assert!(lines[4].trim_end().ends_with('-'), "{}", lines[4]);
        assert_eq!(point(1, 1e-3).best_skinny().unwrap().name, "skinny-m8-r16");
    }

    #[test]
    fn plans_with_the_same_bits_share_a_class_in_first_seen_order() {
        let out = |name: &str, bits: &[u16]| (name.to_string(), bits.to_vec());
        let classes = order_classes(&[
            out("skinny-m8-r8", &[1, 2, 3]),
            out("wgmma", &[1, 2, 4]),
            out("skinny-m8-r16", &[1, 2, 3]),
            out("cublaslt-at-m64", &[1, 2, 4]),
            out("cublaslt", &[1, 2, 0x8000]),
        ]);
        assert_eq!(
            classes,
            [vec!["skinny-m8-r8", "skinny-m8-r16"], vec!["wgmma", "cublaslt-at-m64"], vec!["cublaslt"]]
        );
        // Bits, not values: +0 and -0 are different outputs, and a NaN equals its own bits.
        assert_eq!(order_classes(&[out("a", &[0]), out("b", &[0x8000]), out("c", &[0])]).len(), 2);
        assert_eq!(order_classes(&[out("a", &[0xffff]), out("b", &[0xffff])]).len(), 1);
        assert!(order_classes(&[]).is_empty());
    }

    #[test]
    fn a_point_key_names_its_weight_and_m_on_the_grid_or_off_it() {
        for (weight, m) in [("qkv", 8), ("down", 96), ("lm_head", 2048)] {
            assert_eq!(GemmPoint::parse_key(&GemmPoint::key(weight, m)), Some((weight, m)));
        }
        assert_eq!(GemmPoint::parse_key(&GemmPoint::key("down", MAX_POINT_M)), Some(("down", MAX_POINT_M)));
        let too_wide = GemmPoint::key("down", MAX_POINT_M + 1);
        for key in
            ["down", "down_M", "down_M0", "down_Mx", "B128_L4096", "down_M99999999999999999999999", &too_wide, "up_M8"]
        {
            assert_eq!(GemmPoint::parse_key(key), None, "{key}");
        }
    }

    #[test]
    fn every_m_of_the_grid_gets_skinny_plans_cublaslt_and_both_pins() {
        for m in M_GRID {
            let names: Vec<String> =
                plans(GemmShape { m, n: 1024, k: 1024 }, (8, 0), 132).unwrap().iter().map(GemmPlan::name).collect();
            let tail: Vec<&str> = names[names.len() - 3..].iter().map(String::as_str).collect();
            assert_eq!(tail, ["cublaslt", "cublaslt-at-m64", "cublaslt-split-at-m64"], "{m}");
            assert!(names.len() > 1 && names[0].starts_with("skinny-m"), "{m}: {names:?}");
        }
    }

    #[test]
    fn the_prefill_grid_times_wgmma_on_hopper_and_no_skinny_slabs() {
        for m in PREFILL_M_GRID {
            let shape = GemmShape { m, n: 6144, k: 1024 };
            let names: Vec<String> = plans(shape, (9, 0), 132).unwrap().iter().map(GemmPlan::name).collect();
            assert_eq!(names, ["wgmma", "cublaslt", "cublaslt-at-m64", "cublaslt-split-at-m64"], "{m}");
            let ampere: Vec<String> = plans(shape, (8, 0), 132).unwrap().iter().map(GemmPlan::name).collect();
            assert_eq!(ampere, ["cublaslt", "cublaslt-at-m64", "cublaslt-split-at-m64"], "{m}");
        }
    }
}
