#!/usr/bin/env bash
# Session 37, call 5: s37d.sh with another new build in .carryz/strata-rt.gz: the long-context
# attention kernel with only the split's block-table words in shared memory (V loads where they
# were) against HEAD (base), and 64 splits of it only.
SPLIT_VARIANTS="STRATA_ATTENTION_GQA_SPLITS=64" exec bash "$(dirname "$0")/s37d.sh"
