//! Single ops on a Vulkan device, through the same kernels the plan records, for the op-by-op
//! checks against the CPU ([`crate::backend_ops`]). Every call makes host-visible buffers for its
//! inputs and output, runs one submission, and reads the output back.

use std::collections::HashMap;
use std::sync::Arc;

use strata_model::sampling::Candidate;
use strata_model::RopeStyle;
use strata_quant::GgmlType;

use super::context::VulkanContext;
use super::conv;
use super::kernels::{int_quantize_groups, top_k_candidates, ActRounding, Kernel, Pipelines, Push, Recorder, TOP_K_MAX};
use super::memory::{Buffer, MemoryKind, OneShot, Origin, VulkanKvMemory};
use crate::backend_ops::{rope_angles, AttentionArgs, OpBackend};
use crate::kv_memory::HostKvMemory;
use crate::DeviceError;

/// The ops of one Vulkan device.
pub struct VulkanOps {
    // Drop order: submissions' users before the context.
    oneshot: OneShot,
    pipelines: Pipelines,
    /// Imported KV arenas by the address of their first chunk: imported once, then read in place.
    imports: HashMap<usize, (Arc<HostKvMemory>, VulkanKvMemory)>,
    ctx: Arc<VulkanContext>,
}

impl VulkanOps {
    /// # Errors
    /// A device that cannot be opened.
    pub fn new(ctx: &Arc<VulkanContext>) -> Result<VulkanOps, DeviceError> {
        Ok(VulkanOps { oneshot: OneShot::new(ctx)?, pipelines: Pipelines::new(ctx)?, imports: HashMap::new(), ctx: ctx.clone() })
    }

    fn upload(&self, bytes: &[u8]) -> Result<Buffer, DeviceError> {
        let mut b = Buffer::new(&self.ctx, bytes.len() as u64, MemoryKind::HostVisible, "op input")?;
        b.mapped_mut().ok_or_else(|| DeviceError::Unsupported { device: self.ctx.name(), what: "unmapped host buffer".into() })?[..bytes.len()].copy_from_slice(bytes);
        Ok(b)
    }

    fn output(&self, floats: usize) -> Result<Buffer, DeviceError> {
        Buffer::new(&self.ctx, (floats * 4) as u64, MemoryKind::HostVisible, "op output")
    }

    fn read(b: &Buffer, floats: usize) -> Vec<f32> {
        conv::f32_from_bytes(&b.mapped().unwrap_or(&[])[..floats * 4])
    }

    fn run(&mut self, record: impl FnOnce(&mut Recorder<'_>) -> Result<(), DeviceError>) -> Result<(), DeviceError> {
        let device = self.ctx.device.clone();
        let pipelines = &mut self.pipelines;
        let mut result = Ok(());
        self.oneshot.run(|_, cb| {
            let mut rec = Recorder::new(&device, cb, pipelines);
            result = record(&mut rec);
        })?;
        result
    }

    fn weight(&self, ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Result<(Buffer, conv::GpuLayout), DeviceError> {
        let layout = conv::layout_of(ty, rows, cols);
        let mut dst = vec![0u8; layout.total_bytes() as usize];
        conv::convert(ty, bytes, rows, cols, &mut dst)?;
        Ok((self.upload(&dst)?, layout))
    }

    /// The imported view of a host KV arena (importing it on first use).
    ///
    /// # Errors
    /// A driver that cannot import host memory.
    pub fn imported(&mut self, kv: &Arc<HostKvMemory>) -> Result<&VulkanKvMemory, DeviceError> {
        let key = kv.chunk_raw(0).map_or(0, |(p, _)| p as usize);
        if !self.imports.contains_key(&key) {
            let export = kv.export()?;
            let layout = export.layout().clone();
            // SAFETY: the Arc stored beside the import keeps the host memory alive.
            let mem = unsafe { VulkanKvMemory::import(&self.ctx, &layout, export)? };
            self.imports.insert(key, (kv.clone(), mem));
        }
        Ok(&self.imports[&key].1)
    }

    /// `rows` rows of `cols` activations rounded as the CPU quantizes them for a product with
    /// `rounding`-type weights.
    ///
    /// # Errors
    /// A device failure.
    pub fn round_activations(&mut self, rounding: super::kernels::ActRounding, x: &[f32], cols: usize) -> Result<Vec<f32>, DeviceError> {
        let rows = x.len() / cols;
        let xb = self.upload(&conv::f32_bytes(x))?;
        let out = self.output(x.len())?;
        let push = Push::new().addr(xb.address()).addr(out.address()).u32(cols as u32).u32(cols as u32).u32(rows as u32);
        self.run(|r| r.dispatch(Kernel::QuantizeAct(rounding), &push, [(rows * cols.div_ceil(256)) as u32, 1, 1]))?;
        Ok(Self::read(&out, x.len()))
    }

    /// The exact mode's rounding helpers of this device's build on each (a, b, c), five results
    /// an input i as the kernels compute them: a / b, fma(a, b, c), sqrt(|a|), c / (a / b), and
    /// acc = fma(a[j], b[j], acc) for j = i .. i + 7 (mod n) from acc = c.
    ///
    /// # Errors
    /// A device failure.
    pub fn rounding_check(&mut self, a: &[f32], b: &[f32], c: &[f32]) -> Result<Vec<f32>, DeviceError> {
        let n = a.len().min(b.len()).min(c.len());
        let (ab, bb, cb) = (self.upload(&conv::f32_bytes(&a[..n]))?, self.upload(&conv::f32_bytes(&b[..n]))?, self.upload(&conv::f32_bytes(&c[..n]))?);
        let out = self.output(5 * n)?;
        let push = Push::new().addr(ab.address()).addr(bb.address()).addr(cb.address()).addr(out.address()).u32(n as u32);
        self.run(|r| r.dispatch(Kernel::RoundingCheck, &push, [n.div_ceil(64) as u32, 1, 1]))?;
        Ok(Self::read(&out, 5 * n))
    }

    /// `rows` rows of `cols` activations as the 8-bit records the integer kernels read (quants,
    /// then per 32-element block the scale bits and the quant sum), as raw bytes.
    ///
    /// # Errors
    /// A device failure.
    pub fn int_records(&mut self, rounding: ActRounding, x: &[f32], cols: usize) -> Result<Vec<u8>, DeviceError> {
        let rows = x.len() / cols;
        let (record_bytes, meta_offset) = super::plan::int_act_record(cols);
        let xb = self.upload(&conv::f32_bytes(x))?;
        let out = self.output((rows * record_bytes).div_ceil(4))?;
        let push = Push::new().addr(xb.address()).addr(out.address()).u32(cols as u32).u32(cols as u32).u32(rows as u32).u32(record_bytes as u32).u32(meta_offset as u32);
        self.run(|r| r.dispatch(Kernel::QuantizeActInt(rounding), &push, int_quantize_groups(rows, cols)))?;
        Ok(out.mapped().unwrap_or(&[])[..rows * record_bytes].to_vec())
    }

    /// SwiGLU of `gate` and `up` (rows of `cols`) that also writes its output as 8-bit records
    /// (the kernel the plan runs before the down projection when gate and up are two products):
    /// (SwiGLU rows, records).
    ///
    /// # Errors
    /// A device failure.
    pub fn swiglu_with_records(&mut self, rounding: ActRounding, gate: &[f32], up: &[f32], cols: usize) -> Result<(Vec<f32>, Vec<u8>), DeviceError> {
        let rows = gate.len() / cols;
        let (record_bytes, meta_offset) = super::plan::int_act_record(cols);
        let (g, u) = (self.upload(&conv::f32_bytes(gate))?, self.upload(&conv::f32_bytes(up))?);
        let out = self.output(gate.len())?;
        let records = self.output((rows * record_bytes).div_ceil(4))?;
        let push = Push::new().addr(g.address()).addr(u.address()).addr(out.address()).addr(records.address()).u32(cols as u32).u32(cols as u32).u32(rows as u32).u32(record_bytes as u32).u32(meta_offset as u32);
        self.run(|r| r.dispatch(Kernel::SwiGluInt(rounding), &push, int_quantize_groups(rows, cols)))?;
        Ok((Self::read(&out, gate.len()), records.mapped().unwrap_or(&[])[..rows * record_bytes].to_vec()))
    }

    /// RMSNorm of `x`'s rows that also writes them as 8-bit records (the fused kernel the plan
    /// uses before a product): (normalized rows, records).
    ///
    /// # Errors
    /// A device failure.
    pub fn rms_norm_with_records(&mut self, rounding: ActRounding, x: &[f32], weight: &[f32], eps: f32) -> Result<(Vec<f32>, Vec<u8>), DeviceError> {
        let d = weight.len();
        let rows = x.len() / d;
        let (record_bytes, meta_offset) = super::plan::int_act_record(d);
        let xb = self.upload(&conv::f32_bytes(x))?;
        let wb = self.upload(&conv::f32_bytes(weight))?;
        let out = self.output(x.len())?;
        let records = self.output((rows * record_bytes).div_ceil(4))?;
        let push = Push::new().addr(xb.address()).addr(wb.address()).addr(out.address()).addr(records.address()).u32(d as u32).u32(1).u32(d as u32).u32(d as u32).f32(eps).u32(record_bytes as u32).u32(meta_offset as u32);
        self.run(|r| r.dispatch(Kernel::RmsNormInt(rounding), &push, [rows as u32, 1, 1]))?;
        Ok((Self::read(&out, x.len()), records.mapped().unwrap_or(&[])[..rows * record_bytes].to_vec()))
    }

    /// Attention as a decode step runs it: attention_decode.comp for tokens shorter than
    /// `gqa_from` positions, attention_decode_gqa.comp for the others (`u32::MAX`: none), then
    /// the merge of the splits.
    ///
    /// # Errors
    /// Device errors; [`DeviceError::Unsupported`] for the GQA kernel on a device that cannot run
    /// it.
    pub fn decode_attention(&mut self, kv: &Arc<HostKvMemory>, a: &AttentionArgs<'_>, gqa_from: u32) -> Result<Vec<f32>, DeviceError> {
        if gqa_from != u32::MAX && !super::plan::gqa_attention_runs_on(&self.ctx.info) {
            return Err(DeviceError::Unsupported { device: self.ctx.name(), what: "attention_decode_gqa.comp (quad operations, 28 KiB of shared memory, 256 invocations)".into() });
        }
        self.run_attention(kv, a, Some(gqa_from))
    }

    /// attention.comp (`gqa_from` None) or the decode kernels, and the merge.
    fn run_attention(&mut self, kv: &Arc<HostKvMemory>, a: &AttentionArgs<'_>, gqa_from: Option<u32>) -> Result<Vec<f32>, DeviceError> {
        let n = a.positions.len();
        let ctx = self.ctx.clone();
        let (kc, vc, stride) = super::plan::kv_addresses(&ctx, self.imported(kv)?, a.layer)?;
        let max_len = a.positions.iter().map(|&p| p as usize + 1).max().unwrap_or(1);
        // Several splits even for short contexts, so the merge is exercised.
        let n_splits = max_len.div_ceil(64).clamp(1, 16);
        let split_len = max_len.div_ceil(n_splits);
        // Tokens of the GQA decode kernel cut their context by its own rule.
        let (long, long_splits) = super::plan::long_context_tokens(a.positions, gqa_from.unwrap_or(u32::MAX));
        let n_splits = n_splits.max(long_splits);
        let header = super::plan::step_header(n_splits, split_len, n, a.n_heads, a.n_kv_heads, long);
        let flat: Vec<u32> = a.block_tables.concat();
        let mut offsets = vec![0u32; n];
        super::plan::token_table_offsets(a.block_tables, a.seq_of_token, &mut offsets)?;
        let hb = self.upload(&u32_bytes(&header))?;
        let qb = self.upload(&conv::f32_bytes(a.q))?;
        let pos = self.upload(&u32_bytes(a.positions))?;
        let seq = self.upload(&u32_bytes(a.seq_of_token))?;
        let off = self.upload(&u32_bytes(&offsets))?;
        let tab = self.upload(&u32_bytes(&flat))?;
        let qw = a.n_heads * a.head_dim;
        let partial = self.output(n * a.n_heads * n_splits * (a.head_dim + 2))?;
        let out = self.output(n * qw)?;
        let push = Push::new()
            .addr(qb.address())
            .addr(partial.address())
            .addr(kc)
            .addr(vc)
            .addr(pos.address())
            .addr(seq.address())
            .addr(off.address())
            .addr(tab.address())
            .addr(hb.address())
            .u32(a.n_heads as u32)
            .u32(a.n_kv_heads as u32)
            .u32(a.head_dim as u32)
            .u32(qw as u32)
            .u32((stride / 2) as u32)
            .u32(a.block_size as u32)
            .f32(a.scale);
        let combine = Push::new().addr(partial.address()).addr(out.address()).addr(hb.address()).u32(a.n_heads as u32).u32(a.head_dim as u32).u32(qw as u32);
        let hbuf = hb.buffer;
        self.run(|r| {
            match gqa_from {
                None => r.dispatch_indirect(Kernel::Attention, &push, hbuf, (super::plan::HEADER_ATTENTION_ARGS * 4) as u64)?,
                Some(from) => {
                    let push = push.u32(from);
                    r.dispatch_indirect(Kernel::AttentionDecode, &push, hbuf, (super::plan::HEADER_ATTENTION_DECODE_ARGS * 4) as u64)?;
                    r.dispatch_indirect(Kernel::AttentionDecodeGqa, &push, hbuf, (super::plan::HEADER_ATTENTION_GQA_ARGS * 4) as u64)?;
                }
            }
            r.barrier();
            r.dispatch(Kernel::AttentionCombine, &combine, [a.n_heads as u32, n as u32, 1])
        })?;
        Ok(Self::read(&out, n * qw))
    }

    /// Where each imported chunk of `kv` came from (host pointers, for the zero-copy check).
    pub fn import_origins(&self, kv: &Arc<HostKvMemory>) -> Option<Vec<Origin>> {
        let key = kv.chunk_raw(0).map_or(0, |(p, _)| p as usize);
        self.imports.get(&key).map(|(_, m)| m.origins())
    }
}

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl OpBackend for VulkanOps {
    fn name(&self) -> String {
        if self.ctx.info.integer_dot_product && !self.ctx.integer_dot_product {
            format!("{} (integer dot products off)", self.ctx.name())
        } else {
            self.ctx.name()
        }
    }

    /// As the plan computes a product: activations rounded as the CPU quantizes them for a
    /// quantized weight (8-bit quants for the integer kernels of decode-sized steps, rounded f32
    /// otherwise), then the product kernel.
    fn matmul(&mut self, ty: GgmlType, weight: &[u8], rows: usize, cols: usize, x: &[f32], n: usize) -> Result<Vec<f32>, DeviceError> {
        let (w, layout) = self.weight(ty, weight, rows, cols)?;
        let xb = self.upload(&conv::f32_bytes(x))?;
        let out = self.output(rows * n)?;
        let aux = if layout.aux_bytes == 0 { 0 } else { w.address() + layout.aux_offset };
        let format = layout.format;
        let push = Push::new().addr(w.address()).addr(aux);
        let rounding = ActRounding::for_format(format);
        match rounding {
            Some(r) if super::plan::uses_int_product(&self.ctx, format, n) => {
                let (record_bytes, meta_offset) = super::plan::int_act_record(cols);
                let records = self.output((n * record_bytes).div_ceil(4))?;
                let quantize = Push::new().addr(xb.address()).addr(records.address()).u32(cols as u32).u32(cols as u32).u32(n as u32).u32(record_bytes as u32).u32(meta_offset as u32);
                let push = push.addr(records.address()).addr(out.address()).addr(0).u32(rows as u32).u32(cols as u32).u32(n as u32).u32(record_bytes as u32).u32(rows as u32).u32(meta_offset as u32).u32(0);
                let (kernel, groups) = super::plan::int_product_dispatch(&self.ctx, format, rows, cols, n, true);
                self.run(|rec| {
                    rec.dispatch(Kernel::QuantizeActInt(r), &quantize, int_quantize_groups(n, cols))?;
                    rec.barrier();
                    rec.dispatch(kernel, &push, groups)
                })?;
            }
            _ => {
                let rounded = self.output(x.len())?;
                let input = if rounding.is_some() { rounded.address() } else { xb.address() };
                let push = push.addr(input).addr(out.address()).addr(0).u32(rows as u32).u32(cols as u32).u32(n as u32).u32(cols as u32).u32(rows as u32);
                let (kernel, push, groups) = super::plan::product_dispatch(&self.ctx, format, rows, n, push);
                self.run(|rec| {
                    if let Some(r) = rounding {
                        let quantize = Push::new().addr(xb.address()).addr(rounded.address()).u32(cols as u32).u32(cols as u32).u32(n as u32);
                        rec.dispatch(Kernel::QuantizeAct(r), &quantize, [(n * cols.div_ceil(256)) as u32, 1, 1])?;
                        rec.barrier();
                    }
                    rec.dispatch(kernel, &push, groups)
                })?;
            }
        }
        Ok(Self::read(&out, rows * n))
    }

    fn embed(&mut self, ty: GgmlType, table: &[u8], rows: usize, cols: usize, tokens: &[u32]) -> Result<Vec<f32>, DeviceError> {
        let (w, layout) = self.weight(ty, table, rows, cols)?;
        let tb = self.upload(&u32_bytes(tokens))?;
        let out = self.output(tokens.len() * cols)?;
        let aux = if layout.aux_bytes == 0 { 0 } else { w.address() + layout.aux_offset };
        let push = Push::new().addr(w.address()).addr(aux).addr(tb.address()).addr(out.address()).u32(cols as u32).u32(cols as u32);
        self.run(|r| r.dispatch(Kernel::Embed(layout.format), &push, crate::vulkan::kernels::embed_groups(tokens.len(), cols)))?;
        Ok(Self::read(&out, tokens.len() * cols))
    }

    fn rms_norm(&mut self, x: &[f32], weight: &[f32], eps: f32) -> Result<Vec<f32>, DeviceError> {
        let d = weight.len();
        let xb = self.upload(&conv::f32_bytes(x))?;
        let wb = self.upload(&conv::f32_bytes(weight))?;
        let out = self.output(x.len())?;
        let push = Push::new().addr(xb.address()).addr(wb.address()).addr(out.address()).u32(d as u32).u32(1).u32(d as u32).u32(d as u32).f32(eps);
        self.run(|r| r.dispatch(Kernel::RmsNorm, &push, [(x.len() / d) as u32, 1, 1]))?;
        Ok(Self::read(&out, x.len()))
    }

    fn rope(&mut self, x: &[f32], n_heads: usize, head_dim: usize, rope_dims: usize, base: f32, positions: &[u32], style: RopeStyle) -> Result<Vec<f32>, DeviceError> {
        let half = rope_dims / 2;
        let max_pos = positions.iter().copied().max().unwrap_or(0) as usize;
        let mut table = Vec::with_capacity((max_pos + 1) * 2 * half);
        for pos in 0..=max_pos as u32 {
            let (c, s) = rope_angles(rope_dims, base, pos);
            table.extend(c);
            table.extend(s);
        }
        let xb = self.upload(&conv::f32_bytes(x))?;
        let tb = self.upload(&conv::f32_bytes(&table))?;
        let pb = self.upload(&u32_bytes(positions))?;
        let n = positions.len();
        let push = Push::new()
            .addr(xb.address())
            .addr(tb.address())
            .addr(pb.address())
            .u32((n_heads * head_dim) as u32)
            .u32(n_heads as u32)
            .u32(head_dim as u32)
            .u32(half as u32)
            .u32(u32::from(style == RopeStyle::Neox))
            .u32(n as u32);
        self.run(|r| r.dispatch(Kernel::Rope, &push, [(n * n_heads * half).div_ceil(64) as u32, 1, 1]))?;
        Ok(Self::read(&xb, x.len()))
    }

    fn swiglu(&mut self, gate: &[f32], up: &[f32]) -> Result<Vec<f32>, DeviceError> {
        let (g, u) = (self.upload(&conv::f32_bytes(gate))?, self.upload(&conv::f32_bytes(up))?);
        let out = self.output(gate.len())?;
        let push = Push::new().addr(g.address()).addr(u.address()).addr(out.address()).u32(gate.len() as u32);
        self.run(|r| r.dispatch(Kernel::SwiGlu, &push, [(gate.len() as u32).div_ceil(256), 1, 1]))?;
        Ok(Self::read(&out, gate.len()))
    }

    fn top_k(&mut self, x: &[f32], width: usize, k: usize) -> Result<Vec<Vec<Candidate>>, DeviceError> {
        if k > TOP_K_MAX || width == 0 {
            return Err(DeviceError::Unsupported { device: self.ctx.name(), what: format!("a top-k of {k} (at most {TOP_K_MAX}) over rows of {width}") });
        }
        let rows = x.len() / width;
        let xb = self.upload(&conv::f32_bytes(x))?;
        let out = self.output(rows * TOP_K_MAX * 2)?;
        let push = Push::new().addr(xb.address()).addr(out.address()).u32(width as u32);
        self.run(|r| r.dispatch(Kernel::TopK, &push, [rows as u32, 1, 1]))?;
        let words = conv::u32_from_bytes(&out.mapped().unwrap_or(&[])[..rows * TOP_K_MAX * 8]);
        Ok(words.chunks_exact(TOP_K_MAX * 2).map(|row| top_k_candidates(row, k)).collect())
    }

    fn add(&mut self, acc: &[f32], other: &[f32]) -> Result<Vec<f32>, DeviceError> {
        let (a, o) = (self.upload(&conv::f32_bytes(acc))?, self.upload(&conv::f32_bytes(other))?);
        let push = Push::new().addr(a.address()).addr(o.address()).u32(acc.len() as u32);
        self.run(|r| r.dispatch(Kernel::Add, &push, [(acc.len() as u32).div_ceil(256), 1, 1]))?;
        Ok(Self::read(&a, acc.len()))
    }

    fn attention(&mut self, kv: &Arc<HostKvMemory>, a: &AttentionArgs<'_>) -> Result<Vec<f32>, DeviceError> {
        self.run_attention(kv, a, None)
    }
}
