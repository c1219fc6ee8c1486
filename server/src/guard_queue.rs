//! Guard requests from many clients judged together: `/v1/moderations` and `/v1/guard/batch`
//! requests wait in the guard model's queue, and one job on its engine thread takes everything
//! that queued while the previous job ran, judging requests that ask for the same risks as one
//! `evaluate_batch` (prompts of several inputs prefilled and decoded in the same passes), then
//! hands each request its own results. A request alone waits for nothing: the first one to queue
//! schedules the job at once. The forward passes are batch-invariant, so a request's verdicts
//! are the same whichever requests it was judged with.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use engine::guard::{BatchItem, GuardError, GuardInput, MAX_BATCH};
use engine::serving::{Cancel, EngineState};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::worker::Worker;

type Reply = oneshot::Sender<Result<Vec<BatchItem>, GuardError>>;

struct Pending {
    inputs: Vec<GuardInput>,
    risks: Vec<String>,
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

    /// Judges `inputs` for `risks` (empty: the 9 harm risks) together with whatever other
    /// requests are waiting; results in input order. 503 when the model's queue is full.
    pub async fn evaluate(
        self: &Arc<Self>,
        worker: &Worker,
        inputs: Vec<GuardInput>,
        risks: Vec<String>,
    ) -> Result<Vec<BatchItem>, ApiError> {
        // the request's place in the system while it waits (admission control as for any job)
        let _ticket = worker.admit()?;
        let (reply, result) = oneshot::channel();
        let cancel = Cancel::default();
        // set if this request is dropped before its answer (its client went away)
        let departure = cancel.on_drop();
        let schedule = {
            let mut q = self.queue.lock().expect("guard queue lock");
            q.pending.push(Pending { inputs, risks, reply, cancel: cancel.clone() });
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
        while !pending.is_empty() {
            let risks = pending[0].risks.clone();
            let (mut group, rest): (Vec<Pending>, Vec<Pending>) = pending.into_iter().partition(|p| p.risks == risks);
            pending = rest;
            // at most MAX_BATCH inputs per evaluation; a request is never split
            while !group.is_empty() {
                let mut take = 0;
                let mut n = 0;
                while take < group.len() && (take == 0 || n + group[take].inputs.len() <= MAX_BATCH) {
                    n += group[take].inputs.len();
                    take += 1;
                }
                let batch: Vec<Pending> = group.drain(..take).collect();
                self.batch_sizes.observe(batch.len() as f64);
                let cancels: Vec<Cancel> = batch.iter().map(|p| p.cancel.clone()).collect();
                judge(&evaluator, batch, &risks);
                // clients that went away while judged, as the engine loop counts its jobs
                self.cancelled.inc_by(cancels.iter().filter(|c| c.is_set()).count() as u64);
            }
        }
    }
}

/// One evaluation over the requests' inputs together; when it fails, each request is judged
/// alone, so that one request's error is only its own. A request judged alone stops when its
/// client goes away; judged with others, its inputs are computed with theirs.
fn judge(evaluator: &engine::guard::Evaluator, batch: Vec<Pending>, risks: &[String]) {
    if batch.len() > 1 {
        let never = AtomicBool::new(false);
        let inputs: Vec<GuardInput> = batch.iter().flat_map(|p| p.inputs.iter().cloned()).collect();
        if let Ok(mut items) = evaluator.evaluate_batch_cancellable(&inputs, risks, &never) {
            for p in batch {
                let mut mine: Vec<BatchItem> = items.drain(..p.inputs.len()).collect();
                for (i, item) in mine.iter_mut().enumerate() {
                    item.index = i;
                }
                let _ = p.reply.send(Ok(mine));
            }
            return;
        }
    }
    for p in batch {
        let result = evaluator.evaluate_batch_cancellable(&p.inputs, risks, p.cancel.flag());
        let _ = p.reply.send(result);
    }
}
