//! Measurements of the device itself, apart from any model: what a stage boundary of a decode
//! step costs (`stage_chain.comp`).
//!
//! A decode step of the fast path is ~9 dispatches a layer separated by pipeline barriers; each
//! product stage costs a few microseconds more than its bytes at the device's bandwidth. Whether
//! one dispatch of resident workgroups that wait for each other between stages (a grid barrier)
//! would cost less is what [`measure_stage_boundaries`] answers, on the memory pattern of a model
//! (the stage list), before any kernel is rewritten for it.

use std::sync::Arc;

use ash::vk;

use super::kernels::{shader_writes_visible, Kernel, Pipelines, Push, Recorder};
use super::memory::{Buffer, MemoryKind, OneShot};
use super::VulkanContext;
use crate::DeviceError;

/// One stage of the pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeStage {
    /// Every workgroup streams its share of this many bytes (a product's weights).
    Stream { bytes: u64 },
    /// One workgroup reads this many bytes and reduces them twice (an RMSNorm).
    Single { bytes: u64 },
}

impl ProbeStage {
    fn bytes(self) -> u64 {
        match self {
            ProbeStage::Stream { bytes } | ProbeStage::Single { bytes } => bytes,
        }
    }
}

/// How a pattern was run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeMode {
    /// One dispatch per stage, a pipeline barrier between two (as a decode step is recorded).
    Dispatches,
    /// One dispatch of `workgroups` resident workgroups, a grid barrier between two stages,
    /// polled as `poll` says; with `preload`, each workgroup issues its first loads of the next
    /// stage before it waits.
    GridBarriers { workgroups: u32, poll: BarrierPoll, preload: bool },
    /// As `GridBarriers` without the waits: the same loads, no ordering between stages.
    Unordered { workgroups: u32 },
    /// One dispatch per stage as `Dispatches`, without the pipeline barriers: each workgroup
    /// waits until every workgroup of the stage before has counted itself done (an atomic
    /// counter per stage, volatile-load polls, bounded); with `preload`, it issues its first
    /// loads before waiting. Each stage keeps its own dispatch (and a kernel its own register
    /// count) while its launch may overlap the previous stage's tail. `workgroups`: at most this
    /// many a streaming stage (each takes a grid-stride share), 0 for as many as `Dispatches`.
    Chained { preload: bool, workgroups: u32, alternate: Alternate },
    /// `Dispatches` with execution-only pipeline barriers (no memory barrier: no cache
    /// maintenance asked for), to tell the barrier's wait from its cache work.
    ExecutionBarriers,
    /// `Dispatches` with no barriers at all: how far the driver overlaps dispatches.
    DispatchesUnordered { alternate: Alternate },
    /// `Dispatches` ordered by events instead of pipeline barriers: each stage sets its own
    /// event after its dispatch and the next stage waits for it (with the same memory
    /// dependency), as a split barrier; a driver may implement the wait otherwise than a barrier.
    Events,
}

/// Which pipelines consecutive stages of the barrier-free modes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alternate {
    /// All the same pipeline.
    Same,
    /// Every other stage a second build of the same shader.
    Copy,
    /// Every other stage a build with 16 KiB more shared memory.
    BigShared,
}

impl Alternate {
    fn kernel(self, stage: usize) -> Kernel {
        match (self, stage % 2) {
            (Alternate::Same, _) | (_, 0) => Kernel::StageChain,
            (Alternate::Copy, _) => Kernel::StageChainOther(0),
            (Alternate::BigShared, _) => Kernel::StageChainOther(1),
        }
    }
}

/// How a grid barrier's waiting workgroups read its counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierPoll {
    /// Atomic adds of zero (a read-modify-write at the cache that owns the counter).
    AtomicAdd,
    /// Loads through a volatile coherent view.
    VolatileLoad,
}

/// One run's result.
#[derive(Clone, Debug)]
pub struct ProbeResult {
    pub mode: ProbeMode,
    /// Wall time of one pass over the pattern, the best of the submissions.
    pub pass_us: f64,
    /// Grid barriers that gave up waiting (a device that did not keep every workgroup
    /// resident); nonzero means the run's order was not kept and its time is not valid.
    pub gave_up: u32,
}

/// Runs `pattern` (stages of at most 1 GiB each) `passes` times per submission in each mode,
/// best of `submissions`, and returns one result per mode. Stage data lies in up to four buffers
/// of up to 1 GiB, laid out in order and wrapping, so a stage reads memory no recent stage read
/// (as a step reads each weight once) as long as the pattern's bytes exceed the device's caches.
///
/// # Errors
/// Out of device memory, a stage larger than a buffer, or a Vulkan failure.
pub fn measure_stage_boundaries(ctx: &Arc<VulkanContext>, pattern: &[ProbeStage], modes: &[ProbeMode], passes: usize, submissions: usize) -> Result<Vec<ProbeResult>, DeviceError> {
    const STREAM_GROUPS_MAX: u64 = 8192;
    let chunk = (ctx.info.max_allocation_bytes.min(ctx.info.max_storage_buffer_range).min(super::memory::MAX_CHUNK_BYTES)) & !0xFFFF;
    let total: u64 = pattern.iter().map(|s| s.bytes()).sum();
    let n_buffers = total.div_ceil(chunk).clamp(1, 4);
    let mut ranges = Vec::new();
    for i in 0..n_buffers {
        ranges.push(Buffer::new(ctx, chunk, MemoryKind::DeviceLocal, &format!("stage probe range {i}"))?);
    }
    // Stage descriptors: (range, first vector, vectors, kind).
    let mut words: Vec<u32> = Vec::with_capacity(pattern.len() * 4);
    let (mut range, mut at) = (0u64, 0u64);
    for s in pattern {
        let bytes = s.bytes().next_multiple_of(16);
        if bytes > chunk {
            return Err(DeviceError::Unsupported { device: ctx.name(), what: format!("a probe stage of {bytes} bytes exceeds a buffer of {chunk}") });
        }
        if at + bytes > chunk {
            range = (range + 1) % n_buffers;
            at = 0;
        }
        words.extend_from_slice(&[range as u32, (at / 16) as u32, (bytes / 16) as u32, u32::from(matches!(s, ProbeStage::Single { .. }))]);
        at += bytes;
    }
    let mut stages = Buffer::new(ctx, (words.len() * 4) as u64, MemoryKind::HostVisible, "stage probe list")?;
    let Some(map) = stages.mapped_mut() else {
        return Err(DeviceError::Unsupported { device: ctx.name(), what: "the stage probe list is not mapped".into() });
    };
    for (dst, w) in map.chunks_exact_mut(4).zip(&words) {
        dst.copy_from_slice(&w.to_le_bytes());
    }
    let max_invocations = (STREAM_GROUPS_MAX * 256).max(modes.iter().map(|m| match m {
        ProbeMode::GridBarriers { workgroups, .. } | ProbeMode::Unordered { workgroups } => u64::from(*workgroups) * 256,
        ProbeMode::Dispatches | ProbeMode::Chained { .. } | ProbeMode::ExecutionBarriers | ProbeMode::DispatchesUnordered { .. } | ProbeMode::Events => 0,
    }).max().unwrap_or(0));
    let mut sink = Buffer::new(ctx, (max_invocations + 1) * 4, MemoryKind::HostVisible, "stage probe sink")?;
    // Word 0: the grid barriers' counter; modes 4 and 5: word k counts stage k's workgroups done.
    let counter_bytes = (pattern.len() as u64 * 4).max(16).next_multiple_of(16);
    let counter = Buffer::new(ctx, counter_bytes, MemoryKind::DeviceLocal, "stage probe counter")?;
    let mut pipelines = Pipelines::new(ctx)?;
    let mut oneshot = OneShot::new(ctx)?;
    let events = ProbeEvents::new(ctx, if modes.contains(&ProbeMode::Events) { pattern.len() } else { 0 })?;
    let range_addresses: Vec<u64> = (0..4).map(|i| ranges[(i as u64 % n_buffers) as usize].address()).collect();
    let sink_address = sink.address();
    let base = |mode: u32, stage: u32, poll: u32, prev_groups: u32| {
        let mut push = Push::new();
        for a in &range_addresses {
            push = push.addr(*a);
        }
        push.addr(sink_address).addr(counter.address()).addr(stages.address()).u32(pattern.len() as u32).u32(mode).u32(stage).u32(1 << 20).u32(poll).u32(prev_groups)
    };
    let groups_of = |s: &ProbeStage| match s {
        ProbeStage::Stream { bytes } => (bytes / 16).div_ceil(256 * 8).clamp(1, STREAM_GROUPS_MAX) as u32,
        ProbeStage::Single { .. } => 1,
    };
    let mut results = Vec::new();
    for &mode in modes {
        if let Some(words) = sink.mapped_mut() {
            words[..4].fill(0);
        }
        let mut best = f64::MAX;
        for _ in 0..submissions.max(1) {
            let device = ctx.device.clone();
            let mut result = Ok(());
            let t = std::time::Instant::now();
            oneshot.run(|_, cb| {
                let mut rec = Recorder::new(&device, cb, &mut pipelines);
                for _ in 0..passes.max(1) {
                    let recorded = match mode {
                        ProbeMode::Dispatches | ProbeMode::ExecutionBarriers | ProbeMode::DispatchesUnordered { .. } => pattern.iter().enumerate().try_for_each(|(k, s)| {
                            let kernel = match mode {
                                ProbeMode::DispatchesUnordered { alternate } => alternate.kernel(k),
                                _ => Kernel::StageChain,
                            };
                            rec.dispatch(kernel, &base(0, k as u32, 0, 0), [groups_of(s), 1, 1])?;
                            match mode {
                                ProbeMode::Dispatches => rec.barrier(),
                                ProbeMode::ExecutionBarriers => rec.execution_barrier(),
                                _ => {}
                            }
                            Ok(())
                        }),
                        ProbeMode::Events => {
                            // SAFETY: recording; the events are live and no other submission uses them.
                            unsafe { events.reset_all(&device, cb) };
                            pattern.iter().enumerate().try_for_each(|(k, s)| {
                                if k > 0 {
                                    // SAFETY: as above; event k - 1 was set just before.
                                    unsafe { events.wait(&device, cb, k - 1) };
                                }
                                rec.dispatch(Kernel::StageChain, &base(0, k as u32, 0, 0), [groups_of(s), 1, 1])?;
                                // SAFETY: as above.
                                unsafe { events.set(&device, cb, k) };
                                Ok(())
                            })
                            .map(|()| rec.barrier())
                        }
                        ProbeMode::Chained { preload, workgroups, alternate } => {
                            rec.barrier_before_transfer();
                            rec.zero(counter.buffer, 0, counter_bytes);
                            let m = if preload { 5 } else { 4 };
                            let done = pattern.iter().enumerate().try_for_each(|(k, s)| {
                                let prev = k.checked_sub(1).map_or(0, |p| groups_of(&pattern[p]));
                                let cap = |g: u32| if workgroups == 0 { g } else { g.min(workgroups) };
                                let prev = cap(prev);
                                rec.dispatch(alternate.kernel(k), &base(m, k as u32, 1, prev), [cap(groups_of(s)), 1, 1])
                            });
                            rec.barrier();
                            done
                        }
                        ProbeMode::GridBarriers { workgroups, .. } | ProbeMode::Unordered { workgroups } => {
                            rec.zero(counter.buffer, 0, 16);
                            let (m, poll) = match mode {
                                ProbeMode::GridBarriers { poll, preload, .. } => (if preload { 3 } else { 1 }, u32::from(poll == BarrierPoll::VolatileLoad)),
                                _ => (2, 0),
                            };
                            let done = rec.dispatch(Kernel::StageChain, &base(m, 0, poll, 0), [workgroups, 1, 1]);
                            rec.barrier();
                            done
                        }
                    };
                    if let Err(e) = recorded {
                        result = Err(e);
                        return;
                    }
                }
            })?;
            result?;
            best = best.min(t.elapsed().as_secs_f64() / passes.max(1) as f64);
        }
        let gave_up = sink.mapped().map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
        results.push(ProbeResult { mode, pass_us: best * 1e6, gave_up });
    }
    Ok(results)
}

/// The events of [`ProbeMode::Events`]: one per stage, destroyed with the probe.
struct ProbeEvents {
    ctx: Arc<VulkanContext>,
    events: Vec<vk::Event>,
}

impl ProbeEvents {
    fn new(ctx: &Arc<VulkanContext>, count: usize) -> Result<ProbeEvents, DeviceError> {
        let mut out = ProbeEvents { ctx: ctx.clone(), events: Vec::with_capacity(count) };
        for _ in 0..count {
            // SAFETY: a live device; the event is destroyed in Drop.
            let e = unsafe { ctx.device.create_event(&vk::EventCreateInfo::default(), None) }.map_err(|e| super::vk_error(&ctx.name(), "vkCreateEvent", e))?;
            out.events.push(e);
        }
        Ok(out)
    }

    /// Unsets every event once all earlier commands are done, before any later command.
    ///
    /// # Safety
    /// `cb` is recording on `device`, and no pending submission uses the events.
    unsafe fn reset_all(&self, device: &ash::Device, cb: vk::CommandBuffer) {
        let all = vk::PipelineStageFlags::ALL_COMMANDS;
        let mb = shader_writes_visible();
        // SAFETY: the caller's.
        unsafe {
            device.cmd_pipeline_barrier(cb, all, all, vk::DependencyFlags::empty(), &[mb], &[], &[]);
            for &e in &self.events {
                device.cmd_reset_event(cb, e, all);
            }
            device.cmd_pipeline_barrier(cb, all, all, vk::DependencyFlags::empty(), &[], &[], &[]);
        }
    }

    /// # Safety
    /// As [`ProbeEvents::reset_all`]; `k` is below the count.
    unsafe fn set(&self, device: &ash::Device, cb: vk::CommandBuffer, k: usize) {
        // SAFETY: the caller's.
        unsafe { device.cmd_set_event(cb, self.events[k], vk::PipelineStageFlags::COMPUTE_SHADER) };
    }

    /// Later compute waits for event `k`, with every shader write before its set visible.
    ///
    /// # Safety
    /// As [`ProbeEvents::set`].
    unsafe fn wait(&self, device: &ash::Device, cb: vk::CommandBuffer, k: usize) {
        let mb = shader_writes_visible();
        // SAFETY: the caller's.
        unsafe { device.cmd_wait_events(cb, &[self.events[k]], vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::COMPUTE_SHADER, &[mb], &[], &[]) };
    }
}

impl Drop for ProbeEvents {
    fn drop(&mut self) {
        for &e in &self.events {
            // SAFETY: the probe's submissions have completed (OneShot waits for each).
            unsafe { self.ctx.device.destroy_event(e, None) };
        }
    }
}
