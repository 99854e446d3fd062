#!/usr/bin/env bash
# Installs what coil needs and builds it. Idempotent: skips what is already there, so it also
# works without network access when the packages are present.
#   Debian packages: g++, ninja, ccache, OpenBLAS, GoogleTest, clang-format
#   Python packages: torch 2.13.0 (CPU build), nanobind, scikit-build-core, pytest, expecttest
#   (PyTorch's OpInfo database, used by tests/python/test_opinfo.py, imports it)
#   Build: the C++ core + the _coil extension, installed editable (so the "coil" backend is
#   registered through its entry point), and the gtest executables.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

debs=(g++ cmake ninja-build ccache libopenblas-dev libopenblas-openmp-dev libgtest-dev clang-format)
missing=()
for p in "${debs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # cmake and ninja may come from pip instead; only insist on what the build needs.
  log "installing Debian packages: ${missing[*]}"
  ($SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}") ||
    log "apt-get failed (no network?); continuing with what is installed"
fi

PY=${PYTHON:-python3}
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
  log "installing torch==2.13.0 (CPU build)"
  pip_install torch==2.13.0
fi
for mod in nanobind scikit_build_core pytest ninja cmake expecttest; do
  if ! "$PY" -c "import $mod" 2>/dev/null; then
    pkg=${mod//_/-}
    log "installing $pkg"
    pip_install "$pkg"
  fi
done

# The model dashboard's libraries (bench/dashboard.py; its tests skip visibly without them).
# torchvision 0.28.0 is the release made for torch 2.13.0; PyPI's wheel is built for CUDA, so
# its C++ ops do not load next to the CPU torch (bench/dashboard_models.py: import_torchvision
# works around it; the dashboard's models need none of them). --no-deps keeps torch as it is.
if ! "$PY" -c 'import torchvision' 2>/dev/null && ! "$PY" -m pip show -q torchvision >/dev/null 2>&1; then
  log "installing torchvision==0.28.0 (dashboard)"
  pip_install --no-deps torchvision==0.28.0 || log "torchvision not installed (no network?)"
fi
for pkg in timm transformers; do
  if ! "$PY" -m pip show -q "$pkg" >/dev/null 2>&1; then
    log "installing $pkg (dashboard)"
    pip_install "$pkg" || log "$pkg not installed (no network?)"
  fi
done

# NVRTC alone (no GPU, no CUDA toolkit): the CUDA emitter's C++ tests compile the kernels they
# emit for sm_90 with it (tests/cpp/backend_cuda: expect_compiles; they skip without it), so
# generated CUDA that does not compile fails here, not on the next GPU machine. NVIDIA's
# redistributable wheel, the one CUDA builds of torch depend on; scripts/test.sh points ctest at it.
if ! "$PY" -m pip show -q nvidia-cuda-nvrtc-cu12 >/dev/null 2>&1; then
  log "installing nvidia-cuda-nvrtc-cu12 (CUDA compile tests)"
  pip_install --no-deps nvidia-cuda-nvrtc-cu12==12.9.86 ||
    log "NVRTC not installed (no network?): the CUDA compile tests will skip"
fi

# The build: an editable install (entry point + extension) whose CMake build also compiles the
# gtest executables. build-dir is fixed (pyproject.toml) and ccache is used, so rebuilds are
# incremental.
log "building coil"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e . \
  -Ccmake.define.COIL_BUILD_TESTS=ON
log "done"
