// Library kernel: forward convolution (1-d and 2-d) by im2col + GEMM.
#include "coil/runtime/extern_kernels.h"
#include "element.h"

#include <algorithm>

namespace coil::runtime::kernels {

using namespace coil::runtime::detail;

ConvParams ConvParams::from_ints(std::span<const int64_t> ints, int nd) {
  COIL_USER_CHECK(nd >= 1 && static_cast<int64_t>(ints.size()) == 4 * nd + 2)
      << "convolution: expected " << 4 * nd + 2 << " int attributes, got " << ints.size();
  ConvParams p;
  auto take = [&](size_t at) {
    return std::vector<int64_t>(ints.begin() + at, ints.begin() + at + nd);
  };
  p.stride = take(0);
  p.padding = take(nd);
  p.dilation = take(2 * nd);
  p.transposed = ints[3 * nd] != 0;
  p.output_padding = take(3 * nd + 1);
  p.groups = ints[4 * nd + 1];
  COIL_USER_CHECK(p.groups >= 1) << "convolution: groups must be positive";
  return p;
}

bool convolution_supported(DType dtype, int input_rank, const ConvParams& p) {
  bool float_type = dtype == DType::Float32 || dtype == DType::Float64 ||
                    dtype == DType::BFloat16 || dtype == DType::Float16;
  return float_type && !p.transposed && (input_rank == 3 || input_rank == 4);
}

namespace {

// A 1-d convolution seen as 2-d with H = 1.
RuntimeTensor as_2d(const RuntimeTensor& t) {
  if (t.sizes.size() == 4) return t;
  RuntimeTensor r = t;
  r.sizes.insert(r.sizes.begin() + 2, 1);
  r.strides.insert(r.strides.begin() + 2, 0);
  return r;
}

template <typename T>
void conv2d(const RuntimeTensor& in, const RuntimeTensor& w, const RuntimeTensor* bias, int64_t sh,
            int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups,
            const RuntimeTensor& out) {
  const int64_t N = in.sizes[0], C = in.sizes[1], H = in.sizes[2], W = in.sizes[3];
  const int64_t O = w.sizes[0], Cg = w.sizes[1], KH = w.sizes[2], KW = w.sizes[3];
  const int64_t OH = out.sizes[2], OW = out.sizes[3];
  COIL_USER_CHECK(Cg * groups == C && O % groups == 0 && out.sizes[0] == N && out.sizes[1] == O)
      << "convolution: channel/group mismatch";
  const int64_t Og = O / groups, L = OH * OW, R = Cg * KH * KW;
  DType dt = in.dtype;
  // Weight as a contiguous [O, R] matrix.
  std::optional<Scratch> wkeep;
  const T* wdata = static_cast<const T*>(w.data);
  if (!is_contiguous(w)) {
    wkeep.emplace(dt, w.sizes);
    copy(w, wkeep->t);
    wdata = static_cast<const T*>(wkeep->t.data);
  }
  // Output into a contiguous [N, O, L] buffer (scratch when `out` is not contiguous).
  std::optional<Scratch> okeep;
  T* odata = static_cast<T*>(out.data);
  if (!is_contiguous(out)) {
    okeep.emplace(dt, out.sizes);
    odata = static_cast<T*>(okeep->t.data);
  }
  const bool pointwise = KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 &&
                         in.strides[3] == 1 && (H == 1 || in.strides[2] == W);
  std::optional<Scratch> col;
  if (!pointwise) col.emplace(dt, std::vector<int64_t>{R, L});
  T* cdata = col ? static_cast<T*>(col->t.data) : nullptr;
  const T* idata = static_cast<const T*>(in.data);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      const T* plane = idata + n * in.strides[0] + g * Cg * in.strides[1];
      RuntimeTensor B;
      B.dtype = dt;
      if (pointwise) {
        B.data = const_cast<T*>(plane);
        B.sizes = {R, L};
        B.strides = {in.strides[1], 1};
      } else {
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
              T* row = cdata + ((c * KH + kh) * KW + kw) * L;
              const T* src = plane + c * in.strides[1];
              for (int64_t oh = 0; oh < OH; ++oh) {
                int64_t ih = oh * sh - ph + kh * dh;
                T* dst = row + oh * OW;
                if (ih < 0 || ih >= H) {
                  for (int64_t ow = 0; ow < OW; ++ow) dst[ow] = from_double<T>(0);
                  continue;
                }
                const T* srow = src + ih * in.strides[2];
                for (int64_t ow = 0; ow < OW; ++ow) {
                  int64_t iw = ow * sw - pw + kw * dw;
                  dst[ow] = (iw >= 0 && iw < W) ? srow[iw * in.strides[3]] : from_double<T>(0);
                }
              }
            }
        B.data = cdata;
        B.sizes = {R, L};
        B.strides = {L, 1};
      }
      RuntimeTensor A;
      A.dtype = dt;
      A.data = const_cast<T*>(wdata + g * Og * R);
      A.sizes = {Og, R};
      A.strides = {R, 1};
      RuntimeTensor Cm;
      Cm.dtype = dt;
      Cm.data = odata + (n * O + g * Og) * L;
      Cm.sizes = {Og, L};
      Cm.strides = {L, 1};
      bool acc = false;
      if (bias) {
        T* cp = static_cast<T*>(Cm.data);
        for (int64_t o = 0; o < Og; ++o) {
          T b = *(static_cast<const T*>(bias->data) + (g * Og + o) * bias->strides[0]);
          for (int64_t l = 0; l < L; ++l) cp[o * L + l] = b;
        }
        acc = true;
      }
      gemm2d(A, B, Cm, 1.0, acc);
    }
  }
  if (okeep) copy(okeep->t, out);
}

}  // namespace

void convolution(const RuntimeTensor& input, const RuntimeTensor& weight, const RuntimeTensor* bias,
                 const ConvParams& p, const RuntimeTensor& out) {
  int rank = static_cast<int>(input.sizes.size());
  COIL_USER_CHECK(convolution_supported(input.dtype, rank, p))
      << "convolution: the library path supports forward 1-d/2-d floating convolutions only";
  COIL_USER_CHECK(weight.dtype == input.dtype && out.dtype == input.dtype &&
                  (!bias || bias->dtype == input.dtype))
      << "convolution: dtype mismatch";
  COIL_USER_CHECK(weight.sizes.size() == input.sizes.size() &&
                  out.sizes.size() == input.sizes.size())
      << "convolution: rank mismatch";
  int64_t sh = 1, ph = 0, dh = 1;
  int off = 0;
  if (rank == 4) {
    sh = p.stride[0], ph = p.padding[0], dh = p.dilation[0];
    off = 1;
  }
  int64_t sw = p.stride[off], pw = p.padding[off], dw = p.dilation[off];
  RuntimeTensor in2 = as_2d(input), w2 = as_2d(weight), o2 = as_2d(out);
  // Expected output sizes.
  int64_t OH = (in2.sizes[2] + 2 * ph - dh * (w2.sizes[2] - 1) - 1) / sh + 1;
  int64_t OW = (in2.sizes[3] + 2 * pw - dw * (w2.sizes[3] - 1) - 1) / sw + 1;
  COIL_USER_CHECK(o2.sizes[2] == OH && o2.sizes[3] == OW) << "convolution: output size mismatch";
  if (numel(out) == 0) return;
  auto run = [&](auto z) {
    using T = decltype(z);
    conv2d<T>(in2, w2, bias, sh, sw, ph, pw, dh, dw, p.groups, o2);
  };
  if (input.dtype == DType::Float32) {
    run(float{});
  } else if (input.dtype == DType::Float64) {
    run(double{});
  } else {
    // bf16/f16: compute in f32 and round once.
    Scratch fi(DType::Float32, in2.sizes), fw(DType::Float32, w2.sizes),
        fo(DType::Float32, o2.sizes);
    copy(in2, fi.t);
    copy(w2, fw.t);
    std::optional<Scratch> fb;
    if (bias) {
      fb.emplace(DType::Float32, bias->sizes);
      copy(*bias, fb->t);
    }
    conv2d<float>(fi.t, fw.t, fb ? &fb->t : nullptr, sh, sw, ph, pw, dh, dw, p.groups, fo.t);
    copy(fo.t, o2);
  }
}

}  // namespace coil::runtime::kernels

namespace coil::runtime::kernels {

namespace {

// A contiguous float64 copy of `t` viewed as 2-d spatial (1-d convolutions get H = 1).
Scratch to_f64_2d(const RuntimeTensor& t) {
  RuntimeTensor v = as_2d(t);
  Scratch s(DType::Float64, v.sizes);
  copy(v, s.t);
  return s;
}

}  // namespace

void convolution_backward(const RuntimeTensor& grad_output, const RuntimeTensor& input,
                          const RuntimeTensor& weight, const ConvParams& p,
                          const RuntimeTensor* grad_input, const RuntimeTensor* grad_weight,
                          const RuntimeTensor* grad_bias) {
  const int rank = static_cast<int>(input.sizes.size());
  COIL_USER_CHECK(convolution_supported(input.dtype, rank, p))
      << "convolution_backward: the library path supports 1-d/2-d floating convolutions only";
  int64_t sh = 1, ph = 0, dh = 1;
  int off = 0;
  if (rank == 4) {
    sh = p.stride[0], ph = p.padding[0], dh = p.dilation[0];
    off = 1;
  }
  const int64_t sw = p.stride[off], pw = p.padding[off], dw = p.dilation[off];
  Scratch go = to_f64_2d(grad_output), in = to_f64_2d(input), w = to_f64_2d(weight);
  const int64_t N = in.t.sizes[0], C = in.t.sizes[1], H = in.t.sizes[2], W = in.t.sizes[3];
  const int64_t O = w.t.sizes[0], Cg = w.t.sizes[1], KH = w.t.sizes[2], KW = w.t.sizes[3];
  const int64_t OH = go.t.sizes[2], OW = go.t.sizes[3];
  const int64_t G = p.groups, Og = O / G;
  COIL_USER_CHECK(Cg * G == C && O % G == 0) << "convolution_backward: channel/group mismatch";
  const double* g = static_cast<const double*>(go.t.data);
  const double* x = static_cast<const double*>(in.t.data);
  const double* k = static_cast<const double*>(w.t.data);
  Scratch gi(DType::Float64, in.t.sizes), gw(DType::Float64, w.t.sizes);
  double* dx = static_cast<double*>(gi.t.data);
  double* dk = static_cast<double*>(gw.t.data);
  std::fill(dx, dx + numel(gi.t), 0.0);
  std::fill(dk, dk + numel(gw.t), 0.0);
  // One pass over (n, o, oh, ow, c, kh, kw): each forward product contributes to both
  // gradients. Parallel over output channels would race on dx; over n it races on dk, so the
  // loops stay serial: this path is the fallback when no faster host kernel exists.
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const int64_t grp = o / Og;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const double gv = g[((n * O + o) * OH + oh) * OW + ow];
          if (gv == 0.0) continue;
          for (int64_t c = 0; c < Cg; ++c) {
            const int64_t ci = grp * Cg + c;
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = oh * sh - ph + kh * dh;
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = ow * sw - pw + kw * dw;
                if (iw < 0 || iw >= W) continue;
                const int64_t xi = ((n * C + ci) * H + ih) * W + iw;
                const int64_t ki = ((o * Cg + c) * KH + kh) * KW + kw;
                dx[xi] += gv * k[ki];
                dk[ki] += gv * x[xi];
              }
            }
          }
        }
    }
  if (grad_input) copy(gi.t, as_2d(*grad_input));
  if (grad_weight) copy(gw.t, as_2d(*grad_weight));
  if (grad_bias) {
    Scratch gb(DType::Float64, {O});
    double* db = static_cast<double*>(gb.t.data);
    for (int64_t o = 0; o < O; ++o) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < OH * OW; ++i) acc += g[(n * O + o) * OH * OW + i];
      db[o] = acc;
    }
    copy(gb.t, *grad_bias);
  }
}

}  // namespace coil::runtime::kernels
