//! Writes the small valid GGUF files used as the fuzz corpus seeds.
//!
//! `cargo run -p strata-io --example gguf_fuzz_seeds -- fuzz/corpus/gguf_parse`

#[path = "../tests/common/samples.rs"]
#[allow(dead_code)]
mod samples;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: gguf_fuzz_seeds <dir>")?;
    std::fs::create_dir_all(&dir)?;
    for (name, w) in samples::all() {
        let path = std::path::Path::new(&dir).join(format!("{name}.gguf"));
        w.write_to_path(&path)?;
        println!("{}", path.display());
    }
    Ok(())
}
