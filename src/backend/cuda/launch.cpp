#include "coil/backend/cuda/launch.h"

#include <algorithm>
#include <cmath>

namespace coil::backend::cuda {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
unsigned clamp_grid(int64_t blocks, int64_t limit) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, limit)));
}

// The tiles of a tiled kernel over `work` elements: one block each (edge tiles count whole).
int64_t tiles_of(const CudaKernel& k, int64_t work) {
  const double full = static_cast<double>(ceil_div(work, int64_t{k.tile} * k.tile));
  return static_cast<int64_t>(std::ceil(full / std::max(k.tile_fill, 1e-3)));
}

// The column entry point (_c, entry 4): C rows per block-row of threads, the block's
// t / C lanes splitting each row. Threads: `block`, or where 0, enough to fill the device
// (about 2048 per SM) with at least 8 elements per lane, 128 to 1024.
// The vector column entry point (_cv, entry 6) alike, its block-rows kColumnVecThreads
// threads of column_vec rows each.
LaunchConfig column_launch(const CudaKernel& k, int64_t work, int64_t row_size,
                           const DeviceInfo& dev, int64_t block, bool vec = false) {
  const int64_t sms = std::max(1, dev.sm_count);
  const int64_t per_block_row = vec ? int64_t{kColumnVecThreads} * k.column_vec : k.column;
  const int64_t groups = ceil_div(work, per_block_row);
  if (block == 0) {
    block = 1024;
    const int64_t threads = vec ? kColumnVecThreads : k.column;
    while (block > 128 && (groups * block > sms * 2048 * 2 || (block / threads) * 8 > row_size))
      block /= 2;
  }
  LaunchConfig c;
  c.entry = vec ? 6 : 4;
  c.block = static_cast<unsigned>(block);
  c.grid = clamp_grid(groups, sms * (2048 / block) * 4);
  return c;
}
}  // namespace

std::string entry_name(const CudaKernel& k, int entry) {
  const std::string& base = k.entry.empty() ? k.name : k.entry;
  if (entry < 0 || entry >= kRowEntries) return "";
  if (k.kind == KernelKind::Pointwise) {
    if (entry > 2 || (entry == 1 && k.vec == 0) || (entry == 2 && k.tile == 0)) return "";
    static const char* const pointwise[] = {"_s", "_v", "_t"};
    return base + pointwise[entry];
  }
  if (entry == 4) return k.column > 0 ? base + "_c" : "";
  if (entry == 6) return k.column_vec > 0 ? base + "_cv" : "";
  if (entry == 5) return k.block_regs > 0 ? base + "_br" : "";
  if (entry >= 2 && k.vec == 0) return "";
  if (entry == 0 && k.vec > 0) return "";  // vector row kernels have no scalar _w
  static const char* const rows[] = {"_w", "_b", "_wv", "_bv"};
  return base + rows[entry];
}

LaunchConfig choose_launch(const CudaKernel& k, int64_t work, int64_t row_size, bool aligned,
                           const DeviceInfo& dev) {
  LaunchConfig c;
  const int64_t sms = std::max(1, dev.sm_count);
  if (k.kind == KernelKind::Pointwise) {
    if (k.tile > 0) {
      // One tile per block and iteration.
      c.entry = 2;
      c.block = kTiledBlock;
      c.grid = clamp_grid(tiles_of(k, work), sms * 16);
      return c;
    }
    int64_t threads = work;
    if (k.vec > 0 && aligned) {
      c.entry = 1;
      threads = work / k.vec;
    }
    c.block = 256;
    c.grid = clamp_grid(ceil_div(threads, c.block), sms * 32);
    return c;
  }
  if (k.column > 0) {
    // _cv where its block-rows (a quarter as many as _c's for f32) still give every other SM
    // a block; below that _c's parallelism wins (the autotuner measures both).
    const int64_t vec_groups =
        k.column_vec > 0 ? ceil_div(work, kColumnVecThreads * k.column_vec) : 0;
    const bool vec = k.column_vec > 0 && aligned && vec_groups * 2 >= sms;
    return column_launch(k, work, row_size, dev, 0, vec);
  }
  // The vector entry points (_wv, _bv) are entries 2 and 3; kernels that have them have no
  // scalar _w (entry 0), so unaligned pointers take _b whatever the row length.
  const int vec = k.vec > 0 && aligned ? 2 : 0;
  if (k.vec > 0 && !aligned) {
    c.entry = 1;
    c.block = row_size <= kWarpRowLimit ? 128 : 256;
    c.grid = clamp_grid(work, sms * 16);
    return c;
  }
  if (row_size <= kWarpRowLimit) {
    c.entry = vec;
    c.block = 256;
    c.grid = clamp_grid(ceil_div(work, c.block / 32), sms * 64);
    return c;
  }
  c.entry = 1 + vec;
  int64_t t = 256;
  while (t < 1024 && t * 8 < row_size) t *= 2;
  c.block = static_cast<unsigned>(t);
  c.grid = clamp_grid(work, sms * (2048 / t) * 4);
  return c;
}

std::vector<LaunchConfig> launch_candidates(const CudaKernel& k, int64_t work, int64_t row_size,
                                            bool aligned, const DeviceInfo& dev) {
  std::vector<LaunchConfig> out{choose_launch(k, work, row_size, aligned, dev)};
  auto add = [&](LaunchConfig c) {
    for (const auto& o : out)
      if (o.entry == c.entry && o.block == c.block && o.grid == c.grid) return;
    out.push_back(c);
  };
  const int64_t sms = std::max(1, dev.sm_count);
  if (k.kind == KernelKind::Pointwise) {
    if (k.tile > 0) {
      // The tiled entry's block is fixed; its grid cap, and the untiled scalar entry (better
      // where the transposed input is small next to the rest), are measured.
      for (int64_t cap : {int64_t{8}, int64_t{32}, int64_t{1} << 20})
        add({2, clamp_grid(tiles_of(k, work), sms * cap), kTiledBlock});
      CudaKernel untiled = k;
      untiled.tile = 0;
      for (const LaunchConfig& c : launch_candidates(untiled, work, row_size, aligned, dev)) add(c);
      return out;
    }
    const int entry = out[0].entry;
    const int64_t threads = entry == 1 ? work / k.vec : work;
    for (int64_t b : {128, 256, 512, 1024}) {
      add({entry, clamp_grid(ceil_div(threads, b), sms * 32), static_cast<unsigned>(b)});
      add({entry, clamp_grid(ceil_div(threads, b), int64_t{2147483647}), static_cast<unsigned>(b)});
    }
    // The scalar loop too where the vector one is the default: a kernel with many loads per
    // element (a convolution's taps) may run better one element per thread.
    if (entry == 1)
      for (int64_t b : {256, 1024})
        add({0, clamp_grid(ceil_div(work, b), sms * 32), static_cast<unsigned>(b)});
    return out;
  }
  if (k.column > 0)
    for (int64_t b : {128, 256, 512, 1024}) {
      if (k.column_vec > 0 && aligned) add(column_launch(k, work, row_size, dev, b, true));
      add(column_launch(k, work, row_size, dev, b));
    }
  const int vec = k.vec > 0 && aligned ? 2 : 0;
  if (row_size <= 4 * kWarpRowLimit && !(k.vec > 0 && !aligned)) {
    for (int64_t b : {128, 256, 512})
      add({vec, clamp_grid(ceil_div(work, b / 32), sms * 64), static_cast<unsigned>(b)});
  }
  for (int64_t t : {128, 256, 512, 1024})
    add({1 + vec, clamp_grid(work, sms * (2048 / t) * 4), static_cast<unsigned>(t)});
  // A block per row without the grid-stride loop (Inductor's layout for long rows): the
  // hardware starts the next row's block as soon as a block finishes.
  for (int64_t t : {256, 512})
    add({1 + vec, clamp_grid(work, int64_t{2147483647}), static_cast<unsigned>(t)});
  // The block per row that keeps the row in registers runs its own block size only.
  if (k.block_regs > 0 && vec > 0) {
    const int64_t t = k.block_regs;
    add({5, clamp_grid(work, sms * (2048 / t) * 4), static_cast<unsigned>(t)});
    add({5, clamp_grid(work, int64_t{2147483647}), static_cast<unsigned>(t)});
  }
  return out;
}

}  // namespace coil::backend::cuda
