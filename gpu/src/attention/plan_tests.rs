//! Tests of [`super`]: the path, form, entry and grid each geometry gets, the split grid's
//! coverage, a plan that follows capacity rather than lengths, the buckets, and the refusals.

use super::*;

/// asynct-0.5b's heads over `rows` query rows and `context` tokens of 16-token blocks.
pub(crate) fn geometry(rows: usize, context: usize) -> Geometry {
    Geometry {
        rows,
        num_heads: 8,
        num_kv_heads: 4,
        head_dim: 128,
        block_size: 16,
        max_blocks_per_seq: context.div_ceil(16),
    }
}

#[test]
fn the_dispatcher_splits_past_one_chunk_loads_two_rounds_on_small_grids_and_pairs_heads_on_large_ones() {
    let (small, one, two) = (Form::TWO_ROUNDS, Form::one_head(GroupSize::Eight), Form::PAIRED);
    // Hq 8 over Hkv 4; one-head CTAs = rows * 8 * ceil(context / CHUNK): two rounds up to
    // 528, paired from 1024.
    let per_row_at_1k = 8 * 1024usize.div_ceil(CHUNK);
    let unpaired_at_1k = (PAIR_MIN_CTAS - 1) / per_row_at_1k;
    for (rows, context, split, kernel) in [
        (1, 1024, true, small), // 72 CTAs
        (TWO_ROUND_MAX_CTAS / per_row_at_1k, 1024, true, small),
        (TWO_ROUND_MAX_CTAS / per_row_at_1k + 1, 1024, true, one),
        (unpaired_at_1k, 1024, true, one), // just under 1024 CTAs
        (unpaired_at_1k + 1, 1024, true, two),
        (1, 127 * CHUNK / 16 * 16, true, one), // 1016 (the capacity is whole blocks of 16)
        (1, 128 * CHUNK, true, two),           // 1024
        (32, 4096, true, two),                 // thousands of CTAs
        (128, 16384, true, two),
        (4096, CHUNK + 1, true, two),       // two chunks
        (1, 112, false, small),             // 7 blocks of 16: one chunk
        (66, 16, false, small),             // 528 CTAs of one chunk each
        (67, 16, false, one),               // 536
        (127, 16, false, one),              // 1016
        (128, 16, false, two),              // 1024
        (1, CHUNK, true, small),            // whole blocks of 16 hold more than one chunk
        (1, CHUNK / 16 * 16, false, small), // whole blocks within one chunk
    ] {
        let (path, form) = dispatch(&geometry(rows, context));
        assert_eq!(matches!(path, AttentionPath::SplitK(_)), split, "rows {rows}, context {context}: {path:?}");
        assert_eq!(path.pv(), Pv::Sparse);
        assert_eq!(form, kernel, "rows {rows}, context {context}");
    }
    // The capacity decides, not the block size it is made of.
    let wide_blocks = Geometry { block_size: 64, max_blocks_per_seq: CHUNK / 64, ..geometry(8, 0) };
    assert!(matches!(dispatch(&wide_blocks).0, AttentionPath::Decode(_)));
    let one_more = Geometry { max_blocks_per_seq: CHUNK / 64 + 1, ..wide_blocks };
    assert!(matches!(dispatch(&one_more).0, AttentionPath::SplitK(_)));
    // An odd number of query heads per kv head never pairs, however large the grid.
    for (hq, hkv) in [(8, 8), (6, 2), (3, 1)] {
        let g = Geometry { num_heads: hq, num_kv_heads: hkv, ..geometry(256, 16384) };
        assert_eq!(dispatch(&g).1, one, "{hq} / {hkv}");
    }
    let g = Geometry { num_heads: 16, num_kv_heads: 2, ..geometry(256, 16384) };
    assert_eq!(dispatch(&g).1, two);
    // Two rounds only where a chunk takes more than one: not at D = 64.
    for (d, form) in [(64, one), (128, small), (256, small)] {
        assert_eq!(dispatch(&Geometry { head_dim: d, ..geometry(1, 1024) }).1, form, "D {d}");
    }
}

#[test]
fn the_plan_depends_on_capacity_not_on_lengths() {
    // The same geometry always gives the same plan: there is no length input to vary.
    let a = Plan::auto(geometry(1, 8192)).unwrap();
    assert_eq!(a, Plan::auto(geometry(1, 8192)).unwrap());
    assert_eq!(a.path, AttentionPath::SplitK(Pv::Sparse));
    let chunks = 8192usize.div_ceil(CHUNK);
    assert_eq!(a.geometry.max_chunks(), chunks);
    assert_eq!(a.attention.grid as usize, 8 * chunks);
    assert_eq!((a.workspace_len, a.counter_len), (8 * chunks * 128, 8));
    assert_eq!(a.attention.entry, "hp1_split_d128_g8_h1_r2_sparse", "{} CTAs: two rounds at a time", 8 * chunks);
    assert_eq!((a.rows.entry.as_str(), a.rows.grid), ("hp1_rows", 1));
    // Rows enough for 1024 one-head CTAs: paired heads, half the stage-1 CTAs, the same
    // partials and counters per (row, head).
    let rows = PAIR_MIN_CTAS.div_ceil(8 * chunks);
    let b = Plan::auto(geometry(rows, 8192)).unwrap();
    assert_eq!(
        (b.attention.entry.as_str(), b.attention.grid as usize),
        ("hp1_split_d128_g16_h2_sparse", rows * 4 * chunks)
    );
    assert_eq!((b.workspace_len, b.counter_len), (rows * 8 * chunks * 128, rows * 8));
    let fewer = Plan::auto(geometry(rows - 1, 8192)).unwrap();
    assert_eq!(fewer.form, Form::TWO_ROUNDS);
    let longer = Plan::auto(geometry(1, 9216)).unwrap();
    assert_eq!((longer.attention.entry.as_str(), longer.attention.grid), ("hp1_split_d128_g8_h1_sparse", 8 * 74));
}

#[test]
fn forced_plans_name_their_entries_and_size_their_grids() {
    let g = Geometry { rows: 300, num_heads: 2, num_kv_heads: 1, head_dim: 64, block_size: 32, max_blocks_per_seq: 3 };
    let p = Plan::new(g, AttentionPath::Decode(Pv::Dense), GroupSize::Sixteen).unwrap();
    assert_eq!(p.attention, LaunchShape { entry: "hp1_decode_d64_g16_h1_dense".into(), grid: 600, block: 128 });
    assert_eq!((p.workspace_len, p.counter_len, p.form.heads), (0, 0, HeadsPerCta::One));
    assert_eq!(p.rows.grid, 3, "300 rows in CTAs of 128");
    let p = Plan::new(g, AttentionPath::SplitK(Pv::Dense), GroupSize::Eight).unwrap();
    // 96 keys of capacity: one chunk.
    assert_eq!(p.attention.grid, 600);
    assert_eq!((p.workspace_len, p.counter_len), (600 * 64, 600));
    // Two heads per CTA: half the CTAs; the partials stay per (row, head).
    let p = Plan::with_form(g, AttentionPath::Decode(Pv::Dense), Form::PAIRED).unwrap();
    assert_eq!(p.attention, LaunchShape { entry: "hp1_decode_d64_g16_h2_dense".into(), grid: 300, block: 128 });
    let p = Plan::with_form(g, AttentionPath::SplitK(Pv::Sparse), Form::PAIRED).unwrap();
    assert_eq!((p.attention.entry.as_str(), p.attention.grid), ("hp1_split_d64_g16_h2_sparse", 300));
    assert_eq!((p.workspace_len, p.counter_len), (600 * 64, 600));
    // Two QK rounds: the one-head grid and workspace under their own entries.
    let p = Plan::with_form(g, AttentionPath::Decode(Pv::Sparse), Form::TWO_ROUNDS).unwrap();
    assert_eq!(p.attention, LaunchShape { entry: "hp1_decode_d64_g8_h1_r2_sparse".into(), grid: 600, block: 128 });
    let p = Plan::with_form(g, AttentionPath::SplitK(Pv::Dense), Form::TWO_ROUNDS).unwrap();
    assert_eq!((p.attention.entry.as_str(), p.attention.grid), ("hp1_split_d64_g8_h1_r2_dense", 600));
    assert_eq!((p.workspace_len, p.counter_len), (600 * 64, 600));
    let names: Vec<String> = Form::ALL.iter().map(Form::name).collect();
    assert_eq!(names, ["g8", "g8-r2", "g16", "g16-h2"]);
    assert_eq!(Form::ALL.map(|f| f.rounds.count()), [1, 2, 1, 1]);
}

#[test]
fn two_heads_per_cta_need_an_even_head_ratio_and_groups_of_16_and_two_rounds_one_head_and_8() {
    let g = Geometry { num_heads: 6, num_kv_heads: 2, ..geometry(4, 1024) };
    let path = AttentionPath::SplitK(Pv::Sparse);
    let err = Plan::with_form(g, path, Form::PAIRED).unwrap_err().to_string();
    assert!(err.contains("even number of query heads per kv head, got 6 / 2 = 3"), "{err}");
    let eight_paired = Form { group: GroupSize::Eight, ..Form::PAIRED };
    let err = Plan::with_form(geometry(4, 1024), path, eight_paired).unwrap_err().to_string();
    assert!(err.contains("groups of 16 lanes, got 8"), "{err}");
    for form in [Form { rounds: QkRounds::Two, ..Form::PAIRED }, Form { group: GroupSize::Sixteen, ..Form::TWO_ROUNDS }]
    {
        let err = Plan::with_form(geometry(4, 1024), path, form).unwrap_err().to_string();
        assert!(err.contains("two QK rounds run with one head and groups of 8 lanes"), "{err}");
    }
    Plan::with_form(g, path, Form::one_head(GroupSize::Eight)).unwrap();
    Plan::with_form(g, path, Form::TWO_ROUNDS).unwrap();
}

/// The kernel's block-index decoding, written out: head groups fastest, then chunks, then
/// rows; CTA `bid` computes heads `h0 .. h0 + heads` of its row and chunk.
fn split_block(plan: &Plan, bid: usize) -> (usize, usize, usize) {
    let (g, per_cta) = (plan.geometry, plan.form.heads.count());
    let (h0, rest) = (bid % (g.num_heads / per_cta) * per_cta, bid / (g.num_heads / per_cta));
    (rest / g.max_chunks(), rest % g.max_chunks(), h0)
}

#[test]
fn the_split_grid_covers_every_row_chunk_and_head_once_with_shared_kv_heads_adjacent() {
    for (hq, hkv, heads) in [(6, 2, HeadsPerCta::One), (8, 2, HeadsPerCta::Two), (4, 2, HeadsPerCta::Two)] {
        let g = Geometry {
            rows: 3,
            num_heads: hq,
            num_kv_heads: hkv,
            head_dim: 256,
            block_size: 16,
            max_blocks_per_seq: 33,
        };
        let form = if heads == HeadsPerCta::Two { Form::PAIRED } else { Form::one_head(GroupSize::Eight) };
        let plan = Plan::with_form(g, AttentionPath::SplitK(Pv::Sparse), form).unwrap();
        let chunks = 528usize.div_ceil(CHUNK);
        assert_eq!(g.max_chunks(), chunks, "528 keys of capacity");
        let per_kv = hq / hkv;
        let mut seen = std::collections::HashSet::new();
        for bid in 0..plan.attention.grid as usize {
            let (row, chunk, h0) = split_block(&plan, bid);
            for h in h0..h0 + heads.count() {
                assert!(row < 3 && chunk < chunks && h < hq);
                assert_eq!(h / per_kv, h0 / per_kv, "the heads of a CTA share a kv head");
                assert!(seen.insert((row, chunk, h)), "block {bid} repeats {row} {chunk} {h}");
            }
            if bid > 0 && h0 % per_kv != 0 {
                let (prow, pchunk, ph) = split_block(&plan, bid - 1);
                assert_eq!((prow, pchunk, ph / per_kv), (row, chunk, h0 / per_kv), "a kv head's CTAs run together");
            }
        }
        assert_eq!(seen.len(), 3 * chunks * hq);
        // The counter of CTA (row, h0) is row * (Hq / heads) + h0 / heads: inside counter_len.
        assert!((3 - 1) * (hq / heads.count()) + (hq - heads.count()) / heads.count() < plan.counter_len);
    }
}

#[test]
fn unsupported_shapes_are_refused_with_the_value() {
    let base = geometry(8, 1024);
    let refused = |g: Geometry, needle: &str| {
        let err = Plan::auto(g).unwrap_err().to_string();
        assert!(err.contains(needle), "expected `{needle}` in: {err}");
        assert!(matches!(Plan::auto(g), Err(Error::Unsupported { .. })));
    };
    refused(Geometry { head_dim: 96, ..base }, "head_dim must be one of [64, 128, 256], got 96");
    refused(Geometry { head_dim: 16, ..base }, "got 16");
    refused(Geometry { block_size: 24, ..base }, "power of two, got 24");
    refused(Geometry { num_kv_heads: 3, ..base }, "3 kv heads must divide 8");
    refused(Geometry { rows: 0, ..base }, "at least 1");
    refused(Geometry { max_blocks_per_seq: 1 << 30, ..base }, "2^31");
    let huge = Geometry { rows: 1 << 20, max_blocks_per_seq: 1 << 20, ..base };
    let err = Plan::new(huge, AttentionPath::SplitK(Pv::Sparse), GroupSize::Eight).unwrap_err().to_string();
    assert!(err.contains("CTAs"), "{err}");
}

#[test]
fn buckets_are_powers_of_two() {
    let got: Vec<usize> = [0, 1, 2, 3, 5, 64, 65, 200].map(bucket).to_vec();
    assert_eq!(got, vec![1, 1, 2, 4, 8, 64, 128, 256]);
}
