// CUDA C++ source for the kernels of a scheduled program: the same LoopProgram + Schedule the
// C++ emitter consumes (backend/cpu/emit_cpp.h), printed as CUDA for NVRTC.
//
// Kernel kinds (docs/cuda-backend.md):
//   Pointwise  every member is pointwise over exactly the kernel's outer ranges: one element per
//              thread in a grid-stride loop, the dim the first output is contiguous along
//              innermost. Entry points <name>_s (scalar) and, when every access along that dim
//              is contiguous and provably aligned, <name>_v (Vec elements per thread with
//              128-bit loads and stores; the runtime picks it when the pointers are aligned),
//              and, when an input is read transposed (contiguous along another dim), <name>_t
//              (square tiles of that plane through shared memory, emit_tiled.cpp).
//   Rows       anything else (reductions, inner loops): one thread group per outer point ("row"),
//              the members one after another, each looping over its inner range with the
//              group's threads; reductions combine across the group. Entry points <name>_w (a
//              warp per row, several rows per block) and <name>_b (the whole block per row);
//              the runtime picks by row length (launch.h). Kernels that read across rows
//              (column reductions) add <name>_c: C adjacent rows per warp, each row split
//              over the lanes of the block (CudaKernel::column); where their members are one
//              pass over the row and the rows' accesses contiguous and aligned, also <name>_cv:
//              W adjacent rows per thread, one 128-bit load each (CudaKernel::column_vec).
// Index arithmetic is 32-bit when every extent and buffer offset of the kernel is a constant
// below 2^31, else 64-bit.
//
// The ABI: parameters are, in order, the data pointers of `buffers` (a View's base pointer, as
// the CPU ABI), then every LoopProgram::size_symbols value (int64), then for random kernels
// the seed and offset (int64).
#pragma once

#include <string>
#include <vector>

#include "coil/sched/schedule.h"

namespace coil::backend::cuda {

enum class KernelKind { Pointwise, Rows };

struct CudaKernel {
  std::string name;  // the KernelPlan's name; entry points add _s/_v/_t or _w/_b/_wv/_bv/_c/_br/_cv
  // Where the entry points are: empty for this kernel's own, else the name of an earlier kernel
  // of the same source whose code is the same up to names (emit_cuda compiles it once).
  std::string entry;
  KernelKind kind = KernelKind::Pointwise;
  std::vector<loop::BufferId> buffers;  // the pointer parameters, in order
  bool random = false;                  // seed and offset parameters follow the sizes
  // Pointwise: elements; Rows: number of rows (outer points).
  sym::Expr work = nullptr;
  // Rows: the longest inner loop of a member (elements per row); Pointwise: 1.
  sym::Expr row_size = nullptr;
  // Elements per thread of the vector entry points (0: none): Pointwise _v; Rows _wv and _bv,
  // one coil::Vec step per thread and iteration of a member's row loop.
  int vec = 0;
  // Pointwise: the edge of the tiled entry point's square tiles (32 or 64), 0 where there is
  // no <name>_t (only when an input is read transposed; 256-thread blocks; emit_tiled.cpp).
  int tile = 0;
  // Pointwise with a tiled entry: the share of its tiles' slots that hold elements (1 where
  // the tiled dims' extents are symbolic). The launch sizes the grid by tiles, not elements: a
  // [8, 12, 64, 70] head merge has 192 tiles of 64 x 64 for 105 tiles' worth of elements.
  double tile_fill = 1.0;
  // Rows: columns per warp of the column entry point <name>_c (0: none), for kernels that
  // read across rows (a sum over the rows of a row-major matrix): the threads of a warp take
  // `column` adjacent rows, so a warp's load is whole sectors (emit_rows.cpp).
  int column = 0;
  // Rows: rows per thread of the vector column entry point <name>_cv (0: none): 8 threads
  // per block-row, each reading W adjacent rows with one 128-bit load (emit_columns.cpp).
  int column_vec = 0;
  // Rows: the threads of the block-per-row entry point <name>_br (0: none), which keeps the
  // row cache in registers, a fixed number of steps per thread (emit_rows.cpp).
  int block_regs = 0;
};

// The code of one distinct kernel cut where NVRTC may split it: each entry point is a
// `extern "C" __global__` definition of its own (most instantiate a template of `shared` once),
// so the entry points of one kernel can go to several translation units compiled at once.
struct KernelCode {
  std::string shared;  // everything but the entry points' definitions (templates, comments)
  struct Entry {
    std::string name;  // e.g. kernel3_bv
    std::string code;  // its definition
  };
  std::vector<Entry> entries;  // in the order emitted
};

// `code` (one kernel as KernelEmitter prints it) cut into its shared part and its entry points.
// An entry point starts at a line beginning `extern "C" __global__` and ends at the next line
// that is exactly "}" (the emitters indent everything inside).
KernelCode split_entry_points(const std::string& code);

struct CudaSource {
  std::string code;                 // prelude + kernels, one translation unit
  std::vector<CudaKernel> kernels;  // per Schedule::kernels
  // The code of each distinct kernel (no prelude), in order, and per kernel the index of the
  // one whose entry points it launches: the runtime may compile them in several units at once.
  std::vector<KernelCode> distinct;
  std::vector<int> distinct_of;
};

CudaSource emit_cuda(const loop::LoopProgram& program, const sched::Schedule& schedule,
                     const CompileOptions& options);

// A translation unit: the prelude, then per kernel of `kernels` that has an entry point in
// `entries` (pairs of distinct kernel, entry index) its shared code and those entry points,
// kernels and entry points in their order.
std::string cuda_unit(const std::vector<KernelCode>& kernels,
                      const std::vector<std::pair<int, int>>& entries);
// The kernels without the prelude (for golden tests and the debug dump).
std::string strip_prelude(const std::string& code);

// The prelude (runtime_headers/coil/cuda/prelude.cuh + philox.h, embedded at build time).
const std::string& cuda_prelude();

}  // namespace coil::backend::cuda
