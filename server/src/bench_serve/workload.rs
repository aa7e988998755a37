//! What `asynct bench-serve` sends: each request's prompt, lengths and arrival time, all drawn
//! from the seed, so a run can be repeated exactly and compared with `asynct bench`.
//!
//! Token-id prompts are [`crate::bench::random_prompt`]'s, the ids `asynct bench` runs for the
//! same seed and vocabulary; with fixed lengths the two time the same work. Lengths with
//! `--range-ratio r` are uniform over `[len (1 - r), len (1 + r)]`; arrivals at `--request-rate`
//! are a Poisson process (exponential gaps), and all at once without it.

use std::time::Duration;

use serde_json::{json, Value};

use crate::bench::{random_prompt, splitmix64};

/// How prompts are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptKind {
    /// Seeded random token ids below the vocabulary size, sent as a token-id prompt.
    Ids { vocab: usize },
    /// Seeded random lowercase words, one per requested token, tokenised by the server.
    Text,
}

/// The shape of a run, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Shape {
    pub num_prompts: usize,
    pub input_len: usize,
    pub output_len: usize,
    pub range_ratio: f64,
    pub prompt_kind: PromptKind,
    pub request_rate: Option<f64>,
    pub seed: u64,
}

/// One request of the run; its prompt is made only when it is sent ([`Shape::prompt`]), so a
/// long run holds the prompts of the requests in flight, not all of them.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    /// Its place in the run (and its prompt's index).
    pub index: usize,
    /// Prompt tokens asked for: exact for token ids, the word count for text.
    pub input_len: usize,
    /// `max_tokens`.
    pub output_len: usize,
    /// When it is due, from the start of the timed run.
    pub arrival: Duration,
}

/// Stream tags, so the lengths, the gaps and the words never reuse the prompts' numbers.
const LENGTHS: u64 = 0x6c65_6e67_7468_7321;
const ARRIVALS: u64 = 0x6172_7269_7661_6c73;
const WORDS: u64 = 0x776f_7264_7321_2121;

impl Shape {
    /// Request `index` (warm-ups use the first indices too, as `asynct bench`'s warm-up does).
    pub fn request(&self, index: usize, arrival: Duration) -> Planned {
        let mut lengths = self.seed ^ LENGTHS ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let input_len = draw_len(self.input_len, self.range_ratio, &mut lengths);
        let output_len = draw_len(self.output_len, self.range_ratio, &mut lengths);
        Planned { index, input_len, output_len, arrival }
    }

    /// The `prompt` field of `planned`: token ids or text.
    pub fn prompt(&self, planned: &Planned) -> Value {
        match self.prompt_kind {
            PromptKind::Ids { vocab } => json!(random_prompt(self.seed, planned.index, planned.input_len, vocab)),
            PromptKind::Text => Value::String(words(self.seed, planned.index, planned.input_len)),
        }
    }

    /// Every timed request, in arrival order.
    pub fn plan(&self) -> Vec<Planned> {
        let mut gaps = self.seed ^ ARRIVALS;
        let mut at = 0.0f64;
        (0..self.num_prompts)
            .map(|i| {
                if let Some(rate) = self.request_rate {
                    // The first request is due at once; each later one an exponential gap after.
                    if i > 0 {
                        at += -unit_open(&mut gaps).ln() / rate;
                    }
                }
                self.request(i, Duration::from_secs_f64(at))
            })
            .collect()
    }
}

/// A length around `len`: uniform over the integers in `[len (1 - r), len (1 + r)]`, at least 1.
fn draw_len(len: usize, ratio: f64, state: &mut u64) -> usize {
    let lo = ((len as f64 * (1.0 - ratio)).ceil() as usize).max(1);
    let hi = longest(len, ratio).max(lo);
    lo + (splitmix64(state) % (hi - lo + 1) as u64) as usize
}

/// The longest length drawn around `len` with `ratio`.
pub fn longest(len: usize, ratio: f64) -> usize {
    ((len as f64 * (1.0 + ratio)).floor() as usize).max(1)
}

/// A uniform number in (0, 1].
fn unit_open(state: &mut u64) -> f64 {
    ((splitmix64(state) >> 11) + 1) as f64 / (1u64 << 53) as f64
}

/// `count` words of two to six lowercase letters.
fn words(seed: u64, index: usize, count: usize) -> String {
    let mut state = seed ^ WORDS ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut out = String::with_capacity(count * 5);
    for i in 0..count {
        if i > 0 {
            out.push(' ');
        }
        let r = splitmix64(&mut state);
        for k in 0..2 + (r % 5) as usize {
            out.push((b'a' + ((r >> (8 + 5 * k)) % 26) as u8) as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            num_prompts: 2000,
            input_len: 100,
            output_len: 10,
            range_ratio: 0.0,
            prompt_kind: PromptKind::Ids { vocab: 1000 },
            request_rate: None,
            seed: 5,
        }
    }

    #[test]
    fn token_id_prompts_are_asynct_benchs_and_fixed_lengths_are_exact() {
        let plan = shape().plan();
        for p in &plan[..3] {
            assert_eq!(shape().prompt(p), json!(random_prompt(5, p.index, 100, 1000)));
            assert_eq!((p.input_len, p.output_len, p.arrival), (100, 10, Duration::ZERO));
        }
        assert_eq!(plan, shape().plan(), "the same seed, the same run");
        let other = Shape { seed: 6, ..shape() };
        assert_ne!(shape().prompt(&plan[0]), other.prompt(&other.plan()[0]));
    }

    #[test]
    fn random_lengths_stay_in_range_and_cover_it() {
        let random = Shape { range_ratio: 0.5, ..shape() };
        let plan = random.plan();
        let inputs: Vec<_> = plan.iter().map(|p| p.input_len).collect();
        assert_eq!((*inputs.iter().min().unwrap(), *inputs.iter().max().unwrap()), (50, 150));
        assert!(plan.iter().all(|p| (5..=15).contains(&p.output_len)));
        let mean = inputs.iter().sum::<usize>() as f64 / inputs.len() as f64;
        assert!((mean - 100.0).abs() < 3.0, "{mean}");
        assert!(plan.iter().all(|p| random.prompt(p).as_array().unwrap().len() == p.input_len));
        assert_eq!(draw_len(1, 0.99, &mut 0), 1, "never below one token");
        assert_eq!((longest(100, 0.5), longest(1, 0.0)), (150, 1));
    }

    #[test]
    fn arrivals_at_a_rate_are_a_poisson_process() {
        let plan = Shape { request_rate: Some(50.0), ..shape() }.plan();
        assert_eq!(plan[0].arrival, Duration::ZERO);
        let gaps: Vec<f64> = plan.windows(2).map(|w| (w[1].arrival - w[0].arrival).as_secs_f64()).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        assert!((mean - 0.02).abs() < 0.002, "mean gap {mean}, 1/50 expected");
        // An exponential's standard deviation equals its mean.
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        assert!((var.sqrt() / mean - 1.0).abs() < 0.1, "{}", var.sqrt() / mean);
    }

    #[test]
    fn text_prompts_are_the_asked_number_of_words() {
        let text_shape = Shape { prompt_kind: PromptKind::Text, ..shape() };
        let prompt = text_shape.prompt(&text_shape.request(3, Duration::ZERO));
        let text = prompt.as_str().unwrap();
        assert_eq!(text.split(' ').count(), 100);
        assert!(text.split(' ').all(|w| (2..=6).contains(&w.len()) && w.bytes().all(|b| b.is_ascii_lowercase())));
    }
}
