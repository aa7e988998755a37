//! Timing HP1 decode paths on one grid point.

use std::sync::Arc;

use gpu::attention::{AttentionPath, AttnBuffers, Form, Hp1Attention, Plan, Pv, Settled};
use gpu::Gpu;

use super::data::{gate_params, BatchData, Lengths};
use super::timing::{copies, Timing};

/// One path's time at one point.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PathTime {
    /// `auto` (the dispatcher's choice) or a path name with its form (`Form::name`).
    pub name: String,
    /// The path the plan ran.
    pub path: String,
    /// Lanes per key in QK.
    pub group: usize,
    /// Query heads per CTA.
    pub heads: usize,
    /// QK rounds whose K loads a thread group issues together.
    pub rounds: usize,
    /// Back-to-back: median ms per launch of `reps` launches from the host, beside the reported
    /// figure (the gap is what launching costs).
    pub eager_ms: f64,
    /// Graph-timed: median ms per launch in a CUDA graph of `calls` launches, the figure
    /// reported and compared with the anchor; absent with `--no-graph` or when the graph failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_ms: Option<f64>,
    /// Softmax-equivalent bandwidth: the whole K and V over `graph_ms`, TB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_tbps: Option<f64>,
    /// Why the graph figure is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A decode point's name: `B{batch}_L{context}` and the lengths' suffix, e.g. `B128_L4096_spread`
/// (what `--point` selects, the anchor's key where the lengths are uniform).
pub fn point_key(batch: usize, context: usize, lengths: Lengths) -> String {
    format!("B{batch}_L{context}{}", lengths.suffix())
}

/// The largest batch a named decode point may ask for: a mistyped name is refused rather than
/// left to allocate a cache past the device.
pub const MAX_NAMED_BATCH: usize = 4096;
/// The longest context a named decode point may ask for, likewise.
pub const MAX_NAMED_CONTEXT: usize = 1 << 20;

/// The batch and context of a decode point named as [`point_key`] names it with `lengths`
/// (`B256_L4096` uniform, `B256_L4096_spread`), so `--point` can ask for one off the default
/// grid; an error naming the form where the name is not a decode point's of `lengths` (another
/// profile's suffix, a prefill or GEMM point), or where its sizes are past [`MAX_NAMED_BATCH`]
/// or [`MAX_NAMED_CONTEXT`] or zero: a point that selects nothing is refused, not measured as
/// nothing.
pub fn parse_point_key(key: &str, lengths: Lengths) -> std::result::Result<(usize, usize), String> {
    let sizes = || {
        let body = key.strip_prefix('B')?.strip_suffix(lengths.suffix())?;
        let (batch, context) = body.split_once("_L")?;
        Some((batch.parse::<usize>().ok()?, context.parse::<usize>().ok()?))
    };
    let (batch, context) = sizes().ok_or_else(|| {
        format!(
            "decode point {key}: the form is {} (batch, context and the lengths' suffix)",
            point_key(128, 4096, lengths)
        )
    })?;
    if batch == 0 || context == 0 || batch > MAX_NAMED_BATCH || context > MAX_NAMED_CONTEXT {
        return Err(format!(
            "decode point {key}: batch 1 to {MAX_NAMED_BATCH} and context 1 to {MAX_NAMED_CONTEXT} tokens"
        ));
    }
    Ok((batch, context))
}

impl DecodePoint {
    /// The point's name ([`point_key`]).
    pub fn key(&self) -> String {
        point_key(self.batch, self.context, self.lengths)
    }
}

/// Every path at one decode grid point.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DecodePoint {
    /// Sequences.
    pub batch: usize,
    /// Tokens of the longest sequence (of every sequence where `lengths` is uniform).
    pub context: usize,
    /// How the sequences' lengths are laid out up to `context`.
    pub lengths: Lengths,
    /// K+V bytes of the batch.
    pub kv_bytes: usize,
    /// The gate's zero fraction on a sample of sequences.
    pub zero_fraction: f64,
    /// Each path's time.
    pub paths: Vec<PathTime>,
}

fn forced() -> Vec<(AttentionPath, Form)> {
    let mut v = Vec::new();
    for path in [
        AttentionPath::Decode(Pv::Dense),
        AttentionPath::Decode(Pv::Sparse),
        AttentionPath::SplitK(Pv::Dense),
        AttentionPath::SplitK(Pv::Sparse),
    ] {
        for form in Form::ALL {
            v.push((path, form));
        }
    }
    v
}

/// Times the dispatcher's plan and every forced path at `(batch, context)`, back-to-back and in a
/// CUDA graph; `only` keeps the plans whose name contains it. Fails when a path cannot launch; a
/// graph that fails is recorded in the path's [`PathTime::error`].
pub fn measure(
    gpu: &Arc<Gpu>,
    (batch, context, lengths): (usize, usize, Lengths),
    timing: &Timing,
    only: Option<&str>,
) -> Result<DecodePoint, String> {
    let e = |x: gpu::Error| x.to_string();
    let data = BatchData::decode_lengths(batch, context, lengths, 0x5eed + batch as u64 * 131 + context as u64);
    let (geometry, host) = (data.geometry(), data.host());
    let kv_bytes = data.kv_bytes();
    let copies = copies(kv_bytes);
    let mut plans = vec![("auto".to_string(), Plan::auto(geometry).map_err(e)?)];
    for (path, form) in forced() {
        let name = format!("{}-{}", path.name(), form.name());
        plans.push((name, Plan::with_form(geometry, path, form).map_err(e)?));
    }
    plans.retain(|(name, _)| only.is_none_or(|o| name.contains(o)));
    let workspace = plans.iter().map(|(_, p)| p.workspace_len).max().unwrap_or(0);
    let mut bufs = Vec::with_capacity(copies);
    for _ in 0..copies {
        let mut b = AttnBuffers::upload(gpu, geometry, &host).map_err(e)?;
        b.reserve_workspace(gpu, workspace).map_err(e)?;
        bufs.push(b);
    }
    let gate = gate_params();
    let mut paths = Vec::new();
    for (name, plan) in plans {
        let attn = Hp1Attention::new(gpu, plan).map_err(e)?;
        for b in bufs.iter_mut() {
            attn.build_rows(b.row_operands()).map_err(e)?;
        }
        // Past the first, a launch follows another attention launch, which writes no row
        // metadata: the engine's form, the metadata read while that one finishes.
        let figures = timing.measure(gpu, |i| {
            attn.run(bufs[i % copies].operands(if i > 0 { Settled::Rows } else { Settled::Nothing }), &gate)
        });
        let Some(eager_ms) = figures.eager_ms else {
            return Err(format!("{name}: {}", figures.error.unwrap_or_default()));
        };
        paths.push(PathTime {
            name,
            path: attn.plan().path.name().to_string(),
            group: attn.plan().form.group.lanes(),
            heads: attn.plan().form.heads.count(),
            rounds: attn.plan().form.rounds.count(),
            eager_ms,
            graph_ms: figures.graph_ms,
            graph_tbps: figures.graph_ms.map(|ms| kv_bytes as f64 / ms / 1e9),
            error: figures.error,
        });
    }
    Ok(DecodePoint { batch, context, lengths, kv_bytes, zero_fraction: data.zero_fraction(4, 1), paths })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_decode_point_parses_back_to_its_sizes_and_nothing_else_does() {
        for (b, l, lengths) in [(256, 4096, Lengths::Uniform), (192, 1024, Lengths::Spread), (1, 1, Lengths::OneLong)] {
            assert_eq!(parse_point_key(&point_key(b, l, lengths), lengths), Ok((b, l)));
        }
        let spread = parse_point_key("B256_L4096_spread", Lengths::Uniform).unwrap_err();
        assert!(spread.contains("B128_L4096 "), "another profile's name: {spread}");
        let uniform = parse_point_key("B256_L4096", Lengths::Spread).unwrap_err();
        assert!(uniform.contains("B128_L4096_spread"), "{uniform}");
        for other in
            ["B1_T16384", "B8_P4096_Q64", "qkv_M8", "B_L1", "Bx_L1", "B1_L", "B1L1024", "B99999999999999999999_L1"]
        {
            assert!(parse_point_key(other, Lengths::Uniform).unwrap_err().contains("the form is"), "{other}");
        }
        for huge in ["B0_L1024", "B1_L0", "B4097_L1024", "B1_L1048577"] {
            assert!(parse_point_key(huge, Lengths::Uniform).unwrap_err().contains("batch 1 to"), "{huge}");
        }
    }
}
