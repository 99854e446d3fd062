// Split reductions: a reduction with few outputs and a long reduction range, computed in two
// stages so that a GPU has enough independent work (Inductor's split reductions).
//
// Training BatchNorm reduces [N, C, H, W] to C channel sums: ResNet-50's first BatchNorm has 64
// outputs over 802,816 elements each, which one block (or warp group) per output runs on 64 of
// the H100's 132 SMs at a fraction of the memory bandwidth. Split, stage 1 reduces chunks into
// partials laid out [chunks..., outputs...] (adjacent outputs stay adjacent, so a column
// reduction's reads stay coalesced) and stage 2 reduces the partials.
//
// The chunks are whole leading reduction dims and a factor of the next one, so the chunk's
// index maps onto the reduction index without div/mod: reduction dims [N, H, W] split 64 ways
// read element (n, c, h, w) as partial (n, c) over (h, w).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "coil/loop/program.h"
#include "coil/sym/expr.h"

namespace coil::lower::detail {

// Split when a reduction has fewer outputs than this ...
// (1024 outputs were measured too few: ResNet-50's BatchNorm statistics over 1024 channels
// of [64, 14, 14] ran at 0.9 TB/s in one stage, and over 256 channels at 0.6 TB/s; 2048
// channels over [64, 7, 7] in one stage took 25.7 us, split 4 ways 11.3, Inductor 14.2.)
inline constexpr int64_t kSplitMaxOutputs = 4096;
// ... at least `min_length` elements per output (option split_reduction_min_length, 2048),
// and `min_elements` in all (option
// split_reduction_min_elements, 2^18: below that a second launch costs more than the
// parallelism gains; a softmax over 64 rows of 2048 stays whole. 512 channels over [64, 7, 7],
// 1.6 M elements, took 17.9 us in one stage and 8.2 split 8 ways; EfficientNet-B0's 40
// channels over [32, 28, 28], 1.0 M elements, took 78 us in one stage on the H200, a column
// kernel of 8 columns a block on 5 blocks. 2^20 -> 2^18 on the H200, reduce-overhead training
// steps: efficientnet_b0 10.46 -> 10.09 ms, mobilenet_v2 11.84 -> 11.42);
// aim for this many partial outputs, each reducing at least kSplitMinChunk elements. 8192:
// a column reduction's vector entry point (_cv) takes 32 partials a block-row, so 256
// block-rows; with 4096 half the H100's SMs held one block (resnet50_train 25.20 -> 24.97 ms;
// a channels-last BatchNorm statistics microbenchmark 77 -> 70 us). Chunks of 256: 256
// channels over [64, 14, 14] split 32 ways (chunks of 392) instead of 8 ran 8.9 -> 6.9 us.
inline constexpr int64_t kSplitTargetPartials = 8192;
inline constexpr int64_t kSplitMinChunk = 256;
// Fewer ways than this do not pay for the second kernel. Outputs from 2049 to 4095 want
// ceil(8192 / outputs) = 2 or 3 chunks and so were never split, although they run on few
// blocks as well: DistilBERT's FFN bias gradient, 3072 columns over 4096 rows, ran as a
// column kernel of 96 blocks on the H100's 132 SMs (2.0-2.4 TB/s); they now split 4 ways.
inline constexpr int64_t kSplitMinWays = 4;

struct ReductionSplit {
  size_t whole = 0;    // leading reduction dims that become chunk dims whole
  int64_t factor = 1;  // then reduction dim `whole` is split `factor` ways (1: not split)
  int64_t chunks = 1;  // product of the chunk dims' sizes
};

// The split of a reduction of `out_sizes` over `red_sizes`, or nullopt where it does not pay
// (or sizes are symbolic, or the kind has no associative combine: argmax/argmin).
std::optional<ReductionSplit> plan_reduction_split(const sym::Context& ctx, loop::ReduceKind kind,
                                                   const std::vector<sym::Expr>& out_sizes,
                                                   const std::vector<sym::Expr>& red_sizes,
                                                   int64_t min_elements, int64_t min_length);

}  // namespace coil::lower::detail
