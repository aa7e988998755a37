//! How the benchmark times a launch, shared by decode and prefill, the same way as
//! `scripts/attention_anchor.py` times its side (SPEC section 7):
//!
//! - Graph-timed ([`graph_median_ms`], the figure reported and compared): one CUDA graph of
//!   `calls` launches, replayed `trials` times between CUDA events, the median replay over
//!   `calls`. A replay issues its launches without the host in between, so at small sizes the
//!   figure is the kernels' and not the launch overhead's.
//! - Back-to-back ([`median_ms`], reported beside it): CUDA events around `reps` launches from
//!   the host, the median of `trials`. The gap to the graph figure is what launching costs.
//!
//! Both cycle through copies of the inputs whose total exceeds twice the L2 ([`copies`], the
//! anchor's rule), so neither side is timed on inputs the other would find in L2; both start
//! with untimed calls so module loading and NVRTC compilation stay out of the figures.

use gpu::Gpu;

/// L2 of an H200 (60 MB): the input copies cycled through add up to twice this.
pub const L2_BYTES: usize = 60 << 20;
/// Most input copies (the anchor uses the same cap).
pub const MAX_COPIES: usize = 64;
/// Untimed eager calls before either measurement (loads and compiles the kernels).
const WARM_UP: usize = 3;

/// Input copies to cycle through when one set is `bytes_per_set` bytes: the anchor's
/// `max(1, min(64, 2 * L2 // bytes + 1))`.
pub fn copies(bytes_per_set: usize) -> usize {
    (2 * L2_BYTES / bytes_per_set.max(1) + 1).clamp(1, MAX_COPIES)
}

/// How each path is timed: the run's settings, written to the JSON beside the figures.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Timing {
    /// Back-to-back launches per trial.
    pub reps: usize,
    /// Launches per CUDA graph; `None` leaves out the graph figure (`--no-graph`: under ncu,
    /// which is to profile one eager launch).
    pub calls: Option<usize>,
    /// Trials (back-to-back) and replays (graph), of which the median is taken.
    pub trials: usize,
}

/// One path's figures: either may be missing, with the reason in `error`.
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// Back-to-back ms per launch ([`median_ms`]).
    pub eager_ms: Option<f64>,
    /// Graph-timed ms per launch ([`graph_median_ms`]).
    pub graph_ms: Option<f64>,
    /// Why a figure is missing (other than `--no-graph`).
    pub error: Option<String>,
}

impl Figures {
    /// No figures: the path could not be set up.
    pub fn failed(error: String) -> Self {
        Self { eager_ms: None, graph_ms: None, error: Some(error) }
    }

    /// Both outcomes in one; a graph error is marked as such, since the eager launch that
    /// preceded it worked.
    fn new(eager: Result<f64, String>, graph: Option<Result<f64, String>>) -> Self {
        let (eager_ms, graph_ms, error) = match (eager, graph) {
            (Err(e), _) => return Self::failed(e),
            (Ok(eager), None) => (Some(eager), None, None),
            (Ok(eager), Some(Ok(graph))) => (Some(eager), Some(graph), None),
            (Ok(eager), Some(Err(e))) => (Some(eager), None, Some(format!("CUDA graph: {e}"))),
        };
        Self { eager_ms, graph_ms, error }
    }
}

impl Timing {
    /// Times `launch` back-to-back, then (unless `calls` is `None`, or the eager launch failed)
    /// in a CUDA graph: `launch(i)` is one call, `i` counting the calls to pick the input copy.
    pub fn measure(&self, gpu: &Gpu, mut launch: impl FnMut(usize) -> gpu::Result<()>) -> Figures {
        let eager = median_ms(gpu, self.reps, self.trials, &mut launch);
        let graph = match (&eager, self.calls) {
            (Ok(_), Some(calls)) => Some(graph_median_ms(gpu, calls, self.trials, &mut launch)),
            _ => None,
        };
        Figures::new(eager, graph)
    }
}

/// The median of `trial_ms` (each the time of `calls` calls) per call, as the anchor's
/// `statistics.median`: with an even number of trials, the mean of the two middle ones. NaN for
/// no trials.
pub fn median_per_call(mut trial_ms: Vec<f64>, calls: usize) -> f64 {
    trial_ms.sort_by(f64::total_cmp);
    let n = trial_ms.len();
    let median = match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => trial_ms[n / 2],
        _ => (trial_ms[n / 2 - 1] + trial_ms[n / 2]) / 2.0,
    };
    median / calls.max(1) as f64
}

/// Back-to-back: the median over `trials` of the time (ms) per call of `reps` calls of
/// `launch(i)` from the host (`i` counts the calls, to pick the input copy), after untimed calls.
pub fn median_ms(
    gpu: &Gpu,
    reps: usize,
    trials: usize,
    mut launch: impl FnMut(usize) -> gpu::Result<()>,
) -> Result<f64, String> {
    let e = |x: gpu::Error| x.to_string();
    (0..WARM_UP).try_for_each(&mut launch).map_err(e)?;
    let reps = reps.max(1);
    let mut times = Vec::with_capacity(trials.max(1));
    for _ in 0..trials.max(1) {
        times.push(gpu.time_ms(|| (0..reps).try_for_each(&mut launch)).map_err(e)?);
    }
    Ok(median_per_call(times, reps))
}

/// Graph-timed: the median over `trials` of the time (ms) per call of one CUDA graph of `calls`
/// calls of `launch(i)` (`i` as in [`median_ms`]), after untimed calls and one untimed replay
/// (which uploads the graph). `launch` must follow `gpu::runtime::graph`'s rules: launches only,
/// on the GPU's stream, buffers allocated beforehand.
pub fn graph_median_ms(
    gpu: &Gpu,
    calls: usize,
    trials: usize,
    mut launch: impl FnMut(usize) -> gpu::Result<()>,
) -> Result<f64, String> {
    let e = |x: gpu::Error| x.to_string();
    (0..WARM_UP).try_for_each(&mut launch).map_err(e)?;
    let calls = calls.max(1);
    let graph = gpu.capture(|| (0..calls).try_for_each(&mut launch)).map_err(e)?;
    graph.launch().map_err(e)?;
    let mut times = Vec::with_capacity(trials.max(1));
    for _ in 0..trials.max(1) {
        times.push(gpu.time_ms(|| graph.launch()).map_err(e)?);
    }
    Ok(median_per_call(times, calls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_follow_the_anchors_rule() {
        // The anchor's prefill points: q, k, v of 16K tokens (67 MB) and of 8K tokens.
        let set = |tokens: usize| 2 * tokens * (8 + 2 * 4) * 128;
        assert_eq!(copies(set(16384)), 2);
        assert_eq!(copies(set(8192)), 4);
        assert_eq!(copies(1 << 40), 1);
        assert_eq!(copies(1024), MAX_COPIES);
        assert_eq!(copies(0), MAX_COPIES);
    }

    #[test]
    fn figures_keep_the_eager_time_when_only_the_graph_fails() {
        let ok = Figures::new(Ok(2.0), Some(Ok(1.5)));
        assert_eq!((ok.eager_ms, ok.graph_ms, ok.error), (Some(2.0), Some(1.5), None));
        let no_graph = Figures::new(Ok(2.0), None);
        assert_eq!((no_graph.eager_ms, no_graph.graph_ms, no_graph.error), (Some(2.0), None, None));
        let graph_failed = Figures::new(Ok(2.0), Some(Err("capture invalidated".into())));
        assert_eq!(graph_failed.eager_ms, Some(2.0));
        assert_eq!(graph_failed.error.as_deref(), Some("CUDA graph: capture invalidated"));
        let eager_failed = Figures::new(Err("launch refused".into()), None);
        assert_eq!((eager_failed.eager_ms, eager_failed.error.as_deref()), (None, Some("launch refused")));
    }

    #[test]
    fn the_median_is_per_call_and_ignores_the_outliers() {
        // Seven replays of 40 calls, one slow (a clock ramp) and one fast: the middle is 4 ms.
        let trials = vec![4.4, 4.0, 40.0, 3.6, 4.2, 0.4, 3.8];
        assert!((median_per_call(trials, 40) - 0.1).abs() < 1e-12);
        // An even count takes the mean of the middle two, as Python's `statistics.median`.
        assert_eq!(median_per_call(vec![3.0, 1.0, 2.0, 4.0], 1), 2.5);
        assert_eq!(median_per_call(vec![4.0, 1.0, 2.0], 2), 1.0, "the anchor's self-test case");
        assert_eq!(median_per_call(vec![2.5], 1), 2.5);
        // Zero calls (`--calls 0`) count as one, as the measurement itself runs one.
        assert_eq!(median_per_call(vec![2.5], 0), 2.5);
        assert!(median_per_call(Vec::new(), 40).is_nan());
    }
}
