//! The plan of an HP1 attention launch: which path, which thread-group size, how many query
//! heads per CTA, the grids and the split-K workspace, all from static facts. Pure host code, so
//! it is tested on the CPU.
//!
//! A plan is made from a [`Geometry`]: the row count the launch covers (the batch bucket a CUDA
//! graph is captured for), the head shape, and the block table's capacity
//! (`max_blocks_per_seq * block_size`). Never from a runtime length: a graph captured on short
//! dummy sequences must still be right when it replays on long ones (SPEC section 6), so the
//! kernels read the real lengths from device buffers and the grid covers the capacity, with
//! the CTAs that find no keys exiting at once.
//!
//! The dispatcher ([`dispatch`]): split-K whenever the capacity holds more than one [`CHUNK`]
//! (else the decode kernel, which then does the same single chunk without a second launch),
//! sparse-index PV, and a CTA [`Form`]: one query head per CTA with thread groups of 8 lanes,
//! loading the K of both QK rounds at once on grids of at most [`TWO_ROUND_MAX_CTAS`] one-head
//! CTAs where a chunk takes more than one round (`head_dim` 128 and 256), or, on grids of at
//! least [`PAIR_MIN_CTAS`] with an even `Hq / Hkv`, two heads of one kv head per CTA with groups
//! of 16 lanes.
//!
//! Measured on an H200 (Hq/Hkv 8/4, D 128, blocks of 16, 71% gate zeros; batch 1, 32, 128 x
//! context 1K, 4K, 16K) with one head per CTA: split-K won or tied at every point, batch 128
//! included (its grid of `rows * Hq * chunks` CTAs balances over the SMs where the decode grid
//! of `rows * Hq` long CTAs leaves a ragged last wave); 8 lanes beat 16 at every point, by 15 to
//! 50%; sparse PV beat dense by 1.5 to 1.9x (a trained AsyncT has about 70% zeros).
//!
//! Two heads per CTA load each K vector once for both (half the K traffic from L2, whose
//! throughput was the nearest ceiling at 72% in the one-head split kernel at batch 128, and one
//! unpack per element for two fmas), at half the CTAs and twice the gate and PV work per CTA: a
//! gain where the one-head grid fills the GPU, a loss where it does not and halving it leaves
//! too few loads in flight. [`PAIR_MIN_CTAS`] is about one wave of the one-head split kernel (7
//! CTAs on each of an H200's 132 SMs, 924): from there the one-head grid needs a second, ragged
//! wave and the paired grid does not. It is an estimate the benchmark should confirm (it times
//! both). Paired heads use groups of 16 lanes: q of two heads then takes 16 registers instead
//! of 32, and only so does ptxas issue all of a step's K loads before the first fma within the
//! launch bounds.
//!
//! Both QK rounds' K at once (a chunk and its FIR overlap are two rounds of 64 keys) takes 116
//! registers where one round takes 72, so 4 CTAs fit an SM instead of 7, and a CTA then waits on
//! one memory latency for its K instead of two. Measured on an H100 (asynct-0.5b, 1K context,
//! whole-step graphs; `verify/RESULTS.md`, runs 212-213): the decode step 6.5% faster at B1 (72
//! one-head CTAs), 6.2% at B2 and 5.3% at B4 (288), and 1.3% slower at B8 (576, past a wave of 4
//! CTAs on 132 SMs) when run 212 took it there; on an H200, B1 0.845 ms against session 36's
//! 0.902 (runs 216-217 against 206). A round of groups of 8 lanes is `8192 / D` keys, so at D = 64
//! a chunk and its overlap (128 keys at `fir_k` 3) are one round: the form would cost registers
//! there and overlap nothing, and the dispatcher keeps one round.
//!
//! The paired decode kernel (one CTA a row and kv head, walking the row's chunks) beat split-K
//! by 5 to 6% at 128 rows of one length (1K, 4K and 16K on an H100; the decode step 2.8% faster
//! at 1K; RESULTS runs 250-251), but its launch lasts as long as its longest row's chain of
//! chunks, which a batch of mixed lengths (continuous batching's usual shape) makes the whole
//! launch's, where split-K's time follows the batch's total work. Run 257 measured it on mixed
//! lengths (24% slower on lengths spread evenly, 3-6x with one long row among short ones), so the
//! dispatcher, which sees only static facts, keeps split-K; a step whose rows' lengths are even
//! takes the decode kernel by [`super::even_rows`]'s rule instead.
//!
//! [`Plan::new`] and [`Plan::with_form`] build the plans the dispatcher never picks (decode on
//! long capacities, dense PV, 16-lane groups for one head), for the benchmark (`asynct-bench`
//! times every forced path beside the dispatcher's) and for the bitwise checks across paths.
//! No choice changes results: split-K, decode and every form give the same bits (the kernel
//! header says why), so a request's output does not depend on its batch.

use crate::error::{Error, Result};

/// Keys per chunk, in decode and split-K alike (the kernel's `CHUNK`): with the FIR overlap of
/// `fir_k = 3` a split-K chunk reads 128 keys, two QK rounds.
pub const CHUNK: usize = 126;
/// Threads per CTA of every attention kernel.
pub const THREADS: u32 = 128;
/// The head dims the kernels are instantiated for.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];
/// The most FIR taps the kernels hold in shared memory (`MAX_FIR` in the kernel).
pub const MAX_FIR_K: usize = 8;
/// The dispatcher pairs heads from this many one-head CTAs (`rows * Hq * chunks`) up.
pub const PAIR_MIN_CTAS: usize = 1024;
/// The dispatcher loads both QK rounds' K at once up to this many one-head CTAs: one wave of
/// that form (4 CTAs an SM) on an H100 or H200 (132 SMs).
pub const TWO_ROUND_MAX_CTAS: usize = 4 * 132;

/// The static facts a plan is made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    /// Query rows the launch covers: `q` and the output have this many rows. Under a CUDA graph,
    /// the captured batch bucket ([`bucket`]); rows past the batch's last query get zeros.
    pub rows: usize,
    /// Query heads `Hq`.
    pub num_heads: usize,
    /// Key/value heads `Hkv`, dividing `Hq`.
    pub num_kv_heads: usize,
    /// Head dim `D`, one of [`HEAD_DIMS`].
    pub head_dim: usize,
    /// Tokens per cache block, a power of two.
    pub block_size: usize,
    /// Columns of the block table.
    pub max_blocks_per_seq: usize,
}

impl Geometry {
    /// The most keys a row can have: `max_blocks_per_seq * block_size`.
    pub fn capacity(&self) -> usize {
        self.max_blocks_per_seq.saturating_mul(self.block_size)
    }

    /// Chunks of the longest possible row: `ceil(capacity / CHUNK)`.
    pub fn max_chunks(&self) -> usize {
        self.capacity().div_ceil(CHUNK)
    }

    /// Checks every limit the kernels rely on; the error names the field and the value.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(unsupported(reason));
        if !HEAD_DIMS.contains(&self.head_dim) {
            return bad(format!("head_dim must be one of {HEAD_DIMS:?}, got {}", self.head_dim));
        }
        if self.rows == 0 || self.num_heads == 0 || self.num_kv_heads == 0 || self.max_blocks_per_seq == 0 {
            return bad(format!("rows, heads and max_blocks_per_seq must be at least 1, got {self:?}"));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(format!("{} kv heads must divide {} query heads", self.num_kv_heads, self.num_heads));
        }
        if !self.block_size.is_power_of_two() {
            return bad(format!("block_size must be a power of two, got {}", self.block_size));
        }
        // The kernels hold lengths, chunk indices and `len + CHUNK - 1` in 32-bit ints.
        let int_max = i32::MAX as usize;
        if self.capacity() > int_max - CHUNK || self.max_blocks_per_seq > int_max || self.rows > int_max {
            return bad(format!(
                "capacity {} (max_blocks_per_seq {} x block_size {}) and rows {} must stay under 2^31 - {CHUNK}",
                self.capacity(),
                self.max_blocks_per_seq,
                self.block_size,
                self.rows
            ));
        }
        Ok(())
    }
}

/// How PV meets the gate's weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pv {
    /// Every key of a chunk, zeros included (for comparison).
    Dense,
    /// Only the ordered list of keys with a nonzero weight.
    Sparse,
}

/// Which kernel path computes the attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionPath {
    /// One CTA per (row, head) walks all chunks.
    Decode(Pv),
    /// One CTA per (row, head, chunk) writes partials; the last one of a (row, head) adds them.
    SplitK(Pv),
}

impl AttentionPath {
    /// The PV variant.
    pub fn pv(&self) -> Pv {
        match *self {
            Self::Decode(pv) | Self::SplitK(pv) => pv,
        }
    }

    /// A short stable name, e.g. `split-k-sparse`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Decode(Pv::Dense) => "decode-dense",
            Self::Decode(Pv::Sparse) => "decode-sparse",
            Self::SplitK(Pv::Dense) => "split-k-dense",
            Self::SplitK(Pv::Sparse) => "split-k-sparse",
        }
    }
}

/// Lanes that cooperate on one key's dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupSize {
    /// Eight lanes (four keys per warp at a time).
    Eight,
    /// Sixteen lanes (two keys per warp at a time).
    Sixteen,
}

impl GroupSize {
    /// The lane count.
    pub fn lanes(&self) -> usize {
        match self {
            Self::Eight => 8,
            Self::Sixteen => 16,
        }
    }
}

/// Query heads one CTA computes; heads that share a kv head share its K loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeadsPerCta {
    /// One head.
    One,
    /// Two consecutive heads of one kv head (`Hq / Hkv` even, groups of 16 lanes).
    Two,
}

impl HeadsPerCta {
    /// The head count.
    pub fn count(&self) -> usize {
        match self {
            Self::One => 1,
            Self::Two => 2,
        }
    }
}

/// QK rounds (64 keys each for groups of 8 lanes at D = 128) whose K loads a thread group issues
/// before its first dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QkRounds {
    /// One round at a time.
    One,
    /// Two rounds at once (one head per CTA, groups of 8 lanes).
    Two,
}

impl QkRounds {
    /// The round count.
    pub fn count(&self) -> usize {
        match self {
            Self::One => 1,
            Self::Two => 2,
        }
    }
}

/// How a CTA is laid out: the kernel instantiation a path runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Form {
    /// The QK thread-group size.
    pub group: GroupSize,
    /// Query heads per CTA.
    pub heads: HeadsPerCta,
    /// QK rounds in flight.
    pub rounds: QkRounds,
}

impl Form {
    /// One head, groups of `group` lanes, one QK round at a time.
    pub const fn one_head(group: GroupSize) -> Self {
        Self { group, heads: HeadsPerCta::One, rounds: QkRounds::One }
    }

    /// The dispatcher's form for small grids.
    pub const TWO_ROUNDS: Form = Form { group: GroupSize::Eight, heads: HeadsPerCta::One, rounds: QkRounds::Two };
    /// The dispatcher's form for large grids.
    pub const PAIRED: Form = Form { group: GroupSize::Sixteen, heads: HeadsPerCta::Two, rounds: QkRounds::One };

    /// Every instantiated form, for the checks that hold them to the same bits.
    pub const ALL: [Form; 4] =
        [Form::one_head(GroupSize::Eight), Form::TWO_ROUNDS, Form::one_head(GroupSize::Sixteen), Form::PAIRED];

    /// A short stable name, e.g. `g8-r2`, `g16-h2`.
    pub fn name(&self) -> String {
        let heads = if self.heads == HeadsPerCta::Two { "-h2" } else { "" };
        let rounds = if self.rounds == QkRounds::Two { "-r2" } else { "" };
        format!("g{}{heads}{rounds}", self.group.lanes())
    }
}

/// One kernel launch: entry point, one-dimensional grid, block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// The `extern "C"` entry in the kernel file.
    pub entry: String,
    /// CTAs.
    pub grid: u32,
    /// Threads per CTA.
    pub block: u32,
}

/// Everything `run` needs besides the buffers: decided once, reused for every layer and step
/// of the same geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// What it was made for.
    pub geometry: Geometry,
    /// The path.
    pub path: AttentionPath,
    /// The CTA's form.
    pub form: Form,
    /// `hp1_rows` (in `hp1_rows.cu`), once per batch step.
    pub rows: LaunchShape,
    /// The decode or split-K kernel.
    pub attention: LaunchShape,
    /// f32 elements of the split-K partial buffer `[rows, Hq, max_chunks, D]`; 0 for decode.
    pub workspace_len: usize,
    /// i32 split-K chunk counters `[rows * Hq]`, zero before a launch and left zero by it; 0 for
    /// decode.
    pub counter_len: usize,
}

impl Plan {
    /// The plan the dispatcher picks for `geometry`.
    pub fn auto(geometry: Geometry) -> Result<Self> {
        geometry.validate()?;
        let (path, form) = dispatch(&geometry);
        Self::with_form(geometry, path, form)
    }

    /// A plan for a forced path and group size with one head per CTA and one QK round at a time
    /// (tests and benchmarks).
    pub fn new(geometry: Geometry, path: AttentionPath, group: GroupSize) -> Result<Self> {
        Self::with_form(geometry, path, Form::one_head(group))
    }

    /// A plan for a forced path and form (tests and benchmarks). Two heads need an even
    /// `Hq / Hkv` and groups of 16 lanes, two QK rounds one head and groups of 8 (the only
    /// instantiations).
    pub fn with_form(geometry: Geometry, path: AttentionPath, form: Form) -> Result<Self> {
        geometry.validate()?;
        let g = geometry;
        let Form { group, heads, rounds } = form;
        if rounds == QkRounds::Two && (group, heads) != (GroupSize::Eight, HeadsPerCta::One) {
            return Err(unsupported(format!(
                "two QK rounds run with one head and groups of 8 lanes, got {}",
                form.name()
            )));
        }
        if heads == HeadsPerCta::Two {
            let per_kv = g.num_heads / g.num_kv_heads;
            if !per_kv.is_multiple_of(2) {
                return Err(unsupported(format!(
                    "two heads per CTA need an even number of query heads per kv head, got {} / {} = {per_kv}",
                    g.num_heads, g.num_kv_heads
                )));
            }
            if group != GroupSize::Sixteen {
                return Err(unsupported(format!(
                    "two heads per CTA run with groups of 16 lanes, got {}",
                    group.lanes()
                )));
            }
        }
        let pv = match path.pv() {
            Pv::Dense => "dense",
            Pv::Sparse => "sparse",
        };
        let head_ctas = g.rows.checked_mul(g.num_heads / heads.count());
        let (kind, ctas) = match path {
            AttentionPath::Decode(_) => ("decode", head_ctas),
            AttentionPath::SplitK(_) => ("split", head_ctas.and_then(|n| n.checked_mul(g.max_chunks()))),
        };
        let r2 = if rounds == QkRounds::Two { "_r2" } else { "" };
        let attention = LaunchShape {
            entry: format!("hp1_{kind}_d{}_g{}_h{}{r2}_{pv}", g.head_dim, group.lanes(), heads.count()),
            grid: grid(ctas, &g)?,
            block: THREADS,
        };
        let (workspace_len, counter_len) = match path {
            AttentionPath::Decode(_) => (0, 0),
            AttentionPath::SplitK(_) => {
                let pairs = g.rows * g.num_heads;
                let len = pairs.checked_mul(g.max_chunks()).and_then(|n| n.checked_mul(g.head_dim));
                let len = len.ok_or_else(|| unsupported(format!("the split-K workspace of {g:?} overflows")))?;
                (len, pairs)
            }
        };
        let rows = LaunchShape {
            entry: "hp1_rows".to_string(),
            grid: grid(Some(g.rows.div_ceil(THREADS as usize)), &g)?,
            block: THREADS,
        };
        Ok(Self { geometry, path, form, rows, attention, workspace_len, counter_len })
    }
}

/// The path and form for `geometry` (see the module doc for the rule and its measurements).
pub fn dispatch(geometry: &Geometry) -> (AttentionPath, Form) {
    let g = geometry;
    let path = if g.capacity() > CHUNK { AttentionPath::SplitK(Pv::Sparse) } else { AttentionPath::Decode(Pv::Sparse) };
    let one_head_ctas = g.rows.saturating_mul(g.num_heads).saturating_mul(g.max_chunks());
    if (g.num_heads / g.num_kv_heads).is_multiple_of(2) && one_head_ctas >= PAIR_MIN_CTAS {
        (path, Form::PAIRED)
    } else if one_head_ctas <= TWO_ROUND_MAX_CTAS && g.head_dim > 64 {
        (path, Form::TWO_ROUNDS)
    } else {
        (path, Form::one_head(GroupSize::Eight))
    }
}

/// The batch bucket of `num_tokens` query rows: the next power of two (at least 1), so a few
/// captured graphs cover every batch size.
pub fn bucket(num_tokens: usize) -> usize {
    num_tokens.max(1).next_power_of_two()
}

/// A one-dimensional grid of `ctas` (at most 2^31 - 1 CTAs).
fn grid(ctas: Option<usize>, g: &Geometry) -> Result<u32> {
    match ctas {
        Some(n) if n <= i32::MAX as usize => Ok(n.max(1) as u32),
        _ => Err(unsupported(format!("{g:?} needs more than 2^31 - 1 CTAs"))),
    }
}

fn unsupported(reason: String) -> Error {
    Error::Unsupported { entry: "hp1 attention".to_string(), reason }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
pub(crate) mod tests;
