#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs all tests: the C++ unit and golden tests
# (ctest) and the Python differential tests (pytest). Slow suites are marked and skipped unless
# COIL_SLOW=1.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
PY=${PYTHON:-python3}
build_dir=$("$PY" - <<'PYEOF'
import sysconfig, glob, os
# scikit-build-core's build dir: build/{wheel_tag}
dirs = [d for d in glob.glob("build/cp*") if os.path.isdir(d)]
dirs.sort(key=os.path.getmtime)
print(dirs[-1] if dirs else "")
PYEOF
)
echo "== C++ tests ($build_dir)"
# NVRTC from its pip wheel (scripts/setup.sh), for the CUDA emitter's compile tests; for ctest
# only (a CUDA torch finds its own).
nvrtc_lib=$("$PY" -c 'import os, nvidia.cuda_nvrtc as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null || true)
if [[ -n "$nvrtc_lib" && -d "$nvrtc_lib" ]]; then
  (cd "$build_dir" && LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ctest --output-on-failure -j2)
else
  (cd "$build_dir" && ctest --output-on-failure -j2)
fi
echo "== Python tests"
export COIL_CACHE_DIR=${COIL_CACHE_DIR:-$HOME/.cache/coil/kernels}
"$PY" -m pytest -q tests/python "$@"
