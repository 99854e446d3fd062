// Pointwise kernels with transposed access: a third entry point `_t` that moves the transposed
// inputs through shared-memory tiles (kernel_emitter.h; docs/cuda-backend.md).
//
// A pointwise kernel runs with the dim its output is contiguous along innermost, so adjacent
// threads store adjacent elements. An input that is contiguous along another dim (a transpose:
// k^T of attention, the head merge of its output, a permuted weight) is then read with a large
// stride, 32 different cache lines per warp. `_t` walks the 2-D plane of those two dims in
// square tiles (32 x 32; 64 x 64 where every tiled input has elements of at most 2 bytes, so
// each thread keeps as many bytes in flight), one per 256-thread block and iteration: first the
// block reads each transposed input's tile with threads adjacent along the input's contiguous
// dim into shared memory (a row pitch of one 4-byte word more than the tile keeps the
// transposed read free of bank conflicts), then computes and stores the tile with threads
// adjacent along the output's contiguous dim, reading those inputs from shared memory. Other
// loads read global memory as in `_s`.
#include "kernel_emitter.h"

#include <algorithm>

#include "coil/support/error.h"

namespace coil::backend::cuda::detail {

namespace {
constexpr int kWarp = 32;        // threads adjacent along a tile row
constexpr int kTileRows = 8;     // rows of threads per block (256 threads)
constexpr size_t kMaxTiles = 4;  // shared arrays per kernel (4 x 32 x 33 x 8 bytes at most)
// A tiled dim narrower than this leaves most of each tile empty: a [64, 3, 7, 7] weight copied
// channels-last (tiles over its 3 channels and 7 columns) took 131 us in 64 x 64 tiles on the
// H200, where the scalar loop's reads of 3-element rows stay within a few cache lines per warp.
// (The launch also sizes its grid for full tiles: 3 blocks for that copy.)
constexpr int64_t kMinTiledExtent = kWarp / 2;
}  // namespace

// A load is transposed when it is neither contiguous nor broadcast along the inner dim.
bool KernelEmitter::transposed_load(const ComputeNode& n, const Instr& in, size_t inner) {
  if (in.kind != InstrKind::Load || locals_.count(in.buffer) || in.mask >= 0 ||
      in.buffer == p_.rng_state)
    return false;
  auto s = stride_within(flat_index(in.buffer, in.index), n.index_vars.at(inner), kWarp);
  return !(s && (*s == 0 || *s == 1));
}

// The dim (not `inner`) along which the first transposed load is contiguous, if any; none when
// a member has an indirect or random instruction (their indices are not plain strides).
std::optional<size_t> KernelEmitter::tile_dim(size_t inner) {
  std::optional<size_t> dim;
  for (const ComputeNode* n : nodes_) {
    for (const Instr& in : n->body.instrs) {
      if (in.kind == InstrKind::Indirect || in.kind == InstrKind::Rand ||
          in.kind == InstrKind::Randn)
        return std::nullopt;
      if (dim || !transposed_load(*n, in, inner)) continue;
      Expr flat = flat_index(in.buffer, in.index);
      for (size_t d = 0; d < n->index_vars.size(); ++d) {
        if (d != inner &&
            stride_within(flat, n->index_vars[d], kWarp) == std::optional<int64_t>(1)) {
          dim = d;
          break;
        }
      }
    }
  }
  return dim;
}

void KernelEmitter::emit_pointwise_tiled(const std::vector<size_t>& order) {
  const size_t k = k_.outer_ranges.size();
  if (k < 2) return;
  const size_t inner = order.back();
  const std::optional<size_t> tdim = tile_dim(inner);
  if (!tdim) return;
  const size_t other = *tdim;
  for (size_t d : {inner, other}) {
    const std::optional<int64_t> extent = ctx_.as_const(k_.outer_ranges[d]);
    if (extent && *extent < kMinTiledExtent) return;  // no _t: the untiled entries serve
  }
  // The tiles: one per distinct transposed load contiguous along `other` (the same element
  // read by several members shares one), keyed by its text with the x<j> loop names.
  struct Tile {
    std::string name, ctype, load;
    int size;   // bytes per element
    bool wide;  // contiguous along `other` in runs of 64 (a 64-wide tile's edge), not only 32
  };
  std::vector<Tile> tiles;
  vec_loads_.clear();
  for (size_t m = 0; m < nodes_.size(); ++m) {
    const ComputeNode& n = *nodes_[m];
    set_node_names(n);
    for (size_t i = 0; i < n.body.instrs.size(); ++i) {
      const Instr& in = n.body.instrs[i];
      if (!transposed_load(n, in, inner)) continue;
      Expr flat = flat_index(in.buffer, in.index);
      if (stride_within(flat, n.index_vars[other], kWarp) != std::optional<int64_t>(1)) continue;
      const std::string load = buf(in.buffer).name + "[" + idx(flat) + "]";
      auto it = std::find_if(tiles.begin(), tiles.end(), [&](auto& t) { return t.load == load; });
      if (it == tiles.end()) {
        if (tiles.size() == kMaxTiles) continue;  // read from global memory as in _s
        const DType dt = buf(in.buffer).dtype;
        const bool wide =
            stride_within(flat, n.index_vars[other], 2 * kWarp) == std::optional<int64_t>(1);
        tiles.push_back(
            {"t" + std::to_string(tiles.size()) + "_", ctype(dt), load, dtype_size(dt), wide});
        it = tiles.end() - 1;
      }
      vec_loads_[{m, static_cast<InstrId>(i)}] = it->name + "[j_][i_]";
    }
  }
  if (tiles.empty()) return;
  int edge = 64;
  for (const Tile& t : tiles)
    if (t.size > 2 || !t.wide) edge = kWarp;
  info_.tile = edge;
  {
    auto ea = ctx_.as_const(k_.outer_ranges[inner]), eb = ctx_.as_const(k_.outer_ranges[other]);
    if (ea && eb) {
      const int64_t slots = (*ea + edge - 1) / edge * edge * ((*eb + edge - 1) / edge * edge);
      info_.tile_fill = static_cast<double>(*ea * *eb) / static_cast<double>(slots);
    }
  }

  const std::string T = idx_t_;
  const std::string xa = "x" + std::to_string(inner), xb = "x" + std::to_string(other);
  const std::string na = "(" + T + ")(" + idx(k_.outer_ranges[inner]) + ")";
  const std::string nb = "(" + T + ")(" + idx(k_.outer_ranges[other]) + ")";
  const std::string E = std::to_string(edge), R = std::to_string(kTileRows);
  const std::string W = std::to_string(kWarp);
  std::vector<std::string> vars, ranges;
  std::vector<Expr> rest;
  for (size_t j = 0; j < k; ++j) {
    if (j == inner || j == other) continue;
    vars.push_back("x" + std::to_string(j));
    ranges.push_back("(" + T + ")(" + idx(k_.outer_ranges[j]) + ")");
    rest.push_back(k_.outer_ranges[j]);
  }
  vars.insert(vars.end(), {"tb_", "ta_"});
  ranges.insert(ranges.end(), {"nb_", "na_"});

  line("extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kWarp * kTileRows) +
       ") " + k_.name + "_t(" + param_list() + ") {");
  ++indent_;
  for (const Tile& t : tiles) {
    const std::string pad = std::to_string(std::max(1, 4 / t.size));
    line("__shared__ " + t.ctype + " " + t.name + "[" + E + "][" + E + " + " + pad + "];");
  }
  line("const " + T + " na_ = (" + na + " + " + E + " - 1) / " + E + ";");
  line("const " + T + " nb_ = (" + nb + " + " + E + " - 1) / " + E + ";");
  line("const int64_t n_ = int64_t(" + idx(product(rest)) + ") * na_ * nb_;");
  line("const int tx_ = threadIdx.x % " + W + ", ty_ = threadIdx.x / " + W + ";");
  open("for (int64_t l_ = blockIdx.x; l_ < n_; l_ += gridDim.x) {");
  decompose_text("(" + T + ")l_", vars, ranges);
  // Phase 1: threads adjacent along `other` (the inputs' contiguous dim) fill the tiles.
  const std::string rows = "for (int i_ = ty_; i_ < " + E + "; i_ += " + R + ") {";
  const std::string lanes = "for (int j_ = tx_; j_ < " + E + "; j_ += " + W + ") {";
  open(rows);
  open(lanes);
  line("const " + T + " " + xa + " = ta_ * " + E + " + i_;");
  line("const " + T + " " + xb + " = tb_ * " + E + " + j_;");
  open("if (" + xa + " < " + na + " && " + xb + " < " + nb + ") {");
  for (const Tile& t : tiles) line(t.name + "[i_][j_] = " + t.load + ";");
  close();
  close();
  close();
  line("__syncthreads();");
  // Phase 2: threads adjacent along `inner` (the output's contiguous dim) compute and store.
  open(rows);
  open(lanes);
  line("const " + T + " " + xa + " = ta_ * " + E + " + j_;");
  line("const " + T + " " + xb + " = tb_ * " + E + " + i_;");
  open("if (" + xa + " < " + na + " && " + xb + " < " + nb + ") {");
  for (size_t m = 0; m < nodes_.size(); ++m) declare_local(m);
  tile_mode_ = true;
  emit_member_stores();
  tile_mode_ = false;
  close();
  close();
  close();
  line("__syncthreads();");
  close();
  close();
  line("");
}

}  // namespace coil::backend::cuda::detail
