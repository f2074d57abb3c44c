# Session 50, for a later device call (either card): is decode batch invariant on NVIDIA? Each
# build's per-position KL and largest logit difference against the CPU (`compare-devices
# --per-position`), one token a step and four, on a synthetic Qwen2.5-0.5B (Q4_K, Q8_K records:
# the chunked norm by default in the new build; Q4_1 too); the two step sizes' lines must be the
# same if their logits are the same bits. `14d5ec2` (.carryt/strata-rt.gz: its fused QKV loop was
# NoContraction, the batched one not) against the session's last build (.carryt/strata-rt-new.gz).
# Lavapipe gives the same lines for both (it does not contract these multiply-adds).
# Run: BUDGET_S=240 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session50/s50d.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
new=$PWD/.carry/strata-rt-new
synth qwen2.5-0.5b Q4_K Q4_1
for ty in Q4_K Q4_1; do
  model=$PWD/target/m/qwen2.5-0.5b-$ty.gguf
  for b in "old $bin" "new $new"; do
    set -- $b
    [ "$(left)" -lt 20 ] && break 2
    for u in 1 4; do
      $2 compare-devices -m $model --device vulkan:0 --ubatch $u --prompt-tokens 32 --positions 64 --per-position 2>&1 | grep "^  position" > $OUT/pp-$ty-$1-u$u.txt
    done
    echo "$ty $1: $(diff $OUT/pp-$ty-$1-u1.txt $OUT/pp-$ty-$1-u4.txt | grep -c '^<') of $(wc -l < $OUT/pp-$ty-$1-u1.txt) per-position lines differ between one and four tokens a step" | tee -a $OUT/invariance.txt
  done
done
echo "left: $(left) s"
