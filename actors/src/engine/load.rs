//! Loading a model file: map it, read its hyperparameters, find its tensors, build its tokenizer,
//! chat template and forward graph.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_io::gguf::{GgufError, GgufFile};
use strata_model::{ForwardGraph, HParams, ModelError, ModelWeights};
use strata_tokenizer::{ChatTemplate, Tokenizer, TokenizerError};

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Gguf(#[from] GgufError),
    #[error("{path}: {source}")]
    Model { path: PathBuf, source: ModelError },
    #[error("{path}: tokenizer: {source}")]
    Tokenizer { path: PathBuf, source: TokenizerError },
}

/// A model file, mapped and understood.
pub struct LoadedModel {
    pub path: PathBuf,
    pub file: Arc<GgufFile>,
    pub hparams: HParams,
    pub weights: ModelWeights,
    pub graph: ForwardGraph,
    pub tokenizer: Arc<Tokenizer>,
    /// The file's chat template, if it has one.
    pub chat_template: Option<ChatTemplate>,
    /// `general.name`, or the file stem.
    pub name: String,
}

impl LoadedModel {
    /// Maps and checks `path`.
    ///
    /// # Errors
    /// A file that cannot be read or parsed, an unsupported architecture, missing or misshapen
    /// tensors, or a vocabulary the tokenizer cannot build.
    pub fn load(path: &Path) -> Result<LoadedModel, LoadError> {
        let file = Arc::new(GgufFile::open(path)?);
        let model_err = |source| LoadError::Model { path: path.to_path_buf(), source };
        let hparams = HParams::from_metadata(file.metadata()).map_err(model_err)?;
        let weights = ModelWeights::from_gguf(&file, &hparams).map_err(model_err)?;
        let tok_err = |source| LoadError::Tokenizer { path: path.to_path_buf(), source };
        let spec = strata_tokenizer::vocab_spec_from_gguf(file.metadata()).map_err(tok_err)?;
        let tokenizer = Tokenizer::from_spec(&spec).map_err(tok_err)?;
        if tokenizer.vocab_size() < hparams.vocab_size {
            return Err(model_err(ModelError::BadHParam {
                key: "tokenizer.ggml.tokens".into(),
                value: tokenizer.vocab_size() as u64,
                why: "fewer tokens than the model's vocabulary",
            }));
        }
        let chat_template = match &spec.chat_template {
            Some(src) => {
                let piece = |id: Option<u32>| id.and_then(|i| spec.tokens.get(i as usize)).cloned().unwrap_or_default();
                Some(ChatTemplate::new(src, &piece(spec.bos), &piece(spec.eos)).map_err(tok_err)?)
            }
            None => None,
        };
        let graph = ForwardGraph::llama(&hparams, &weights);
        let name = file
            .metadata()
            .opt_str("general.name")
            .ok()
            .flatten()
            .map(str::to_string)
            .unwrap_or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default());
        Ok(LoadedModel { path: path.to_path_buf(), file, hparams, weights, graph, tokenizer: Arc::new(tokenizer), chat_template, name })
    }

    /// Reads every page of the mapped weights once, so the first requests do not stall on page
    /// faults; `progress(done_bytes, total_bytes)` is called as it goes.
    pub fn prefault(&self, progress: &mut dyn FnMut(u64, u64)) {
        const PAGE: usize = 4096;
        const REPORT_EVERY: usize = 64 << 20;
        let bytes = self.file.bytes();
        let total = bytes.len() as u64;
        let mut sum = 0u8;
        for (i, chunk) in bytes.chunks(REPORT_EVERY).enumerate() {
            for page in chunk.chunks(PAGE) {
                sum = sum.wrapping_add(page[0]);
            }
            progress(((i + 1) * REPORT_EVERY).min(bytes.len()) as u64, total);
        }
        std::hint::black_box(sum);
    }

    /// A one-paragraph summary for the start-up log.
    pub fn summary(&self) -> String {
        let hp = &self.hparams;
        let bytes = self.weights.total_bytes();
        format!(
            "{name} ({arch}): {layers} layers, d_model {d}, {h}/{kv} heads of {hd}, ffn {ff}, vocab {v}, trained context {ctx}; {mib:.1} MiB of weights mapped from {path}",
            name = self.name,
            arch = hp.arch,
            layers = hp.n_layers,
            d = hp.n_embd,
            h = hp.n_heads,
            kv = hp.n_kv_heads,
            hd = hp.head_dim,
            ff = hp.n_ff,
            v = hp.vocab_size,
            ctx = hp.trained_context,
            mib = bytes as f64 / (1 << 20) as f64,
            path = self.path.display(),
        )
    }
}
