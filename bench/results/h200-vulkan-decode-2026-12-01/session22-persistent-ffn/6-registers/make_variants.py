"""Register probes of ffn_persistent.comp (session 22): copies of the shader with some of its
stages removed (results: shader_stats.txt; the stripped variants compute nothing useful).

Run from a scratch folder holding a copy of gpu/src/vulkan/shaders/ in src/:
    python3 make_variants.py
    for v in src/v_*.comp; do glslc --target-env=vulkan1.2 -O -Werror -DTYPE_Q4_K -DACT_Q8_K \\
        -DGU_PAIRS=2 -DGU_GROUPS=2 -DDOWN_ROWS=4 -DDOWN_GROUPS=1 -DDOWN_UNROLL2=1 \\
        $v -o $(basename $v .comp).spv; done
then on the device: STRATA_VULKAN_PROFILE=1 shader_stats 0 *.spv
"""
import itertools

s = open('src/ffn_persistent.comp').read()
main_at = s.index('void main() {')
head, main = s[:main_at], s[main_at:]
blocks = {
    'norm': main[main.index('    uint norm_passes'):main.index('    grid_arrive();\n    uint early = prefetch_gate_up(me);')],
    'gu': main[main.index('    uint gate_up_groups'):main.index('    grid_arrive();\n    early = prefetch_down(me, 0);')],
    'act': main[main.index('    uint act_passes'):main.index('    grid_arrive();\n    early = prefetch_down(me, WG / DOWN_GROUPS);')],
    'down': main[main.index('    uint down_groups'):main.index('    // The last workgroup out')],
}
no_prefetch = [('uint early = prefetch_gate_up(me);', 'uint early = 0;'),
               ('early = prefetch_down(me, 0);', 'early = 0;'),
               ('early = prefetch_down(me, WG / DOWN_GROUPS);', 'early = 0;')]
for k in range(1, 5):
    for kept in itertools.combinations(blocks, k):
        m = main
        for name, text in blocks.items():
            if name not in kept:
                m = m.replace(text, '')
        for a, b in no_prefetch:
            m = m.replace(a, b)
        open(f"src/v_{'_'.join(kept)}.comp", 'w').write(head + m)
