# Sourced by session 39's call scripts (from the repository root): session 38's prologue, whose
# `ab TYPE DEPTH VARIANT...` they use.
source bench/results/h200-vulkan-decode-2026-12-01/session38/common.sh
