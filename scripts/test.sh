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
(cd "$build_dir" && ctest --output-on-failure -j2)
echo "== Python tests"
export COIL_CACHE_DIR=${COIL_CACHE_DIR:-$HOME/.cache/coil/kernels}
"$PY" -m pytest -q tests/python "$@"
