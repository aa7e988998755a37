//! A step's inputs and results on their way: a batch of copies as one upload and one launch
//! (`gpu::runtime::CopyList`): batch after batch queued without waiting, each copy lands whole, a
//! device-to-device copy lands over what a staged copy wrote, and a batch past the block or the
//! entry limit is refused; and a step's tokens and fault word written into mapped host memory
//! (`gpu::ops::StepResults`), the word cleared on the device behind its read.

use std::sync::Arc;

use gpu::ops::{Embedding, FaultKind, Faults, StepResults};
use gpu::runtime::copy_list::MAX_ENTRIES;
use gpu::runtime::{CopyList, MappedHost};
use gpu::Gpu;
use half::bf16;

use super::compare::{g, Check};

const POISON: u32 = 0xDEAD_BEEF;

pub fn copy_lists_land_whole_batch_after_batch(gpu: &Arc<Gpu>) -> Check {
    let mut list = g(CopyList::new(gpu, 8_000))?;
    // More batches than the list has areas, queued behind each other before any is waited for:
    // each writes its own buffers (u32, i64 and a gathered run over part of the first), so every
    // landed value can be checked at the end.
    let mut outs = Vec::new();
    for batch in 0..10u32 {
        let a: Vec<u32> = (0..600).map(|i| batch * 10_000 + i).collect();
        let b: Vec<i64> = (0..301).map(|i| -i64::from(batch) * 1_000_000 - i).collect();
        let drawn: Vec<u32> = (0..5).map(|i| batch * 100 + i + 7).collect();
        let drawn_dev = g(gpu.upload(&drawn))?;
        let (mut da, mut db) = (g(gpu.upload(&vec![POISON; 700]))?, g(gpu.upload(&vec![0i64; 301]))?);
        list.begin();
        g(list.stage(&a, &mut da.slice_mut(..600)))?;
        // Rows 10..13 of `a` get draws 1..4 of the device buffer, after the staged copy.
        g(list.gather(&drawn_dev.slice(1..4), &mut da.slice_mut(10..13)))?;
        g(list.stage(&b, &mut db))?;
        g(list.end())?;
        let mut want = a.clone();
        want[10..13].copy_from_slice(&drawn[1..4]);
        want.extend(std::iter::repeat_n(POISON, 100));
        outs.push((want, da, b, db, drawn_dev));
    }
    for (batch, (want, da, b, db, _)) in outs.iter().enumerate() {
        if g(gpu.download(da))? != *want {
            return Err(format!("batch {batch}: the u32 buffer holds other values (or was written past the copy)"));
        }
        if g(gpu.download(db))? != *b {
            return Err(format!("batch {batch}: a staged i64 copy landed other values"));
        }
    }
    list.begin();
    let mut big = g(gpu.zeros::<u32>(2_001))?;
    g(list.stage(&vec![1u32; 2_001], &mut big))?;
    if list.end().is_ok() {
        return Err("a batch of 8,004 payload bytes was queued into a block of 8,000".into());
    }
    list.begin();
    let mut one = g(gpu.zeros::<u32>(1))?;
    for _ in 0..MAX_ENTRIES {
        g(list.stage(&[1u32], &mut one))?;
    }
    if list.stage(&[1u32], &mut one).is_ok() {
        return Err(format!("a copy past the {MAX_ENTRIES} a batch holds was taken"));
    }
    let mut short = g(gpu.zeros::<u32>(10))?;
    if list.stage(&[1u32; 11], &mut short).is_ok() {
        return Err("a copy of 11 values into a buffer of 10 was taken".into());
    }
    println!("  10 batches of two staged copies and a gathered run landed whole; overruns refused");
    Ok(())
}

pub fn step_results_land_in_mapped_memory_and_clear_the_fault_word(gpu: &Arc<Gpu>) -> Check {
    let results = g(StepResults::new(gpu))?;
    let mut faults = g(Faults::new(gpu))?;
    let embedding = g(Embedding::new(gpu))?;
    let (vocab, hidden) = (64usize, 8usize);
    let table = g(gpu.upload(&vec![bf16::ONE; vocab * hidden]))?;
    let mut out = g(gpu.zeros::<bf16>(2 * hidden))?;
    let mut tokens_host = g(MappedHost::<u32>::new(gpu, 300))?;
    let mut fault_host = g(MappedHost::<u32>::new(gpu, FaultKind::WORDS))?;
    for (round, bad) in [(0u32, true), (1, false), (2, true)] {
        // The fault word records a token id past the vocabulary in the rounds that launch one.
        let ids = g(gpu.upload(&[1u32, if bad { vocab as u32 + round } else { 2 }]))?;
        g(embedding.run(&table.as_view(), vocab, &ids.as_view(), &mut out.as_view_mut(), &mut faults))?;
        let rows = 257 + round as usize;
        let drawn: Vec<u32> = (0..rows as u32).map(|i| i * 3 + round).collect();
        let drawn_d = g(gpu.upload(&drawn))?;
        g(results.enqueue(&drawn_d.as_view(), &mut tokens_host, &mut faults, &mut fault_host))?;
        g(gpu.synchronize())?;
        if g(tokens_host.as_slice())?[..rows] != drawn[..] {
            return Err(format!("round {round}: the mapped tokens are not the {rows} drawn"));
        }
        let word = g(fault_host.as_slice())?.to_vec();
        let at = 2 * FaultKind::TokenId as usize;
        let want = if bad { (1, vocab as u32 + round) } else { (0, 0) };
        if (word[at], word[at + 1]) != want {
            return Err(format!(
                "round {round}: the mapped fault word records {:?}, expected {want:?}",
                &word[at..at + 2]
            ));
        }
        // The device word was cleared behind its read: a check now finds nothing.
        g(faults.check())?;
    }
    let mut short = g(MappedHost::<u32>::new(gpu, 4))?;
    let five = g(gpu.upload(&[0u32; 5]))?;
    if results.enqueue(&five.as_view(), &mut short, &mut faults, &mut fault_host).is_ok() {
        return Err("5 tokens were queued into a mapped area of 4".into());
    }
    println!("  tokens and fault word landed in mapped memory three rounds running; the word cleared");
    Ok(())
}
