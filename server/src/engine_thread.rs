//! The one thread that owns the [`Engine`]: HTTP handlers reach it only through [`EngineHandle`].
//!
//! An engine is not shared between threads (its executor is `Send`, not `Sync`), and a step must
//! never wait on a client, so handlers send commands through a channel and receive each choice's
//! events through an unbounded channel: a slow reader costs memory for its own backlog, never
//! step time. A receiver that is gone (the client disconnected) aborts its request before the next
//! step, which frees its KV blocks. Admission control lives here too, because only this thread
//! knows how many requests wait: a submission that would push the waiting count past
//! `max_queue` is refused with 429 before anything is queued, and one larger than the whole queue
//! with 400 (a retry could never succeed).
//!
//! A step's sends wait on nothing, but each wakes the task that reads its channel, which from
//! outside the async runtime costs a lock of the runtime's queue and at times a syscall: over
//! hundreds of streams, a share of every step. So the engine thread only collects each step's
//! events (with a clone of their channel's sender) and hands them, one batch per step, to a
//! delivery thread that sends them, while the next step runs. One thread and one queue carry
//! every event, so each choice's events keep their order. (On a 2-core CPU with 256 streams the
//! sends cost the engine thread 0.6 to 1.2 µs per token; handing them over, 0.3 to 0.5.) The
//! thread's time in and between steps goes to `/metrics`, to tell a slower step from a busier
//! server.
//!
//! Shutdown stops new submissions, lets what runs finish for up to a grace period, then aborts the
//! rest; every stream still gets a final [`EventKind::Finished`], so no client sees a cut stream.

use std::collections::HashMap;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use model::engine::{Engine, EngineEvent, GenerationRequest, TokenLogprobs};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use crate::api::error::ApiError;
use crate::metrics::Metrics;

/// The finish reason of a request that shutdown or a disconnect cut off (vLLM's word for it).
pub const ABORTED: &str = "abort";
/// How `/metrics` counts a request the engine failed.
const FAILED: &str = "error";

/// Something that happened to one choice of a submission.
#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceEvent {
    /// The choice: its position in the submission.
    pub index: usize,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of [`ChoiceEvent`].
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    /// A generated token and the text it releases (possibly empty).
    Token {
        /// The token id.
        id: u32,
        /// Text safe to show now: never half a character, never part of a stop string.
        text: String,
        /// Its logprobs, when the request asked for them.
        logprobs: Option<TokenLogprobs>,
    },
    /// The prompt's logprobs (`None` for its first token), just before the first token, when the
    /// request asked for them.
    Prompt(Vec<Option<TokenLogprobs>>),
    /// The choice ended; the reason is OpenAI's word (`stop`, `length`) or [`ABORTED`].
    Finished(&'static str),
    /// The engine failed; the choice ends with no further events.
    Failed(String),
}

enum Command {
    Submit {
        choices: Vec<GenerationRequest>,
        events: UnboundedSender<ChoiceEvent>,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    Shutdown,
}

/// How the loop admits and drains.
#[derive(Clone, Copy, Debug)]
pub struct LoopConfig {
    /// Requests that may wait (not yet running) at once; a submission past it gets 429.
    pub max_queue: usize,
    /// How long shutdown lets running requests finish before aborting them.
    pub grace: Duration,
}

/// The handlers' side of the engine thread; cheap to clone.
#[derive(Clone)]
pub struct EngineHandle {
    commands: UnboundedSender<Command>,
}

impl EngineHandle {
    /// Queues `choices` as one engine request each (all or none); their events arrive on the
    /// returned receiver, tagged with their index. Dropping the receiver aborts every choice.
    pub async fn submit(&self, choices: Vec<GenerationRequest>) -> Result<UnboundedReceiver<ChoiceEvent>, ApiError> {
        let (events, receiver) = unbounded_channel();
        let (reply, replied) = oneshot::channel();
        let shutting = || ApiError::unavailable("the server is shutting down");
        self.commands.send(Command::Submit { choices, events, reply }).map_err(|_| shutting())?;
        replied.await.map_err(|_| shutting())??;
        Ok(receiver)
    }

    /// Stops admitting and begins the drain; the thread exits when it is done.
    pub fn shutdown(&self) {
        // A send error means the thread has already gone, which is what was asked.
        let _ = self.commands.send(Command::Shutdown);
    }
}

/// Starts the thread that owns `engine`.
pub fn spawn(engine: Engine, config: LoopConfig, metrics: Arc<Metrics>) -> (EngineHandle, JoinHandle<()>) {
    let (commands, receiver) = unbounded_channel();
    let thread = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || {
            let (post, batches) = mpsc::channel();
            let delivery = std::thread::Builder::new()
                .name("engine-delivery".into())
                .spawn(move || deliver(batches))
                .expect("the OS starts a thread");
            let state = Loop {
                engine,
                config,
                metrics,
                commands: receiver,
                tracked: HashMap::new(),
                deadline: None,
                outbox: Vec::new(),
                post,
                last_step_end: None,
            };
            state.run();
            // The loop's end dropped its sender: the delivery thread sends what is left, then ends.
            let _ = delivery.join();
        })
        .expect("the OS starts a thread");
    (EngineHandle { commands }, thread)
}

/// Events to send, each with the sender of its submission's channel.
type Batch = Vec<(UnboundedSender<ChoiceEvent>, ChoiceEvent)>;

/// Sends each batch's events in order until the engine thread is gone. A failed send is a client
/// gone, which the engine thread sees on its own (the channel is closed) and aborts.
fn deliver(batches: mpsc::Receiver<Batch>) {
    for batch in batches {
        for (events, event) in batch {
            let _ = events.send(event);
        }
    }
}

/// A request in the engine and where its events go.
struct Tracked {
    events: UnboundedSender<ChoiceEvent>,
    index: usize,
    arrived: Instant,
    last_token: Option<Instant>,
}

struct Loop {
    engine: Engine,
    config: LoopConfig,
    metrics: Arc<Metrics>,
    commands: UnboundedReceiver<Command>,
    tracked: HashMap<u64, Tracked>,
    /// Set once shutdown began: when running requests get aborted.
    deadline: Option<Instant>,
    /// Events not yet handed to the delivery thread.
    outbox: Batch,
    post: mpsc::Sender<Batch>,
    /// When the last step ended, while the engine has had work since.
    last_step_end: Option<Instant>,
}

impl Loop {
    fn run(mut self) {
        loop {
            if !self.drain_commands() {
                self.deadline.get_or_insert_with(Instant::now);
            }
            self.abort_abandoned();
            if let Some(deadline) = self.deadline {
                if !self.engine.has_work() || Instant::now() >= deadline {
                    self.abort_all(|| EventKind::Finished(ABORTED));
                    self.post();
                    self.publish_stats();
                    return;
                }
            }
            if self.engine.has_work() {
                self.step();
            } else {
                self.last_step_end = None;
            }
            self.post();
            self.publish_stats();
        }
    }

    /// Hands the events collected so far to the delivery thread.
    fn post(&mut self) {
        if self.outbox.is_empty() {
            return;
        }
        let room = self.outbox.len();
        let batch = std::mem::replace(&mut self.outbox, Vec::with_capacity(room));
        // The delivery thread ends only after this loop does, so the send cannot fail.
        let _ = self.post.send(batch);
    }

    /// Queues `kind` for request `id`'s channel, if the request is tracked.
    fn queue(&mut self, id: u64, kind: EventKind) {
        if let Some(t) = self.tracked.get(&id) {
            self.outbox.push((t.events.clone(), ChoiceEvent { index: t.index, kind }));
        }
    }

    /// Handles every queued command, blocking for the next one while the engine is idle; false
    /// once every handle is gone.
    fn drain_commands(&mut self) -> bool {
        loop {
            let idle = !self.engine.has_work() && self.deadline.is_none();
            let command = if idle {
                match self.commands.blocking_recv() {
                    Some(c) => c,
                    None => return false,
                }
            } else {
                match self.commands.try_recv() {
                    Ok(c) => c,
                    Err(TryRecvError::Empty) => return true,
                    Err(TryRecvError::Disconnected) => return false,
                }
            };
            match command {
                Command::Submit { choices, events, reply } => {
                    let outcome = self.admit(choices, events);
                    // The handler may have gone meanwhile; its requests then abort as abandoned.
                    let _ = reply.send(outcome);
                }
                Command::Shutdown => {
                    self.deadline.get_or_insert_with(|| Instant::now() + self.config.grace);
                }
            }
        }
    }

    fn admit(&mut self, choices: Vec<GenerationRequest>, events: UnboundedSender<ChoiceEvent>) -> Result<(), ApiError> {
        if self.deadline.is_some() {
            return Err(ApiError::unavailable("the server is shutting down"));
        }
        if choices.len() > self.config.max_queue {
            // Refused for good, not as an overload to retry: no empty queue would take it.
            return Err(ApiError::larger_than_queue(choices.len(), self.config.max_queue));
        }
        if self.engine.stats().num_waiting + choices.len() > self.config.max_queue {
            self.metrics.record_rejected();
            return Err(ApiError::queue_full(self.config.max_queue));
        }
        let arrived = Instant::now();
        let mut added = Vec::with_capacity(choices.len());
        for (index, request) in choices.into_iter().enumerate() {
            let prompt_tokens = request.prompt.len();
            match self.engine.add_request(request) {
                Ok(id) => {
                    added.push((id, prompt_tokens));
                    let tracked = Tracked { events: events.clone(), index, arrived, last_token: None };
                    self.tracked.insert(id, tracked);
                }
                Err(e) => {
                    for (id, _) in added {
                        self.abort(id, None);
                    }
                    return Err(ApiError::from(e));
                }
            }
        }
        for (_, prompt_tokens) in added {
            self.metrics.record_prompt(prompt_tokens);
        }
        Ok(())
    }

    /// Aborts every request whose client has gone, freeing its blocks before the next step.
    fn abort_abandoned(&mut self) {
        let gone: Vec<u64> = self.tracked.iter().filter(|(_, t)| t.events.is_closed()).map(|(&id, _)| id).collect();
        for id in gone {
            self.abort(id, Some(ABORTED));
        }
    }

    /// Drops request `id`; with a `reason`, it counts as a request that ended that way.
    fn abort(&mut self, id: u64, reason: Option<&str>) {
        if let (Some(t), Some(reason)) = (self.tracked.remove(&id), reason) {
            self.metrics.record_finished(reason, t.arrived.elapsed());
        }
        // Only a request that already finished is unknown to the engine, and that is no failure.
        let _ = self.engine.abort(id);
    }

    /// Ends every request with `last` as its final event.
    fn abort_all(&mut self, last: impl Fn() -> EventKind) {
        let ids: Vec<u64> = self.tracked.keys().copied().collect();
        for id in ids {
            let kind = last();
            let reason = match &kind {
                EventKind::Finished(reason) => *reason,
                _ => FAILED,
            };
            self.queue(id, kind);
            self.abort(id, Some(reason));
        }
    }

    fn step(&mut self) {
        let began = Instant::now();
        if let Some(end) = self.last_step_end {
            self.metrics.record_between_steps(began - end);
        }
        let stepped = self.engine.step();
        let ended = Instant::now();
        self.last_step_end = Some(ended);
        if stepped.is_ok() {
            self.metrics.record_step(self.engine.last_step().is_decode_only(), ended - began);
        }
        let events = match stepped {
            Ok(events) => events,
            Err(e) => {
                let message = format!("engine step failed: {e}");
                eprintln!("{message}");
                self.abort_all(|| EventKind::Failed(message.clone()));
                return;
            }
        };
        // The events carry everything the clients get; the engine's completions would only pile up.
        drop(self.engine.take_finished());
        for event in events {
            match event {
                EngineEvent::Token { request, token, text, logprobs } => {
                    let Some(t) = self.tracked.get_mut(&request) else { continue };
                    match t.last_token.replace(ended) {
                        None => self.metrics.record_first_token(ended - t.arrived),
                        Some(previous) => self.metrics.record_inter_token(ended - previous),
                    }
                    let kind = EventKind::Token { id: token, text, logprobs };
                    self.outbox.push((t.events.clone(), ChoiceEvent { index: t.index, kind }));
                }
                EngineEvent::PromptLogprobs { request, logprobs } => self.queue(request, EventKind::Prompt(logprobs)),
                EngineEvent::Finished { request, reason } => {
                    let Some(t) = self.tracked.remove(&request) else { continue };
                    self.metrics.record_finished(reason.as_openai(), ended - t.arrived);
                    let kind = EventKind::Finished(reason.as_openai());
                    self.outbox.push((t.events, ChoiceEvent { index: t.index, kind }));
                }
            }
        }
    }

    fn publish_stats(&self) {
        self.metrics.set_engine_stats(&self.engine.stats());
    }
}

#[cfg(test)]
mod tests {
    use model::config::ModelConfig;
    use model::cpu_backend::{load_cpu_executor, Precision};
    use model::engine::{SamplingParams, StopConditions};
    use model::presets::{generate, Preset};
    use model::scheduler::SchedulerConfig;
    use tokenizers::Tokenizer;

    use super::*;

    /// The engine thread over asynct-tiny on the CPU, one sequence per step.
    fn start(label: &str, max_queue: usize) -> (EngineHandle, JoinHandle<()>, Arc<Metrics>) {
        let dir = std::env::temp_dir().join(format!("asynct-engine-thread-{}-{label}", std::process::id()));
        generate(Preset::Tiny, &dir, 1).unwrap();
        let cfg = ModelConfig::load(&dir).unwrap();
        let executor = load_cpu_executor(&dir, &cfg, Precision::F32, 256, 16, &mut |_, _| {}).unwrap();
        let tokenizer = Arc::new(Tokenizer::from_file(dir.join("tokenizer.json")).unwrap());
        let sched = SchedulerConfig {
            max_num_seqs: 1,
            max_batched_tokens: 64,
            prefill_chunk: 64,
            max_model_len: 2048,
            prefix_caching: true,
        };
        let engine = Engine::new(executor, tokenizer, sched, false).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let metrics = Arc::new(Metrics::new());
        let config = LoopConfig { max_queue, grace: Duration::from_secs(30) };
        let (handle, thread) = spawn(engine, config, metrics.clone());
        (handle, thread, metrics)
    }

    fn request(max_tokens: usize) -> GenerationRequest {
        GenerationRequest {
            prompt: vec![1, 2, 3],
            sampling: SamplingParams::greedy(),
            stop: StopConditions {
                eos_token_ids: vec![],
                stop: vec![],
                max_tokens,
                max_model_len: 2048,
                ignore_eos: true,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Every event until the channel closes: the tokens counted, the other kinds in order; each
    /// choice's events must end with its one end.
    async fn drain(events: &mut UnboundedReceiver<ChoiceEvent>) -> (usize, Vec<EventKind>) {
        let (mut tokens, mut ends) = (0, Vec::new());
        let mut ended = std::collections::HashSet::new();
        while let Some(e) = events.recv().await {
            assert!(!ended.contains(&e.index), "choice {} had an event after its end: {:?}", e.index, e.kind);
            match e.kind {
                EventKind::Token { .. } => tokens += 1,
                other => {
                    ended.insert(e.index);
                    ends.push(other);
                }
            }
        }
        (tokens, ends)
    }

    #[tokio::test]
    async fn admission_abandonment_and_shutdown() {
        let (handle, thread, metrics) = start("all", 2);
        // One runs, two wait, and the queue of two is then full until a waiting one starts.
        let mut running = handle.submit(vec![request(400)]).await.unwrap();
        assert!(matches!(running.recv().await.map(|e| e.kind), Some(EventKind::Token { .. })));
        let waiting = handle.submit(vec![request(400), request(400)]).await.unwrap();
        let refused = handle.submit(vec![request(4)]).await.expect_err("the queue is full");
        assert_eq!(refused.status, 429);
        // More generations than the whole queue holds can never be admitted: 400, not 429.
        let never = handle.submit(vec![request(4); 3]).await.expect_err("larger than the queue");
        assert_eq!((never.status, never.param.as_deref()), (400, Some("prompt")), "{}", never.message);
        assert!(never.message.contains("3 generations") && never.message.contains("queue of 2"), "{}", never.message);
        // A dropped receiver is a client gone: the request leaves the engine, its blocks with it.
        drop(waiting);
        drop(running);
        let mut tries = 0;
        while !metrics.render().contains("asynct_requests_waiting 0\n")
            || !metrics.render().contains("asynct_kv_blocks_used 0\n")
        {
            tries += 1;
            assert!(tries < 500, "{}", metrics.render());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Shutdown lets a running request finish and refuses new ones.
        let mut last = handle.submit(vec![request(8), request(8)]).await.unwrap();
        handle.shutdown();
        let (tokens, ends) = drain(&mut last).await;
        assert_eq!((tokens, ends), (16, vec![EventKind::Finished("length"); 2]));
        let text = metrics.render();
        assert!(!text.contains("asynct_engine_steps_total{kind=\"decode\"} 0\n"), "{text}");
        assert_eq!(handle.submit(vec![request(1)]).await.err().map(|e| e.status), Some(503));
        thread.join().unwrap();
    }
}
