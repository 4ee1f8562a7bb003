#!/usr/bin/env bash
# Regenerates the synthetic test trace (see README.md in this folder).
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo run -q -p llm-cache --example synth -- llm 24 > llm-cache/tests/data/llm_offload_small.csv
