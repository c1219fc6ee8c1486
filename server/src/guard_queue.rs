//! Guard requests from many clients judged together: `/v1/moderations`, `/v1/guard/batch` and
//! guardrail requests wait in the guard model's queue, and one job on its engine thread takes
//! everything that queued while the previous job ran, judging it as one `evaluate_batch`
//! (prompts of several inputs, whatever risks and thresholds each asks for, prefilled and
//! decoded in the same passes), then hands each request its own results. A request alone waits for nothing: the first one to queue
//! schedules the job at once. The forward passes are batch-invariant, so a request's verdicts
//! are the same whichever requests it was judged with.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use engine::guard::{GuardError, GuardRequest, GuardResult, MAX_BATCH};
use engine::serving::{Cancel, EngineState};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::worker::Worker;

type Reply = oneshot::Sender<Result<Vec<GuardResult>, GuardError>>;

struct Pending {
    /// One per input, each deciding by its own thresholds.
    requests: Vec<GuardRequest>,
    reply: Reply,
    /// Set when the request goes away: its work is skipped, or stopped when judged alone.
    cancel: Cancel,
}

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    /// A job that will drain the queue is already on its way to the engine thread.
    scheduled: bool,
}

/// The queue of one guard model.
pub struct GuardQueue {
    queue: Mutex<Queue>,
    /// `requests_cancelled`: requests whose client went away before their answer (counted on
    /// the engine thread, when their work is skipped or done).
    cancelled: Counter,
    /// `guard_batch_requests`: requests per evaluation.
    batch_sizes: Histogram,
}

impl GuardQueue {
    pub fn new(cancelled: Counter, batch_sizes: Histogram) -> GuardQueue {
        GuardQueue { queue: Mutex::default(), cancelled, batch_sizes }
    }

    /// Judges `requests` (one per input) together with whatever other requests are waiting;
    /// final verdicts in input order. 503 when the model's queue is full.
    pub async fn evaluate(self: &Arc<Self>, worker: &Worker, requests: Vec<GuardRequest>) -> Result<Vec<GuardResult>, ApiError> {
        // the request's place in the system while it waits (admission control as for any job)
        let _ticket = worker.admit()?;
        let (reply, result) = oneshot::channel();
        let cancel = Cancel::default();
        // set if this request is dropped before its answer (its client went away)
        let departure = cancel.on_drop();
        let schedule = {
            let mut q = self.queue.lock().expect("guard queue lock");
            q.pending.push(Pending { requests, reply, cancel: cancel.clone() });
            !std::mem::replace(&mut q.scheduled, true)
        };
        if schedule {
            let queue = self.clone();
            if let Err(e) = worker.submit(Box::new(move |engine: &mut EngineState| queue.drain(engine))) {
                // no engine thread will ever drain the queue: answer everyone waiting
                let mut q = self.queue.lock().expect("guard queue lock");
                q.scheduled = false;
                for p in q.pending.drain(..) {
                    let _ = p.reply.send(Err(GuardError::Device(e.message.clone())));
                }
            }
        }
        let answer = result.await;
        departure.disarm();
        answer.map_err(|_| ApiError::server("the engine thread stopped"))?.map_err(ApiError::from)
    }

    /// On the engine thread: everything queued so far, judged group by group.
    fn drain(&self, engine: &mut EngineState) {
        let pending = {
            let mut q = self.queue.lock().expect("guard queue lock");
            // requests queued from now on schedule the next job
            q.scheduled = false;
            std::mem::take(&mut q.pending)
        };
        let Some(evaluator) = engine.guard.clone() else {
            for p in pending {
                let _ = p.reply.send(Err(GuardError::Device("this model has no guard evaluator".into())));
            }
            return;
        };
        // a request whose client went away is not judged (but counted, as any job skipped)
        let (gone, mut pending): (Vec<Pending>, Vec<Pending>) = pending.into_iter().partition(|p| p.cancel.is_set());
        self.cancelled.inc_by(gone.len() as u64);
        // at most MAX_BATCH inputs per evaluation; a request is never split
        while !pending.is_empty() {
            let mut take = 0;
            let mut n = 0;
            while take < pending.len() && (take == 0 || n + pending[take].requests.len() <= MAX_BATCH) {
                n += pending[take].requests.len();
                take += 1;
            }
            let batch: Vec<Pending> = pending.drain(..take).collect();
            self.batch_sizes.observe(batch.len() as f64);
            let cancels: Vec<Cancel> = batch.iter().map(|p| p.cancel.clone()).collect();
            judge(&evaluator, batch);
            // clients that went away while judged, as the engine loop counts its jobs
            self.cancelled.inc_by(cancels.iter().filter(|c| c.is_set()).count() as u64);
        }
    }
}

/// One evaluation over the requests' inputs together; when it fails, each request is judged
/// alone, so that one request's error is only its own. A request judged alone stops when its
/// client goes away; judged with others, its inputs are computed with theirs.
fn judge(evaluator: &engine::guard::Evaluator, batch: Vec<Pending>) {
    if batch.len() > 1 {
        let never = AtomicBool::new(false);
        let requests: Vec<GuardRequest> = batch.iter().flat_map(|p| p.requests.iter().cloned()).collect();
        if let Ok(mut results) = evaluator.evaluate_batch_cancellable(&requests, &never) {
            for p in batch {
                let mine: Vec<GuardResult> = results.drain(..p.requests.len()).collect();
                let _ = p.reply.send(Ok(mine));
            }
            return;
        }
    }
    for p in batch {
        let result = evaluator.evaluate_batch_cancellable(&p.requests, p.cancel.flag());
        let _ = p.reply.send(result);
    }
}
