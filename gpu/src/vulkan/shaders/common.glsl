// Shared by every strata-rt compute shader: buffers are reached through device addresses passed in
// push constants (VK_KHR_buffer_device_address), so no shader binds a descriptor set.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference2 : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer F16s { float16_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32s { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer U32x4s { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 1) buffer U8s { uint8_t v[]; };

// The KV cell of position `pos` of the sequence whose block table starts at `table_offset`.
uint kv_cell(U32s tables, uint table_offset, uint pos, uint block_size) {
    return tables.v[table_offset + pos / block_size] * block_size + pos % block_size;
}
