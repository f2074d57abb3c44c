//! Compiles the Vulkan compute shaders (`src/vulkan/shaders/*.comp`, GLSL) to SPIR-V with `glslc`.
//! The weight-reading kernels are built once per weight type (`-DTYPE_<T>`).

use std::path::{Path, PathBuf};
use std::process::Command;

const SHADER_DIR: &str = "src/vulkan/shaders";
const PER_TYPE: &[&str] = &["matvec", "matmul", "embed"];
const TYPES: &[&str] = &["F32", "F16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"];
/// The weight types of the integer-dot-product kernel (quantized ones).
const INT_TYPES: &[&str] = &["Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"];
/// The product kernels' workgroup layouts (kernels.rs, ProductLayout): (file suffix, lane groups
/// per workgroup of 128).
const PRODUCT_LAYOUTS: &[(&str, u32)] = &[("", 1), ("_g2", 2), ("_g4", 4)];
/// Rows per workgroup of its one-token build (chosen at run time, `STRATA_MATVEC_ROWS`).
const INT_ROWS: &[u32] = &[1, 2, 4, 8];
/// The rounding builds of the kernels that have them: (file suffix, defines).
const ROUNDING_BUILDS: &[(&str, &[&str])] = &[("", &[]), ("_f64", &["F64"]), ("_f64fma", &["F64", "FMA_F64"])];
/// The weight types of the kernel that computes the CPU's bits (matvec_exact), and its builds:
/// (tokens per pass, blocks loaded ahead per lane).
const EXACT_TYPES: &[&str] = &["Q4_0", "Q4_1", "Q8_0", "Q4_K"];
const EXACT_BUILDS: &[(u32, u32)] = &[(1, 1), (1, 2), (1, 4), (1, 8), (4, 1), (4, 2)];
/// matmul_q.comp's tile shapes: (file suffix, defines).
const GEMM_TILES: &[(&str, &[&str])] = &[("", &["KI=4", "PREFETCH"]), ("_k2", &["KI=2"]), ("_k4", &["KI=4"]), ("_n8", &["KI=2", "TN=8"])];
const PLAIN: &[&str] = &["rms_norm", "store_kv", "attention", "attention_decode", "attention_decode_gqa", "attention_combine", "swiglu", "add", "select_rows", "read_bandwidth", "prefetch_l2", "stage_chain", "argmax", "top_k"];

fn main() {
    println!("cargo:rerun-if-changed={SHADER_DIR}");
    println!("cargo:rerun-if-env-changed=GLSLC");
    println!("cargo:rerun-if-env-changed=STRATA_MATVEC1_ROWS");
    println!("cargo:rerun-if-env-changed=STRATA_SHADER_TIMELINE");
    println!("cargo:rerun-if-env-changed=STRATA_SHADER_DEFINES");
    // Rows per subgroup of the one-token matrix-vector kernel (a tuning knob for experiments).
    let rows1 = std::env::var("STRATA_MATVEC1_ROWS").ok().and_then(|v| v.parse::<u32>().ok()).filter(|r| (1..=8).contains(r)).unwrap_or(4);
    println!("cargo:rustc-env=STRATA_MATVEC1_ROWS={rows1}");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let glslc = std::env::var("GLSLC").unwrap_or_else(|_| "glslc".to_string());
    for name in PLAIN {
        compile(&glslc, name, None, &out);
    }
    // The workgroup timeline's test kernel, in every build (vulkan::timeline).
    compile_with(&glslc, "read_bandwidth", "read_bandwidth_timeline", &["TIMELINE"], &out);
    compile_with(&glslc, "stage_chain", "stage_chain_copy", &["COPY"], &out);
    // Decode attention writing its split records tagged (plan.rs, STRATA_VULKAN_TAGGED_MERGE).
    compile_with(&glslc, "attention_decode", "attention_decode_tagged", &["TAGGED_OUT"], &out);
    compile_with(&glslc, "attention_decode_gqa", "attention_decode_gqa_tagged", &["TAGGED_OUT"], &out);
    // Both also reading q and the new cell tagged, from QKV recorded right before them.
    compile_with(&glslc, "attention_decode", "attention_decode_tagged_in", &["TAGGED_OUT", "TAGGED_IN"], &out);
    compile_with(&glslc, "attention_decode_gqa", "attention_decode_gqa_tagged_in", &["TAGGED_OUT", "TAGGED_IN"], &out);
    compile_with(&glslc, "stage_chain", "stage_chain_big_shared", &["BIG_SHARED"], &out);
    // Kernels whose divisions, square roots or fused multiply-adds must round as the CPU's have
    // three builds (shaders/common.glsl): as written, F64 (divisions and square roots through
    // f64) and F64 + FMA_F64 (fused multiply-adds through f64 too).
    for (suffix, defines) in ROUNDING_BUILDS {
        compile_with(&glslc, "rounding_check", &format!("rounding_check{suffix}"), defines, &out);
        for (act, define) in [("q8_0", "ACT_Q8_0"), ("q8_k", "ACT_Q8_K")] {
            let with = |d: &[&'static str]| -> Vec<&'static str> { d.iter().chain(defines.iter()).copied().collect() };
            compile_with(&glslc, "quantize_act", &format!("quantize_act_{act}{suffix}"), &with(&[define]), &out);
            compile_with(&glslc, "quantize_act", &format!("quantize_act_int_{act}{suffix}"), &with(&[define, "INT_OUT"]), &out);
            compile_with(&glslc, "quantize_act", &format!("swiglu_quantize_int_{act}{suffix}"), &with(&[define, "INT_OUT", "SWIGLU"]), &out);
            compile_with(&glslc, "quantize_act", &format!("combine_quantize_int_{act}{suffix}"), &with(&[define, "INT_OUT", "COMBINE"]), &out);
            compile_with(&glslc, "rms_norm_q", &format!("rms_norm_int_{act}{suffix}"), &with(&[define]), &out);
            if defines.is_empty() {
                // Reading the row tagged by the product before it (no barrier between them).
                compile_with(&glslc, "rms_norm_q", &format!("rms_norm_int_{act}_tagged"), &[define, "TAGGED_IN"], &out);
                compile_with(&glslc, "quantize_act", &format!("quantize_act_int_{act}_tagged"), &[define, "INT_OUT", "TAGGED_IN"], &out);
                // The RMSNorm after a tagged residual add as that quantization's chunks (NORM_W).
                compile_with(&glslc, "quantize_act", &format!("quantize_act_int_{act}_tagged_norm"), &[define, "INT_OUT", "TAGGED_IN", "NORM_W"], &out);
                // The same of rows written before it (the batched steps').
                compile_with(&glslc, "quantize_act", &format!("quantize_act_int_{act}_norm"), &[define, "INT_OUT", "NORM_W"], &out);
                compile_with(&glslc, "quantize_act", &format!("combine_quantize_int_{act}_tagged"), &[define, "INT_OUT", "COMBINE", "TAGGED_IN"], &out);
            }
            // Chained builds (shaders/chain.glsl) of the one-token step's staged kernels.
            compile_with(&glslc, "quantize_act", &format!("quantize_act_int_{act}{suffix}_chained"), &with(&[define, "INT_OUT", "CHAINED"]), &out);
            compile_with(&glslc, "rms_norm_q", &format!("rms_norm_int_{act}{suffix}_chained"), &with(&[define, "CHAINED"]), &out);
        }
        for (act, define) in [("q8_0", "ACT_Q8_0"), ("q8_k", "ACT_Q8_K")] {
            if defines.is_empty() {
                compile_with(&glslc, "attention_decode", &format!("attention_decode_fused_{act}"), &["FUSED_COMBINE", define], &out);
            }
        }
        for name in ["rope", "rope_store", "attention_exact"] {
            compile_with(&glslc, name, &format!("{name}{suffix}"), defines, &out);
        }
    }
    for ty in INT_TYPES {
        let t = format!("TYPE_{ty}");
        let ty = ty.to_lowercase();
        for rows in INT_ROWS {
            compile_with(&glslc, "matvec_q", &format!("matvec_q1_r{rows}_{ty}"), &[&t, "NT=1", &format!("ROWS={rows}")], &out);
        }
        // Two items in flight per lane, 128 lanes a row (long rows: a 7B down projection).
        for rows in [2, 4] {
            compile_with(&glslc, "matvec_q", &format!("matvec_q1_r{rows}_{ty}_u2"), &[&t, "NT=1", &format!("ROWS={rows}"), "UNROLL2"], &out);
        }
        // Chained builds (shaders/chain.glsl) of the one-token products, 128 and 64 lanes a row.
        for rows in [2, 4] {
            compile_with(&glslc, "matvec_q", &format!("matvec_q1_r{rows}_{ty}_chained"), &[&t, "NT=1", &format!("ROWS={rows}"), "CHAINED"], &out);
            compile_with(&glslc, "matvec_q", &format!("matvec_q1_r{rows}_{ty}_u2_chained"), &[&t, "NT=1", &format!("ROWS={rows}"), "UNROLL2", "CHAINED"], &out);
        }
        for (suffix, groups) in &PRODUCT_LAYOUTS[..2] {
            let groups_define = format!("GROUPS={groups}");
            let build = |name: &str, defines: &[&str]| {
                let d: Vec<&str> = defines.iter().copied().chain([groups_define.as_str(), "CHAINED"]).collect();
                compile_with(&glslc, "matvec_q", &format!("{name}{suffix}_chained"), &d, &out);
            };
            if *groups > 1 {
                build(&format!("matvec_q1_r2_{ty}"), &[&t, "NT=1", "ROWS=2"]);
            }
            build(&format!("matvec_qkv_{ty}"), &[&t, "NT=1", "ROWS=2", "QKV_ROPE"]);
            build(&format!("matvec_swiglu_{ty}_f32"), &[&t, "NT=1", "ROWS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET"]);
            build(&format!("matvec_swiglu_{ty}_f32_p2"), &[&t, "NT=1", "ROWS=4", "PAIRS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET"]);
        }
        // The RMSNorm after a residual add in the one-token product's last workgroups
        // (NORM_EPILOGUE: the layouts a residual-adding product takes, its records rounded as
        // this type's products read them), and the fused QKV and gate/up products that scale
        // their outputs by that norm (NORM_SCALE), 128 and 64 lanes a row.
        {
            let act = if matches!(ty.as_str(), "q4_k" | "q6_k") { "ACT_Q8_K" } else { "ACT_Q8_0" };
            // Where the tagged products read the step's tag (matvec_q.comp): Q4_1's where each
            // output is stored (its down projection then keeps the plain build's 40 registers, not
            // 48: 7B decode +1.8% on an H100), the others' first (Q4_K's down keeps 61 registers
            // against 52, yet the late read made its decode 1.9% slower).
            let tag_at_store = if ty == "q4_1" { "TAG_AT_STORE" } else { "TAG_EARLY" };
            for (name, defines) in [
                (format!("matvec_q1_r2_normout_{ty}"), vec!["ROWS=2"]),
                (format!("matvec_q1_r2_normout_{ty}_g2"), vec!["ROWS=2", "GROUPS=2"]),
                (format!("matvec_q1_r4_normout_{ty}"), vec!["ROWS=4"]),
                (format!("matvec_q1_r2_normout_{ty}_u2"), vec!["ROWS=2", "UNROLL2"]),
                (format!("matvec_q1_r4_normout_{ty}_u2"), vec!["ROWS=4", "UNROLL2"]),
            ] {
                let d: Vec<&str> = [t.as_str(), "NT=1", "NORM_EPILOGUE", act].into_iter().chain(defines.iter().copied()).collect();
                compile_with(&glslc, "matvec_q", &name, &d, &out);
                // The same layouts writing their outputs tagged with the step (TAGGED_OUT).
                let d: Vec<&str> = [t.as_str(), "NT=1", "TAGGED_OUT", tag_at_store].into_iter().chain(defines).collect();
                compile_with(&glslc, "matvec_q", &name.replace("_normout", "_tagout"), &d, &out);
            }
            for (suffix, groups) in &PRODUCT_LAYOUTS[..2] {
                let g = format!("GROUPS={groups}");
                // The f32 SwiGLU pair writing its row tagged with the step too (TAGGED_OUT).
                compile_with(&glslc, "matvec_q", &format!("matvec_swiglu_tagout_{ty}_f32{suffix}"), &[&t, "NT=1", "ROWS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET", "TAGGED_OUT", tag_at_store, &g], &out);
                compile_with(&glslc, "matvec_q", &format!("matvec_swiglu_tagout_{ty}_f32_p2{suffix}"), &[&t, "NT=1", "ROWS=4", "PAIRS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET", "TAGGED_OUT", tag_at_store, &g], &out);
                compile_with(&glslc, "matvec_q", &format!("matvec_qkv_scaled_{ty}{suffix}"), &[&t, "NT=1", "ROWS=2", "QKV_ROPE", "NORM_SCALE", &g], &out);
                compile_with(&glslc, "matvec_q", &format!("matvec_swiglu_scaled_{ty}_f32{suffix}"), &[&t, "NT=1", "ROWS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET", "NORM_SCALE", &g], &out);
                compile_with(&glslc, "matvec_q", &format!("matvec_swiglu_scaled_{ty}_f32_p2{suffix}"), &[&t, "NT=1", "ROWS=4", "PAIRS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET", "NORM_SCALE", &g], &out);
                // The batched product scaled alike (a token's outputs then have the bits it gets
                // alone from the two above).
                compile_with(&glslc, "matvec_q", &format!("matvec_q4_scaled_{ty}{suffix}"), &[&t, "NT=4", "ROWS=2", "NORM_SCALE", &g], &out);
                // Scaled and writing the SwiGLU row tagged (after the chunked norm, before the
                // tagged quantization).
                compile_with(&glslc, "matvec_q", &format!("matvec_swiglu_scaled_tagout_{ty}_f32{suffix}"), &[&t, "NT=1", "ROWS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET", "NORM_SCALE", "TAGGED_OUT", tag_at_store, &g], &out);
                compile_with(&glslc, "matvec_q", &format!("matvec_swiglu_scaled_tagout_{ty}_f32_p2{suffix}"), &[&t, "NT=1", "ROWS=4", "PAIRS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET", "NORM_SCALE", "TAGGED_OUT", tag_at_store, &g], &out);
            }
        }
        // Each layout (kernels.rs, ProductLayout) of every product kernel; 128 lanes a row
        // (one group) carries no suffix.
        for (suffix, groups) in PRODUCT_LAYOUTS {
            let groups_define = format!("GROUPS={groups}");
            let build = |name: &str, defines: &[&str]| {
                let d: Vec<&str> = defines.iter().copied().chain([groups_define.as_str()]).collect();
                compile_with(&glslc, "matvec_q", &format!("{name}{suffix}"), &d, &out);
            };
            build(&format!("matvec_q4_{ty}"), &[&t, "NT=4", "ROWS=2"]);
            if *groups > 1 {
                build(&format!("matvec_q1_r2_{ty}"), &[&t, "NT=1", "ROWS=2"]);
            }
            build(&format!("matvec_qkv_{ty}"), &[&t, "NT=1", "ROWS=2", "QKV_ROPE"]);
            // Writing its outputs tagged too, for the attention split kernels recorded right
            // after it (TAGGED_OUT).
            build(&format!("matvec_qkv_tagout_{ty}"), &[&t, "NT=1", "ROWS=2", "QKV_ROPE", "TAGGED_OUT"]);
            for (act, define) in [("q8_0", "ACT_Q8_0"), ("q8_k", "ACT_Q8_K")] {
                build(&format!("matvec_swiglu_{ty}_{act}"), &[&t, "NT=1", "ROWS=2", "SWIGLU_PAIR", define]);
            }
            build(&format!("matvec_swiglu_{ty}_f32"), &[&t, "NT=1", "ROWS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET"]);
            build(&format!("matvec_swiglu_{ty}_f32_p2"), &[&t, "NT=1", "ROWS=4", "PAIRS=2", "SWIGLU_PAIR", "ACT_Q8_0", "NO_TICKET"]);
            // The same two with the RMSNorm before them in their own workgroups (its records
            // rounded as this type's products read them).
            let act = if matches!(ty.as_str(), "q4_k" | "q6_k") { "ACT_Q8_K" } else { "ACT_Q8_0" };
            build(&format!("matvec_qkv_norm_{ty}"), &[&t, "NT=1", "ROWS=2", "QKV_ROPE", "NORM_PROLOGUE", act]);
            build(&format!("matvec_swiglu_norm_{ty}_f32"), &[&t, "NT=1", "ROWS=2", "SWIGLU_PAIR", act, "NO_TICKET", "NORM_PROLOGUE"]);
            build(&format!("matvec_swiglu_norm_{ty}_f32_p2"), &[&t, "NT=1", "ROWS=4", "PAIRS=2", "SWIGLU_PAIR", act, "NO_TICKET", "NORM_PROLOGUE"]);
        }
    }
    // The feed-forward half of a decoding layer in one dispatch (ffn_persistent.comp), in the
    // staged kernels' layouts (kernels.rs, FfnLayout): gate/up with 64 lanes a row, two output
    // rows a group for Q4_K; down with 128 lanes a row and two items in flight (long rows: four
    // rows a workgroup for Q4_K, else two) or with 64 lanes a row, two rows a group (short rows).
    for ty in INT_TYPES {
        let t = format!("TYPE_{ty}");
        let act = if matches!(*ty, "Q4_K" | "Q6_K") { "ACT_Q8_K" } else { "ACT_Q8_0" };
        let pairs = if *ty == "Q4_K" { "GU_PAIRS=2" } else { "GU_PAIRS=1" };
        let long_rows = if *ty == "Q4_K" { "DOWN_ROWS=4" } else { "DOWN_ROWS=2" };
        let ty = ty.to_lowercase();
        let common = [t.as_str(), act, pairs, "GU_GROUPS=2"];
        let long = [long_rows, "DOWN_GROUPS=1", "DOWN_UNROLL2=1"];
        let short = ["DOWN_ROWS=2", "DOWN_GROUPS=2", "DOWN_UNROLL2=0"];
        compile_with(&glslc, "ffn_persistent", &format!("ffn_persistent_{ty}_long"), &[&common[..], &long[..]].concat(), &out);
        compile_with(&glslc, "ffn_persistent", &format!("ffn_persistent_{ty}_short"), &[&common[..], &short[..]].concat(), &out);
    }
    // The integer tiled product of prefill chunks (matmul_q.comp), in each tile shape
    // (kernels.rs, GemmTile): (file suffix, defines).
    for ty in INT_TYPES {
        let t = format!("TYPE_{ty}");
        for (suffix, defines) in GEMM_TILES {
            let d: Vec<&str> = [t.as_str()].into_iter().chain(defines.iter().copied()).collect();
            compile_with(&glslc, "matmul_q", &format!("matmul_q_{}{suffix}", ty.to_lowercase()), &d, &out);
        }
    }
    for ty in EXACT_TYPES {
        for (nt, unroll) in EXACT_BUILDS {
            let defines = [format!("TYPE_{ty}"), format!("NT={nt}"), format!("UNROLL={unroll}")];
            let d: Vec<&str> = defines.iter().map(String::as_str).collect();
            compile_with(&glslc, "matvec_exact", &format!("matvec_exact_t{nt}_u{unroll}_{}", ty.to_lowercase()), &d, &out);
            compile_with(&glslc, "matvec_exact", &format!("matvec_exact_t{nt}_u{unroll}_{}_f64fma", ty.to_lowercase()), &[d.as_slice(), &["FMA_F64"]].concat(), &out);
            if *ty == "Q4_K" {
                // The AVX2 level's lane order (kernels.rs, KQuantOrder).
                compile_with(&glslc, "matvec_exact", &format!("matvec_exact_t{nt}_u{unroll}_q4_k_l8"), &[d.as_slice(), &["K_LANES8"]].concat(), &out);
                compile_with(&glslc, "matvec_exact", &format!("matvec_exact_t{nt}_u{unroll}_q4_k_l8_f64fma"), &[d.as_slice(), &["K_LANES8", "FMA_F64"]].concat(), &out);
            }
        }
    }
    for ty in TYPES {
        compile_with(&glslc, "matvec", &format!("matvec1_{}", ty.to_lowercase()), &[&format!("TYPE_{ty}"), "NT=1", &format!("ROWS1={rows1}")], &out);
    }
    for name in PER_TYPE {
        for ty in TYPES {
            compile(&glslc, name, Some(ty), &out);
        }
    }
}

fn compile(glslc: &str, name: &str, ty: Option<&str>, out: &Path) {
    match ty {
        Some(t) => compile_with(glslc, name, &format!("{name}_{}", t.to_lowercase()), &[&format!("TYPE_{t}")], out),
        None => compile_with(glslc, name, name, &[], out),
    }
}

fn compile_with(glslc: &str, name: &str, output: &str, defines: &[&str], out: &Path) {
    let src = Path::new(SHADER_DIR).join(format!("{name}.comp"));
    let spv = out.join(format!("{output}.spv"));
    let mut cmd = Command::new(glslc);
    cmd.args(["--target-env=vulkan1.2", "-O", "-Werror"]);
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    // Workgroup timeline builds (common.glsl's TIMELINE): a developer's tool for measuring where a
    // step's time goes between and inside dispatches, never the default.
    // `sm` also records NVIDIA's SM index (VK_NV_shader_sm_builtins, which other devices lack).
    match std::env::var("STRATA_SHADER_TIMELINE").as_deref() {
        Ok("1") => {
            cmd.arg("-DTIMELINE");
        }
        // (Debian 12's glslc crashes on the SM index in the exact mode's f64 builds.)
        Ok("sm") if defines.iter().any(|d| d.starts_with("F64")) => {
            cmd.arg("-DTIMELINE");
        }
        Ok("sm") => {
            cmd.args(["-DTIMELINE", "-DTIMELINE_SM"]);
        }
        _ => {}
    }
    // Experiments' defines for every shader (`STRATA_SHADER_DEFINES=A,B`): a developer's tool for
    // timing a kernel's alternative form as a build of its own, never the default.
    if let Ok(extra) = std::env::var("STRATA_SHADER_DEFINES") {
        for d in extra.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            cmd.arg(format!("-D{d}"));
        }
    }
    cmd.arg(&src).arg("-o").arg(&spv);
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("cannot run `{glslc}` to compile the Vulkan shaders ({e}). Install it (Debian/Ubuntu: `apt-get install glslc`) or point GLSLC at it.")
    });
    assert!(status.success(), "glslc failed on {}", src.display());
}
