//! The page-locked staging of host-to-device copies (`gpu::runtime::Staging`): batch after batch
//! queued without waiting, each copy lands whole, and a batch that would overrun its area is
//! refused.

use std::sync::Arc;

use gpu::runtime::Staging;
use gpu::Gpu;

use super::compare::{g, Check};

pub fn staged_copies_land_whole_batch_after_batch(gpu: &Arc<Gpu>) -> Check {
    let mut staging = g(Staging::<u32>::new(gpu, 1_000))?;
    // Eight batches queued behind each other before any is waited for: each batch writes two
    // copies into device buffers of its own, so every landed value can be checked at the end.
    let mut outs = Vec::new();
    for batch in 0..8u32 {
        let a: Vec<u32> = (0..600).map(|i| batch * 10_000 + i).collect();
        let b: Vec<u32> = (0..400).map(|i| batch * 10_000 + 5_000 + i).collect();
        let (mut da, mut db) = (g(gpu.zeros::<u32>(600))?, g(gpu.zeros::<u32>(400))?);
        g(staging.begin())?;
        g(staging.copy(&a, &mut da))?;
        g(staging.copy(&b, &mut db))?;
        g(staging.end())?;
        outs.push((a, da, b, db));
    }
    for (batch, (a, da, b, db)) in outs.iter().enumerate() {
        if g(gpu.download(da))? != *a || g(gpu.download(db))? != *b {
            return Err(format!("batch {batch}: a staged copy landed other values"));
        }
    }
    g(staging.begin())?;
    let mut small = g(gpu.zeros::<u32>(1_001))?;
    if staging.copy(&vec![1; 1_001], &mut small).is_ok() {
        return Err("a copy past the area's 1,000 values was queued".into());
    }
    let mut short = g(gpu.zeros::<u32>(10))?;
    if staging.copy(&[1; 11], &mut short).is_ok() {
        return Err("a copy of 11 values into a buffer of 10 was queued".into());
    }
    println!("  8 batches of two staged copies landed whole; overruns refused");
    Ok(())
}
