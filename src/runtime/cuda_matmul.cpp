#include "cuda_matmul.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "coil/loop/program.h"

namespace coil::runtime::detail {

namespace cu = backend::cuda;

namespace {

bool misaligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; }

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One operand [rows, cols] with strides (s0, s1): which way it is contiguous.
struct Side {
  bool row_major;  // unit column stride (else unit row stride)
  int64_t ld;      // the other stride
};

Side side_of(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if (s1 == 1 || cols == 1) return {true, rows == 1 ? cols : s0};
  return {false, cols == 1 ? rows : s1};
}

}  // namespace

bool run_gemm(const cu::GemmArgs& g, const CudaSteps& steps, const RunContext& rc,
              std::string* why) {
  const int64_t es = dtype_size(g.dtype);
  if (g.batch != 1 || es > 4 || g.m * g.n * g.k < loop::kMatmulPadMinWork ||
      !(g.c_stride1 == 1 || g.n == 1))
    return cu::gemm(g, rc.stream, why);
  const int64_t per = 16 / es;
  const Side a = side_of(g.m, g.k, g.a.stride0, g.a.stride1);
  const Side b = side_of(g.k, g.n, g.b.stride0, g.b.stride1);
  // A dimension is padded when it is some operand's contiguous one and not a multiple of `per`.
  const bool pad_m = !a.row_major && g.m % per != 0;
  const bool pad_k = (a.row_major || !b.row_major) && g.k % per != 0;
  const bool pad_n = g.n % per != 0;  // C is row-major
  const int64_t mp = pad_m ? round_up(g.m, per) : g.m;
  const int64_t kp = pad_k ? round_up(g.k, per) : g.k;
  const int64_t np = pad_n ? round_up(g.n, per) : g.n;
  // An operand padded only along its contiguous dim, whose storage holds zeros there up to
  // its (aligned) leading stride, is read padded in place.
  const bool a_in_place =
      g.a_zero_padded && a.ld >= (a.row_major ? kp : mp) && (a.row_major ? !pad_m : !pad_k);
  const bool b_in_place =
      g.b_zero_padded && b.ld >= (b.row_major ? np : kp) && (b.row_major ? !pad_k : !pad_n);
  const bool repack_a =
      ((pad_m || pad_k) && !a_in_place) || (a.ld * es) % 16 != 0 || misaligned(g.a.data);
  const bool repack_b =
      ((pad_k || pad_n) && !b_in_place) || (b.ld * es) % 16 != 0 || misaligned(g.b.data);
  // C written in place: its rows are aligned and, when N is padded, hold N_pad columns (the
  // lowering gave a CUDA mm's product such a buffer: src/lower/linalg.cpp).
  const bool c_room = g.c_cols >= np && (g.c_stride0 * es) % 16 == 0 && !misaligned(g.c);
  const bool temp_c = pad_m || !c_room;
  if (!repack_a && !repack_b && !temp_c) return cu::gemm(g, rc.stream, why);

  std::vector<std::shared_ptr<void>> keep;  // freed after the work is queued: stream-ordered
  auto block = [&](int64_t elements) {
    void* p = nullptr;
    keep.push_back(steps.allocate(static_cast<size_t>(elements * es), rc, &p));
    return p;
  };
  // A dense zero-padded copy of operand [rows, cols] (s0, s1) -> [rows_p, cols_p], keeping its
  // orientation; returns the operand's new strides.
  auto repack = [&](const cu::GemmOperand& op, Side side, int64_t rows, int64_t cols,
                    int64_t rows_p, int64_t cols_p) {
    cu::GemmOperand out;
    if (side.row_major) {
      out.data = block(rows_p * cols_p);
      steps.pad_copy(op.data, g.dtype, rows, cols, op.stride0, op.stride1,
                     const_cast<void*>(out.data), rows_p, cols_p, cols_p, rc.stream);
      out.stride0 = cols_p;
      out.stride1 = 1;
    } else {  // column-major: copy the transpose [cols, rows] row by row
      out.data = block(rows_p * cols_p);
      steps.pad_copy(op.data, g.dtype, cols, rows, op.stride1, op.stride0,
                     const_cast<void*>(out.data), cols_p, rows_p, rows_p, rc.stream);
      out.stride0 = 1;
      out.stride1 = rows_p;
    }
    return out;
  };
  cu::GemmArgs p = g;
  p.m = mp;
  p.k = kp;
  p.n = np;
  if (repack_a) p.a = repack(g.a, a, g.m, g.k, mp, kp);
  if (repack_b) p.b = repack(g.b, b, g.k, g.n, kp, np);
  if (g.bias && pad_n) {
    void* bias = block(np);
    steps.pad_copy(g.bias, g.dtype, 1, g.n, 0, 1, bias, 1, np, np, rc.stream);
    p.bias = bias;
  }
  if (temp_c) {
    p.c = block(mp * np);
    p.c_stride0 = np;
    p.c_stride1 = 1;
  }
  if (!cu::gemm(p, rc.stream, why)) return false;
  if (temp_c) steps.pad_copy(p.c, g.dtype, g.m, g.n, np, 1, g.c, g.m, g.n, g.c_stride0, rc.stream);
  return true;
}

}  // namespace coil::runtime::detail
