//! `--decode-kernel`: how a pure decode step launches its layers on the GPU.
//!
//! `graph` launches every layer's five kernels (captured in the step's CUDA graph); `mega` runs
//! every layer in the persistent megakernel (`gpu::mega`) wherever its batch tiles reach;
//! `auto` takes the megakernel for the batch buckets where it measured faster on the H200 and the
//! graph path elsewhere. Every choice gives a request the same bits: the megakernel runs the graph
//! path's kernel bodies (`gpu_engine` and `gpu_model` check it).

use std::str::FromStr;

use crate::error::Error;

/// The decode buckets (rows) at which the megakernel measured faster than the graph path, which
/// `auto` runs in it: none yet. On the H200 with asynct-0.5b at 1K context (`verify/RESULTS.md`,
/// runs 60-62) it took 1.37-1.44 ms a step at B1 against the graph path's 1.02-1.05 ms, 1.53-1.83
/// against 1.18-1.34 at B8 and 3.1-4.0 against 2.1-2.3 at B32: its tasks take as long as the
/// standalone kernels, it loses their PDL overlap, and each grid barrier adds about 1.2 us.
const MEGA_FASTER_ROWS: &[usize] = &[];

/// How a decode step's layers launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecodeKernel {
    /// The megakernel where it measured faster, else the graph path.
    #[default]
    Auto,
    /// Five kernels a layer.
    Graph,
    /// The megakernel wherever it applies.
    Mega,
}

impl DecodeKernel {
    /// The flag's value for this choice.
    pub fn name(self) -> &'static str {
        match self {
            DecodeKernel::Auto => "auto",
            DecodeKernel::Graph => "graph",
            DecodeKernel::Mega => "mega",
        }
    }

    /// Whether a decode step of `rows` rows (its batch bucket) asks for the megakernel; the step
    /// program still decides whether the step allows it.
    pub fn persistent(self, rows: usize) -> bool {
        let fits = gpu::mega::row_tile(rows).is_some();
        match self {
            DecodeKernel::Graph => false,
            DecodeKernel::Mega => fits,
            DecodeKernel::Auto => fits && MEGA_FASTER_ROWS.contains(&rows),
        }
    }
}

impl FromStr for DecodeKernel {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        [DecodeKernel::Auto, DecodeKernel::Graph, DecodeKernel::Mega]
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| Error::Options(format!("--decode-kernel must be auto, graph or mega, got `{s}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_choice_asks_for_the_megakernel_where_it_says() {
        assert!(!DecodeKernel::Graph.persistent(1));
        assert!(DecodeKernel::Mega.persistent(1) && DecodeKernel::Mega.persistent(32));
        assert!(!DecodeKernel::Mega.persistent(33), "past the widest row tile");
        for rows in [1, 2, 8, 32, 64] {
            assert_eq!(DecodeKernel::Auto.persistent(rows), MEGA_FASTER_ROWS.contains(&rows), "{rows} rows");
        }
        for k in [DecodeKernel::Auto, DecodeKernel::Graph, DecodeKernel::Mega] {
            assert_eq!(k.name().parse::<DecodeKernel>().unwrap(), k);
        }
        let err = "fast".parse::<DecodeKernel>().unwrap_err().to_string();
        assert!(err.contains("auto, graph or mega, got `fast`"), "{err}");
    }
}
