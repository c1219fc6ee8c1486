//! Serving a model to many requests at once: its engine thread (`engine_loop.rs`: continuous
//! batching, chunked prefill, prefix reuse, speculative rounds, exclusive jobs between steps) and
//! what it says with whoever feeds it (`protocol.rs`). It knows no HTTP, async runtime or metrics
//! library: requests come as messages on a standard channel, their events go to an
//! [`EventSink`], the loop's figures to a [`LoopMetrics`].

mod engine_loop;
mod protocol;
mod spec_cost;

pub use engine_loop::{state_slots_per_sequence, EngineLoop};
pub use protocol::{
    Cancel, CancelOnDrop, EngineState, EventSink, Job, LoopConfig, LoopMetrics, Msg, PromptProgress, SeqError, SeqEvent, SeqSpec, Ticket,
};
pub use spec_cost::{Source, SpecPolicy};
