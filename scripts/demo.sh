#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then compiles real models (timm, HuggingFace
# transformers, torchvision: bench/dashboard_models.py) with Inductor and with coil and prints
# eager vs Inductor vs coil side by side, with accuracy and compile times (bench/dashboard.py).
# Arguments go to bench/dashboard.py (e.g. --suite timm --mode infer,train); without any, a
# slice of four models, inference. The whole dashboard: python3 bench/dashboard.py.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
out=$(mktemp -d)/demo.jsonl
if [ $# -eq 0 ]; then
  set -- --models timm_resnet18,hf_bert,hf_gpt2,tv_mobilenet_v3_small --mode infer
fi
exec "${PYTHON:-python3}" bench/dashboard.py --out "$out" "$@"
