// Extern-call dispatch of a Program: Program::Impl::run_extern runs one extern step through
// cuBLASLt (cuda_matmul) or cuDNN on the GPU, the host fallback (adopting or copying its
// results), or the library kernels of extern_kernels.h on the CPU.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "coil/backend/cuda/cublaslt.h"
#include "coil/runtime/extern_kernels.h"
#include "coil/support/error.h"
#include "cuda_conv.h"
#include "cuda_matmul.h"
#include "program_impl.h"

namespace coil::runtime {

using detail::eval_size;
using detail::ExternCall;
using detail::Provider;
using detail::Root;
using detail::RunMemory;
using detail::ViewSpec;
using loop::BufferId;
using loop::ExternKind;

bool Program::Impl::measure_provider(const ExternCall& call, const std::vector<RuntimeTensor>& ins,
                                     const std::function<void()>& library,
                                     const std::function<void()>& host, Provider* known) const {
  std::pair<const ExternCall*, std::vector<int64_t>> key{&call, {}};
  for (const RuntimeTensor& t : ins) {
    key.second.insert(key.second.end(), t.sizes.begin(), t.sizes.end());
    key.second.insert(key.second.end(), t.strides.begin(), t.strides.end());
    key.second.push_back(-1);
  }
  {
    std::lock_guard<std::mutex> lock(measured_mutex);
    auto it = measured.find(key);
    if (it != measured.end()) {
      *known = it->second.chosen;
      return true;
    }
  }
  // Interleaved, a warm-up run of each first, best of two timed runs; the host runs last, so
  // the step ends as a host step would (its results adopted or copied). Both are correct.
  using Clock = std::chrono::steady_clock;
  double best[2] = {1e300, 1e300};
  for (int rep = 0; rep < 3; ++rep) {
    for (int which = 0; which < 2; ++which) {
      const auto t0 = Clock::now();
      (which == 0 ? library : host)();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep > 0) best[which] = std::min(best[which], s);
    }
  }
  Measurement r{best[1] < best[0] ? Provider::Host : Provider::Library, best[0], best[1]};
  std::lock_guard<std::mutex> lock(measured_mutex);
  measured.emplace(std::move(key), r);
  return false;
}

bool Program::Impl::cuda_matmul(const ExternCall& call, const std::vector<RuntimeTensor>& ins,
                                const RuntimeTensor& out, const RunContext& rc,
                                std::string* why) const {
  namespace cu = backend::cuda;
  const bool addmm = call.kind == ExternKind::Addmm;
  const RuntimeTensor& a = ins[addmm ? 1 : 0];
  const RuntimeTensor& b = ins[addmm ? 2 : 1];
  const size_t r = a.sizes.size();
  if ((r != 2 && r != 3) || b.sizes.size() != r || out.sizes.size() != r) {
    *why = "matmul ranks";
    return false;
  }
  const size_t o = r - 2;  // first matrix dim
  cu::GemmArgs g;
  g.dtype = a.dtype;
  g.allow_tf32 = allow_tf32;
  if (b.dtype != a.dtype || out.dtype != a.dtype) {
    *why = "mixed dtypes";
    return false;
  }
  g.batch = r == 3 ? a.sizes[0] : 1;
  g.m = a.sizes[o];
  g.k = a.sizes[o + 1];
  g.n = b.sizes[o + 1];
  g.a = {a.data, a.strides[o], a.strides[o + 1], r == 3 ? a.strides[0] : 0};
  g.b = {b.data, b.strides[o], b.strides[o + 1], r == 3 ? b.strides[0] : 0};
  g.c = out.data;
  g.c_stride0 = out.strides[o];
  g.c_stride1 = out.strides[o + 1];
  g.c_cols = out.sizes[o + 1];  // > n where the lowering padded the product's columns
  g.activation = call.ints.empty() ? 0 : static_cast<int>(call.ints[0]);
  const int64_t zero_padded = call.ints.size() > 2 ? call.ints[2] : 0;
  g.a_zero_padded = (zero_padded & loop::kZeroPaddedA) != 0;
  g.b_zero_padded = (zero_padded & loop::kZeroPaddedB) != 0;
  g.c_batch_stride = r == 3 ? out.strides[0] : 0;
  if (g.batch > 1 && (a.sizes[0] == 1 || b.sizes[0] == 1)) {
    *why = "broadcast batch";
    return false;
  }
  if (addmm) {
    const double beta = call.scalars.size() > 0 ? call.scalars[0] : 1.0;
    const double alpha = call.scalars.size() > 1 ? call.scalars[1] : 1.0;
    g.alpha = static_cast<float>(alpha);
    const RuntimeTensor& bias = ins[0];
    // The epilogue adds a bias row: [N] or [1|M, N] broadcast over rows, unit stride, alpha 1.
    const size_t br = bias.sizes.size();
    bool row = bias.dtype == a.dtype && br >= 1 && br <= 2 && bias.sizes[br - 1] == g.n &&
               (bias.strides[br - 1] == 1 || g.n == 1) &&
               (br == 1 || bias.sizes[0] == 1 || bias.strides[0] == 0) &&
               reinterpret_cast<uintptr_t>(bias.data) % 16 == 0;
    if (beta != 0.0) {
      if (!(row && beta == 1.0 && alpha == 1.0)) {
        *why = "addmm with a bias that is not a row";
        return false;
      }
      g.bias = bias.data;
    }
  }
  return detail::run_gemm(g, *cuda, rc, why);
}

void Program::Impl::run_extern(const ExternCall& call, std::vector<void*>& bufs, const int64_t* env,
                               std::vector<std::shared_ptr<void>>& storages,
                               const std::vector<RuntimeTensor>& in, const RunContext& rc,
                               const RunMemory& rm) const {
  std::vector<RuntimeTensor> ins;
  ins.reserve(call.inputs.size());
  for (const auto& v : call.inputs) ins.push_back(view(v, bufs, env, storages, in));
  if (call.provider == Provider::Library && cuda) {
    std::string why;
    if (call.kind == ExternKind::Convolution || call.kind == ExternKind::ConvolutionBackward) {
      std::vector<RuntimeTensor> outs;
      for (const auto& v : call.outputs) outs.push_back(view(v, bufs, env, storages, in));
      const bool backward = call.kind == ExternKind::ConvolutionBackward;
      if (detail::run_cudnn_conv(backward, call.conv,
                                 backward ? &call.ints[call.ints.size() - 3] : nullptr, ins, outs,
                                 conv_allow_tf32, conv_measure, *cuda, rc, &why))
        return;
    } else if (call.kind == ExternKind::IndexPut) {
      RuntimeTensor out = view(call.outputs[0], bufs, env, storages, in);
      const size_t k = ins.size() - 2;
      std::vector<RuntimeTensor> idx(ins.begin() + 1, ins.begin() + 1 + k);
      std::vector<int64_t> dims(call.ints.begin() + 1, call.ints.end());
      // (Provider::Library only where init found ints[0], accumulate, set.)
      if (cuda->index_put_accumulate(ins[0], idx, dims, ins.back(), out, rc.stream, &why)) return;
    } else {
      RuntimeTensor out = view(call.outputs[0], bufs, env, storages, in);
      if (cuda_matmul(call, ins, out, rc, &why)) return;
    }
    if (!call.host_ok)
      throw std::runtime_error("coil: cannot run " + call.op + " on the GPU: " + why);
  }
  // The host: ATen through the fallback callback, its results adopted or copied.
  auto run_host = [&] {
    std::vector<RuntimeTensor> res = fallback(call.graph_node, ins);
    // A convolution_backward whose bias gradient coil computes itself (the lowering's
    // convolution_bias_pointwise): ATen, called with the graph's output_mask, returns it last.
    if (call.kind == ExternKind::ConvolutionBackward && res.size() == call.outputs.size() + 1)
      res.pop_back();
    if (res.size() != call.outputs.size())
      throw std::runtime_error("coil: fallback for " + call.op + " returned " +
                               std::to_string(res.size()) + " tensors, expected " +
                               std::to_string(call.outputs.size()));
    for (size_t k = 0; k < res.size(); ++k) {
      const ViewSpec& spec = call.outputs[k];
      RuntimeTensor dst = view(spec, bufs, env, storages, in);
      const RuntimeTensor& r = res[k];
      if (r.sizes != dst.sizes)
        throw std::runtime_error("coil: fallback for " + call.op + " output " + std::to_string(k) +
                                 " has sizes " + dims_text(r.sizes) + ", expected " +
                                 dims_text(dst.sizes));
      bool same_layout = r.dtype == dst.dtype && r.owner && call.adoptable[k] && r.data;
      int64_t span = 1;  // elements from r.data to its last element, inclusive
      for (size_t d = 0; same_layout && d < r.sizes.size(); ++d) {
        if (r.sizes[d] > 1 && r.strides[d] != dst.strides[d]) same_layout = false;
        if (r.sizes[d] > 1) span += (r.sizes[d] - 1) * r.strides[d];
        if (r.sizes[d] == 0 || r.strides[d] < 0) same_layout = false;
      }
      if (same_layout && spec.root.kind == Root::Storage)
        same_layout = span * dtype_size(r.dtype) >=
                      eval_size(storage_bytes[spec.root.index], env, code.data());
      // A result inside the arena aliases an input there, whose memory later steps reuse.
      const char* rd = static_cast<const char*>(r.data);
      if (same_layout && rm.arena_base && rd >= rm.arena_base &&
          rd < rm.arena_base + rm.arena_bytes)
        same_layout = false;
      if (same_layout && dst.data == bufs[spec.buffer]) {
        // Adopt the host's result as the storage: no copy.
        int s = spec.root.index;
        storages[s] = r.owner;
        for (BufferId b : storage_buffers[s]) bufs[b] = r.data;
      } else if (cuda) {
        if (spec.root.kind == Root::Storage && !storages[spec.root.index]) {
          // A deferred storage whose result could not be adopted: its own block after all.
          allocate_own(spec.root.index, env, rc, storages, bufs);
          dst = view(spec, bufs, env, storages, in);
        }
        cuda->copy(r, dst, rc.stream);
      } else {
        kernels::copy(r, dst);
      }
    }
  };
  // coil's library kernels (extern_kernels.h), into the step's own buffers.
  auto run_library = [&] {
    std::vector<RuntimeTensor> outs;
    for (const auto& v : call.outputs) outs.push_back(view(v, bufs, env, storages, in));
    switch (call.kind) {
      case ExternKind::Mm:
      case ExternKind::Bmm:
        kernels::matmul(ins[0], ins[1], outs[0], nullptr, 0.0, 1.0, call.gemm);
        return;
      case ExternKind::Addmm: {
        double beta = call.scalars.size() > 0 ? call.scalars[0] : 1.0;
        double alpha = call.scalars.size() > 1 ? call.scalars[1] : 1.0;
        kernels::matmul(ins[1], ins[2], outs[0], &ins[0], beta, alpha, call.gemm);
        return;
      }
      case ExternKind::Convolution:
        kernels::convolution(ins[0], ins[1], ins.size() > 2 ? &ins[2] : nullptr, call.conv,
                             outs[0]);
        return;
      case ExternKind::ConvolutionBackward: {
        // The outputs are the gradients whose output_mask entry (the last 3 ints) is set.
        const RuntimeTensor* grads[3] = {nullptr, nullptr, nullptr};
        size_t next = 0;
        for (int j = 0; j < 3; ++j)
          if (call.ints[call.ints.size() - 3 + j] != 0) grads[j] = &outs.at(next++);
        kernels::convolution_backward(ins[0], ins[1], ins[2], call.conv, grads[0], grads[1],
                                      grads[2]);
        return;
      }
      case ExternKind::IndexPut: {
        size_t k = ins.size() - 2;
        std::vector<RuntimeTensor> idx(ins.begin() + 1, ins.begin() + 1 + k);
        std::vector<int64_t> dims;
        if (call.ints.size() > 1) {
          dims.assign(call.ints.begin() + 1, call.ints.end());
        } else {
          for (size_t j = 0; j < k; ++j) dims.push_back(static_cast<int64_t>(j));
        }
        kernels::index_put(ins[0], idx, dims, ins.back(), call.ints[0] != 0, outs[0]);
        return;
      }
      case ExternKind::ScatterAdd:
        kernels::scatter_add(ins[0], call.ints[0], ins[1], ins[2], outs[0]);
        return;
      case ExternKind::Cat: {
        // Each piece into its slice of the output: a view at the running offset along dim.
        const size_t dim = static_cast<size_t>(call.ints[0]);
        RuntimeTensor slice = outs[0];
        for (const RuntimeTensor& piece : ins) {
          slice.sizes[dim] = piece.sizes[dim];
          kernels::copy(piece, slice);
          slice.data = static_cast<char*>(slice.data) +
                       piece.sizes[dim] * slice.strides[dim] * dtype_size(slice.dtype);
        }
        return;
      }
      case ExternKind::Fallback:
        break;
    }
    COIL_INTERNAL_ERROR() << "extern " << call.op << " has no library path";
  };
  Provider provider = call.provider;
  if (provider == Provider::Measured) {
    if (cuda) {
      provider = Provider::Host;  // (not chosen on the GPU: see program.cpp)
    } else if (!measure_provider(call, ins, run_library, run_host, &provider)) {
      return;  // measured: both ran, and their (equal) results are in place
    }
  }
  if (provider == Provider::Host || cuda) {
    run_host();
  } else {
    run_library();
  }
}

}  // namespace coil::runtime
