#!/usr/bin/env bash
# A/B of coil's model set between two source trees, interleaved per model (the machine's drift
# hits both): each tree built in place (cmake -DCOIL_BUILD_PYTHON=ON -DCOIL_INPLACE=ON, so
# python/coil/_coil*.so sits in it) and run with PYTHONPATH=<tree>/python. An editable install
# of coil (its .pth in site-packages) would win over PYTHONPATH, so it is moved aside for the
# run and put back on exit.
#   bash bench/ab_trees.sh /tmp/old /tmp/new [models...]
set -uo pipefail
a=$1 b=$2
shift 2
models=${*:-attention_block transformer_block gpt2 resnet18_train resnet18_eval mlp_sgd}
sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
pth=$(ls "$sp"/_editable_*coil*.pth 2>/dev/null | head -1)
if [ -n "$pth" ]; then
  mv "$pth" "$pth.ab_aside"
  trap 'mv "$pth.ab_aside" "$pth"' EXIT
fi
for m in $models; do
  for tree in "$a" "$b" "$a" "$b"; do
    row=$(cd "$tree" && PYTHONPATH="$tree/python" timeout 900 python3 bench/run.py \
      --compilers coil --models "$m" --repeat 10 2>&1 | grep "^| $m ")
    echo "$tree $row"
  done
done
