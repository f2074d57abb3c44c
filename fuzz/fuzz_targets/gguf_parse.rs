//! Parses arbitrary bytes as GGUF; on success touches every tensor's data and calls every metadata
//! getter on every key, then re-writes the file and checks the reader reads back the same thing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_io::gguf::{GgufFile, GgufWriter};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    assert!(f.version() == 2 || f.version() == 3);
    assert!(f.alignment().is_power_of_two());
    let mut acc = 0u8;
    for t in f.tensors() {
        let d = f.tensor_data(t);
        assert_eq!(d.len() as u64, t.bytes);
        assert_eq!(t.offset % f.alignment(), 0);
        assert!(t.offset >= f.data_offset());
        acc ^= d.first().copied().unwrap_or(0) ^ d.last().copied().unwrap_or(0);
        assert!(std::ptr::eq(f.tensor(&t.name).unwrap(), t));
        assert_eq!(t.elems() % t.rows(), 0);
    }
    let md = f.metadata();
    for (k, v) in md.iter() {
        assert!(std::ptr::eq(md.get(k).unwrap(), v));
        let _ = (md.u32(k), md.opt_u32(k), md.u64(k), md.opt_u64(k));
        let _ = (md.f32(k), md.opt_f32(k), md.bool(k), md.opt_bool(k));
        let _ = (
            md.str(k),
            md.opt_str(k),
            md.str_array(k),
            md.opt_str_array(k),
        );
        let _ = (
            md.f32_array(k),
            md.opt_f32_array(k),
            md.i32_array(k),
            md.opt_i32_array(k),
        );
        let _ = (md.u32_array(k), md.opt_u32_array(k));
        if let Err(e) = md.u32(k) {
            let _ = e.to_string();
        }
    }
    std::hint::black_box(acc);

    // Round trip through the writer.
    let mut w = GgufWriter::new();
    w.set_version(f.version()).unwrap();
    for (k, v) in md.iter() {
        w.add(k, v.clone()).unwrap();
    }
    for t in f.tensors() {
        w.add_tensor(&t.name, &t.dims, t.ty, f.tensor_data(t))
            .unwrap();
    }
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    let g = GgufFile::from_bytes(out).unwrap();
    assert_eq!(format!("{:?}", g.metadata()), format!("{:?}", md));
    assert_eq!(g.tensors().len(), f.tensors().len());
    for (a, b) in f.tensors().iter().zip(g.tensors()) {
        assert_eq!(
            (&a.name, &a.dims, a.ty, a.bytes),
            (&b.name, &b.dims, b.ty, b.bytes)
        );
        assert_eq!(f.tensor_data(a), g.tensor_data(b));
    }
});
