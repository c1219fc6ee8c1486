//! The batch scheduler: requests submitted one at a time are gathered into batches (flushed when
//! `max_batch_size` requests are in, or `batch_timeout` after the first one arrived) and handed
//! to a handler that answers a whole batch at once, one result per request in the same order.
//! Each request carries its prompt and its phase (prefill or decode) so that a handler can
//! arrange the batch's work. Batches run on their own threads, at most `max_in_flight` at once;
//! `stop` refuses new requests, flushes the pending ones and waits for every batch in flight.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engine::tokenizer::TokenId;
use tokio::sync::oneshot;

/// What a request of a batch asks of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Its prompt is still to be read (the expensive, parallel part).
    Prefill,
    /// Its prompt is in the cache: it produces tokens.
    Decode,
}

/// One request: its prompt, its phase, and whatever else the handler needs.
#[derive(Debug)]
pub struct BatchRequest<P> {
    pub prompt: Vec<TokenId>,
    pub phase: Phase,
    pub payload: P,
}

#[derive(Clone, Copy, Debug)]
pub struct BatchConfig {
    /// A batch is flushed as soon as it holds this many requests.
    pub max_batch_size: usize,
    /// ... or this long after its first request arrived.
    pub batch_timeout: Duration,
    /// Batches being handled at once; a full batch waits for one to finish.
    pub max_in_flight: usize,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum BatchError<E> {
    #[error("the batch scheduler has not been started")]
    NotStarted,
    #[error("the batch scheduler is stopped")]
    Stopped,
    #[error("the batch handler returned {got} results for {expected} requests")]
    WrongLength { expected: usize, got: usize },
    #[error("the batch handler panicked")]
    HandlerPanicked,
    /// The handler's answer for this request.
    #[error("{0}")]
    Item(E),
}

type Handler<P, R, E> = Arc<dyn Fn(Vec<BatchRequest<P>>) -> Vec<Result<R, E>> + Send + Sync>;

struct Item<P, R, E> {
    request: BatchRequest<P>,
    reply: oneshot::Sender<Result<R, BatchError<E>>>,
}

enum State<P, R, E> {
    Idle,
    Running { tx: Sender<Item<P, R, E>>, collector: JoinHandle<()> },
    Stopped,
}

pub struct BatchScheduler<P, R, E> {
    config: BatchConfig,
    handler: Handler<P, R, E>,
    state: Mutex<State<P, R, E>>,
}

impl<P: Send + 'static, R: Send + 'static, E: Send + 'static> BatchScheduler<P, R, E> {
    /// A scheduler that hands batches to `handler` once started.
    pub fn new(config: BatchConfig, handler: impl Fn(Vec<BatchRequest<P>>) -> Vec<Result<R, E>> + Send + Sync + 'static) -> Self {
        let config = BatchConfig { max_batch_size: config.max_batch_size.max(1), max_in_flight: config.max_in_flight.max(1), ..config };
        BatchScheduler { config, handler: Arc::new(handler), state: Mutex::new(State::Idle) }
    }

    pub fn config(&self) -> BatchConfig {
        self.config
    }

    /// Starts gathering batches (a second call does nothing; a stopped scheduler stays stopped).
    pub fn start(&self) {
        let mut state = self.state.lock().expect("scheduler lock");
        if !matches!(*state, State::Idle) {
            return;
        }
        let (tx, rx) = channel::<Item<P, R, E>>();
        let (config, handler) = (self.config, self.handler.clone());
        let collector = std::thread::Builder::new()
            .name("batch-scheduler".into())
            .spawn(move || {
                let in_flight = Arc::new((Mutex::new(0usize), Condvar::new()));
                let mut workers = Vec::new();
                // ends when `stop` drops the sender, after the items already sent
                while let Ok(first) = rx.recv() {
                    let deadline = Instant::now() + config.batch_timeout;
                    let mut batch = vec![first];
                    while batch.len() < config.max_batch_size {
                        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                            Ok(item) => batch.push(item),
                            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
                        }
                    }
                    {
                        let (count, freed) = &*in_flight;
                        let mut n = count.lock().expect("in-flight lock");
                        while *n >= config.max_in_flight {
                            n = freed.wait(n).expect("in-flight lock");
                        }
                        *n += 1;
                    }
                    let (handler, in_flight) = (handler.clone(), in_flight.clone());
                    workers.retain(|w: &JoinHandle<()>| !w.is_finished());
                    workers.push(std::thread::spawn(move || {
                        run_batch(&*handler, batch);
                        let (count, freed) = &*in_flight;
                        *count.lock().expect("in-flight lock") -= 1;
                        freed.notify_all();
                    }));
                }
                for w in workers {
                    let _ = w.join();
                }
            })
            .expect("starting the batch scheduler thread");
        *state = State::Running { tx, collector };
    }

    /// Refuses new requests, flushes the pending ones without waiting for the timeout, and
    /// returns once every batch in flight has been answered.
    pub fn stop(&self) {
        let previous = std::mem::replace(&mut *self.state.lock().expect("scheduler lock"), State::Stopped);
        if let State::Running { tx, collector } = previous {
            drop(tx);
            let _ = collector.join();
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(*self.state.lock().expect("scheduler lock"), State::Running { .. })
    }

    fn enqueue(&self, request: BatchRequest<P>) -> Result<oneshot::Receiver<Result<R, BatchError<E>>>, BatchError<E>> {
        let state = self.state.lock().expect("scheduler lock");
        let tx = match &*state {
            State::Idle => return Err(BatchError::NotStarted),
            State::Stopped => return Err(BatchError::Stopped),
            State::Running { tx, .. } => tx,
        };
        let (reply, result) = oneshot::channel();
        tx.send(Item { request, reply }).map_err(|_| BatchError::Stopped)?;
        Ok(result)
    }

    /// Adds `request` to the next batch and waits for its result.
    pub async fn submit(&self, request: BatchRequest<P>) -> Result<R, BatchError<E>> {
        let result = self.enqueue(request)?;
        result.await.unwrap_or(Err(BatchError::Stopped))
    }

    /// The same, blocking the calling thread (not for async code).
    pub fn submit_blocking(&self, request: BatchRequest<P>) -> Result<R, BatchError<E>> {
        let result = self.enqueue(request)?;
        result.blocking_recv().unwrap_or(Err(BatchError::Stopped))
    }
}

impl<P, R, E> Drop for BatchScheduler<P, R, E> {
    fn drop(&mut self) {
        if let Ok(state) = self.state.get_mut() {
            if let State::Running { tx, collector } = std::mem::replace(state, State::Stopped) {
                drop(tx);
                let _ = collector.join();
            }
        }
    }
}

/// Runs the handler on one batch and answers each request.
fn run_batch<P, R, E>(handler: &(dyn Fn(Vec<BatchRequest<P>>) -> Vec<Result<R, E>> + Send + Sync), batch: Vec<Item<P, R, E>>) {
    let (requests, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|i| (i.request, i.reply)).unzip();
    let expected = requests.len();
    match catch_unwind(AssertUnwindSafe(|| handler(requests))) {
        Ok(results) if results.len() == expected => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result.map_err(BatchError::Item));
            }
        }
        Ok(results) => {
            let got = results.len();
            for reply in replies {
                let _ = reply.send(Err(BatchError::WrongLength { expected, got }));
            }
        }
        Err(_) => {
            for reply in replies {
                let _ = reply.send(Err(BatchError::HandlerPanicked));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Sizes = Arc<Mutex<Vec<usize>>>;

    /// A scheduler whose handler doubles each prompt's first token after `delay`, fails odd
    /// ones when `fail_odd`, and records the size of every batch.
    fn doubler(max: usize, timeout_ms: u64, delay_ms: u64, fail_odd: bool) -> (Arc<BatchScheduler<(), u32, String>>, Sizes) {
        let sizes: Sizes = Arc::default();
        let seen = sizes.clone();
        let config = BatchConfig { max_batch_size: max, batch_timeout: Duration::from_millis(timeout_ms), max_in_flight: 4 };
        let s = BatchScheduler::new(config, move |batch: Vec<BatchRequest<()>>| {
            seen.lock().unwrap().push(batch.len());
            std::thread::sleep(Duration::from_millis(delay_ms));
            batch
                .iter()
                .map(|r| {
                    let t = r.prompt[0];
                    if fail_odd && t % 2 == 1 {
                        Err(format!("odd {t}"))
                    } else {
                        Ok(t * 2)
                    }
                })
                .collect()
        });
        s.start();
        (Arc::new(s), sizes)
    }

    fn request(t: u32) -> BatchRequest<()> {
        BatchRequest { prompt: vec![t], phase: if t.is_multiple_of(3) { Phase::Decode } else { Phase::Prefill }, payload: () }
    }

    /// Submits `n` requests from as many threads at once; results in submission order.
    fn submit_all(s: &Arc<BatchScheduler<(), u32, String>>, n: u32) -> Vec<Result<u32, BatchError<String>>> {
        let handles: Vec<_> = (0..n)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || s.submit_blocking(request(t)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn a_full_batch_is_flushed_without_waiting_for_the_timeout() {
        let (s, sizes) = doubler(4, 60_000, 0, false);
        let start = Instant::now();
        let results = submit_all(&s, 4);
        assert!(start.elapsed() < Duration::from_secs(30), "waited for the timeout");
        assert_eq!(results, vec![Ok(0), Ok(2), Ok(4), Ok(6)]);
        assert_eq!(*sizes.lock().unwrap(), vec![4]);
    }

    #[test]
    fn a_partial_batch_is_flushed_at_the_timeout() {
        let (s, sizes) = doubler(100, 150, 0, false);
        let start = Instant::now();
        let results = submit_all(&s, 3);
        assert!(start.elapsed() >= Duration::from_millis(150), "flushed before the timeout");
        assert_eq!(results, vec![Ok(0), Ok(2), Ok(4)]);
        let sizes = sizes.lock().unwrap();
        assert_eq!(sizes.iter().sum::<usize>(), 3);
        assert!(sizes.iter().all(|&n| n < 100));
    }

    #[test]
    fn more_requests_than_a_batch_holds_make_several_batches() {
        let (s, sizes) = doubler(3, 100, 0, false);
        let results = submit_all(&s, 7);
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 7);
        let sizes = sizes.lock().unwrap();
        assert!(sizes.len() >= 3 && sizes.iter().all(|&n| n <= 3), "{sizes:?}");
    }

    #[test]
    fn each_request_gets_its_own_result_or_error() {
        let (s, _) = doubler(8, 50, 0, true);
        let results = submit_all(&s, 6);
        for (t, r) in results.into_iter().enumerate() {
            if t % 2 == 1 {
                assert_eq!(r, Err(BatchError::Item(format!("odd {t}"))));
            } else {
                assert_eq!(r, Ok(t as u32 * 2));
            }
        }
    }

    #[test]
    fn stop_answers_every_request_in_flight_and_refuses_later_ones() {
        let (s, sizes) = doubler(2, 10, 300, false);
        // all five are queued before stop (submitted from this thread: no thread may still be
        // on its way to `submit` when stop is called)
        let mut replies: Vec<_> = (0..5u32).map(|t| s.enqueue(request(t)).expect("running")).collect();
        // the first batches are in their handler (300 ms) when stop is called
        while sizes.lock().unwrap().is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
        s.stop();
        // stop returned: every submitted request has its answer already
        let results: Vec<_> = replies.iter_mut().map(|r| r.try_recv().expect("answered before stop returned")).collect();
        assert_eq!(results, (0..5u32).map(|t| Ok(t * 2)).collect::<Vec<_>>());
        assert_eq!(sizes.lock().unwrap().iter().sum::<usize>(), 5);
        assert_eq!(s.submit_blocking(request(1)), Err(BatchError::Stopped));
        assert!(!s.is_running());
    }

    #[test]
    fn a_scheduler_answers_only_once_started() {
        let config = BatchConfig { max_batch_size: 2, batch_timeout: Duration::from_millis(1), max_in_flight: 1 };
        let s: BatchScheduler<(), u32, String> = BatchScheduler::new(config, |b| b.iter().map(|_| Ok(1)).collect());
        assert_eq!(s.submit_blocking(request(1)), Err(BatchError::NotStarted));
        s.start();
        assert_eq!(s.submit_blocking(request(1)), Ok(1));
    }

    #[test]
    fn a_handler_that_miscounts_or_panics_fails_its_batch_only() {
        let config = BatchConfig { max_batch_size: 1, batch_timeout: Duration::from_millis(1), max_in_flight: 1 };
        let s: BatchScheduler<(), u32, String> = BatchScheduler::new(config, |b| match b[0].prompt[0] {
            0 => vec![],
            1 => panic!("handler bug"),
            _ => vec![Ok(7)],
        });
        s.start();
        assert_eq!(s.submit_blocking(request(0)), Err(BatchError::WrongLength { expected: 1, got: 0 }));
        assert_eq!(s.submit_blocking(request(1)), Err(BatchError::HandlerPanicked));
        assert_eq!(s.submit_blocking(request(2)), Ok(7));
    }
}
