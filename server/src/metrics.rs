//! Prometheus metrics (text exposition through `prometheus-client`): request counts and
//! latency, cancelled requests, generated tokens and speed, time to first token, the guard's
//! requests and latency when a guard is configured (with the verdicts flagged and the latency by
//! risk, label `risk`), and per model (label `model`) the
//! scheduler's state: queue depth, running sequences, batch sizes, KV-cache blocks and their
//! fraction in use, prompt and prefix-cache counts, speculative drafts. The queue depth, the
//! running sequences and the KV-cache fraction are the three gauges the Gateway API Inference
//! Extension's model-server protocol asks for (its endpoint picker is told their names).

use std::sync::atomic::AtomicU64;

use engine::serving::{LoopMetrics, Source};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Latency buckets in milliseconds when `--latency-buckets` is not given.
pub const DEFAULT_LATENCY_BUCKETS: [f64; 12] = [5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0];

/// Label set of the per-model metrics: `model="<id>"`.
type Labels = Vec<(String, String)>;

/// Sequences per forward step.
const BATCH_SIZE_BUCKETS: [f64; 8] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

fn batch_size_histogram() -> Histogram {
    Histogram::new(BATCH_SIZE_BUCKETS.iter().copied())
}

/// Histograms with the server's latency buckets (the constructor of a labelled family).
#[derive(Clone)]
pub struct LatencyHistograms(std::sync::Arc<[f64]>);

impl prometheus_client::metrics::family::MetricConstructor<Histogram> for LatencyHistograms {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// The per-model families of the scheduler's metrics.
struct SchedulerFamilies {
    queue_depth: Family<Labels, Gauge>,
    running: Family<Labels, Gauge>,
    kv_blocks_used: Family<Labels, Gauge>,
    kv_blocks_capacity: Family<Labels, Gauge>,
    kv_usage: Family<Labels, Gauge<f64, AtomicU64>>,
    batch_size: Family<Labels, Histogram, fn() -> Histogram>,
    prefix_lookups: Family<Labels, Counter>,
    prefix_hits: Family<Labels, Counter>,
    prompt_tokens: Family<Labels, Counter>,
    prompt_tokens_cached: Family<Labels, Counter>,
    draft_tokens: Family<Labels, Counter>,
    draft_tokens_accepted: Family<Labels, Counter>,
}

pub struct Metrics {
    registry: Registry,
    scheduler: SchedulerFamilies,
    pub requests: Counter,
    pub requests_cancelled: Counter,
    pub tokens_generated: Counter,
    pub tokens_per_second: Gauge<f64, AtomicU64>,
    pub request_latency_ms: Histogram,
    pub time_to_first_token_ms: Histogram,
    pub guard_requests: Counter,
    pub guard_latency_ms: Histogram,
    /// Requests judged per guard evaluation (moderation and batch requests from several clients
    /// are judged together, `guard_queue`).
    pub guard_batch_requests: Histogram,
    /// Verdicts that came back unsafe, by risk (`guard_flagged_total{risk}`).
    guard_flagged: Family<Labels, Counter>,
    /// Time to serve the guard requests that judged a risk, by risk.
    guard_risk_latency_ms: Family<Labels, Histogram, LatencyHistograms>,
}

impl Metrics {
    pub fn new(latency_buckets: &[f64], guard: bool) -> Metrics {
        let mut registry = Registry::default();
        let m = Metrics {
            requests: Counter::default(),
            requests_cancelled: Counter::default(),
            tokens_generated: Counter::default(),
            tokens_per_second: Gauge::default(),
            request_latency_ms: Histogram::new(latency_buckets.iter().copied()),
            time_to_first_token_ms: Histogram::new(latency_buckets.iter().copied()),
            guard_requests: Counter::default(),
            guard_latency_ms: Histogram::new(latency_buckets.iter().copied()),
            guard_batch_requests: batch_size_histogram(),
            guard_flagged: Family::default(),
            guard_risk_latency_ms: Family::new_with_constructor(LatencyHistograms(latency_buckets.into())),
            registry: Registry::default(),
            scheduler: SchedulerFamilies {
                queue_depth: Family::default(),
                running: Family::default(),
                kv_blocks_used: Family::default(),
                kv_blocks_capacity: Family::default(),
                kv_usage: Family::default(),
                batch_size: Family::new_with_constructor(batch_size_histogram as fn() -> Histogram),
                prefix_lookups: Family::default(),
                prefix_hits: Family::default(),
                prompt_tokens: Family::default(),
                prompt_tokens_cached: Family::default(),
                draft_tokens: Family::default(),
                draft_tokens_accepted: Family::default(),
            },
        };
        let f = &m.scheduler;
        registry.register("queue_depth", "Requests waiting for a free sequence", f.queue_depth.clone());
        registry.register("running_sequences", "Sequences being decoded or prefilled", f.running.clone());
        registry.register(
            "kv_cache_blocks_used",
            "KV-cache blocks in use (running sequences and the prefix cache)",
            f.kv_blocks_used.clone(),
        );
        registry.register("kv_cache_blocks_capacity", "KV-cache blocks the scheduler may use", f.kv_blocks_capacity.clone());
        // what the Gateway API Inference Extension's endpoint picker reads as KV-cache
        // utilisation (--kv-cache-usage-percentage-metric): a fraction, 0 to 1
        registry.register(
            "kv_cache_usage_ratio",
            "Fraction of the KV-cache blocks the scheduler may use that are in use (0 to 1)",
            f.kv_usage.clone(),
        );
        registry.register("batch_size", "Sequences per forward step", f.batch_size.clone());
        registry.register("prefix_cache_lookups", "Sequences started (each looks for a cached prefix)", f.prefix_lookups.clone());
        registry.register("prefix_cache_hits", "Sequences started on a cached prefix", f.prefix_hits.clone());
        registry.register("prompt_tokens", "Prompt tokens of started sequences", f.prompt_tokens.clone());
        registry.register("prompt_tokens_cached", "Prompt tokens found in the cache instead of computed", f.prompt_tokens_cached.clone());
        registry.register("draft_tokens", "Tokens proposed, by source: the draft model or the n-gram lookup", f.draft_tokens.clone());
        registry.register("draft_tokens_accepted", "Proposed tokens the target model kept, by source", f.draft_tokens_accepted.clone());
        registry.register("requests", "HTTP requests served (every route)", m.requests.clone());
        registry.register(
            "requests_cancelled",
            "Requests whose client went away before the answer was complete (their work skipped or stopped early)",
            m.requests_cancelled.clone(),
        );
        registry.register("tokens_generated", "Tokens generated by chat and text completions", m.tokens_generated.clone());
        registry.register("tokens_per_second", "Generation speed of the last completed request", m.tokens_per_second.clone());
        registry.register("request_latency_ms", "Time to serve a request, in milliseconds", m.request_latency_ms.clone());
        registry.register(
            "time_to_first_token_ms",
            "Time from request to first generated token, in milliseconds",
            m.time_to_first_token_ms.clone(),
        );
        if guard {
            registry.register("guard_requests", "Guard requests (/v1/guard, /scan, /batch)", m.guard_requests.clone());
            registry.register("guard_latency_ms", "Time to serve a guard request, in milliseconds", m.guard_latency_ms.clone());
            registry.register(
                "guard_batch_requests",
                "Moderation and guard batch requests judged together per evaluation",
                m.guard_batch_requests.clone(),
            );
            registry.register("guard_flagged", "Verdicts that came back unsafe, by risk", m.guard_flagged.clone());
            registry.register(
                "guard_risk_latency_ms",
                "Time to serve the guard requests that judged a risk, by risk, in milliseconds",
                m.guard_risk_latency_ms.clone(),
            );
        }
        Metrics { registry, ..m }
    }

    /// The scheduler metrics of model `id`.
    pub fn for_model(&self, id: &str) -> ModelMetrics {
        let labels: Labels = vec![("model".into(), id.into())];
        // each source's series, from the start (a scrape sees 0 rather than nothing)
        let by_source = |family: &Family<Labels, Counter>| -> [Counter; 2] {
            Source::ALL.map(|source| {
                let mut labels = labels.clone();
                labels.push(("source".into(), source.name().into()));
                family.get_or_create(&labels).clone()
            })
        };
        let f = &self.scheduler;
        ModelMetrics {
            queue_depth: f.queue_depth.get_or_create(&labels).clone(),
            running: f.running.get_or_create(&labels).clone(),
            kv_blocks_used: f.kv_blocks_used.get_or_create(&labels).clone(),
            kv_blocks_capacity: f.kv_blocks_capacity.get_or_create(&labels).clone(),
            kv_usage: f.kv_usage.get_or_create(&labels).clone(),
            batch_size: f.batch_size.get_or_create(&labels).clone(),
            prefix_lookups: f.prefix_lookups.get_or_create(&labels).clone(),
            prefix_hits: f.prefix_hits.get_or_create(&labels).clone(),
            prompt_tokens: f.prompt_tokens.get_or_create(&labels).clone(),
            prompt_tokens_cached: f.prompt_tokens_cached.get_or_create(&labels).clone(),
            draft_tokens: by_source(&f.draft_tokens),
            draft_tokens_accepted: by_source(&f.draft_tokens_accepted),
            cancelled: self.requests_cancelled.clone(),
        }
    }

    /// A finished generation of `tokens` tokens that started at `start`: counts them and sets
    /// the speed gauge.
    pub fn record_generation(&self, tokens: usize, start: std::time::Instant) {
        self.tokens_generated.inc_by(tokens as u64);
        let secs = start.elapsed().as_secs_f64();
        if tokens > 0 && secs > 0.0 {
            self.tokens_per_second.set(tokens as f64 / secs);
        }
    }

    /// The verdicts of one guard request that took `latency_ms`: each built-in risk's latency,
    /// and the unsafe ones counted (custom risks are the callers' own names: no label for them).
    pub fn record_verdicts<'a>(&self, verdicts: impl IntoIterator<Item = &'a engine::guard::Verdict>, latency_ms: f64) {
        let mut seen: Vec<engine::guard::Risk> = Vec::new();
        for v in verdicts {
            let Some(risk) = v.risk.builtin() else { continue };
            let labels: Labels = vec![("risk".into(), risk.name().into())];
            if v.is_unsafe {
                self.guard_flagged.get_or_create(&labels).inc();
            }
            // a batch judges each risk once per input: its latency is observed once per request
            if !seen.contains(&risk) {
                seen.push(risk);
                self.guard_risk_latency_ms.get_or_create(&labels).observe(latency_ms);
            }
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// The scheduler metrics of one model: its series of the per-model families.
pub struct ModelMetrics {
    queue_depth: Gauge,
    running: Gauge,
    kv_blocks_used: Gauge,
    kv_blocks_capacity: Gauge,
    kv_usage: Gauge<f64, AtomicU64>,
    batch_size: Histogram,
    prefix_lookups: Counter,
    prefix_hits: Counter,
    prompt_tokens: Counter,
    prompt_tokens_cached: Counter,
    /// By [`Source`] (its index).
    draft_tokens: [Counter; 2],
    draft_tokens_accepted: [Counter; 2],
    /// `requests_cancelled` (shared by all models).
    cancelled: Counter,
}

impl ModelMetrics {
    /// The used blocks over the capacity (0 before the capacity is known).
    fn set_kv_usage(&self) {
        let capacity = self.kv_blocks_capacity.get();
        let ratio = if capacity > 0 { (self.kv_blocks_used.get() as f64 / capacity as f64).min(1.0) } else { 0.0 };
        self.kv_usage.set(ratio);
    }
}

impl LoopMetrics for ModelMetrics {
    fn queue_depth(&self, waiting: usize) {
        self.queue_depth.set(waiting as i64);
    }

    fn running(&self, sequences: usize) {
        self.running.set(sequences as i64);
    }

    fn kv_blocks(&self, used: usize) {
        self.kv_blocks_used.set(used as i64);
        self.set_kv_usage();
    }

    fn kv_capacity(&self, blocks: usize) {
        self.kv_blocks_capacity.set(blocks as i64);
        self.set_kv_usage();
    }

    fn step(&self, sequences: usize) {
        self.batch_size.observe(sequences as f64);
    }

    fn prefix_lookup(&self, hit: bool) {
        self.prefix_lookups.inc();
        if hit {
            self.prefix_hits.inc();
        }
    }

    fn prompt(&self, tokens: usize, cached: usize) {
        self.prompt_tokens.inc_by(tokens as u64);
        self.prompt_tokens_cached.inc_by(cached as u64);
    }

    fn drafted(&self, source: Source, proposed: usize, accepted: usize) {
        self.draft_tokens[source as usize].inc_by(proposed as u64);
        self.draft_tokens_accepted[source as usize].inc_by(accepted as u64);
    }

    fn cancelled(&self) {
        self.cancelled.inc();
    }
}
