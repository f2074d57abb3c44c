# Session 53's last try (376 s of device time left): s53c.sh cut to ~120 s. Carry as s53c.sh.
# `devices` (the SM count the new default reads), 7B Q4_K at context 512: the new default,
# STRATA_SWIGLU_SMALL_FIRST=0 (the old default), V-early (cells by compares), two rounds; the
# greedy tokens of the default and the old default.
# Run: BUDGET_S=150 OUT=$OUT bash bench/results/h200-vulkan-decode-2026-12-01/session53/s53d.sh
source bench/results/h200-vulkan-decode-2026-12-01/session44/common.sh
b=$PWD/.carry/strata-rt
ve=$PWD/.carry/strata-rt-ve
$b devices 2>&1 | grep -E "vulkan:|SMs" | tee $OUT/devices.txt
synth qwen2.5-7b Q4_K
for round in 1 2; do
  for cfg in "default $b NONE=1" "small-first-off $b STRATA_SWIGLU_SMALL_FIRST=0" "v-early $ve NONE=1"; do
    set -- $cfg
    [ "$(left)" -lt 20 ] && break 2
    echo "Q4_K $1: $(tg512 $2 Q4_K $3)" | tee -a $OUT/decode.txt
  done
done
for x in "default $b NONE=1" "small-first-off $b STRATA_SWIGLU_SMALL_FIRST=0"; do
  set -- $x
  [ "$(left)" -lt 15 ] && break
  echo "tokens $1: $(env $3 STRATA_DEVICES__DECODE=vulkan:0 timeout 30 $2 generate --model $(m Q4_K) --prompt 'The history of the printing press' --temperature 0 --max-tokens 96 --print-ids 2>&1 | tail -1 | md5sum)" | tee -a $OUT/tokens.txt
done
echo "left: $(left) s"
