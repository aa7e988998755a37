//! The scheduler's unit tests: chunk boundaries, growing allocation, admission, preemption and
//! refusals, and the property test that every request draws exactly its own tokens under any
//! pressure.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn cfg() -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs: 4,
        max_batched_tokens: 8,
        prefill_chunk: 5,
        max_model_len: 32,
        prefix_caching: true,
    }
}

fn scheduler(num_blocks: usize) -> Scheduler {
    scheduler_at(cfg().max_batched_tokens, num_blocks)
}

fn scheduler_at(budget: usize, num_blocks: usize) -> Scheduler {
    let cfg = SchedulerConfig { max_batched_tokens: budget, ..cfg() };
    Scheduler::new(cfg, KvCapacity { num_blocks, block_size: 4 }).unwrap()
}

/// Plans and commits one step, every sampling sequence drawing `token`; returns the plan.
fn step(s: &mut Scheduler, token: u32) -> StepPlan {
    let plan = s.schedule().unwrap().expect("work is left");
    let sampled: Vec<_> = plan.seqs.iter().map(|p| p.samples.then_some(token)).collect();
    s.commit(&plan, &sampled).unwrap();
    s.check_invariants();
    plan
}

fn chunks(plan: &StepPlan) -> Vec<(u64, usize, usize, bool)> {
    plan.seqs.iter().map(|p| (p.id, p.start, p.len, p.samples)).collect()
}

/// Steps until done for four 10-token prompts generating 6 tokens each under `budget`.
fn steps_to_finish(budget: usize) -> usize {
    let cfg = SchedulerConfig { max_batched_tokens: budget, ..cfg() };
    let mut s = Scheduler::new(cfg, KvCapacity { num_blocks: 64, block_size: 4 }).unwrap();
    for id in 0..4 {
        s.add(id, (0..10).collect(), 6).unwrap();
    }
    let mut steps = 0;
    while s.has_work() {
        let plan = step(&mut s, 1);
        // Prompt (10) plus 6 sampled tokens: done once the sixth is drawn.
        for p in plan.seqs.iter().filter(|p| p.samples && p.start + p.len + 1 >= 16) {
            s.finish(p.id).unwrap();
        }
        steps += 1;
    }
    steps
}

#[test]
fn a_budget_of_one_chunk_runs_a_batch_one_request_at_a_time() {
    // A decoding sequence takes one token of a chunk-sized budget, and the next request's
    // chunk (never cut) no longer fits: each request prefills (2 steps) and decodes (5) alone.
    // With a row for every sequence beside the chunk they overlap.
    assert_eq!(steps_to_finish(5), 4 * 7);
    let overlapped = steps_to_finish(5 + 4);
    assert!(overlapped < 14, "{overlapped} steps");
}

/// Each request's chunks (start, len) in order, for prompts of `lens` tokens generating 3 each
/// under `budget`, and the most prefill chunks one step carried.
fn chunk_history(budget: usize, lens: &[usize]) -> (BTreeMap<u64, Vec<(usize, usize)>>, usize) {
    let cfg = SchedulerConfig { max_batched_tokens: budget, max_model_len: 64, ..cfg() };
    let mut s = Scheduler::new(cfg, KvCapacity { num_blocks: 64, block_size: 4 }).unwrap();
    for (id, &len) in lens.iter().enumerate() {
        s.add(id as u64, (0..len as u32).collect(), 3).unwrap();
    }
    let (mut history, mut most) = (BTreeMap::<u64, Vec<(usize, usize)>>::new(), 0);
    while s.has_work() {
        let plan = step(&mut s, 1);
        assert!(plan.token_ids.len() <= budget, "a step of {} tokens", plan.token_ids.len());
        most = most.max(plan.seqs.iter().filter(|p| p.len > 1).count());
        for p in &plan.seqs {
            history.entry(p.id).or_default().push((p.start, p.len));
            if p.samples && p.start + p.len + 1 >= lens[p.id as usize] + 3 {
                s.finish(p.id).unwrap();
            }
        }
    }
    (history, most)
}

/// `history`'s entries cut at the chunk boundaries (chunks of 5) of prompts of `lens` tokens.
fn cut_at_chunks(history: &BTreeMap<u64, Vec<(usize, usize)>>, lens: &[usize]) -> BTreeMap<u64, Vec<(usize, usize)>> {
    let cut = |prompt: usize, &(start, len): &(usize, usize)| {
        let mut pieces = vec![];
        let mut at = start;
        while at < start + len {
            let end = if at < prompt { ((at / 5 + 1) * 5).min(prompt) } else { at + 1 };
            pieces.push((at, end.min(start + len) - at));
            at = end;
        }
        pieces
    };
    history.iter().map(|(&id, h)| (id, h.iter().flat_map(|c| cut(lens[id as usize], c)).collect())).collect()
}

#[test]
fn a_large_budget_carries_several_chunks_at_the_same_boundaries() {
    // The last prompt ends in a one-token chunk, which is a decode row and never joins another.
    let lens = [12, 17, 9, 23, 16];
    // One chunk a step (the scheduler's least budget), then the loader's least (a chunk beside a
    // row of every sequence), and larger.
    let (one, few) = chunk_history(5, &lens);
    assert_eq!(few, 1);
    assert_eq!(one[&3][..5], [(0, 5), (5, 5), (10, 5), (15, 5), (20, 3)]);
    for budget in [5 + 4, 2 * 5 + 4, 4 * 5 + 4, 1 << 20] {
        let (history, _) = chunk_history(budget, &lens);
        assert_eq!(cut_at_chunks(&history, &lens), one, "budget {budget}: chunk boundaries depend on the budget");
        assert!(history[&4].contains(&(15, 1)), "budget {budget}: the one-token chunk joined another");
    }
    let (history, most) = chunk_history(1 << 20, &lens);
    assert_eq!(most, 4, "every running sequence's chunks in one step");
    let prompt_steps: Vec<usize> =
        history.iter().map(|(id, h)| h.iter().filter(|c| c.0 < lens[*id as usize]).count()).collect();
    assert_eq!(prompt_steps, [1, 1, 1, 1, 2], "each prompt in one step, the one-token chunk apart");
    let (history, _) = chunk_history(2 * 5 + 4, &lens);
    assert_eq!(history[&0][0], (0, 12), "the first admitted takes its whole prompt");
}

#[test]
fn prefill_is_chunked_at_fixed_boundaries_then_decodes() {
    let mut s = scheduler_at(5, 16);
    s.add(7, (0..12).collect(), 3).unwrap();
    let got: Vec<_> = (0..5).flat_map(|_| chunks(&step(&mut s, 100))).collect();
    assert_eq!(got, vec![(7, 0, 5, false), (7, 5, 5, false), (7, 10, 2, true), (7, 12, 1, true), (7, 13, 1, true)]);
    // With room for more, a step takes the following whole chunks, at the same boundaries.
    let mut s = scheduler_at(8, 16);
    s.add(7, (0..12).collect(), 3).unwrap();
    let got: Vec<_> = (0..3).flat_map(|_| chunks(&step(&mut s, 100))).collect();
    assert_eq!(got, vec![(7, 0, 5, false), (7, 5, 7, true), (7, 12, 1, true)]);
}

#[test]
fn a_prefilling_sequence_leaves_a_row_for_each_running_sequence_behind_it() {
    let mut s = scheduler_at(13, 16);
    s.add(1, (0..23).collect(), 2).unwrap();
    s.add(2, vec![7, 7, 7], 3).unwrap();
    // Two chunks of the first fit 13 tokens, three do not; the second's prompt takes the rest.
    assert_eq!(chunks(&step(&mut s, 100)), vec![(1, 0, 10, false), (2, 0, 3, true)]);
    // 13 would hold the first's whole rest (10..23), but request 2 decodes behind it.
    assert_eq!(chunks(&step(&mut s, 100)), vec![(1, 10, 10, false), (2, 3, 1, true)]);
    assert_eq!(chunks(&step(&mut s, 100)), vec![(1, 20, 3, true), (2, 4, 1, true)]);
}

#[test]
fn a_following_chunk_leaves_a_block_for_each_running_sequence_behind_it() {
    let mut s = scheduler_at(19, 9);
    s.add(1, (0..30).collect(), 1).unwrap();
    s.add(2, vec![7; 4], 3).unwrap();
    assert_eq!(chunks(&step(&mut s, 100)), vec![(1, 0, 15, false), (2, 0, 4, true)]);
    // Request 2's next token needs a fifth block of the nine, so request 1 stops at 25 tokens
    // (7 blocks) where 30 (8) fit the budget but would leave request 2 to preempt itself.
    assert_eq!(chunks(&step(&mut s, 100)), vec![(1, 15, 10, false), (2, 4, 1, true)]);
    assert_eq!(s.num_preemptions(), 0);
}

#[test]
fn a_following_chunk_never_preempts_and_waits_for_free_blocks() {
    // The first chunk's two blocks are free, a second chunk's third is held by request 1.
    let mut s = scheduler_at(16, 3);
    s.add(1, vec![9, 9], 2).unwrap();
    step(&mut s, 100);
    s.add(2, (0..10).collect(), 1).unwrap();
    assert_eq!(chunks(&step(&mut s, 100)), vec![(1, 2, 1, true), (2, 0, 5, false)]);
    s.finish(1).unwrap();
    assert_eq!(chunks(&step(&mut s, 100)), vec![(2, 5, 5, true)]);
    assert_eq!(s.num_preemptions(), 0);
}

#[test]
fn plan_metadata_matches_the_blocks_held() {
    let mut s = scheduler(16);
    s.add(1, vec![1, 2, 3], 2).unwrap();
    s.add(2, vec![4, 5], 9).unwrap();
    let plan = s.schedule().unwrap().unwrap();
    assert_eq!(plan.token_ids, vec![1, 2, 3, 4, 5]);
    assert_eq!(plan.meta.query_start_loc, vec![0, 3, 5]);
    assert_eq!(plan.meta.seq_lens, vec![3, 2]);
    // Each holds one block for what it computes now: request 1 block 0, request 2 block 1.
    assert_eq!(plan.slot_mapping, vec![0, 1, 2, 4, 5]);
    plan.meta.validate(16, 4, 5).unwrap();
}

#[test]
fn a_chunk_that_does_not_fit_waits_whole() {
    let mut s = scheduler(16);
    s.add(1, (0..5).collect(), 1).unwrap();
    s.add(2, (0..5).collect(), 1).unwrap();
    let plan = s.schedule().unwrap().unwrap();
    assert_eq!(plan.seqs.len(), 1, "two 5-token chunks exceed the 8-token budget");
    assert_eq!(plan.seqs[0].id, 1);
}

#[test]
fn admission_takes_the_first_chunks_blocks_and_decoding_adds_one_per_block() {
    let mut s = scheduler_at(5, 16);
    s.add(1, (0..12).collect(), 12).unwrap();
    step(&mut s, 100);
    assert_eq!(s.pool().num_used(), 2, "5 of 24 tokens computed: 2 blocks, not the 6 of its whole life");
    step(&mut s, 100);
    step(&mut s, 100);
    let mut used = vec![s.pool().num_used()];
    for _ in 0..9 {
        step(&mut s, 100);
        used.push(s.pool().num_used());
    }
    // 12 prompt tokens computed, then one more per decode step.
    assert_eq!(used, vec![3, 4, 4, 4, 4, 5, 5, 5, 5, 6]);
    s.finish(1).unwrap();
    assert_eq!(s.pool().num_used(), 0);
}

#[test]
fn admission_waits_for_blocks_and_finish_frees_them_at_once() {
    let mut s = scheduler(2);
    s.add(1, (0..5).collect(), 3).unwrap();
    s.add(2, (0..3).collect(), 1).unwrap();
    let plan = step(&mut s, 100);
    assert_eq!(chunks(&plan), vec![(1, 0, 5, true)], "request 2 fits the budget but not the free blocks");
    assert_eq!((s.num_running(), s.num_waiting()), (1, 1));
    s.finish(1).unwrap();
    assert_eq!(s.pool().num_used(), 0);
    assert_eq!(chunks(&step(&mut s, 100)), vec![(2, 0, 3, true)]);
    s.add(3, vec![1], 1).unwrap();
    s.finish(3).unwrap();
    assert_eq!(s.num_waiting(), 0);
    assert!(matches!(s.finish(3), Err(Error::UnknownRequest { id: 3 })));
}

#[test]
fn the_newest_is_preempted_and_recomputes_its_tokens_at_the_same_boundaries() {
    let mut s = scheduler(4);
    s.add(1, vec![1, 2, 3, 4], 8).unwrap();
    s.add(2, vec![5, 6, 7, 8], 8).unwrap();
    // Five steps fill both sequences' two blocks: 8 tokens each, 5 of them generated.
    for t in 0..5 {
        assert_eq!(step(&mut s, 100 + t).seqs.len(), 2);
    }
    assert_eq!(s.pool().num_free(), 0);
    let plan = step(&mut s, 105);
    assert_eq!(chunks(&plan), vec![(1, 8, 1, true)], "request 1 grows, request 2 goes back to wait");
    assert_eq!((s.num_preemptions(), s.num_running(), s.num_waiting()), (1, 1, 1));
    assert_eq!(s.pool().num_used(), 3);
    s.finish(1).unwrap();
    // The prompt as one chunk, then each generated token as a row of its own, as they were
    // first computed; only the step ending at its last token samples.
    let mut recomputed = Vec::new();
    let mut seen = Vec::new();
    for t in 0..6 {
        let plan = step(&mut s, 105 + t);
        seen.extend(chunks(&plan));
        recomputed.extend(plan.token_ids);
        if t == 5 {
            break;
        }
    }
    assert_eq!(
        seen,
        vec![(2, 0, 4, false), (2, 4, 1, false), (2, 5, 1, false), (2, 6, 1, false), (2, 7, 1, false), (2, 8, 1, true)]
    );
    assert_eq!(recomputed, vec![5, 6, 7, 8, 100, 101, 102, 103, 104]);
    assert_eq!(chunks(&step(&mut s, 106)), vec![(2, 9, 1, true)]);
}

#[test]
fn the_newest_preempts_itself_and_frees_nothing_for_newcomers_that_step() {
    let mut s = scheduler(3);
    s.add(1, vec![1, 2, 3, 4], 4).unwrap();
    s.add(2, vec![5, 6, 7], 5).unwrap();
    step(&mut s, 100);
    step(&mut s, 101);
    s.add(3, vec![9], 1).unwrap();
    // Request 2 needs its second block, and the only sequence newer than it is itself.
    let plan = step(&mut s, 102);
    assert_eq!(chunks(&plan), vec![(1, 5, 1, true)]);
    assert_eq!((s.num_preemptions(), s.num_waiting(), s.pool().num_free()), (1, 2, 1));
    // Request 3 fits the freed block, but request 2 is ahead of it: its prompt (one block)
    // is recomputed there first, without sampling.
    assert_eq!(chunks(&step(&mut s, 103)), vec![(1, 6, 1, true), (2, 0, 3, false)]);
    assert_eq!((s.num_waiting(), s.pool().num_free()), (1, 0));
}

#[test]
fn impossible_requests_are_refused_with_reasons() {
    let mut s = scheduler(16);
    assert!(s.add(1, vec![], 4).unwrap_err().to_string().contains("no tokens"));
    assert!(s.add(1, (0..40).collect(), 4).unwrap_err().to_string().contains("at most 32"));
    let mut small = scheduler(2);
    // Two blocks of 4: a 10-token prompt passes them alone, a 4-token one with 5 more to draw.
    assert!(matches!(small.add(1, (0..10).collect(), 5), Err(Error::Invalid { param: "prompt", .. })));
    assert!(matches!(small.add(1, (0..4).collect(), 5), Err(Error::Invalid { param: "max_tokens", .. })));
    small.add(2, (0..4).collect(), 4).unwrap();
    s.add(3, vec![1], 1).unwrap();
    assert!(s.add(3, vec![1], 1).is_err());
    let zero = KvCapacity { num_blocks: 4, block_size: 0 };
    assert!(Scheduler::new(cfg(), zero).unwrap_err().to_string().contains("block_size"));
}

/// The property tests' limits: a cache that fits the longest request and `spare_blocks` more, a
/// budget of a chunk and `extra_budget` tokens.
#[derive(Debug)]
struct Pressure {
    spare_blocks: usize,
    prefill_chunk: usize,
    extra_budget: usize,
    max_num_seqs: usize,
    prefix_caching: bool,
}

fn pressures() -> impl Strategy<Value = Pressure> {
    (0usize..6, 1usize..8, 0usize..6, 1usize..6, any::<bool>()).prop_map(
        |(spare_blocks, prefill_chunk, extra_budget, max_num_seqs, prefix_caching)| Pressure {
            spare_blocks,
            prefill_chunk,
            extra_budget,
            max_num_seqs,
            prefix_caching,
        },
    )
}

/// The property tests' longest sequence.
const WORKLOAD_LEN: usize = 28;

impl Pressure {
    /// A scheduler under these limits for requests of `(prompt length, max_tokens)`.
    fn scheduler(&self, reqs: impl Iterator<Item = (usize, usize)>) -> Scheduler {
        let cfg = SchedulerConfig {
            max_num_seqs: self.max_num_seqs,
            max_batched_tokens: self.prefill_chunk + self.extra_budget,
            prefill_chunk: self.prefill_chunk,
            max_model_len: WORKLOAD_LEN,
            prefix_caching: self.prefix_caching,
        };
        let longest = reqs.map(|(p, m)| blocks_for((p + m).min(WORKLOAD_LEN), 4)).max().unwrap();
        Scheduler::new(cfg, KvCapacity { num_blocks: longest + self.spare_blocks, block_size: 4 }).unwrap()
    }
}

/// Request `id`'s prompt of `len` tokens in a property test.
fn workload_prompt(id: usize, len: usize) -> Vec<u32> {
    (0..len).map(|t| (id * 100 + t) as u32).collect()
}

/// Request `id`'s `n`-th drawn token in a property test.
fn workload_draw(id: u64, n: usize) -> u32 {
    (10_000 + id * 100 + n as u64) as u32
}

proptest! {
    /// Any workload on any cache that fits its longest request runs to the end, every
    /// request drawing exactly its tokens in order whatever was preempted, each chunk
    /// embedding the request's own tokens, and each running sequence holding exactly the
    /// blocks its computed tokens need.
    #[test]
    fn every_request_finishes_with_its_own_tokens_under_any_pressure(
        reqs in prop::collection::vec((1usize..20, 1usize..12), 1..8),
        pressure in pressures(),
    ) {
        let mut s = pressure.scheduler(reqs.iter().copied());
        let (prompt, draw) = (workload_prompt, workload_draw);
        let mut generated: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for (id, &(p, m)) in reqs.iter().enumerate() {
            s.add(id as u64, prompt(id, p), m).unwrap();
            generated.insert(id as u64, Vec::new());
        }
        let mut steps = 0;
        while s.has_work() {
            steps += 1;
            prop_assert!(steps < 2000, "no progress");
            let plan = s.schedule().unwrap().expect("work left means a step");
            let mut sampled = Vec::new();
            let mut done = Vec::new();
            for (i, p) in plan.seqs.iter().enumerate() {
                let (pl, max_tokens) = reqs[p.id as usize];
                let gen = &generated[&p.id];
                let mut want = prompt(p.id as usize, pl);
                want.extend(gen);
                let q = plan.rows(i);
                prop_assert_eq!(&plan.token_ids[q], &want[p.start..p.start + p.len]);
                prop_assert_eq!(p.samples, p.start + p.len == want.len());
                sampled.push(p.samples.then(|| draw(p.id, gen.len())));
                if let Some(t) = sampled[i] {
                    let gen = generated.get_mut(&p.id).unwrap();
                    gen.push(t);
                    if gen.len() == max_tokens || pl + gen.len() == WORKLOAD_LEN {
                        done.push(p.id);
                    }
                }
            }
            s.commit(&plan, &sampled).unwrap();
            for id in done {
                s.finish(id).unwrap();
            }
            s.check_invariants();
            let held: usize = s.running.iter().map(|q| blocks_for(q.num_computed, 4)).sum();
            prop_assert_eq!(held, s.pool().num_used());
            prop_assert!(s.running.iter().all(|q| q.blocks.len() == blocks_for(q.num_computed, 4)));
        }
        for (id, &(p, m)) in reqs.iter().enumerate() {
            let want: Vec<u32> = (0..m.min(WORKLOAD_LEN - p)).map(|n| draw(id as u64, n)).collect();
            prop_assert_eq!(&generated[&(id as u64)], &want);
        }
        prop_assert_eq!(s.pool().num_used(), 0);
    }
}

#[test]
fn a_plans_sequences_are_found_in_running_in_any_order() {
    let mut s = scheduler(64);
    for id in 0..4 {
        s.add(id, vec![1, 2, 3], 4).unwrap();
    }
    let mut plan = step(&mut s, 7);
    while plan.seqs.len() < 4 {
        plan = step(&mut s, 7);
    }
    let ids = |seqs: &[ScheduledSeq]| -> Vec<u64> {
        s.running_indices(seqs).into_iter().map(|j| s.running[j.unwrap()].id).collect()
    };
    assert_eq!(ids(&plan.seqs), [0, 1, 2, 3]);
    // Out of running's order (which no plan is), each is still found by its search.
    let mut shuffled = plan.seqs.clone();
    shuffled.swap(0, 3);
    shuffled.swap(1, 2);
    assert_eq!(ids(&shuffled), [3, 2, 1, 0]);
    shuffled[1].id = 99;
    assert_eq!(s.running_indices(&shuffled)[1], None);
    // A plan naming a request that no longer runs is refused by name before any is touched.
    s.finish(2).unwrap();
    let before: Vec<(usize, usize)> = s.running.iter().map(|q| (q.num_computed, q.tokens.len())).collect();
    let err = s.commit(&plan, &[Some(1), Some(1), Some(1), Some(1)]).unwrap_err();
    assert!(err.to_string().contains("request 2 is not running"), "{err}");
    assert_eq!(s.running.iter().map(|q| (q.num_computed, q.tokens.len())).collect::<Vec<_>>(), before);
}

proptest! {
    /// Planned one step ahead of the draws, as the engine does over a device that queues steps,
    /// any workload runs to the end with each request drawing exactly its tokens: every planned
    /// row embeds the request's own token or, for the one the step in flight draws, the
    /// placeholder; a request ended by a token learnt late (`stop_at`, as a stop string ends
    /// one) leaves a planned row that is dropped, and its blocks all come back.
    #[test]
    fn planned_ahead_every_request_finishes_with_its_own_tokens(
        reqs in prop::collection::vec((1usize..20, 1usize..12, 1usize..14), 1..8),
        pressure in pressures(),
    ) {
        let mut s = pressure.scheduler(reqs.iter().map(|&(p, m, _)| (p, m)));
        let (prompt, draw) = (workload_prompt, workload_draw);
        // What the engine knows: each live request's drawn tokens; a finished one is removed.
        let mut generated: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        let mut finished: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        for (id, &(p, m, _)) in reqs.iter().enumerate() {
            s.add(id as u64, prompt(id, p), m).unwrap();
            generated.insert(id as u64, Vec::new());
        }
        let mut in_flight: Option<StepPlan> = None;
        let mut steps = 0;
        loop {
            steps += 1;
            prop_assert!(steps < 2000, "no progress");
            let ahead = match s.has_work() {
                true => s.schedule().unwrap(),
                false => None,
            };
            if let Some(plan) = &ahead {
                let drawing = |id: u64| in_flight.as_ref().is_some_and(|f| f.seqs.iter().any(|q| q.id == id && q.samples));
                for (i, p) in plan.seqs.iter().enumerate() {
                    let (pl, _, _) = reqs[p.id as usize];
                    let mut want = prompt(p.id as usize, pl);
                    want.extend(&generated[&p.id]);
                    if drawing(p.id) {
                        want.push(PENDING_TOKEN);
                    }
                    let q = plan.rows(i);
                    prop_assert_eq!(&plan.token_ids[q], &want[p.start..p.start + p.len]);
                    prop_assert_eq!(p.samples, p.start + p.len == want.len());
                }
                s.commit_ahead(plan).unwrap();
            }
            let Some(done_plan) = in_flight.take() else {
                prop_assert!(ahead.is_some() || !s.has_work(), "nothing planned with work left");
                in_flight = ahead;
                if in_flight.is_none() {
                    break;
                }
                continue;
            };
            let sampled: Vec<Option<u32>> = done_plan
                .seqs
                .iter()
                .map(|p| p.samples.then(|| generated.get(&p.id).map_or(7, |g| draw(p.id, g.len()))))
                .collect();
            s.resolve(&done_plan, &sampled).unwrap();
            for (p, t) in done_plan.seqs.iter().zip(&sampled) {
                let (Some(t), Some(gen)) = (t, generated.get_mut(&p.id)) else { continue };
                gen.push(*t);
                let (pl, max_tokens, stop_at) = reqs[p.id as usize];
                if gen.len() == max_tokens || pl + gen.len() == WORKLOAD_LEN || gen.len() == stop_at {
                    finished.insert(p.id, generated.remove(&p.id).unwrap());
                    s.finish(p.id).unwrap();
                }
            }
            s.check_invariants();
            in_flight = ahead;
        }
        for (id, &(p, m, stop_at)) in reqs.iter().enumerate() {
            let want: Vec<u32> = (0..m.min(WORKLOAD_LEN - p).min(stop_at)).map(|n| draw(id as u64, n)).collect();
            prop_assert_eq!(&finished[&(id as u64)], &want);
        }
        prop_assert_eq!(s.pool().num_used(), 0);
    }
}

#[test]
fn a_token_is_resolved_once_and_only_where_it_is_pending() {
    let mut s = scheduler(64);
    s.add(0, vec![1, 2, 3], 4).unwrap();
    let plan = s.schedule().unwrap().unwrap();
    s.commit_ahead(&plan).unwrap();
    let next = s.schedule().unwrap().unwrap();
    assert_eq!(next.token_ids, [PENDING_TOKEN]);
    s.commit_ahead(&next).unwrap();
    s.check_invariants();
    let err = s.resolve(&plan, &[Some(PENDING_TOKEN)]).unwrap_err();
    assert!(err.to_string().contains("no pending token"), "{err}");
    s.resolve(&plan, &[Some(9)]).unwrap();
    let err = s.resolve(&plan, &[Some(9)]).unwrap_err();
    assert!(err.to_string().contains("request 0: no pending token at 3"), "{err}");
    assert!(s.resolve(&plan, &[]).is_err());
    s.resolve(&next, &[Some(5)]).unwrap();
    assert_eq!(s.running[0].tokens, [1, 2, 3, 9, 5]);
    // A sequence preempted while its draw runs waits until that token is known.
    s.add(1, vec![4, 5], 4).unwrap();
    let plan = step(&mut s, 8);
    assert_eq!(chunks(&plan), [(0, 4, 1, true), (1, 0, 2, true)]);
    let mut s2 = scheduler(64);
    s2.add(0, vec![1, 2], 4).unwrap();
    let first = s2.schedule().unwrap().unwrap();
    s2.commit_ahead(&first).unwrap();
    s2.preempt(0).unwrap();
    assert!(s2.schedule().unwrap().is_none(), "readmitted with a pending token");
    s2.resolve(&first, &[Some(6)]).unwrap();
    let again = s2.schedule().unwrap().unwrap();
    assert_eq!((chunks(&again), again.token_ids.clone()), (vec![(0, 0, 2, false)], vec![1, 2]));
    s2.commit(&again, &[None]).unwrap();
    assert_eq!(s2.schedule().unwrap().unwrap().token_ids, [6]);
}
