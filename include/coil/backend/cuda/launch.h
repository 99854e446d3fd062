// Launch configurations per kernel kind (emit_cuda.h), from heuristics over the run-time sizes.
//
//   Pointwise: 256 threads per block, the _v entry point when it exists and every pointer is
//              16-byte aligned; at most 32 waves of blocks per SM (the kernels are grid-stride
//              loops, so more blocks only add scheduling cost). Kernels with a tiled entry
//              point (_t, an input read transposed) take it: a tile per block and iteration.
//   Rows:      a warp per row (_w, 8 rows per 256-thread block) while rows are at most
//              kWarpRowLimit elements; longer rows get a whole block (_b) of 256 to 1024
//              threads, about 8 elements per thread, each block looping over rows. The
//              vector entry points (_wv, _bv: a coil::Vec step per thread) when they exist
//              and every pointer is 16-byte aligned; such kernels keep only _b as their
//              scalar entry point, which then serves unaligned pointers at every row length.
//              Kernels with a column entry point (_c, they read across rows) take it: C
//              rows per warp, each split over the block's lanes, 128 to 1024 threads chosen
//              to fill the device with at least 8 elements per lane; where they also have
//              the vector column entry point (_cv) and every pointer is 16-byte aligned, that:
//              8 threads of W rows per block-row, 128-bit loads. The register-cached
//              block per row (_br, its own fixed block size) is only among the measured
//              candidates (launch_candidates), never the heuristic's choice.
// The thresholds are measured choices (docs/decisions.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coil/backend/cuda/driver.h"
#include "coil/backend/cuda/emit_cuda.h"

namespace coil::backend::cuda {

constexpr int64_t kWarpRowLimit = 1024;

// Rows entry points per kernel (entry 0..6) and the vector column entry point's threads per
// block-row (emit_columns.cpp: 8 threads of 16 bytes read 128 bytes of a row).
constexpr int kRowEntries = 7;
constexpr int kColumnVecThreads = 8;

// The tiled pointwise entry point's block: 8 rows of 32 threads (emit_tiled.cpp).
constexpr unsigned kTiledBlock = 256;

struct LaunchConfig {
  int entry = 0;  // 0: _s / _w, 1: _v / _b, 2: _t / _wv, 3: _bv, 4: _c, 5: _br, 6: _cv
  unsigned grid = 1, block = 32;
};

LaunchConfig choose_launch(const CudaKernel& k, int64_t work, int64_t row_size, bool aligned,
                           const DeviceInfo& dev);

// The small set the runtime measures once per kernel and size (the heuristic's choice first):
// rows kernels try a warp per row (short rows) and blocks of 128..1024 threads per row;
// pointwise kernels try 128..1024 threads per block with and without the grid cap.
std::vector<LaunchConfig> launch_candidates(const CudaKernel& k, int64_t work, int64_t row_size,
                                            bool aligned, const DeviceInfo& dev);

// Kernels smaller than this many elements (work x row) are launched by the heuristic alone:
// their time is launch latency, which no configuration changes.
constexpr int64_t kTuneMinElements = int64_t{1} << 20;

// The entry-point names of a kernel: {_s, _v, _t} or {_w, _b, _wv, _bv, _c, _br, _cv}; "" where
// absent.
std::string entry_name(const CudaKernel& k, int entry);

}  // namespace coil::backend::cuda
