#!/usr/bin/env bash
# On the GPU machine: build coil (scripts/gpu_run.sh --build-only, incremental while the machine
# is warm), then dashboard rows. Carried wheels (.whl/, e.g. timm, which the GPU image lacks)
# are installed into /tmp/site first. Rows go to $OUT/dashboard_gpu.jsonl (or /tmp); append
# them to bench/results/dashboard_gpu.jsonl here.
#
#   DASH_MODELS=hf_gpt2,hf_bert DASH_MODE=infer [DASH_COMPILE_MODE=reduce-overhead]
#     [DASH_BUDGET=4] [DASH_GPUS=1] [COIL_REVISION=abc123] bash scripts/gpu_dash.sh
#   DASH_TESTS="-m gpu tests/python/test_x.py" bash scripts/gpu_dash.sh   # GPU tests instead
set -uo pipefail
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
./scripts/gpu_run.sh --build-only >/tmp/coil_build.log 2>&1 || { tail -40 /tmp/coil_build.log; exit 1; }
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
out=${OUT:-/tmp}
if [[ -n "${DASH_TESTS:-}" ]]; then
  # shellcheck disable=SC2086 # the variable holds pytest's arguments
  python3 -m pytest -q -p no:cacheprovider --durations=10 $DASH_TESTS 2>&1 | tee -a "$out/gpu_tests.log"
  exit "${PIPESTATUS[0]}"
fi
args=(--device cuda --models "${DASH_MODELS:?}" --mode "${DASH_MODE:-infer}"
  --out "$out/dashboard_gpu.jsonl" --budget "${DASH_BUDGET:-4}" --gpus "${DASH_GPUS:-1}")
[[ -n "${DASH_COMPILE_MODE:-}" ]] && args+=(--compile-mode "$DASH_COMPILE_MODE")
PYTHONUNBUFFERED=1 python3 bench/dashboard.py "${args[@]}"
