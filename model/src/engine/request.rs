//! What a caller gives the engine and gets back: a request, the events of its steps, and its
//! completion.

use ndarray::Array2;
use oracle::decode::logprobs::TokenLogprobs;
use oracle::decode::processors::LogitsProcessors;
use oracle::decode::sampler::SamplingParams;
use oracle::decode::stop::{FinishReason, StopConditions};

/// What a caller asks of the engine.
#[derive(Clone, Debug, Default)]
pub struct GenerationRequest {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Sampling parameters.
    pub sampling: SamplingParams,
    /// Logit bias, min tokens and the penalties (SPEC 5 steps 1 to 3).
    pub processors: LogitsProcessors,
    /// Stop rules; `max_model_len` is the model's.
    pub stop: StopConditions,
    /// With `Some(n)`, each generated token's logprob and the `n` likeliest alternatives.
    pub logprobs: Option<usize>,
    /// With `Some(n)`, each prompt token's logprob (none for the first) and `n` alternatives.
    pub prompt_logprobs: Option<usize>,
    /// Compute every prompt position: no prefix-cache lookup for this request (its full chunks
    /// are still cached for later ones), as for a caller that scores every prompt position.
    /// Implied by `prompt_logprobs` ([`GenerationRequest::needs_prompt_logits`]).
    pub skip_prefix_cache: bool,
}

impl GenerationRequest {
    /// Whether the request needs the logits of every prompt position, so that none may be
    /// skipped (as a prefix-cache hit would).
    pub fn needs_prompt_logits(&self) -> bool {
        self.prompt_logprobs.is_some()
    }
}

/// Cuts `ids` to its last `keep` tokens (vLLM's `truncate_prompt_tokens`, which the server and
/// the Python bindings both take); returns whether any were cut.
pub fn keep_last_tokens(ids: &mut Vec<u32>, keep: usize) -> bool {
    let cut = ids.len().saturating_sub(keep);
    ids.drain(..cut);
    cut > 0
}

/// Something that happened to a request during a step.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineEvent {
    /// A token was generated; `text` is what may be shown now (possibly empty).
    Token {
        /// The request.
        request: u64,
        /// The generated id.
        token: u32,
        /// Newly releasable text.
        text: String,
        /// Its logprobs, when the request asked for them.
        logprobs: Option<TokenLogprobs>,
    },
    /// The prompt's logprobs (one per prompt token, `None` for the first), when the request
    /// asked for them; just before its first [`EngineEvent::Token`].
    PromptLogprobs {
        /// The request.
        request: u64,
        /// One per prompt token.
        logprobs: Vec<Option<TokenLogprobs>>,
    },
    /// The request ended (its last [`EngineEvent::Token`] came just before).
    Finished {
        /// The request.
        request: u64,
        /// Why.
        reason: FinishReason,
    },
}

/// A finished request, as [`Engine::run_to_completion`] returns it.
///
/// [`Engine::run_to_completion`]: super::Engine::run_to_completion
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The request.
    pub id: u64,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Generated ids, eos included.
    pub token_ids: Vec<u32>,
    /// Generated text, stop string excluded.
    pub text: String,
    /// Why it ended.
    pub finish: FinishReason,
    /// Each generated token's logprobs, when asked.
    pub logprobs: Option<Vec<TokenLogprobs>>,
    /// Each prompt token's logprobs (`None` for the first), when asked.
    pub prompt_logprobs: Option<Vec<Option<TokenLogprobs>>>,
    /// `[prompt + generated - 1, vocab]` logits when recording was on: one row per prompt
    /// position, then one per generated token but the last. A row is kept as first computed: a
    /// preempted request's recomputation does not record its rows again.
    pub logits: Option<Array2<f32>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_last_tokens_cuts_from_the_front_only_when_longer() {
        let mut ids = vec![1, 2, 3, 4, 5];
        assert!(keep_last_tokens(&mut ids, 2));
        assert_eq!(ids, [4, 5]);
        assert!(!keep_last_tokens(&mut ids, 2) && !keep_last_tokens(&mut ids, 9));
        assert_eq!(ids, [4, 5]);
    }
}
