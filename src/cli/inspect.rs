//! `strata-rt inspect`: a GGUF file's metadata and tensors.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use strata_io::gguf::{GgufFile, MetaArray, MetaValue};

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The GGUF file.
    model: PathBuf,
    /// Print every element of arrays (tokenizer vocabularies are long).
    #[arg(long)]
    full: bool,
}

pub fn run(args: InspectArgs) -> Result<ExitCode> {
    let file = GgufFile::open(&args.model)?;
    println!("file: {}", args.model.display());
    println!("GGUF version {}, {} bytes, alignment {}, data at {}", file.version(), file.file_bytes(), file.alignment(), file.data_offset());
    println!("\nmetadata ({} keys):", file.metadata().iter().count());
    for (key, value) in file.metadata().iter() {
        println!("  {key} = {}", show(value, args.full));
    }
    println!("\ntensors ({}):", file.tensors().len());
    println!("  {:<40} {:>8} {:<24} {:>14} {:>12}", "name", "type", "dims", "offset", "bytes");
    for t in file.tensors() {
        println!("  {:<40} {:>8} {:<24} {:>14} {:>12}", t.name, t.ty.name(), format!("{:?}", t.dims), t.offset, t.bytes);
    }
    Ok(ExitCode::SUCCESS)
}

/// Arrays show this many elements unless `--full`.
const ARRAY_PREVIEW: usize = 8;

fn show(v: &MetaValue, full: bool) -> String {
    let s = match v {
        MetaValue::U8(x) => x.to_string(),
        MetaValue::I8(x) => x.to_string(),
        MetaValue::U16(x) => x.to_string(),
        MetaValue::I16(x) => x.to_string(),
        MetaValue::U32(x) => x.to_string(),
        MetaValue::I32(x) => x.to_string(),
        MetaValue::U64(x) => x.to_string(),
        MetaValue::I64(x) => x.to_string(),
        MetaValue::F32(x) => x.to_string(),
        MetaValue::F64(x) => x.to_string(),
        MetaValue::Bool(x) => x.to_string(),
        MetaValue::Str(x) => format!("{x:?}"),
        MetaValue::Array(a) => show_array(a, full),
    };
    if full || s.chars().count() <= 200 {
        s
    } else {
        let cut: String = s.chars().take(200).collect();
        format!("{cut}... ({} chars)", s.chars().count())
    }
}

fn show_array(a: &MetaArray, full: bool) -> String {
    fn list<T: std::fmt::Debug>(items: impl ExactSizeIterator<Item = T>, full: bool) -> String {
        let n = items.len();
        let shown: Vec<String> = items.take(if full { n } else { ARRAY_PREVIEW }).map(|x| format!("{x:?}")).collect();
        let more = if n > shown.len() { format!(", ... ({n} in all)") } else { String::new() };
        format!("[{}{more}]", shown.join(", "))
    }
    match a {
        MetaArray::U8(v) => list(v.iter(), full),
        MetaArray::I8(v) => list(v.iter(), full),
        MetaArray::U16(v) => list(v.iter(), full),
        MetaArray::I16(v) => list(v.iter(), full),
        MetaArray::U32(v) => list(v.iter(), full),
        MetaArray::I32(v) => list(v.iter(), full),
        MetaArray::U64(v) => list(v.iter(), full),
        MetaArray::I64(v) => list(v.iter(), full),
        MetaArray::F32(v) => list(v.iter(), full),
        MetaArray::F64(v) => list(v.iter(), full),
        MetaArray::Bool(v) => list(v.iter(), full),
        MetaArray::Str(v) => list(v.iter(), full),
        MetaArray::Array(v) => format!("[{} arrays]", v.len()),
    }
}
