//! One `generate` call's requests on the engine: queued together, stepped with the GIL released,
//! and stoppable from outside.
//!
//! The engine steps with the GIL released for up to [`SLICE`] at a time (one step at least);
//! then the GIL is taken back just long enough to run Python's signal handlers
//! ([`Python::check_signals`]), so Ctrl-C raises `KeyboardInterrupt` within a slice and a step.
//! `LLM.abort()` from another thread sets a flag that is read after every step. Whichever stops
//! the batch, its unfinished requests are aborted in the engine, freeing their KV blocks, so the
//! next generate starts on an idle engine.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use model::engine::{Completion, Engine, EngineEvent, GenerationRequest, StopConditions};
use oracle::decode::logprobs::TokenLogprobs;
use pyo3::prelude::*;

use crate::errors::{from_model, runtime_error, value_error};
use crate::outputs::{Choice, Done};
use crate::prompts::Prompt;
use crate::sampling::{SamplingParams, SeedSource};

/// The longest the engine steps between two looks at Python's signals.
pub const SLICE: Duration = Duration::from_millis(20);

/// A request of the batch (one of a prompt's `n` choices) and what it has produced so far.
struct Tracked {
    id: u64,
    /// Generated ids, released text and (when asked) each token's logprobs from the step events,
    /// for a request aborted before it finished (a finished one has its [`Completion`]).
    token_ids: Vec<u32>,
    text: String,
    token_logprobs: Option<Vec<TokenLogprobs>>,
    /// The prompt's logprobs, once the engine has scored every position (asked and not aborted
    /// before).
    prompt_logprobs: Option<Vec<Option<TokenLogprobs>>>,
    completion: Option<Completion>,
}

/// The requests of one generate call, in prompt order, a prompt's choices in order.
pub struct Batch {
    requests: Vec<Tracked>,
    /// Each prompt with its number of choices, whose requests follow those of the prompts before.
    prompts: Vec<(Prompt, usize)>,
    /// Engine id to index in `requests`.
    by_id: BTreeMap<u64, usize>,
}

impl Batch {
    /// Queues `n` requests per prompt, choice `j` seeded `seed + j` where a seed is given (each
    /// the next of `seeds` where not); only the first scores the prompt where `prompt_logprobs`
    /// asks. If the engine refuses one, those already queued are aborted and the error names the
    /// prompt.
    pub fn submit(
        engine: &mut Engine,
        prompts: Vec<Prompt>,
        params: &[SamplingParams],
        seeds: &mut SeedSource,
        eos_token_ids: &[u32],
        max_model_len: usize,
    ) -> PyResult<Self> {
        let requests = params.iter().map(|p| p.n).sum();
        let mut batch = Self {
            requests: Vec::with_capacity(requests),
            prompts: Vec::with_capacity(prompts.len()),
            by_id: BTreeMap::new(),
        };
        for (i, (prompt, p)) in prompts.into_iter().zip(params).enumerate() {
            let stop = p.stop_conditions(eos_token_ids, max_model_len);
            batch.add_choices(engine, i, &prompt, p, seeds, &stop)?;
            batch.prompts.push((prompt, p.n));
        }
        Ok(batch)
    }

    /// Queues prompt `i`'s `p.n` requests, each stopping by `stop`; see [`Batch::submit`].
    fn add_choices(
        &mut self,
        engine: &mut Engine,
        i: usize,
        prompt: &Prompt,
        p: &SamplingParams,
        seeds: &mut SeedSource,
        stop: &StopConditions,
    ) -> PyResult<()> {
        for choice in 0..p.n {
            let request = GenerationRequest {
                prompt: prompt.ids.clone(),
                sampling: p.engine_sampling(choice, seeds),
                processors: p.processors(),
                stop: stop.clone(),
                logprobs: p.logprobs,
                prompt_logprobs: p.prompt_logprobs.filter(|_| choice == 0),
                ..Default::default()
            };
            let id = match engine.add_request(request) {
                Ok(id) => id,
                Err(e) => {
                    self.abort_unfinished(engine);
                    // What the engine refuses at admission names the field to fix: this prompt
                    // (too long for the model or the KV cache) or a parameter (max_tokens past the
                    // KV cache, a logit_bias id).
                    return Err(match e {
                        model::Error::Invalid { param: "prompt", .. } => value_error(&format!("prompts[{i}]"), e),
                        model::Error::Invalid { param, .. } => value_error(param, e),
                        // A parameter the engine checks against the model (a logit_bias id).
                        model::Error::Oracle(oracle::Error::Invalid { name, .. }) if name != "prompt_len" => {
                            value_error(name, e)
                        }
                        model::Error::Oracle(_) => value_error(&format!("prompts[{i}]"), e),
                        other => from_model(other),
                    });
                }
            };
            self.by_id.insert(id, self.requests.len());
            let tracked = Tracked {
                id,
                token_ids: Vec::new(),
                text: String::new(),
                token_logprobs: p.logprobs.map(|_| Vec::new()),
                prompt_logprobs: None,
                completion: None,
            };
            self.requests.push(tracked);
        }
        Ok(())
    }

    /// Steps the engine until every request has finished or `cancel` is set (`LLM.abort()`; the
    /// unfinished requests are aborted), both `Ok`, or until Python has a pending signal (its
    /// exception is returned, `KeyboardInterrupt` for Ctrl-C) or the engine fails (a
    /// `RuntimeError`). Only the first way leaves no request aborted.
    pub fn run(&mut self, py: Python<'_>, engine: &mut Engine, cancel: &AtomicBool) -> PyResult<()> {
        loop {
            let more = py.detach(|| self.steps(engine, cancel));
            let more = match more {
                Ok(more) => more,
                Err(e) => {
                    self.abort_unfinished(engine);
                    return Err(runtime_error(format!("the engine failed: {e}")));
                }
            };
            if let Err(e) = py.check_signals() {
                self.abort_unfinished(engine);
                return Err(e);
            }
            if !more {
                return Ok(());
            }
            if cancel.load(Ordering::Acquire) {
                self.abort_unfinished(engine);
                return Ok(());
            }
        }
    }

    /// Steps for one [`SLICE`] at most; returns whether work is left.
    fn steps(&mut self, engine: &mut Engine, cancel: &AtomicBool) -> model::Result<bool> {
        let start = Instant::now();
        while engine.has_work() {
            for event in engine.step()? {
                match event {
                    EngineEvent::Token { request, token, text, logprobs } => {
                        let Some(&i) = self.by_id.get(&request) else { continue };
                        let r = &mut self.requests[i];
                        r.token_ids.push(token);
                        r.text.push_str(&text);
                        if let (Some(all), Some(lp)) = (&mut r.token_logprobs, logprobs) {
                            all.push(lp);
                        }
                    }
                    EngineEvent::PromptLogprobs { request, logprobs } => {
                        if let Some(&i) = self.by_id.get(&request) {
                            self.requests[i].prompt_logprobs = Some(logprobs);
                        }
                    }
                    EngineEvent::Finished { .. } => {}
                }
            }
            self.collect(engine);
            if cancel.load(Ordering::Acquire) || start.elapsed() >= SLICE {
                break;
            }
        }
        Ok(engine.has_work())
    }

    /// Takes the engine's completions of this batch's requests.
    fn collect(&mut self, engine: &mut Engine) {
        for c in engine.take_finished() {
            if let Some(&i) = self.by_id.get(&c.id) {
                self.requests[i].completion = Some(c);
            }
        }
    }

    /// Aborts every request that has not finished, freeing its blocks, and drops the engine's
    /// completions so none is left for the next batch.
    fn abort_unfinished(&mut self, engine: &mut Engine) {
        self.collect(engine);
        for r in self.requests.iter().filter(|r| r.completion.is_none()) {
            // The only refusal is an id the engine no longer holds, which is what we want.
            let _ = engine.abort(r.id);
        }
        engine.take_finished();
    }

    /// One [`Done`] per prompt, in prompt order, its choices in order.
    pub fn into_done(self) -> Vec<Done> {
        let mut requests = self.requests.into_iter();
        let mut done = Vec::with_capacity(self.prompts.len());
        for (prompt, n) in self.prompts {
            let (mut id, mut prompt_logprobs, mut choices) = (0, None, Vec::with_capacity(n));
            for (choice, r) in requests.by_ref().take(n).enumerate() {
                let (token_ids, text, finish, logprobs, scored_prompt) = match r.completion {
                    Some(c) => (c.token_ids, c.text, Some(c.finish), c.logprobs, c.prompt_logprobs),
                    None => (r.token_ids, r.text, None, r.token_logprobs, r.prompt_logprobs),
                };
                if choice == 0 {
                    (id, prompt_logprobs) = (r.id, scored_prompt);
                }
                choices.push(Choice { token_ids, text, finish, logprobs });
            }
            done.push(Done { id, prompt: prompt.text, prompt_token_ids: prompt.ids, prompt_logprobs, choices });
        }
        done
    }
}
