#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then compiles the benchmark models with Inductor and
# with coil and prints eager vs Inductor vs coil side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec "${PYTHON:-python3}" bench/run.py "$@"
