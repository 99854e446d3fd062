#!/usr/bin/env bash
# The one command for the GPU machine: build coil with this machine's python3, run the GPU tests,
# then the GPU benchmark (arguments go to bench/gpu.py). Installs nothing: the machine has no
# network; it needs python3 with torch (CUDA), triton, nanobind, scikit-build-core, cmake, ninja
# and pytest. With OUT set, logs and the report (gpu.md, unless --write is given) go there.
# The whole run should fit in 10 minutes on an H100; if it does not, split it with --cases and
# GPU_RUN_TESTS=0 on the later runs (the build is incremental when build/gpu is kept).
#
#   OUT=/some/dir ./scripts/gpu_run.sh                 # everything
#   ./scripts/gpu_run.sh --quick --cases silu_mul      # a smoke run
#   ./scripts/gpu_run.sh --build-only                  # the build alone, then run what you
#                                                      #   like with PYTHONPATH=$PWD/python
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/gpu_run.log") 2>&1
fi

# The interpreter itself (not a launcher shim), so CMake builds for the one that runs the tests.
py=$(python3 -c 'import sys; print(sys.executable)') || exit 1
jobs=$(nproc 2>/dev/null || echo 16)
echo "== build ($py, -j$jobs)"
# The system g++: the GPU machine's default CXX (/opt/gcc) links libstdc++ statically into
# _coil, whose iostreams then crash next to the process's shared libstdc++ (seen on the H100).
cxx=${COIL_GPU_CXX:-/usr/bin/g++}
[[ -x "$cxx" ]] || cxx=$(command -v g++)
cmake -S . -B build/gpu -G Ninja -DCOIL_BUILD_PYTHON=ON -DCOIL_INPLACE=ON \
  -DCMAKE_CXX_COMPILER="$cxx" -DPython_EXECUTABLE="$py" || exit 1
ninja -C build/gpu -j"$jobs" || exit 1

# COIL_INPLACE put _coil*.so into python/coil/; use that package, not an installed one.
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
if [[ "${1:-}" == "--build-only" ]]; then
  "$py" -c "import coil._coil" && echo "== built (PYTHONPATH=$PWD/python)"
  exit $?
fi
"$py" -c "import coil, coil._coil, torch; print('coil from', coil.__file__); \
print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())" || exit 1

tests_rc=0
if [[ "${GPU_RUN_TESTS:-1}" != 0 ]]; then  # GPU_RUN_TESTS=0: benchmark only (a second run)
  echo "== GPU tests"
  "$py" -m pytest -q -m gpu tests/python
  tests_rc=$?
  # The C++ library's GPU tests (no PyTorch in the process), where GoogleTest is installed:
  # a build of their own; NVRTC and cuBLASLt from the nvidia wheels PyTorch brought.
  if [[ -d /usr/include/gtest ]]; then
    echo "== C++ GPU tests"
    nvrtc=$("$py" -c 'from coil.cuda import nvrtc_path; print(nvrtc_path())')
    if cmake -S . -B build/gpu-tests -G Ninja -DCOIL_BUILD_PYTHON=OFF -DCOIL_BUILD_TESTS=ON \
        -DCMAKE_CXX_COMPILER="$cxx" -DPython_EXECUTABLE="$py" >/dev/null &&
       ninja -C build/gpu-tests -j"$jobs" test_runtime test_backend_cuda >/dev/null; then
      export COIL_TEST_NVRTC="$nvrtc"
      LD_LIBRARY_PATH="$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        build/gpu-tests/test_runtime --gtest_filter='CudaLibrary*' &&
        build/gpu-tests/test_backend_cuda --gtest_brief=1 || tests_rc=1
    else
      echo "C++ GPU tests: the build failed"
      tests_rc=1
    fi
  else
    echo "== C++ GPU tests skipped: no GoogleTest headers (/usr/include/gtest)"
  fi
fi

echo "== GPU benchmark"
args=("$@")
if [[ -n "${OUT:-}" && " $* " != *" --write"* ]]; then
  args+=(--write "$OUT/gpu.md")
fi
"$py" bench/gpu.py "${args[@]}"
bench_rc=$?

echo "== done: tests rc=$tests_rc, benchmark rc=$bench_rc"
exit $((tests_rc != 0 || bench_rc != 0))
