//! The strata-rt runtime: the engine that ties a model to its devices and KV arena, and (with
//! their issues) the actors, the HTTP front end and the metrics.

pub mod engine;
pub mod http;
pub mod kv_broker;
pub mod metrics;
pub mod scheduler;

pub use engine::{Engine, EngineError, EngineOptions, Flow, GenerationOutcome, LoadedModel, RowOutput, SeqStep, StepOutcome, StepOutput, StepStatus, StopReason};
