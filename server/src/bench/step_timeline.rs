//! A decode step's timeline from the step trace (`gpu::runtime::step_trace`): what each launch
//! of the step costs on its path, as replayed in its graph.
//!
//! A launch's time on the step's path is from its release (its first CTA past the wait on its
//! predecessor, which has then finished) to the next launch's release: under programmatic
//! dependent launch the part of a kernel that overlaps its predecessor is not on the path, and
//! the time before its successor's release is, whether spent in the kernel or in the handover.
//! A launch that is not stamped (cuBLASLt's LM head) falls into the time of the launch before it.
//! Each traced step is one trace window; the steps whose launch sequence is the most common one
//! are combined position by position (medians), and the repeating stretch of that sequence (the
//! layers) is found by its period, so each launch of a layer is reported summed over the layers.
//! Where a kernel marks points of its CTAs' paths (the decode GEMMs: 0 their x in, 1 the product
//! done, 2 the classes' partials in, 3 the epilogue's stores issued; the attention: 2 its chunks
//! done, 3 its output written), a layer's launch also gets each mark's time after the median
//! CTA's release and after the slowest CTA's, and its last mark by how many of the launch's CTAs
//! shared a CTA's SM: whether a launch's slowest CTAs are those of its busiest SMs. Each layer's
//! launch also says how far apart in the grid the CTAs that shared an SM most often were.

use std::collections::BTreeMap;

use serde::Serialize;

use model::executor::{LaunchTrace, MarkTimes, SmLoad, SmNeighbours, TraceWindow};

use super::Summary;

/// One launch position of the step, medians over the combined steps, in microseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PositionTimes {
    /// The kernel file, CTAs and threads a CTA: the launch's signature.
    pub kernel: &'static str,
    pub ctas: u32,
    pub threads: u32,
    /// Release to the next launch's release; `None` for the step's last launch.
    pub on_path_us: Option<f64>,
    /// First arrival at the wait to the first release: how early PDL had the launch waiting.
    pub waited_us: f64,
    /// First release to last release: how long CTAs kept starting (waves, late arrivals).
    pub spread_us: f64,
    /// First release to the release by which half the CTAs were out.
    pub half_out_us: f64,
    /// Each mark the kernel sets (`step_trace_mark`), after each CTA's release: the median CTA's
    /// and the slowest's; `None` where a combined step lacks it.
    pub marks_us: Vec<Option<(f64, f64)>>,
    /// The last mark by CTAs an SM held, for the loads every combined step has.
    pub by_sm_load: Vec<SmLoadUs>,
    /// How far apart in the grid CTAs that shared an SM most often were.
    pub sm_neighbours: Option<NeighbourShare>,
}

/// [`SmNeighbours`] as a share: the most common distance in the grid between CTAs next to each
/// other on an SM, and the share of such pairs at it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct NeighbourShare {
    pub distance: u32,
    pub share: f64,
}

impl From<&SmNeighbours> for NeighbourShare {
    fn from(n: &SmNeighbours) -> Self {
        Self { distance: n.distance, share: f64::from(n.pairs_at) / f64::from(n.pairs) }
    }
}

/// The distance most of `all` have (the smallest of those as common), with the shares of those
/// combined by `f`; `None` where none has one.
fn combine_neighbours(all: &[Option<NeighbourShare>], f: &dyn Fn(Vec<f64>) -> f64) -> Option<NeighbourShare> {
    let mut by_distance = BTreeMap::<u32, Vec<f64>>::new();
    for n in all.iter().flatten() {
        by_distance.entry(n.distance).or_default().push(n.share);
    }
    let (&distance, _) = by_distance.iter().rev().max_by_key(|(_, shares)| shares.len())?;
    Some(NeighbourShare { distance, share: f(by_distance.remove(&distance).expect("the key just found")) })
}

/// A launch's last mark over the CTAs of SMs that held `ctas_on_sm` of its CTAs ([`SmLoad`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SmLoadUs {
    pub ctas_on_sm: u32,
    /// SMs that held that many.
    pub sms: f64,
    /// The median CTA's and the slowest's, after each CTA's release.
    pub median_us: f64,
    pub max_us: f64,
}

impl From<&SmLoad> for SmLoadUs {
    fn from(l: &SmLoad) -> Self {
        Self {
            ctas_on_sm: l.ctas_on_sm,
            sms: f64::from(l.sms),
            median_us: l.last_mark.median as f64 / 1e3,
            max_us: l.last_mark.max as f64 / 1e3,
        }
    }
}

/// The loads every one of `groups` has, in the first's order, each figure combined by `f` (the
/// median over steps, the mean over layers).
fn combine_loads(groups: &[Vec<SmLoadUs>], f: &dyn Fn(Vec<f64>) -> f64) -> Vec<SmLoadUs> {
    let Some(first) = groups.first() else { return Vec::new() };
    first
        .iter()
        .filter_map(|g| {
            let same: Vec<&SmLoadUs> =
                groups.iter().map(|gs| gs.iter().find(|h| h.ctas_on_sm == g.ctas_on_sm)).collect::<Option<_>>()?;
            let of = |field: fn(&SmLoadUs) -> f64| f(same.iter().map(|h| field(h)).collect());
            Some(SmLoadUs {
                ctas_on_sm: g.ctas_on_sm,
                sms: of(|h| h.sms),
                median_us: of(|h| h.median_us),
                max_us: of(|h| h.max_us),
            })
        })
        .collect()
}

/// One launch of a layer, summed over the layers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerSlot {
    pub kernel: &'static str,
    pub ctas: u32,
    pub threads: u32,
    /// On the path, mean per layer and summed over the layers.
    pub on_path_us: f64,
    pub on_path_sum_us: f64,
    /// As [`PositionTimes`], means per layer.
    pub waited_us: f64,
    pub spread_us: f64,
    pub half_out_us: f64,
    /// As [`PositionTimes`], means per layer; `None` where a layer lacks the mark.
    pub marks_us: Vec<Option<(f64, f64)>>,
    /// As [`PositionTimes`], means per layer, for the loads every layer has.
    pub by_sm_load: Vec<SmLoadUs>,
    /// As [`PositionTimes`], the share a mean over the layers at the most common distance.
    pub sm_neighbours: Option<NeighbourShare>,
}

/// The repeating stretch of a step's launches.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Layers {
    /// Position of the first layer's first launch, launches a layer, and layers.
    pub first: usize,
    pub period: usize,
    pub count: usize,
    /// Each launch of a layer, its time on the path over every layer but for the stretch's last
    /// launch.
    pub slots: Vec<LayerSlot>,
    /// The stretch's last launch, whose time on the path runs on through the launches after it
    /// that are not stamped (the LM head on cuBLASLt).
    pub last_on_path_us: Option<f64>,
}

/// A step's timeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepTimeline {
    /// Steps whose launches were combined, and those traced in all.
    pub steps: usize,
    pub steps_traced: usize,
    /// Slots that held two launches (dropped by the trace's reader).
    pub dropped_slots: usize,
    /// First launch's release to the last launch's release, median.
    pub span_us: f64,
    pub positions: Vec<PositionTimes>,
    pub layers: Option<Layers>,
}

type Signature = (&'static str, u32, u32);

fn signature(l: &LaunchTrace) -> Signature {
    (l.kernel, l.ctas, l.threads)
}

/// The median of values the combined steps give (at least one step).
fn median(v: Vec<f64>) -> f64 {
    Summary::of(&v).expect("a timeline combines at least one step").median
}

fn us(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1e3
}

/// The timeline of `steps` (one trace window each); `None` when none holds a launch.
pub fn timeline(steps: &[TraceWindow]) -> Option<StepTimeline> {
    let traced: Vec<&[LaunchTrace]> = steps.iter().map(|w| w.launches.as_slice()).filter(|l| !l.is_empty()).collect();
    let dropped_slots = steps.iter().map(|w| w.dropped_slots).sum();
    let sigs: Vec<Vec<Signature>> = traced.iter().map(|s| s.iter().map(signature).collect()).collect();
    let modal = sigs.iter().max_by_key(|s| sigs.iter().filter(|t| t == s).count())?.clone();
    let same: Vec<&[LaunchTrace]> = traced.iter().zip(&sigs).filter(|(_, s)| **s == modal).map(|(st, _)| *st).collect();
    let n = modal.len();
    let positions: Vec<PositionTimes> = (0..n)
        .map(|j| {
            let per_step = |f: &dyn Fn(&[LaunchTrace]) -> f64| median(same.iter().map(|s| f(s)).collect());
            PositionTimes {
                kernel: modal[j].0,
                ctas: modal[j].1,
                threads: modal[j].2,
                on_path_us: (j + 1 < n).then(|| per_step(&|s| us(s[j].release.0, s[j + 1].release.0))),
                waited_us: per_step(&|s| us(s[j].arrive.0, s[j].release.0)),
                spread_us: per_step(&|s| us(s[j].release.0, s[j].release.1)),
                half_out_us: per_step(&|s| us(s[j].release.0, s[j].release_median)),
                marks_us: (0..same[0][j].marks.len())
                    .map(|k| {
                        let at: Option<Vec<_>> = same.iter().map(|s| s[j].marks[k]).collect();
                        at.map(|m| {
                            let ns = |f: fn(&MarkTimes) -> u64| median(m.iter().map(|t| f(t) as f64 / 1e3).collect());
                            (ns(|t| t.median), ns(|t| t.max))
                        })
                    })
                    .collect(),
                by_sm_load: combine_loads(
                    &same.iter().map(|s| s[j].by_sm_load.iter().map(SmLoadUs::from).collect()).collect::<Vec<_>>(),
                    &median,
                ),
                sm_neighbours: combine_neighbours(
                    &same.iter().map(|s| s[j].sm_neighbours.as_ref().map(NeighbourShare::from)).collect::<Vec<_>>(),
                    &median,
                ),
            }
        })
        .collect();
    let span_us = median(same.iter().map(|s| us(s[0].release.0, s[n - 1].release.0)).collect());
    let layers = layers(&modal, &positions);
    Some(StepTimeline { steps: same.len(), steps_traced: traced.len(), dropped_slots, span_us, positions, layers })
}

/// The longest stretch of `sigs` that repeats with one period (the smallest period of the
/// longest stretch), at least two periods long, and its launches summed over the repeats.
fn layers(sigs: &[Signature], positions: &[PositionTimes]) -> Option<Layers> {
    let n = sigs.len();
    let mut best: Option<(usize, usize, usize)> = None; // (covered, first, period)
    for period in 1..=n / 2 {
        let mut i = 0;
        while i + period < n {
            if sigs[i] != sigs[i + period] {
                i += 1;
                continue;
            }
            let start = i;
            while i + period < n && sigs[i] == sigs[i + period] {
                i += 1;
            }
            let covered = (i + period - start) / period * period;
            if covered >= 2 * period && best.is_none_or(|(c, _, _)| covered > c) {
                best = Some((covered, start, period));
            }
        }
    }
    let (covered, first, period) = best?;
    let count = covered / period;
    let last = first + count * period - 1;
    let slots = (0..period)
        .map(|k| {
            let at: Vec<&PositionTimes> = (0..count).map(|l| &positions[first + l * period + k]).collect();
            let on_path: Vec<f64> = (0..count)
                .map(|l| first + l * period + k)
                .filter(|&j| j != last)
                .filter_map(|j| positions[j].on_path_us)
                .collect();
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
            LayerSlot {
                kernel: sigs[first + k].0,
                ctas: sigs[first + k].1,
                threads: sigs[first + k].2,
                on_path_us: mean(&on_path),
                on_path_sum_us: on_path.iter().sum(),
                waited_us: mean(&at.iter().map(|p| p.waited_us).collect::<Vec<_>>()),
                spread_us: mean(&at.iter().map(|p| p.spread_us).collect::<Vec<_>>()),
                half_out_us: mean(&at.iter().map(|p| p.half_out_us).collect::<Vec<_>>()),
                marks_us: (0..at[0].marks_us.len())
                    .map(|k| {
                        let m: Option<(Vec<f64>, Vec<f64>)> = at.iter().map(|p| p.marks_us[k]).collect();
                        m.map(|(medians, maxes)| (mean(&medians), mean(&maxes)))
                    })
                    .collect(),
                by_sm_load: combine_loads(
                    &at.iter().map(|p| p.by_sm_load.clone()).collect::<Vec<_>>(),
                    &|v: Vec<f64>| mean(&v),
                ),
                sm_neighbours: combine_neighbours(
                    &at.iter().map(|p| p.sm_neighbours).collect::<Vec<_>>(),
                    &|v: Vec<f64>| mean(&v),
                ),
            }
        })
        .collect();
    Some(Layers { first, period, count, slots, last_on_path_us: positions[last].on_path_us })
}

/// Prints `t` for batch `batch`: the layer's launches, then the launches outside the layers.
pub fn print_timeline(batch: usize, t: &StepTimeline) {
    println!(
        "step trace B{batch}: {} of {} traced steps combined, {} launches a step ({} slots dropped); \
         first to last release {:.1} us (median)",
        t.steps,
        t.steps_traced,
        t.positions.len(),
        t.dropped_slots,
        t.span_us
    );
    let (first, end) = t.layers.as_ref().map_or((0, 0), |l| (l.first, l.first + l.count * l.period));
    if let Some(l) = &t.layers {
        println!(
            "  {} layers of {} launches from launch {}; us a layer (sum over layers; the last layer's \
             last launch apart):",
            l.count, l.period, l.first
        );
        for s in &l.slots {
            println!(
                "    {:<24} {:>6} x {:<4} on path {:>7.2} ({:>7.1})  waited {:>6.2}  half out {:>6.2}  all out {:>6.2}",
                s.kernel, s.ctas, s.threads, s.on_path_us, s.on_path_sum_us, s.waited_us, s.half_out_us, s.spread_us
            );
            if s.marks_us.iter().any(Option::is_some) {
                let marks: Vec<String> = s
                    .marks_us
                    .iter()
                    .enumerate()
                    .filter_map(|(k, m)| m.map(|(median, max)| format!("{k}: {median:.2} / {max:.2}")))
                    .collect();
                println!("      marks after release, us (median CTA / slowest): {}", marks.join("  "));
            }
            if !s.by_sm_load.is_empty() {
                let loads: Vec<String> = s
                    .by_sm_load
                    .iter()
                    .map(|l| format!("{} ({:.0}): {:.2} / {:.2}", l.ctas_on_sm, l.sms, l.median_us, l.max_us))
                    .collect();
                println!("      last mark by CTAs an SM held (SMs), us: {}", loads.join("  "));
            }
            if let Some(n) = s.sm_neighbours {
                println!(
                    "      CTAs sharing an SM: most often {} apart in the grid ({:.0}% of pairs)",
                    n.distance,
                    100.0 * n.share
                );
            }
        }
    }
    if let Some(last) = t.layers.as_ref().and_then(|l| l.last_on_path_us) {
        println!("  the last layer's last launch with what follows it unstamped (the LM head): {last:.2} us");
    }
    println!("  launches outside the layers, us:");
    for (j, p) in t.positions.iter().enumerate().filter(|(j, _)| *j < first || *j >= end) {
        let on_path = p.on_path_us.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "    {j:>3} {:<24} {:>6} x {:<4} on path {:>7}  waited {:>6.2}  half out {:>6.2}  all out {:>6.2}",
            p.kernel, p.ctas, p.threads, on_path, p.waited_us, p.half_out_us, p.spread_us
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step: embed, then `layers` x (gemm, attn), then sample; each CTA set released over
    /// 100 ns (half out at 40), arriving 500 ns before its release. Layer i's gemm sets mark 0,
    /// 1,000 + 200 i ns after the median CTA's release and 1,500 after the slowest's; on its 14
    /// SMs of two CTAs so, on its 100 of one 100 ns and 300 ns sooner.
    fn step(layers: usize, t0: u64) -> TraceWindow {
        let mut out = Vec::new();
        let mut t = t0;
        let mut push = |kernel: &'static str, ctas: u32, dur: u64, mark: Option<MarkTimes>| {
            let grid_id = out.len() as u64;
            out.push(LaunchTrace {
                kernel,
                grid_id,
                ctas,
                threads: 128,
                stamped: ctas,
                arrive: (t - 500, t),
                release: (t, t + 100),
                release_median: t + 40,
                marks: [mark, None, None, None],
                by_sm_load: mark.map_or(Vec::new(), |m| {
                    let alone = MarkTimes { median: m.median - 100, max: m.max - 300 };
                    vec![
                        SmLoad { ctas_on_sm: 1, sms: 100, last_mark: alone },
                        SmLoad { ctas_on_sm: 2, sms: 14, last_mark: m },
                    ]
                }),
                sm_neighbours: mark.map(|_| SmNeighbours { distance: 114, pairs_at: 12, pairs: 14 }),
            });
            t += dur;
        };
        push("embedding.cu", 1, 2_000, None);
        for i in 0..layers as u64 {
            push("gemm.cu", 128, 4_000, Some(MarkTimes { median: 1_000 + 200 * i, max: 1_500 }));
            push("attn.cu", 72, 6_000, None);
        }
        push("sampling.cu", 1, 9_000, None);
        TraceWindow { launches: out, dropped_slots: 1 }
    }

    #[test]
    fn each_launch_costs_until_the_next_release_and_layers_are_found_by_period() {
        let t = timeline(&[step(3, 1_000), step(3, 90_000), step(3, 300_000)]).expect("three steps");
        assert_eq!((t.steps, t.steps_traced, t.dropped_slots), (3, 3, 3));
        assert_eq!(t.positions.len(), 8);
        assert_eq!(t.positions[0].on_path_us, Some(2.0));
        assert_eq!(t.positions[1].on_path_us, Some(4.0));
        assert_eq!(t.positions[2].on_path_us, Some(6.0));
        assert_eq!(t.positions[7].on_path_us, None);
        assert_eq!((t.positions[1].waited_us, t.positions[1].half_out_us, t.positions[1].spread_us), (0.5, 0.04, 0.1));
        assert_eq!(t.span_us, 2.0 + 3.0 * 10.0);
        let l = t.layers.expect("a repeating stretch");
        assert_eq!((l.first, l.period, l.count), (1, 2, 3));
        assert_eq!((l.slots[0].kernel, l.slots[0].ctas), ("gemm.cu", 128));
        assert_eq!((l.slots[0].on_path_us, l.slots[0].on_path_sum_us), (4.0, 12.0));
        // The last layer's attention runs on into the unstamped time before the sampler: apart.
        assert_eq!((l.slots[1].kernel, l.slots[1].on_path_sum_us), ("attn.cu", 12.0));
        assert_eq!(l.last_on_path_us, Some(6.0));
        // Marks: per launch the median over steps, per layer slot the mean over layers.
        assert_eq!(t.positions[3].marks_us, vec![Some((1.2, 1.5)), None, None, None]);
        assert_eq!(l.slots[0].marks_us, vec![Some((1.2, 1.5)), None, None, None]);
        assert_eq!(l.slots[1].marks_us, vec![None; 4]);
        let load = |ctas_on_sm, sms, median_us, max_us| SmLoadUs { ctas_on_sm, sms, median_us, max_us };
        assert_eq!(t.positions[3].by_sm_load, vec![load(1, 100.0, 1.1, 1.2), load(2, 14.0, 1.2, 1.5)]);
        // The mean over layers, to rounding.
        let want = [load(1, 100.0, 1.1, 1.2), load(2, 14.0, 1.2, 1.5)];
        assert_eq!(l.slots[0].by_sm_load.len(), want.len());
        for (got, want) in l.slots[0].by_sm_load.iter().zip(&want) {
            assert_eq!((got.ctas_on_sm, got.sms), (want.ctas_on_sm, want.sms));
            assert!(
                (got.median_us - want.median_us).abs() < 1e-9 && (got.max_us - want.max_us).abs() < 1e-9,
                "{got:?}"
            );
        }
        assert!(l.slots[1].by_sm_load.is_empty());
        let neighbours = Some(NeighbourShare { distance: 114, share: 12.0 / 14.0 });
        assert_eq!((t.positions[3].sm_neighbours, l.slots[0].sm_neighbours), (neighbours, neighbours));
        assert_eq!(l.slots[1].sm_neighbours, None);
    }

    #[test]
    fn neighbours_combine_at_the_distance_most_have_the_smaller_of_equals() {
        let n = |distance, share| Some(NeighbourShare { distance, share });
        let all = [n(4, 0.5), None, n(1, 0.9), n(4, 0.7), n(1, 0.3)];
        assert_eq!(combine_neighbours(&all, &median), n(1, 0.6));
        assert_eq!(combine_neighbours(&all[..4], &median), n(4, 0.6));
        assert_eq!(combine_neighbours(&[None, None], &median), None);
    }

    #[test]
    fn only_the_loads_every_step_or_layer_has_are_combined() {
        let load = |ctas_on_sm, median_us| SmLoadUs { ctas_on_sm, sms: 10.0, median_us, max_us: 2.0 * median_us };
        let groups = vec![vec![load(3, 1.0), load(4, 2.0)], vec![load(4, 4.0)], vec![load(4, 3.0), load(5, 9.0)]];
        assert_eq!(combine_loads(&groups, &median), vec![load(4, 3.0)]);
        assert!(combine_loads(&[], &median).is_empty());
    }

    #[test]
    fn steps_unlike_the_common_one_are_left_out_and_empty_windows_give_none() {
        let t = timeline(&[step(2, 1_000), step(5, 50_000), step(2, 90_000), TraceWindow::default()]).expect("steps");
        assert_eq!((t.steps, t.steps_traced), (2, 3));
        assert_eq!(t.positions.len(), 6);
        assert!(timeline(&[TraceWindow { launches: Vec::new(), dropped_slots: 2 }]).is_none());
        assert!(timeline(&[]).is_none());
    }
}
