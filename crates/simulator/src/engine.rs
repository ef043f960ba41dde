//! The dynamics: a discrete-time model of vLLM's V1 engine serving a closed
//! loop of clients, plus the GPU it runs on.
//!
//! Time only moves when [`Simulator::advance_to`] is called; nothing in here
//! reads a clock, so a seed and a sequence of times always give the same
//! state. The engine runs *steps* back to back while it has work, like
//! vLLM's busy loop: at each step boundary it preempts if the KV cache would
//! overflow, admits waiting requests up to `capacity` (`--max-num-seqs`),
//! then runs one forward pass in which every running sequence yields one
//! token and newly admitted ones do their (prefix-cache-shortened) prefill.
//!
//! Step duration is calibrated on the article's A10G measurements: ~16 ms at
//! 8 sequences (ITL 16 ms, ≈480 generated tokens/s) and ~19.6 ms at 32
//! (≈1,630 tokens/s). Decode is memory bound, so a bigger batch barely slows
//! a step; that is why decode dominates end-to-end latency and why the GPU
//! shows 100 % utilisation while the tensor pipe stays mostly idle.

use std::collections::VecDeque;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::SimConfig;
use crate::hist::{self, Histogram};

/// Fixed cost of one forward pass (weights streamed from HBM once per step).
const STEP_BASE: f64 = 0.0150;
/// Extra cost per sequence in the batch (its KV reads).
const STEP_PER_SEQ: f64 = 0.000145;
/// Extra cost per prompt token computed in the step (prefill is compute bound
/// but prompts are short here).
const STEP_PER_PREFILL_TOKEN: f64 = 0.00005;
/// ± relative jitter of a step's duration, so latency histograms have spread.
const STEP_JITTER: f64 = 0.03;
/// Frontend work before the engine sees a request (HTTP parsing, chat
/// template, tokenisation). Counted in e2e and TTFT, not in queue time.
const TOKENIZE: f64 = 0.003;
/// Scheduler overhead between `queued` and `scheduled` when a slot is free
/// (the article measured 0.01 ms of queue time).
const SCHEDULE_OVERHEAD: f64 = 0.000_01;
/// Engine output → frontend (detokenise, stream the chunk).
const DETOKENIZE: f64 = 0.002;
/// Client turnaround before it sends its next request.
const CLIENT_GAP: f64 = 0.001;
/// Share of requests the API server rejects before the engine (HTTP 4xx:
/// validation errors, unknown model) and how long that takes.
pub(crate) const REJECT_SHARE: f64 = 0.01;
const REJECT_LATENCY: f64 = 0.002;
/// vLLM's default KV block size in tokens.
pub(crate) const BLOCK_SIZE: u32 = 16;
/// Chunked-prefill token budget per step (`--max-num-batched-tokens`).
const MAX_BATCHED_TOKENS: u32 = 8192;
/// KV-cache usage the pool is sized for when the engine is at capacity with
/// average-length sequences.
const KV_USAGE_AT_CAPACITY: f64 = 0.6;
/// Board power when the engine is idle, as a share of `power_watts`.
const IDLE_POWER_SHARE: f64 = 0.25;
/// Time constant of the GPU gauges (power, utilisation, PROF ratios): DCGM
/// reports averages over a sampling window, not instantaneous values.
const GAUGE_TAU: f64 = 1.0;
/// Thermal time constant of the board.
const THERMAL_TAU: f64 = 60.0;

/// `finished_reason` values vLLM ≥ 0.17 pre-registers, in its order.
pub const FINISHED_REASONS: [&str; 5] = ["stop", "length", "abort", "error", "repetition"];
const STOP: usize = 0;
const LENGTH: usize = 1;
const ABORT: usize = 2;
const ERROR: usize = 3;

#[derive(Debug, Clone)]
struct Request {
    arrival: f64,
    queued: f64,
    scheduled: Option<f64>,
    first_token: Option<f64>,
    last_token: f64,
    prompt: u32,
    cached: u32,
    max_tokens: u32,
    target: u32,
    reason: usize,
    generated: u32,
    /// Tokens to compute in the next step before this sequence decodes again
    /// (its prefill, or its recompute after a preemption).
    pending_prefill: u32,
}

impl Request {
    fn blocks(&self) -> u32 {
        (self.prompt + self.generated + 1).div_ceil(BLOCK_SIZE)
    }
}

#[derive(Debug, Clone, Copy)]
struct Step {
    start: f64,
    end: f64,
    batch: usize,
    prefill_tokens: u32,
}

/// vLLM engine-side metrics (all cumulative except the gauges).
#[derive(Debug, Clone)]
pub(crate) struct EngineStats {
    pub prefix_queries: f64,
    pub prefix_hits: f64,
    pub preemptions: f64,
    pub prompt_tokens: f64,
    pub prompt_local_compute: f64,
    pub prompt_local_cache_hit: f64,
    pub generation_tokens: f64,
    pub success: [f64; 5],
    pub request_prompt_tokens: Histogram,
    pub request_generation_tokens: Histogram,
    pub iteration_tokens: Histogram,
    pub request_max_num_generation_tokens: Histogram,
    pub request_params_n: Histogram,
    pub request_params_max_tokens: Histogram,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub tpot: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
    pub inference: Histogram,
    pub prefill: Histogram,
    pub decode: Histogram,
    pub prefill_kv_computed: Histogram,
}

impl EngineStats {
    fn new(max_model_len: f64) -> Self {
        let tok = hist::one_two_five(max_model_len);
        let lat = hist::REQUEST_LATENCY;
        EngineStats {
            prefix_queries: 0.0,
            prefix_hits: 0.0,
            preemptions: 0.0,
            prompt_tokens: 0.0,
            prompt_local_compute: 0.0,
            prompt_local_cache_hit: 0.0,
            generation_tokens: 0.0,
            success: [0.0; 5],
            request_prompt_tokens: Histogram::new(&tok),
            request_generation_tokens: Histogram::new(&tok),
            iteration_tokens: Histogram::new(hist::ITERATION_TOKENS),
            request_max_num_generation_tokens: Histogram::new(&tok),
            request_params_n: Histogram::new(hist::PARAMS_N),
            request_params_max_tokens: Histogram::new(&tok),
            ttft: Histogram::new(hist::TTFT),
            itl: Histogram::new(hist::ITL),
            tpot: Histogram::new(hist::ITL),
            e2e: Histogram::new(lat),
            queue: Histogram::new(lat),
            inference: Histogram::new(lat),
            prefill: Histogram::new(lat),
            decode: Histogram::new(lat),
            prefill_kv_computed: Histogram::new(&tok),
        }
    }
}

/// One `http_requests_total` child (handler and method are fixed).
#[derive(Debug, Clone)]
pub(crate) struct HttpChild {
    pub status: &'static str,
    pub value: f64,
    pub created: f64,
}

/// prometheus-fastapi-instrumentator state for `POST /v1/chat/completions`.
/// Children appear on first use, as in the real library.
#[derive(Debug, Clone)]
pub(crate) struct HttpStats {
    pub requests: Vec<HttpChild>,
    /// `(count, sum, created)` of the request/response size summaries.
    pub request_size: Option<(f64, f64, f64)>,
    pub response_size: Option<(f64, f64, f64)>,
    pub highr: Histogram,
    pub lowr: Option<(Histogram, f64)>,
}

impl HttpStats {
    fn record(&mut self, at: f64, status: &'static str, duration: f64, req_bytes: f64, resp_bytes: f64) {
        match self.requests.iter_mut().find(|c| c.status == status) {
            Some(c) => c.value += 1.0,
            None => self.requests.push(HttpChild { status, value: 1.0, created: at }),
        }
        let rs = self.request_size.get_or_insert((0.0, 0.0, at));
        rs.0 += 1.0;
        rs.1 += req_bytes;
        let rs = self.response_size.get_or_insert((0.0, 0.0, at));
        rs.0 += 1.0;
        rs.1 += resp_bytes;
        self.highr.observe(duration);
        self.lowr.get_or_insert_with(|| (Histogram::new(hist::HTTP_LOWR), at)).0.observe(duration);
    }
}

/// Per-GPU physical state (dcgm-exporter's view).
#[derive(Debug, Clone)]
pub(crate) struct GpuState {
    /// Per-board spread of power draw (silicon lottery), ~±2 %.
    pub power_factor: f64,
    pub power_w: f64,
    pub energy_mj: f64,
    pub util: f64,
    pub gr_active: f64,
    pub dram_active: f64,
    pub tensor_active: f64,
    pub temp_c: f64,
    pub uuid: String,
}

/// The whole simulated deployment: a vLLM server and its GPUs.
#[derive(Debug, Clone)]
pub struct Simulator {
    pub(crate) cfg: SimConfig,
    rng: StdRng,
    pub(crate) start: f64,
    pub(crate) now: f64,
    /// Time up to which power, energy and the EWMA gauges are integrated.
    phys_t: f64,
    /// Engine clock: end of the last step (or the moment it went idle).
    engine_t: f64,
    target_clients: usize,
    clients: usize,
    /// Times at which a client sends its next request, ascending.
    arrivals: Vec<f64>,
    /// Requests being tokenised by the frontend, by engine-arrival time.
    inbound: VecDeque<Request>,
    waiting: VecDeque<Request>,
    running: Vec<Request>,
    step: Option<Step>,
    pub(crate) max_tokens: u32,
    pub(crate) max_model_len: u32,
    pub(crate) kv_blocks_total: u32,
    pub(crate) stats: EngineStats,
    pub(crate) http: HttpStats,
    pub(crate) gpus: Vec<GpuState>,
    pub(crate) finished_requests: u64,
    pub(crate) cpu_seconds: f64,
    /// The other server's histograms, in its buckets (`engines.rs`).
    pub(crate) alt: std::collections::BTreeMap<crate::engines::Role, Histogram>,
}

impl Simulator {
    /// A fresh server whose process started at `start_unix_secs` (the value of
    /// every `_created` series), with `cfg.concurrency` clients starting now.
    pub fn new(cfg: SimConfig, start_unix_secs: f64) -> Self {
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let cfg_server = cfg.server;
        let max_tokens = ((1.4 * cfg.output_tokens_mean).ceil().max(16.0) as u32).next_power_of_two();
        let max_model_len = ((1.5 * cfg.prompt_tokens_mean).ceil() as u32 + max_tokens).next_power_of_two().max(4096);
        let capacity = cfg.capacity.max(1.0);
        // Size the KV pool so that `capacity` sequences of average length
        // (prompt + half the answer) fill KV_USAGE_AT_CAPACITY of it.
        let per_seq_blocks = (cfg.prompt_tokens_mean + cfg.output_tokens_mean / 2.0) / f64::from(BLOCK_SIZE) + 0.5;
        let kv_blocks_total = ((capacity * per_seq_blocks / KV_USAGE_AT_CAPACITY).ceil() as u32)
            .max(max_model_len.div_ceil(BLOCK_SIZE) + 1);
        let gpus = (0..cfg.gpu_count.max(1))
            .map(|i| {
                // GPU 0 draws exactly `power_watts`; the others spread ±2 %.
                let spread = 0.98 + 0.04 * rng.random::<f64>();
                let power_factor = if i == 0 { 1.0 } else { spread };
                let idle = cfg.power_watts * IDLE_POWER_SHARE * power_factor;
                let b: [u8; 16] = rng.random();
                let uuid = format!(
                    "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
                    b[13], b[14], b[15]
                );
                GpuState {
                    power_factor,
                    power_w: idle,
                    // The counter runs since driver load; pretend the board
                    // idled for a day before the server started.
                    energy_mj: (idle * 86_400.0 * 1000.0).round(),
                    util: 0.0,
                    gr_active: 0.0,
                    dram_active: 0.0,
                    tensor_active: 0.0,
                    temp_c: idle_temp(),
                    uuid,
                }
            })
            .collect();
        let mut sim = Simulator {
            stats: EngineStats::new(f64::from(max_model_len)),
            http: HttpStats {
                requests: Vec::new(),
                request_size: None,
                response_size: None,
                highr: Histogram::new(hist::HTTP_HIGHR),
                lowr: None,
            },
            cfg,
            rng,
            start: start_unix_secs,
            now: start_unix_secs,
            phys_t: start_unix_secs,
            engine_t: start_unix_secs,
            target_clients: 0,
            clients: 0,
            arrivals: Vec::new(),
            inbound: VecDeque::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            step: None,
            max_tokens,
            max_model_len,
            kv_blocks_total,
            gpus,
            finished_requests: 0,
            cpu_seconds: 16.22,
            alt: crate::engines::histograms(cfg_server),
        };
        let c = sim.cfg.concurrency;
        sim.set_concurrency(c);
        sim
    }

    /// The configuration the simulator was built with (concurrency as last set).
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Simulated time of the last `advance_to`.
    pub fn now(&self) -> f64 {
        self.now
    }

    /// Change the number of closed-loop clients from the current simulated
    /// time on. New clients send their first request right away (staggered
    /// by 5 ms); surplus clients stop after their request in flight.
    pub fn set_concurrency(&mut self, c: f64) {
        self.cfg.concurrency = c.max(0.0);
        let target = self.cfg.concurrency.round() as usize;
        self.target_clients = target;
        let now = self.now;
        let mut i = 0.0;
        while self.clients < target {
            self.push_arrival(now + 0.005 * i);
            self.clients += 1;
            i += 1.0;
        }
        // Clients that have not sent their next request yet leave at once.
        while self.clients > target && !self.arrivals.is_empty() {
            self.arrivals.pop();
            self.clients -= 1;
        }
    }

    /// Run the model up to `unix_secs` (earlier times are ignored).
    pub fn advance_to(&mut self, unix_secs: f64) {
        let t = unix_secs;
        // Also rejects NaN.
        if t.is_nan() || t <= self.now {
            return;
        }
        loop {
            if let Some(step) = self.step {
                if step.end <= t {
                    self.integrate(step.end, Some(step.batch));
                    self.finish_step();
                    continue;
                }
                self.integrate(t, Some(step.batch));
                break;
            }
            let te = self.engine_t;
            self.process_arrivals(te);
            while self.inbound.front().is_some_and(|r| r.queued <= te) {
                let r = self.inbound.pop_front().expect("front checked");
                self.waiting.push_back(Request { queued: te, ..r });
            }
            if self.running.is_empty() && self.waiting.is_empty() {
                // Idle: the busy loop blocks until the next request reaches it.
                let wake = match (self.inbound.front(), self.arrivals.first()) {
                    (Some(r), _) => Some(r.queued),
                    (None, Some(a)) => Some(a + TOKENIZE),
                    (None, None) => None,
                };
                match wake {
                    Some(w) if w <= t => {
                        let w = w.max(te);
                        // `w > te`: everything up to `te` was processed above.
                        self.integrate(w, None);
                        self.engine_t = w;
                        continue;
                    }
                    _ => {
                        self.integrate(t, None);
                        self.engine_t = t;
                        break;
                    }
                }
            }
            self.start_step(te);
        }
        self.now = t;
    }

    fn push_arrival(&mut self, at: f64) {
        let i = self.arrivals.partition_point(|a| *a <= at);
        self.arrivals.insert(i, at);
    }

    /// Clients whose send time has come: either rejected by the API server
    /// (4xx) or tokenised and handed to the engine.
    fn process_arrivals(&mut self, upto: f64) {
        while self.arrivals.first().is_some_and(|a| *a <= upto) {
            let a = self.arrivals.remove(0);
            if self.clients > self.target_clients {
                self.clients -= 1;
                continue;
            }
            if self.rng.random::<f64>() < REJECT_SHARE {
                let req_bytes = self.request_bytes(self.cfg.prompt_tokens_mean);
                self.http.record(a + REJECT_LATENCY, "4xx", REJECT_LATENCY, req_bytes, 86.0);
                self.push_arrival(a + REJECT_LATENCY + CLIENT_GAP);
                continue;
            }
            let r = self.new_request(a);
            self.inbound.push_back(r);
        }
    }

    fn request_bytes(&self, prompt: f64) -> f64 {
        // Chat-completion JSON: envelope plus ~4 bytes per prompt token.
        (180.0 + 4.2 * prompt).round()
    }

    fn new_request(&mut self, arrival: f64) -> Request {
        let cfg = &self.cfg;
        let max_tokens = self.max_tokens;
        let prompt_cap = self.max_model_len.saturating_sub(max_tokens).max(1);
        let u_prompt: f64 = self.rng.random_range(0.5..1.5);
        let prompt = ((cfg.prompt_tokens_mean * u_prompt).round().max(1.0) as u32).min(prompt_cap);
        // Prefix-cache hits come in whole blocks and never cover the last
        // prompt token; round the expected share up or down at random so the
        // long-run hit ratio equals `prefix_reuse`.
        let want = cfg.prefix_reuse.clamp(0.0, 1.0) * f64::from(prompt) / f64::from(BLOCK_SIZE);
        let extra = u32::from(self.rng.random::<f64>() < want.fract());
        let max_cached = (prompt - 1) / BLOCK_SIZE * BLOCK_SIZE;
        let cached = ((want.floor() as u32 + extra) * BLOCK_SIZE).min(max_cached);
        let u_out: f64 = self.rng.random_range(0.6..1.4);
        let natural = (cfg.output_tokens_mean * u_out).round().max(1.0) as u32;
        let (mut target, mut reason) = if self.rng.random::<f64>() < cfg.finished_length_share {
            (max_tokens, LENGTH)
        } else {
            (natural.min(max_tokens.saturating_sub(1)).max(1), STOP)
        };
        let x: f64 = self.rng.random();
        let cut: f64 = self.rng.random_range(0.05..0.95);
        if x < cfg.abort_share + cfg.error_share {
            reason = if x < cfg.abort_share { ABORT } else { ERROR };
            target = ((f64::from(target) * cut).ceil() as u32).max(1);
        }
        Request {
            arrival,
            queued: arrival + TOKENIZE,
            scheduled: None,
            first_token: None,
            last_token: 0.0,
            prompt,
            cached,
            max_tokens,
            target,
            reason,
            generated: 0,
            pending_prefill: prompt - cached,
        }
    }

    fn start_step(&mut self, at: f64) {
        let capacity = self.cfg.capacity.max(1.0) as usize;
        // Preempt (recompute mode, newest first) if the running sequences'
        // next tokens would not fit in the KV pool.
        while self.running.len() > 1 && self.used_blocks() > self.kv_blocks_total {
            let mut r = self.running.pop().expect("len > 1");
            r.pending_prefill = r.prompt + r.generated;
            self.stats.preemptions += 1.0;
            self.waiting.push_front(r);
        }
        let mut budget = MAX_BATCHED_TOKENS;
        let mut used = self.used_blocks();
        while self.running.len() < capacity {
            let Some(front) = self.waiting.front() else {
                break;
            };
            let need = front.blocks();
            let tokens = front.pending_prefill;
            if !self.running.is_empty() && (used + need > self.kv_blocks_total || tokens > budget) {
                break;
            }
            let mut r = self.waiting.pop_front().expect("front checked");
            budget = budget.saturating_sub(tokens);
            used += need;
            if r.scheduled.is_none() {
                r.scheduled = Some(at + SCHEDULE_OVERHEAD);
                let (p, c) = (f64::from(r.prompt), f64::from(r.cached));
                self.stats.prefix_queries += p;
                self.stats.prefix_hits += c;
                self.stats.prompt_tokens += p;
                self.stats.prompt_local_compute += p - c;
                self.stats.prompt_local_cache_hit += c;
            }
            self.running.push(r);
        }
        let batch = self.running.len();
        let prefill_tokens: u32 = self.running.iter().map(|r| r.pending_prefill).sum();
        let jitter = 1.0 + STEP_JITTER * self.rng.random_range(-1.0..1.0);
        let dt =
            (STEP_BASE + STEP_PER_SEQ * batch as f64 + STEP_PER_PREFILL_TOKEN * f64::from(prefill_tokens)) * jitter;
        self.step = Some(Step { start: at, end: at + dt, batch, prefill_tokens });
    }

    fn used_blocks(&self) -> u32 {
        self.running.iter().map(Request::blocks).sum()
    }

    fn finish_step(&mut self) {
        let step = self.step.take().expect("a step in progress");
        let dt = step.end - step.start;
        // With async scheduling the engine core turns a step's sampled tokens
        // into outputs while the next step runs, so token timestamps trail
        // the step by about one step; the frontend sees them DETOKENIZE later.
        let engine_ts = step.end + dt;
        let visible = engine_ts + DETOKENIZE;
        self.engine_t = step.end;
        let batch = step.batch as f64;
        self.stats.iteration_tokens.observe(f64::from(step.prefill_tokens) + batch);
        self.stats.generation_tokens += batch;
        let mut finished = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            let r = &mut self.running[i];
            if r.first_token.is_none() {
                r.first_token = Some(engine_ts);
                self.stats.ttft.observe(visible - r.arrival);
                observe(&mut self.alt, crate::engines::Role::Ttft, visible - r.arrival);
            } else {
                self.stats.itl.observe(engine_ts - r.last_token);
                observe(&mut self.alt, crate::engines::Role::Itl, engine_ts - r.last_token);
            }
            r.pending_prefill = 0;
            r.generated += 1;
            r.last_token = engine_ts;
            if r.generated >= r.target {
                finished.push(self.running.remove(i));
            } else {
                i += 1;
            }
        }
        for r in finished {
            self.finish_request(r, visible);
        }
    }

    fn finish_request(&mut self, r: Request, visible: f64) {
        let s = &mut self.stats;
        let scheduled = r.scheduled.expect("finished requests were scheduled");
        let first = r.first_token.expect("finished requests have a first token");
        let e2e = visible - r.arrival;
        let decode = r.last_token - first;
        s.e2e.observe(e2e);
        s.queue.observe(scheduled - r.queued);
        s.prefill.observe(first - scheduled);
        s.decode.observe(decode);
        s.inference.observe(r.last_token - scheduled);
        s.tpot.observe(if r.generated > 1 { decode / f64::from(r.generated - 1) } else { 0.0 });
        s.request_prompt_tokens.observe(f64::from(r.prompt));
        s.request_generation_tokens.observe(f64::from(r.generated));
        s.request_params_max_tokens.observe(f64::from(r.max_tokens));
        s.request_max_num_generation_tokens.observe(f64::from(r.max_tokens));
        s.request_params_n.observe(1.0);
        s.prefill_kv_computed.observe(f64::from(r.prompt - r.cached));
        use crate::engines::Role;
        let tpot = if r.generated > 1 { decode / f64::from(r.generated - 1) } else { 0.0 };
        for (role, v) in [
            (Role::E2e, e2e),
            (Role::Queue, scheduled - r.queued),
            (Role::Prefill, first - scheduled),
            (Role::Decode, decode),
            (Role::Inference, r.last_token - scheduled),
            (Role::Tpot, tpot),
            (Role::PromptLen, f64::from(r.prompt)),
            (Role::GenerationLen, f64::from(r.generated)),
        ] {
            observe(&mut self.alt, role, v);
        }
        s.success[r.reason] += 1.0;
        self.finished_requests += 1;
        // Streaming responses carry no Content-Length, so the instrumentator
        // records 0 bytes for them; error bodies are small JSON documents.
        let (status, resp_bytes) = if r.reason == ERROR { ("5xx", 112.0) } else { ("2xx", 0.0) };
        let req_bytes = self.request_bytes(f64::from(r.prompt));
        self.http.record(visible, status, e2e + 0.0004, req_bytes, resp_bytes);
        if self.clients > self.target_clients {
            self.clients -= 1;
        } else {
            self.push_arrival(visible + CLIENT_GAP);
        }
    }

    /// Integrate power, energy and the averaged GPU gauges up to `to`, with
    /// the engine running a step of `batch` sequences or idle.
    fn integrate(&mut self, to: f64, batch: Option<usize>) {
        let dt = to - self.phys_t;
        if dt <= 0.0 {
            return;
        }
        self.phys_t = to;
        let cfg = &self.cfg;
        let load = batch.map(|b| (b as f64 / cfg.capacity.max(1.0)).min(1.0));
        let a = 1.0 - (-dt / GAUGE_TAU).exp();
        let a_t = 1.0 - (-dt / THERMAL_TAU).exp();
        for g in &mut self.gpus {
            let (p, busy, gr, dram, tensor) = match load {
                Some(l) => (
                    cfg.power_watts * (0.80 + 0.20 * l),
                    1.0,
                    0.97 + 0.02 * l,
                    cfg.dram_active * (0.85 + 0.15 * l),
                    cfg.tensor_active * (0.60 + 0.40 * l),
                ),
                None => (cfg.power_watts * IDLE_POWER_SHARE, 0.0, 0.0, 0.0005, 0.0),
            };
            let p = p * g.power_factor;
            g.energy_mj += p * dt * 1000.0;
            g.power_w += (p - g.power_w) * a;
            g.util += (busy - g.util) * a;
            g.gr_active += (gr - g.gr_active) * a;
            g.dram_active += (dram - g.dram_active) * a;
            g.tensor_active += (tensor - g.tensor_active) * a;
            let temp_target = idle_temp() + 45.0 * (p / cfg.power_watts.max(1.0) - IDLE_POWER_SHARE).max(0.0);
            g.temp_c += (temp_target - g.temp_c) * a_t;
        }
        // The API server process: frontend work grows with load.
        self.cpu_seconds += dt * (0.02 + if load.is_some() { 0.30 } else { 0.0 });
    }

    /// `vllm:num_requests_running`.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// `vllm:num_requests_waiting` (requests the engine has accepted but not scheduled).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// `vllm:kv_cache_usage_perc` (0–1).
    pub fn kv_cache_usage(&self) -> f64 {
        f64::from(self.used_blocks()) / f64::from(self.kv_blocks_total)
    }

    /// Requests in flight from the clients' point of view (for process gauges).
    pub(crate) fn in_flight(&self) -> usize {
        self.inbound.len() + self.waiting.len() + self.running.len()
    }
}

fn idle_temp() -> f64 {
    32.0
}

/// Records `v` in the other server's histogram for `role`, when it has one.
fn observe(alt: &mut std::collections::BTreeMap<crate::engines::Role, Histogram>, role: crate::engines::Role, v: f64) {
    if let Some(h) = alt.get_mut(&role) {
        h.observe(v);
    }
}
