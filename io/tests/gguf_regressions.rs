//! Inputs kept under `tests/bad_gguf/` (found by the `gguf_parse` fuzz target, or hand-made for
//! the hostile cases it exercises) must each give a clear error, quickly, without panicking.
//!
//! A file is named `<Variant>-<what it exercises>.gguf`; `<Variant>` is the [`GgufError`] variant
//! it must produce.

use std::time::{Duration, Instant};

use strata_io::gguf::{GgufError, GgufFile};

#[test]
fn bad_gguf_inputs_give_their_error() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_gguf");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no inputs in {}", dir.display());
    for p in &paths {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let variant = name.split('-').next().unwrap();
        let start = Instant::now();
        let e = GgufFile::open(p).expect_err(&name);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{name} took {:?}",
            start.elapsed()
        );
        assert!(matches!(e, GgufError::File { .. }), "{name}: {e}");
        let root = format!("{:?}", e.root());
        assert!(
            root.starts_with(variant),
            "{name}: expected {variant}, got {root}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&name) && msg.len() > name.len() + 20,
            "{name}: unclear message {msg}"
        );
        eprintln!("{msg}");
    }
}

/// Valid inputs the fuzzer flagged (harness bugs rather than parser bugs) must keep parsing and
/// round-tripping. `fuzz-metadata_debug_order`: `Metadata`'s `Debug` once printed the hash index,
/// so two equal maps could print differently; it now prints the pairs in file order.
#[test]
fn good_gguf_inputs_parse_and_round_trip() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/good_gguf");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let f = GgufFile::open(&p).unwrap();
        let mut w = strata_io::GgufWriter::new();
        w.set_version(f.version()).unwrap();
        for (k, v) in f.metadata().iter() {
            w.add(k, v.clone()).unwrap();
        }
        for t in f.tensors() {
            w.add_tensor(&t.name, &t.dims, t.ty, f.tensor_data(t))
                .unwrap();
        }
        let mut out = Vec::new();
        w.write_to(&mut out).unwrap();
        let g = GgufFile::from_bytes(out).unwrap();
        assert_eq!(g.metadata(), f.metadata());
        assert_eq!(format!("{:?}", g.metadata()), format!("{:?}", f.metadata()));
        let keys: Vec<&str> = f.metadata().iter().map(|(k, _)| k).collect();
        let dbg = format!("{:?}", f.metadata());
        let pos: Vec<usize> = keys
            .iter()
            .map(|k| dbg.find(&format!("{k:?}")).unwrap())
            .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "{dbg}");
    }
}
