//! Models: architectures and hyperparameters, the tensors they read, the forward graph every
//! device compiles, sampling, and the synthetic-model generator.

pub mod arch;
pub mod graph;
pub mod sampling;
pub mod synth;
pub mod weights;

pub use arch::{Architecture, HParams, RopeStyle};
pub use graph::ForwardGraph;
pub use weights::ModelWeights;

use strata_io::gguf::GgufError;

/// Why a model could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unsupported architecture {0:?} (supported: llama, mistral, qwen2, qwen3)")]
    UnsupportedArchitecture(String),
    #[error("hyperparameter {key} = {value}: {why}")]
    BadHParam { key: String, value: u64, why: &'static str },
    #[error("hyperparameter {key} = {value} is not a usable value")]
    BadHParamF { key: String, value: f32 },
    #[error("the model file has no tensor {0}")]
    MissingTensor(String),
    #[error("tensor {name} has shape {found}, expected {expected}")]
    TensorShape { name: String, expected: String, found: String },
}
