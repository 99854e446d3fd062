#!/usr/bin/env bash
# On the GPU machine, in one device call: build coil, run the GPU tests of the changes not yet
# run on a GPU, then two kernel comparisons against Inductor; each part is time-boxed so that
# what ran comes back even when the call's limit is near. Logs and a summary go to $OUT (or
# /tmp). Run from the repository root:
#
#   bash scripts/gpu_check.sh            # about 8 minutes on an H100
#   GPU_CHECK_TESTS="tests/python/test_x.py" GPU_CHECK_AB="hf_gpt2 train opt=0 20" \
#     GPU_CHECK_DASH="tv_resnet50,hf_gpt2 train 3" COIL_REVISION=abc123 bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
exec > >(tee -a "$out/gpu_check.txt") 2>&1
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Carried wheels (.whl/, e.g. timm for the dashboard's timm models), as scripts/gpu_dash.sh does.
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
./scripts/gpu_run.sh --build-only >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
echo "== built ($(elapsed))"
tests=${GPU_CHECK_TESTS:-"tests/python/test_cuda_training_graphs.py \
tests/python/test_cuda_gemm_algorithms.py tests/python/test_cuda_kernels.py \
tests/python/test_cuda_models.py tests/python/test_partition.py tests/python/test_cuda_attention.py"}
# shellcheck disable=SC2086 # a list of test files
timeout 240 python3 -m pytest -q -s -p no:cacheprovider -m gpu $tests >"$out/tests.log" 2>&1
echo "== tests: exit $? ($(elapsed))"
grep -E "passed|failed" "$out/tests.log" | tail -2
grep -E "^(FAILED|ERROR)" "$out/tests.log" | head -20
# Kernel comparisons: "model mode coil_b-options top" per line (coil_b: coil with those options).
ab=${GPU_CHECK_AB:-"tv_resnet50 train cuda_graphs_training=1 15
hf_gpt2 train_bf16 split_to_row_readers=0 20"}
while read -r model mode opts top; do
  [[ -z "$model" ]] && continue
  timeout 140 python3 bench/dashboard_kernels.py "$model" --mode "$mode" \
    --variants inductor,coil,coil_b --coil-b-options "$opts" --top "$top" \
    >"$out/${model}_${mode}.log" 2>&1
  echo "== $model $mode, coil_b: $opts ($(elapsed))"
  tail -30 "$out/${model}_${mode}.log"
done <<<"$ab"
# Then, while the call has time left: which ATen ops launch the copy kernels of a GPT-2 training
# step (coil's extern calls copy operands they cannot take as laid out).
if (( $(date +%s) - t0 < ${GPU_CHECK_EXTRA_BEFORE:-420} )); then
  timeout 120 python3 bench/gpu_profile.py --cases gpt2_train --compilers inductor,coil \
    --origins copy --top 12 >"$out/gpt2_train_copies.log" 2>&1
  echo "== gpt2_train copy kernels by launching op ($(elapsed))"
  grep -E "===|by kind|kernels matching|<-" "$out/gpt2_train_copies.log" | head -40
fi
# Then dashboard rows while time is left (GPU_CHECK_DASH="models mode [budget]", e.g.
# "tv_resnet50,hf_gpt2 train 3"): rows to $out/dashboard_gpu.jsonl, to append to
# bench/results/dashboard_gpu*.jsonl here (the card is in each row).
if [[ -n "${GPU_CHECK_DASH:-}" ]] && (( $(date +%s) - t0 < ${GPU_CHECK_DASH_BEFORE:-360} )); then
  read -r dmodels dmode dbudget <<<"$GPU_CHECK_DASH"
  PYTHONUNBUFFERED=1 python3 bench/dashboard.py --device cuda --models "$dmodels" \
    --mode "${dmode:-train}" --budget "${dbudget:-3}" --out "$out/dashboard_gpu.jsonl" \
    >"$out/dashboard.log" 2>&1
  echo "== dashboard $dmodels $dmode: exit $? ($(elapsed))"
  grep -E "coil/Ind" "$out/dashboard.log"
fi
