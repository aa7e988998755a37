//! Tests of [`super`]: the program of every step shape against the properties the executor,
//! the graphs and the megakernel rely on (launches per layer, every buffer written before it is
//! read, the rounding points once per layer, no attention op right after the row metadata, the
//! caches written at the step's own slots only).

use std::collections::HashSet;

use super::*;

/// A shape of 3 layers whose chunk rows are not fused and whose prefill norms its queries (the
/// defaults).
fn shape(decodes: usize, chunks: usize, attention_on_rows: bool, fusion: Fusion) -> ProgramShape {
    let tokens = decodes + chunks;
    ProgramShape {
        layers: 3,
        rows: RowSplit { decodes, chunks },
        attention_on_rows,
        picked: tokens.min(decodes + 2),
        picked_all: chunks == 0,
        fusion,
        decode_cublas: DecodeCublas::default(),
        chunk_fusion: Fusion::NONE,
        gate_stats: false,
        prefill_norms_queries: true,
        persistent: false,
        fold_o: false,
    }
}

/// Every shape the executor can plan: decode-only, prefill-only, mixed, fake decode, each
/// with every fusion setting of either class of rows, with and without the megakernel asked
/// for, with the prefill norming its queries or not, with decode rows of no weight, gate/up
/// alone or every weight on cuBLASLt, and with o_proj's folded form asked for or not.
fn shapes() -> Vec<ProgramShape> {
    let fusions = [Fusion::ALL, Fusion::NONE, Fusion { qkv: false, ..Fusion::ALL }, Fusion::parse("qkv,silu")];
    let cublas = ["", "gate_up", "qkv,o:split,gate_up,down:split"].map(|l| DecodeCublas::parse(l).unwrap());
    let mut all = Vec::new();
    for fusion in fusions {
        for chunk_fusion in fusions {
            for (d, c) in [(1, 0), (32, 0), (128, 0), (0, 512), (3, 100), (1, 7)] {
                for (persistent, decode_cublas) in [false, true].into_iter().flat_map(|p| cublas.map(|dc| (p, dc))) {
                    let s = ProgramShape { persistent, chunk_fusion, decode_cublas, ..shape(d, c, c == 0, fusion) };
                    all.push(s);
                    all.push(ProgramShape { fold_o: true, ..s });
                    all.push(ProgramShape { gate_stats: true, ..s });
                    if c > 0 {
                        all.push(ProgramShape { attention_on_rows: true, ..s });
                        all.push(ProgramShape { prefill_norms_queries: false, ..s });
                    }
                }
            }
        }
    }
    all
}

#[test]
fn the_megakernel_takes_every_layer_of_a_fused_decode_step_and_nothing_else() {
    let graph = StepProgram::build(shape(8, 0, true, Fusion::ALL));
    let mega = StepProgram::build(ProgramShape { persistent: true, ..shape(8, 0, true, Fusion::ALL) });
    // embed with layer 0's input norm, rows, the megakernel, the head.
    assert_eq!(mega.ops, vec![Op::Embed, Op::BuildRows, Op::Megakernel, Op::LmHead { direct: true }]);
    assert_eq!(mega.persistent.len(), 3 * 5);
    assert_eq!(mega.expanded(), graph.ops);
    assert!(graph.persistent.is_empty());
    // Chunk rows, an unfused op or gate statistics keep the graph path's launches.
    for s in [
        shape(3, 100, false, Fusion::ALL),
        shape(3, 100, true, Fusion::ALL),
        shape(8, 0, true, Fusion { silu: false, ..Fusion::ALL }),
        ProgramShape { gate_stats: true, ..shape(8, 0, true, Fusion::ALL) },
        ProgramShape { decode_cublas: DecodeCublas::parse("gate_up").unwrap(), ..shape(8, 0, true, Fusion::ALL) },
    ] {
        let asked = StepProgram::build(ProgramShape { persistent: true, ..s });
        assert_eq!(asked, StepProgram::build(s), "{s:?}");
    }
}

#[test]
fn a_fused_decode_layer_is_five_launches() {
    let p = StepProgram::build(shape(32, 0, true, Fusion::ALL));
    let layer1: Vec<_> = p.ops.iter().filter(|op| layer_of(op) == Some(1)).collect();
    assert_eq!(layer1.len(), 5, "{layer1:?}");
    // embed with layer 0's input norm, rows, 3 x 5, the head without a gather
    assert_eq!(p.launches(), 2 + 15 + 1);
    let unfused = StepProgram::build(shape(32, 0, true, Fusion::NONE));
    assert_eq!(unfused.launches(), 2 + 3 * 9 + 1);
}

#[test]
fn a_weight_whose_decode_rows_run_cublas_stores_and_its_op_follows_over_the_decode_rows() {
    let s = shape(32, 0, true, Fusion::ALL);
    let gate_up = StepProgram::build(ProgramShape { decode_cublas: DecodeCublas::parse("gate_up").unwrap(), ..s });
    let layer1: Vec<_> = gate_up.ops.iter().filter(|op| layer_of(op) == Some(1)).copied().collect();
    let (rows, store) = (Lane::Rows, EpilogueKind::Store);
    assert_eq!(layer1.len(), 6, "{layer1:?}");
    assert_eq!(layer1[3], Op::Linear { layer: 1, weight: Weight::GateUp, lane: rows, epilogue: store });
    assert_eq!(layer1[4], Op::SiluMul { layer: 1, rows: Rows::All });
    // Beside chunk rows whose ops are fused, the separate op covers the decode rows alone.
    let mixed = ProgramShape {
        decode_cublas: DecodeCublas::parse("o,down:split").unwrap(),
        chunk_fusion: Fusion::ALL,
        ..shape(3, 100, true, Fusion::ALL)
    };
    let p = StepProgram::build(mixed);
    let closes: Vec<_> = p.ops.iter().filter(|op| matches!(op, Op::PeriLn { layer: 0, .. })).collect();
    assert_eq!(closes.len(), 2, "{:?}", p.ops);
    assert!(closes.iter().all(|op| op.rows() == Some(Rows::Decodes)), "{closes:?}");
    let every =
        StepProgram::build(ProgramShape { decode_cublas: DecodeCublas::parse("qkv,o,gate_up,down").unwrap(), ..s });
    assert_eq!(every, StepProgram::build(shape(32, 0, true, Fusion::NONE)));
}

#[test]
fn a_folded_decode_layer_is_five_launches_with_the_attention_output_rounded_by_o_proj() {
    let s = ProgramShape { fold_o: true, ..shape(1, 0, true, Fusion::ALL) };
    let layer1: Vec<_> = StepProgram::build(s).ops.into_iter().filter(|op| layer_of(op) == Some(1)).collect();
    let (rows, o) = (Lane::Rows, Op::FoldedO { layer: 1, epilogue: EpilogueKind::PeriLn });
    assert_eq!(
        layer1,
        vec![
            Op::Linear { layer: 1, weight: Weight::Qkv, lane: rows, epilogue: EpilogueKind::QkNormRopeCache },
            Op::Attention { layer: 1, part: AttnPart::RowsLeavingPartials },
            o,
            Op::Linear { layer: 1, weight: Weight::GateUp, lane: rows, epilogue: EpilogueKind::SiluMul },
            Op::Linear { layer: 1, weight: Weight::Down, lane: rows, epilogue: EpilogueKind::PeriLn },
        ]
    );
    assert!(layer1[1].rounds(3).is_empty());
    assert_eq!(o.rounds(3)[..2], [RoundPoint::AttnOutput, RoundPoint::OProj]);
    // Unfused, the close follows as its own op over every row.
    let unfused = StepProgram::build(ProgramShape { fold_o: true, ..shape(1, 0, true, Fusion::NONE) });
    let o_ops: Vec<_> = unfused.ops.iter().filter(|op| layer_of(op) == Some(0)).skip(3).take(2).copied().collect();
    assert_eq!(
        o_ops,
        vec![
            Op::FoldedO { layer: 0, epilogue: EpilogueKind::Store },
            Op::PeriLn { layer: 0, sublayer: Sublayer::Attention, rows: Rows::All }
        ]
    );
}

#[test]
fn o_proj_folds_only_beside_a_decode_only_attention_of_its_own_kernels() {
    let decode = ProgramShape { fold_o: true, ..shape(1, 0, true, Fusion::ALL) };
    let folds = |s: ProgramShape| StepProgram::build(s).expanded().iter().any(|op| matches!(op, Op::FoldedO { .. }));
    assert!(folds(decode));
    for s in [
        ProgramShape { rows: RowSplit { decodes: 1, chunks: 7 }, ..decode },
        ProgramShape { rows: RowSplit { decodes: 1, chunks: 7 }, attention_on_rows: false, ..decode },
        ProgramShape { gate_stats: true, ..decode },
        ProgramShape { decode_cublas: DecodeCublas::parse("o").unwrap(), ..decode },
        ProgramShape { fold_o: false, ..decode },
    ] {
        assert!(!folds(s), "{s:?}");
    }
    // The megakernel, where asked for and allowed, keeps its ops.
    let mega = ProgramShape { persistent: true, ..decode };
    assert_eq!(StepProgram::build(mega), StepProgram::build(ProgramShape { fold_o: false, ..mega }));
    assert!(!StepProgram::build(mega).persistent.is_empty());
}

fn layer_of(op: &Op) -> Option<usize> {
    match *op {
        Op::Linear { layer, .. }
        | Op::FoldedO { layer, .. }
        | Op::QkNormRopeCache { layer, .. }
        | Op::Attention { layer, .. }
        | Op::GateStats { layer, .. }
        | Op::PeriLn { layer, .. }
        | Op::SiluMul { layer, .. } => Some(layer),
        Op::Embed | Op::BuildRows | Op::Megakernel | Op::Gather | Op::LmHead { .. } => None,
    }
}

#[test]
fn every_row_meets_every_rounding_point_once_in_forward_order() {
    for s in shapes() {
        let p = StepProgram::build(s).expanded();
        let mut want = Vec::new();
        for _ in 0..s.layers {
            want.extend(RoundPoint::ALL.iter().copied().filter(|r| r.in_layer()));
        }
        // Layer 0's input norm is the prologue's, layer l's the close of layer l - 1, and the
        // last layer's close rounds the final norm.
        want.push(RoundPoint::FinalNorm);
        for class in [Rows::Decodes, Rows::Chunks] {
            let present = if class == Rows::Decodes { s.rows.decodes } else { s.rows.chunks };
            if present == 0 {
                continue;
            }
            let mut got: Vec<_> = p
                .iter()
                .filter(|op| op.rows().is_some_and(|r| r.covers(class)))
                .flat_map(|op| op.rounds(s.layers))
                .collect();
            // q's norm and k's read neither's output, so a program may round k first (a prefill
            // that norms its queries does q after the qk op's k): forward order holds either way.
            for i in 1..got.len() {
                if got[i - 1] == RoundPoint::KNormRope && got[i] == RoundPoint::QNormRope {
                    got.swap(i - 1, i);
                }
            }
            assert_eq!(got, want, "{class:?} rows of {s:?}");
        }
        let head: Vec<_> = p.iter().filter(|op| op.rows().is_none()).flat_map(|op| op.rounds(s.layers)).collect();
        assert_eq!(head, vec![RoundPoint::Logits], "{s:?}");
    }
}

#[test]
fn every_buffer_is_written_before_it_is_read() {
    let uploaded = [Buf::Ids, Buf::PositionsSlots, Buf::Meta, Buf::PrefillMeta, Buf::LogitRows];
    for s in shapes() {
        let p = StepProgram::build(s).expanded();
        for class in [Rows::Decodes, Rows::Chunks] {
            let present = if class == Rows::Decodes { s.rows.decodes } else { s.rows.chunks };
            if present == 0 {
                continue;
            }
            let mut written: HashSet<Buf> = uploaded.into_iter().collect();
            for op in &p {
                // The head's ops read the picked rows, which may be of either class.
                if !op.rows().is_none_or(|r| r.covers(class)) {
                    continue;
                }
                let (reads, writes) = op.access();
                for b in reads {
                    assert!(written.contains(&b), "{op:?} reads {b:?} of {class:?} rows before any write in {s:?}");
                }
                written.extend(writes);
            }
            assert!(written.contains(&Buf::Logits), "{s:?}");
        }
    }
}

#[test]
fn no_attention_follows_the_op_that_writes_the_row_metadata() {
    // The attention launches with `Settled::Rows` or more and the folded o_proj reads row_len alike
    // (before waiting for the kernel before it), a race right after the op that writes them.
    for s in shapes() {
        let ops = StepProgram::build(s).expanded();
        for pair in ops.windows(2) {
            if matches!(pair[1], Op::Attention { .. } | Op::FoldedO { .. }) {
                assert!(
                    !pair[0].access().1.contains(&Buf::RowMeta),
                    "{:?} right after {:?} in {s:?}",
                    pair[1],
                    pair[0]
                );
            }
        }
    }
}

#[test]
fn a_cache_is_written_only_at_the_steps_own_slots() {
    // The decode rows' attention launches with `Settled::OlderKeys` (it reads every key but a
    // row's newest before waiting for the kernel before it), which holds while no op of the step
    // writes a cache anywhere but at its own rows' slots: each op that writes one places its
    // rows by the uploaded slots.
    for s in shapes() {
        let mut writers = 0;
        for op in StepProgram::build(s).expanded() {
            let (reads, writes) = op.access();
            if writes.iter().any(|b| matches!(b, Buf::Cache(_))) {
                assert!(reads.contains(&Buf::PositionsSlots), "{op:?} writes a cache in {s:?}");
                writers += 1;
            }
        }
        assert!(writers >= s.layers, "{s:?} writes {writers} caches");
    }
}

#[test]
fn gate_statistics_follow_each_decode_attention_and_only_when_asked() {
    let count =
        |s: ProgramShape| StepProgram::build(s).ops.iter().filter(|op| matches!(op, Op::GateStats { .. })).count();
    assert_eq!(count(ProgramShape { gate_stats: true, ..shape(32, 0, true, Fusion::ALL) }), 3);
    assert_eq!(count(ProgramShape { gate_stats: true, ..shape(0, 512, false, Fusion::ALL) }), 0);
    assert_eq!(count(shape(32, 0, true, Fusion::ALL)), 0);
}

#[test]
fn a_layer_reads_its_residual_from_where_the_last_close_left_it() {
    // X holds the stream entering a layer and XNext after its attention: the attention close
    // reads X and writes XNext, the MLP close the reverse, so they never read what they write.
    for s in shapes() {
        for op in StepProgram::build(s).expanded() {
            let (reads, writes) = op.access();
            assert!(reads.iter().all(|b| !writes.contains(b)), "{op:?} reads what it writes");
        }
    }
}

#[test]
fn chunk_rows_keep_their_separate_ops_and_decode_rows_their_epilogues() {
    let p = StepProgram::build(shape(3, 100, false, Fusion::ALL));
    let layer0: Vec<_> = p.ops.iter().filter(|op| layer_of(op) == Some(0)).collect();
    assert!(layer0.contains(&&Op::Linear {
        layer: 0,
        weight: Weight::O,
        lane: Lane::Rows,
        epilogue: EpilogueKind::PeriLn
    }));
    assert!(layer0.contains(&&Op::PeriLn { layer: 0, sublayer: Sublayer::Attention, rows: Rows::Chunks }));
    assert!(layer0.contains(&&Op::Attention { layer: 0, part: AttnPart::PrefillNormingQueries }));
    let none = StepProgram::build(shape(3, 100, false, Fusion::NONE));
    assert!(none.ops.contains(&Op::PeriLn { layer: 0, sublayer: Sublayer::Attention, rows: Rows::All }));
    assert!(none.ops.iter().all(|op| !matches!(op, Op::Linear { epilogue, .. } if *epilogue != EpilogueKind::Store)));
}

#[test]
fn fused_chunk_rows_take_the_epilogues_and_leave_no_separate_op() {
    let chunked = |s: ProgramShape| ProgramShape { chunk_fusion: Fusion::ALL, ..s };
    let prefill = StepProgram::build(chunked(shape(0, 512, false, Fusion::ALL)));
    let layer1: Vec<_> = prefill.ops.iter().filter(|op| layer_of(op) == Some(1)).copied().collect();
    assert_eq!(
        layer1,
        vec![
            Op::Linear { layer: 1, weight: Weight::Qkv, lane: Lane::Chunks, epilogue: EpilogueKind::QkNormRopeCache },
            Op::Attention { layer: 1, part: AttnPart::Prefill },
            Op::Linear { layer: 1, weight: Weight::O, lane: Lane::Chunks, epilogue: EpilogueKind::PeriLn },
            Op::Linear { layer: 1, weight: Weight::GateUp, lane: Lane::Chunks, epilogue: EpilogueKind::SiluMul },
            Op::Linear { layer: 1, weight: Weight::Down, lane: Lane::Chunks, epilogue: EpilogueKind::PeriLn },
        ]
    );
    // Mixed: each lane its own fused GEMM, two attention parts, no separate op.
    let mixed = StepProgram::build(chunked(shape(3, 100, false, Fusion::ALL)));
    assert_eq!(mixed.ops.iter().filter(|op| layer_of(op) == Some(0)).count(), 10);
    assert!(!mixed
        .ops
        .iter()
        .any(|op| matches!(op, Op::PeriLn { .. } | Op::SiluMul { .. } | Op::QkNormRopeCache { .. })));
    // Decode rows unfused beside fused chunks: the separate op covers the decode rows alone.
    let decodes_unfused = StepProgram::build(chunked(shape(3, 100, false, Fusion::NONE)));
    assert!(decodes_unfused.ops.contains(&Op::SiluMul { layer: 2, rows: Rows::Decodes }));
    assert!(!decodes_unfused.ops.iter().any(|op| matches!(op, Op::SiluMul { rows: Rows::All | Rows::Chunks, .. })));
    // A decode-only step is the same program whatever the chunk rows' fusion.
    let decode = shape(32, 0, true, Fusion::ALL);
    assert_eq!(StepProgram::build(chunked(decode)), StepProgram::build(decode));
}

#[test]
fn a_prefill_that_norms_its_queries_leaves_the_qk_op_keys_and_values() {
    let layer0 = |s: ProgramShape| -> Vec<Op> {
        StepProgram::build(s).ops.into_iter().filter(|op| layer_of(op) == Some(0)).collect()
    };
    for (decodes, rows) in [(0, Rows::All), (3, Rows::Chunks)] {
        let ops = layer0(shape(decodes, 100, false, Fusion::ALL));
        assert!(ops.contains(&Op::QkNormRopeCache { layer: 0, rows, queries: false }), "{ops:?}");
        assert!(ops.contains(&Op::Attention { layer: 0, part: AttnPart::PrefillNormingQueries }), "{ops:?}");
    }
    // Where any other op reads normed queries of chunk rows, or the chunks' qkv GEMM norms them
    // in its epilogue, the qk op writes them and the prefill reads them.
    let off = |s: ProgramShape| {
        let ops = layer0(s);
        assert!(!ops.iter().any(|op| matches!(op, Op::QkNormRopeCache { queries: false, .. })), "{ops:?}");
        assert!(!ops.contains(&Op::Attention { layer: 0, part: AttnPart::PrefillNormingQueries }), "{ops:?}");
    };
    off(ProgramShape { prefill_norms_queries: false, ..shape(3, 100, false, Fusion::ALL) });
    off(shape(3, 100, false, Fusion::NONE));
    off(shape(3, 100, true, Fusion::ALL));
    off(ProgramShape { chunk_fusion: Fusion::ALL, ..shape(0, 100, false, Fusion::ALL) });
}

#[test]
fn a_fusion_list_names_the_fusions_to_keep() {
    assert_eq!(Fusion::parse("none"), Fusion::NONE);
    assert_eq!(Fusion::parse("qkv, silu"), Fusion { qkv: true, peri_ln: false, silu: true });
    assert_eq!(Fusion::parse("peri_ln,qkv,silu"), Fusion::ALL);
    assert_eq!(Fusion::ALL.and(Fusion::parse("silu")), Fusion::parse("silu"));
    assert_eq!(Fusion::parse("qkv").and(Fusion::NONE), Fusion::NONE);
}
