#include "coil/runtime/program.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "coil/backend/cuda/cublaslt.h"
#include "coil/runtime/allocator.h"
#include "coil/runtime/device_memory.h"
#include "coil/runtime/extern_kernels.h"
#include "coil/support/error.h"
#include "cuda_conv.h"
#include "cuda_steps.h"
#include "element.h"
#include "gemm_libraries.h"
#include "program_impl.h"
#include "size_expr.h"

namespace coil::runtime {

using detail::Binding;
using detail::Check;
using detail::eval_size;
using detail::ExternCall;
using detail::Provider;
using detail::RangeCheck;
using detail::Root;
using detail::RunMemory;
using detail::SizeExpr;
using detail::StepOp;
using detail::ViewSpec;
using loop::BufferId;
using loop::BufferKind;
using loop::ExternKind;

namespace {

std::string_view canonical_op(ExternKind k) {
  switch (k) {
    case ExternKind::Mm:
      return "aten.mm.default";
    case ExternKind::Bmm:
      return "aten.bmm.default";
    case ExternKind::Addmm:
      return "aten.addmm.default";
    case ExternKind::Convolution:
      return "aten.convolution.default";
    case ExternKind::ConvolutionBackward:
      return "aten.convolution_backward.default";
    default:
      return "";
  }
}
}  // namespace

Program::Program(const loop::LoopProgram& program, const sched::Schedule& schedule,
                 std::vector<KernelFn> kernel_fns, std::shared_ptr<void> keep_alive,
                 const CompileOptions& options, FallbackFn fallback)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  COIL_CHECK(kernel_fns.size() == schedule.kernels.size()) << "one function per kernel";
  m.kernels = std::move(kernel_fns);
  m.keep_alive = std::move(keep_alive);
  m.fallback = std::move(fallback);
  init(program, schedule, options);
}

Program::Program(const loop::LoopProgram& program, const sched::Schedule& schedule,
                 CudaKernels cuda, const CompileOptions& options, FallbackFn fallback)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  COIL_CHECK(cuda.kernels.size() == schedule.kernels.size() &&
             cuda.functions.size() == schedule.kernels.size())
      << "one CUDA kernel per kernel";
  m.device = Device::CUDA;
  m.keep_alive = cuda.module;
  m.pending_cuda = std::move(cuda);
  m.fallback = std::move(fallback);
  init(program, schedule, options);
}

Device Program::device() const { return impl_->device; }

void Program::init(const loop::LoopProgram& program, const sched::Schedule& schedule,
                   const CompileOptions& options) {
  Impl& m = *impl_;
  COIL_CHECK(program.ctx != nullptr) << "LoopProgram without a sym::Context";
  sym::Context& ctx = *program.ctx;
  for (const auto& k : schedule.kernels) m.kernel_names.push_back(k.name);
  m.num_size_symbols = static_cast<int>(program.size_symbols.size());
  m.num_buffers = static_cast<int>(program.buffers.size());
  m.rng_state = program.rng_state;
  m.allow_tf32 = options.cuda_allow_tf32;
  m.conv_allow_tf32 = options.cuda_conv_allow_tf32;
  m.conv_measure = options.cuda_conv_measure;
  if (options.seed >= 0) {
    m.seed = static_cast<uint64_t>(options.seed);
  } else {
    std::random_device rd;
    m.seed = (uint64_t{rd()} << 32) ^ rd();
  }

  // --- inputs: symbol slots, bindings, guards.
  std::unordered_map<sym::Expr, int> slots;
  auto slot_of = [&](sym::Expr s, int input, int dim, bool stride) {
    auto it = slots.find(s);
    if (it != slots.end()) return it->second;
    int slot = m.num_slots++;
    slots.emplace(s, slot);
    m.bindings.push_back({input, dim, stride, slot});
    m.ranges.push_back({slot, ctx.symbol_range(s), s->name, ctx.symbol_multiple(s)});
    return slot;
  };
  for (const auto& ss : program.size_symbols) {
    int dim = ss.dim >= 0 ? ss.dim : -ss.dim - 1;
    slot_of(ss.symbol, ss.input, dim, ss.dim < 0);
  }
  // The kernels' `sizes` are the first size_symbols.size() slots, in order.
  for (size_t k = 0; k < program.size_symbols.size(); ++k)
    COIL_CHECK(slots.at(program.size_symbols[k].symbol) == static_cast<int>(k))
        << "size_symbols repeats a symbol";
  m.inputs.resize(program.inputs.size());
  std::vector<std::pair<int, int>> pending;  // (input, dim) exprs checked after binding
  for (size_t p = 0; p < program.inputs.size(); ++p) {
    const loop::Buffer& b = program.buffer(program.inputs[p]);
    m.inputs[p] = {b.dtype, static_cast<int>(b.sizes.size())};
    m.input_buffers.push_back({b.id, static_cast<int>(p)});
    for (size_t d = 0; d < b.sizes.size(); ++d) {
      if (b.sizes[d]->is_symbol())
        slot_of(b.sizes[d], static_cast<int>(p), static_cast<int>(d), false);
      if (b.strides[d]->is_symbol())
        slot_of(b.strides[d], static_cast<int>(p), static_cast<int>(d), true);
    }
  }
  detail::SizeCompiler sc(&slots);
  // Sizes first (a wrong size is the clearer message), then strides.
  for (bool stride : {false, true}) {
    for (size_t p = 0; p < program.inputs.size(); ++p) {
      const loop::Buffer& b = program.buffer(program.inputs[p]);
      for (size_t d = 0; d < b.sizes.size(); ++d) {
        sym::Expr e = stride ? b.strides[d] : b.sizes[d];
        bool is_binding = false;
        for (const auto& bd : m.bindings)
          if (bd.input == static_cast<int>(p) && bd.dim == static_cast<int>(d) &&
              bd.stride == stride)
            is_binding = true;
        if (is_binding) continue;
        m.checks.push_back(
            {static_cast<int>(p), static_cast<int>(d), stride, sc.compile(e), ctx.str(e)});
      }
    }
  }

  // --- buffers -> roots.
  const auto& mem = schedule.memory;
  auto root_of = [&](BufferId id) {
    Root r;
    BufferId b = id;
    for (int guard = 0; program.buffer(b).kind == BufferKind::View; ++guard) {
      COIL_CHECK(guard < 1000 && program.buffer(b).view_of >= 0) << "bad view chain";
      b = program.buffer(b).view_of;
    }
    r.buffer = b;
    const loop::Buffer& rb = program.buffer(b);
    if (b == program.rng_state) {
      r.kind = Root::Rng;
    } else if (rb.kind == BufferKind::Input) {
      r.kind = Root::Input;
      r.index = rb.input_index;
      if (r.index < 0)
        for (size_t p = 0; p < program.inputs.size(); ++p)
          if (program.inputs[p] == b) r.index = static_cast<int>(p);
      COIL_CHECK(r.index >= 0) << "input buffer " << rb.name << " is not a graph input";
    } else if (b < static_cast<BufferId>(mem.buffer_storage.size()) && mem.buffer_storage[b] >= 0) {
      r.kind = Root::Storage;
      r.index = mem.buffer_storage[b];
    }
    return r;
  };
  std::vector<Root> roots(program.buffers.size());
  for (const auto& b : program.buffers) roots[b.id] = root_of(b.id);
  m.input_buffers.clear();
  m.storage_buffers.resize(mem.storage_bytes.size());
  for (const auto& b : program.buffers) {
    const Root& r = roots[b.id];
    if (r.kind == Root::Input) m.input_buffers.push_back({b.id, r.index});
    if (r.kind == Root::Storage) {
      COIL_CHECK(r.index < static_cast<int>(mem.storage_bytes.size())) << "bad storage id";
      m.storage_buffers[r.index].push_back(b.id);
    }
  }
  for (sym::Expr e : mem.storage_bytes) m.storage_bytes.push_back(sc.compile(e));

  auto spec = [&](BufferId id) {
    const loop::Buffer& b = program.buffer(id);
    ViewSpec v;
    v.buffer = id;
    v.root = roots[id];
    v.dtype = b.dtype;
    v.offset = sc.compile(b.offset);
    for (sym::Expr e : b.sizes) v.sizes.push_back(sc.compile(e));
    for (sym::Expr e : b.strides) v.strides.push_back(sc.compile(e));
    COIL_CHECK(v.root.kind != Root::None) << "buffer " << b.name << " has no storage";
    return v;
  };

  // --- outputs.
  std::unordered_set<int> output_storages;
  for (BufferId id : program.outputs) {
    m.outputs.push_back(spec(id));
    if (roots[id].kind == Root::Storage) output_storages.insert(roots[id].index);
  }

  // --- steps.
  COIL_CHECK(mem.alloc_before.size() == schedule.order.size() &&
             mem.free_after.size() == schedule.order.size())
      << "memory plan does not match the schedule";
  std::vector<bool> allocated(mem.storage_bytes.size(), false);
  for (const auto& list : mem.alloc_before)
    for (int s : list) allocated.at(s) = true;
  for (size_t s = 0; s < allocated.size(); ++s)  // used but never planned: allocate up front
    if (!allocated[s] && !m.storage_buffers[s].empty())
      m.steps.push_back({StepOp::Alloc, static_cast<int>(s)});
  // Inputs no step reads are released before the first step, the others after their last
  // reader (run_consuming; outputs that alias an input keep it).
  const bool releases = mem.input_last_read.size() == program.inputs.size();
  auto release_after = [&](int step) {
    if (!releases) return;
    for (size_t p = 0; p < program.inputs.size(); ++p)
      if (mem.input_last_read[p] == step) m.steps.push_back({StepOp::Release, static_cast<int>(p)});
  };
  release_after(-1);
  std::unordered_set<int> deferred;
  const std::string provider = options.extern_provider;
  COIL_USER_CHECK(provider == "auto" || provider == "host" || provider == "library" ||
                  provider == "measured")
      << "extern_provider must be auto, host, library or measured, got '" << provider << "'";
  const kernels::GemmPolicy gemm_policy = detail::parse_gemm_policy(options.cpu_gemm.c_str());
  for (size_t i = 0; i < schedule.order.size(); ++i) {
    for (int s : mem.alloc_before[i]) m.steps.push_back({StepOp::Alloc, s});
    const auto& st = schedule.order[i];
    if (st.kind == sched::ScheduledStep::Kind::Kernel) {
      COIL_CHECK(st.index >= 0 && st.index < static_cast<int>(m.kernel_names.size()))
          << "bad kernel";
      m.steps.push_back({StepOp::Kernel, st.index});
    } else {
      const auto* node = std::get_if<loop::ExternNode>(&program.steps.at(st.index));
      COIL_CHECK(node) << "extern step is not an ExternNode";
      ExternCall call;
      call.kind = node->kind;
      call.scalars = node->scalars;
      call.ints = node->ints;
      call.graph_node = node->graph_node;
      call.op = node->op;
      for (BufferId b : node->inputs) call.inputs.push_back(spec(b));
      for (BufferId b : node->outputs) {
        call.outputs.push_back(spec(b));
        const Root& r = roots[b];
        bool exclusive = r.kind == Root::Storage && r.buffer == b;
        // A convolution's result is always a fresh tensor, so it may also take over a storage
        // the memory plan shares with other buffers of equal size (dead before it, or written
        // after it): they then use the adopted block. run_extern checks the block is big
        // enough. Other host ops might return an alias of an input, which must not be shared.
        const bool fresh = node->fresh_outputs || node->kind == ExternKind::Convolution ||
                           node->kind == ExternKind::ConvolutionBackward;
        if (exclusive && !fresh)
          for (BufferId o : m.storage_buffers[r.index])
            if (roots[o].buffer != b) exclusive = false;
        call.adoptable.push_back(exclusive);
      }
      bool has_host = static_cast<bool>(m.fallback) && node->graph_node >= 0;
      // A product with a fused activation or padded columns is not what the host's op returns
      // (ints[2], the zero-padded operands, is only a hint).
      const bool matmul_variant =
          (node->kind == ExternKind::Mm || node->kind == ExternKind::Addmm) &&
          std::any_of(node->ints.begin(),
                      node->ints.begin() + std::min<size_t>(2, node->ints.size()),
                      [](int64_t v) { return v != 0; });
      bool host_ok = has_host && !matmul_variant &&
                     (node->kind == ExternKind::Fallback ||
                      (!canonical_op(node->kind).empty() && node->op == canonical_op(node->kind)));
      bool library_ok = false;
      switch (node->kind) {
        case ExternKind::Mm:
        case ExternKind::Bmm:
          library_ok = call.inputs.size() == 2 && call.outputs.size() == 1;
          break;
        case ExternKind::Addmm:
          library_ok = call.inputs.size() == 3 && call.outputs.size() == 1;
          break;
        case ExternKind::Convolution: {
          int rank = static_cast<int>(call.inputs.empty() ? 0 : call.inputs[0].sizes.size());
          if (rank >= 3 && (call.inputs.size() == 2 || call.inputs.size() == 3) &&
              call.outputs.size() == 1) {
            call.conv = kernels::ConvParams::from_ints(node->ints, rank - 2);
            library_ok = kernels::convolution_supported(call.inputs[0].dtype, rank, call.conv);
          }
          break;
        }
        case ExternKind::ConvolutionBackward: {
          int rank = static_cast<int>(call.inputs.size() == 3 ? call.inputs[1].sizes.size() : 0);
          if (rank >= 3 && node->ints.size() >= 3) {
            std::span<const int64_t> ints(node->ints);
            call.conv = kernels::ConvParams::from_ints(ints.first(ints.size() - 3), rank - 2);
            library_ok = kernels::convolution_supported(call.inputs[1].dtype, rank, call.conv);
          }
          break;
        }
        case ExternKind::IndexPut:
          library_ok = call.inputs.size() >= 3 && call.outputs.size() == 1 && !node->ints.empty();
          break;
        case ExternKind::ScatterAdd:
          library_ok = call.inputs.size() == 3 && call.outputs.size() == 1 && !node->ints.empty();
          break;
        case ExternKind::Cat:
          library_ok = !call.inputs.empty() && call.outputs.size() == 1 && !node->ints.empty();
          break;
        case ExternKind::Fallback:
          library_ok = false;
          break;
      }
      // The library kernels run on host memory; on the GPU matmuls go to cuBLASLt and the
      // host (ATen) runs the other externs, but convolutions go to cuDNN (cuda_conv.h).
      if (m.device == Device::CUDA) {
        const bool mm = node->kind == ExternKind::Mm || node->kind == ExternKind::Bmm ||
                        node->kind == ExternKind::Addmm;
        const bool backward = node->kind == ExternKind::ConvolutionBackward;
        if (mm) {
          library_ok = library_ok && backend::cuda::cublaslt_unavailable_reason().empty();
        } else if (node->kind == ExternKind::Convolution || backward) {
          // (library_ok: the CPU library could run it, so its inputs and call.conv are sound.)
          if (library_ok) {
            const ViewSpec& x = call.inputs[backward ? 1 : 0];
            library_ok =
                !call.outputs.empty() &&
                detail::cudnn_conv_supported(
                    backward, x.dtype, static_cast<int>(x.sizes.size()), call.inputs.size(),
                    call.conv, backward ? &node->ints[node->ints.size() - 3] : nullptr);
          }
        } else if (node->kind == ExternKind::IndexPut) {
          // Accumulating index_put of float32/float64 values: coil's atomic scatter
          // (cuda_index.cpp); it names what it refuses at run time, and ATen runs those.
          const DType t = call.inputs[0].dtype;
          library_ok = library_ok && node->ints[0] != 0 &&
                       node->ints.size() == call.inputs.size() - 1 &&
                       (t == DType::Float32 || t == DType::Float64);
        } else {
          library_ok = false;
        }
      }
      call.host_ok = host_ok;
      call.gemm = gemm_policy;
      COIL_USER_CHECK(library_ok || host_ok)
          << "cannot run " << loop::extern_kind_name(node->kind) << " node (" << node->op
          << "): no library kernel for it and no host fallback function";
      // "auto" (measured, docs/decisions.md): convolutions go to the host (oneDNN beats
      // im2col + OpenBLAS by 1.5-2.4x); matmuls stay on OpenBLAS, which matched or beat MKL
      // reached through the host round trip at every size measured.
      bool is_matmul = node->kind == ExternKind::Mm || node->kind == ExternKind::Bmm ||
                       node->kind == ExternKind::Addmm;
      // "measured": on the CPU, where both can run it, the faster for the sizes at hand.
      const bool products_or_convs = is_matmul || node->kind == ExternKind::Convolution ||
                                     node->kind == ExternKind::ConvolutionBackward;
      if (!host_ok) {
        call.provider = Provider::Library;
      } else if (provider == "measured" && library_ok && m.device == Device::CPU &&
                 products_or_convs) {
        call.provider = Provider::Measured;
      } else if (!library_ok || provider == "host") {
        call.provider = Provider::Host;
      } else if (provider == "library" || is_matmul || m.device == Device::CUDA) {
        call.provider = Provider::Library;
      } else {
        call.provider = Provider::Host;
      }
      // A storage that a host op's result writes first can adopt that result (run_extern):
      // on the GPU it gets no block of its own unless the result's layout differs.
      if (m.device == Device::CUDA && call.provider == Provider::Host) {
        for (size_t k = 0; k < call.outputs.size(); ++k) {
          const ViewSpec& o = call.outputs[k];
          if (call.adoptable[k] && o.root.kind == Root::Storage && o.root.buffer == o.buffer &&
              std::count(mem.alloc_before[i].begin(), mem.alloc_before[i].end(), o.root.index))
            deferred.insert(o.root.index);
        }
      }
      m.externs.push_back(std::move(call));
      m.steps.push_back({StepOp::Extern, static_cast<int>(m.externs.size()) - 1});
    }
    for (int s : mem.free_after[i])
      if (!output_storages.count(s)) m.steps.push_back({StepOp::Free, s});
    release_after(static_cast<int>(i));
  }
  if (m.pending_cuda) {
    m.cuda = std::make_unique<detail::CudaSteps>(std::move(*m.pending_cuda), sc, options);
    m.pending_cuda.reset();
    std::erase_if(m.steps, [&](const StepOp& s) {
      return s.kind == StepOp::Alloc && deferred.count(s.index) > 0;
    });
    std::vector<detail::StorageUse> uses(m.storage_buffers.size());
    for (size_t i = 0; i < m.steps.size(); ++i) {
      const StepOp& st = m.steps[i];
      if (st.kind == StepOp::Alloc) uses[st.index].first = static_cast<int>(i);
      if (st.kind == StepOp::Free) uses[st.index].last = static_cast<int>(i);
    }
    for (size_t s = 0; s < uses.size(); ++s) {
      uses[s].output = output_storages.count(static_cast<int>(s)) > 0;
      uses[s].deferred = deferred.count(static_cast<int>(s)) > 0;
      uses[s].constant_bytes = ctx.as_const(mem.storage_bytes[s]);
    }
    m.memory.build(uses);
  }
  m.code = std::move(sc.code);
}

void Program::Impl::place_run_memory(const RunContext& rc, RunMemory& rm) const {
  void* p = nullptr;
  if (memory.small_bytes() > 0) {
    rm.small = cuda->allocate(static_cast<size_t>(memory.small_bytes()), rc, &p);
    rm.small_base = static_cast<char*>(p);
  }
  if (memory.arena_bytes() > 0) {
    rm.arena = cuda->allocate(static_cast<size_t>(memory.arena_bytes()), rc, &p);
    rm.arena_base = static_cast<char*>(p);
    rm.arena_bytes = memory.arena_bytes();
  }
}

void* Program::Impl::allocate_own(int s, const int64_t* env, const RunContext& rc,
                                  std::vector<std::shared_ptr<void>>& storages,
                                  std::vector<void*>& bufs) const {
  const int64_t bytes = eval_size(storage_bytes[s], env, code.data());
  const size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 0));
  void* p = nullptr;
  if (cuda) {
    storages[s] = cuda->allocate(n, rc, &p);
  } else {
    storages[s] = Allocator::global().allocate(n);
    p = storages[s].get();
  }
  for (BufferId b : storage_buffers[s]) bufs[b] = p;
  return p;
}

Program::~Program() = default;

size_t Program::num_inputs() const { return impl_->inputs.size(); }
size_t Program::num_outputs() const { return impl_->outputs.size(); }

int Program::output_aliases_input(size_t k) const {
  const ViewSpec& v = impl_->outputs.at(k);
  return v.root.kind == Root::Input ? v.root.index : -1;
}

void Program::set_profiling(bool on) const {
  Impl& m = *impl_;
  if (on && !m.step_ns) {
    m.step_ns = std::make_unique<std::atomic<int64_t>[]>(m.steps.size());
    for (size_t i = 0; i < m.steps.size(); ++i) m.step_ns[i] = 0;
  }
  m.profiling.store(on && m.step_ns != nullptr);
}

std::vector<Program::StepTime> Program::profile(int64_t* runs) const {
  const Impl& m = *impl_;
  if (runs) *runs = m.profiled_runs.load();
  std::vector<StepTime> out;
  if (!m.step_ns) return out;
  std::istringstream lines(describe());
  std::string line;
  for (size_t i = 0; i < m.steps.size() && std::getline(lines, line); ++i)
    out.push_back({line, static_cast<double>(m.step_ns[i].load()) * 1e-9});
  return out;
}

std::string Program::describe() const {
  const Impl& m = *impl_;
  std::ostringstream out;
  for (const StepOp& s : m.steps) {
    switch (s.kind) {
      case StepOp::Alloc:
        out << "alloc s" << s.index
            << (m.memory.place(s.index) == detail::Place::Arena   ? " (arena)"
                : m.memory.place(s.index) == detail::Place::Small ? " (small outputs)"
                                                                  : "")
            << "\n";
        break;
      case StepOp::Free:
        out << "free s" << s.index << "\n";
        break;
      case StepOp::Kernel:
        out << "kernel " << m.kernel_names[s.index] << "\n";
        break;
      case StepOp::Release:
        out << "release input" << s.index << "\n";
        break;
      case StepOp::Extern: {
        const ExternCall& c = m.externs[s.index];
        out << "extern " << loop::extern_kind_name(c.kind) << " " << c.op << " ("
            << (c.provider == Provider::Host      ? "host"
                : c.provider == Provider::Library ? "library"
                                                  : "measured")
            << ")\n";
        if (c.provider == Provider::Measured) {
          // What the measurements chose so far, per input sizes.
          std::lock_guard<std::mutex> lock(m.measured_mutex);
          for (const auto& [key, r] : m.measured) {
            if (key.first != &c) continue;
            char line[160];
            std::snprintf(line, sizeof line, "  measured: %s (library %.3f ms, host %.3f ms)\n",
                          r.chosen == Provider::Host ? "host" : "library", r.library_s * 1e3,
                          r.host_s * 1e3);
            out << line;
          }
        }
        break;
      }
    }
  }
  return out.str();
}

namespace {

[[noreturn]] void mismatch(int input, const std::string& what) {
  throw InputMismatchError("coil: input " + std::to_string(input) + ": " + what);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<RuntimeTensor> Program::run(const std::vector<RuntimeTensor>& in,
                                        const RunContext& rc) const {
  return run_steps(in, nullptr, rc, nullptr);
}

std::vector<RuntimeTensor> Program::run_consuming(std::vector<RuntimeTensor> inputs,
                                                  const RunContext& rc,
                                                  const std::function<void()>& checked) const {
  return run_steps(inputs, &inputs, rc, &checked);
}

std::vector<RuntimeTensor> Program::run_steps(const std::vector<RuntimeTensor>& in,
                                              std::vector<RuntimeTensor>* owned,
                                              const RunContext& rc,
                                              const std::function<void()>* checked) const {
  const Impl& m = *impl_;
  if (in.size() != m.inputs.size())
    throw InputMismatchError("coil: expected " + std::to_string(m.inputs.size()) + " inputs, got " +
                             std::to_string(in.size()));
  for (size_t p = 0; p < in.size(); ++p) {
    const RuntimeTensor& t = in[p];
    if (t.dtype != m.inputs[p].dtype)
      mismatch(static_cast<int>(p), "expected dtype " + std::string(dtype_name(m.inputs[p].dtype)) +
                                        ", got " + std::string(dtype_name(t.dtype)));
    if (static_cast<int>(t.sizes.size()) != m.inputs[p].rank || t.strides.size() != t.sizes.size())
      mismatch(static_cast<int>(p), "expected rank " + std::to_string(m.inputs[p].rank) + ", got " +
                                        std::to_string(t.sizes.size()));
    if (t.device != m.device)
      mismatch(static_cast<int>(p), "expected a " + std::string(device_name(m.device)) + " tensor");
  }
  // Size symbols.
  int64_t env_small[16];
  std::vector<int64_t> env_big;
  int64_t* env = env_small;
  if (m.num_slots > 16) {
    env_big.resize(m.num_slots);
    env = env_big.data();
  }
  for (const Binding& b : m.bindings) {
    const RuntimeTensor& t = in[b.input];
    env[b.slot] = b.stride ? t.strides[b.dim] : t.sizes[b.dim];
  }
  for (const RangeCheck& r : m.ranges) {
    int64_t v = env[r.slot];
    if (!r.range.contains(v) || v % r.multiple != 0) {
      const Binding* b = nullptr;
      for (const Binding& x : m.bindings)
        if (x.slot == r.slot) b = &x;
      const std::string what =
          r.range.contains(v) ? "is not a multiple of " + std::to_string(r.multiple)
                              : "is outside the compiled range [" + std::to_string(r.range.lo) +
                                    ", " + std::to_string(r.range.hi) + "]";
      mismatch(b->input, (b->stride ? "stride " : "size ") + std::to_string(v) + " of dim " +
                             std::to_string(b->dim) + " (symbol " + r.name + ") " + what);
    }
  }
  for (const Check& c : m.checks) {
    const RuntimeTensor& t = in[c.input];
    if (c.stride && t.sizes[c.dim] <= 1) continue;  // any stride for size-0/1 dims
    // An empty tensor addresses nothing: any strides (PyTorch gives such tensors odd ones).
    if (c.stride && std::find(t.sizes.begin(), t.sizes.end(), 0) != t.sizes.end()) continue;
    int64_t got = c.stride ? t.strides[c.dim] : t.sizes[c.dim];
    int64_t want = eval_size(c.expected, env, m.code.data());
    if (got != want)
      mismatch(c.input, std::string(c.stride ? "stride" : "size") + " of dim " +
                            std::to_string(c.dim) + " is " + std::to_string(got) +
                            ", compiled for " + c.text + " = " + std::to_string(want) + " (sizes " +
                            dims_text(t.sizes) + ", strides " + dims_text(t.strides) + ")");
  }
  if (checked && *checked) (*checked)();
  // Buffers.
  std::vector<void*> bufs(m.num_buffers, nullptr);
  for (const auto& [b, p] : m.input_buffers) bufs[b] = in[p].data;
  int64_t rng[2] = {0, 0};
  if (m.rng_state >= 0) {
    // Fresh numbers every call: the lowering reads only the seed (offsets are compile-time),
    // so the seed itself advances, derived from the base seed and the call count.
    uint64_t n = m.run_count.fetch_add(1, std::memory_order_relaxed);
    rng[0] = static_cast<int64_t>(splitmix64(m.seed ^ splitmix64(n)) >> 1);
    rng[1] = static_cast<int64_t>(n << 32);
    bufs[m.rng_state] = rng;
  }
  // Kernels, cuBLASLt and cuDNN run in the graph's device's context, restored after.
  std::optional<backend::cuda::ScopedContext> on_device;
  if (m.cuda) on_device.emplace(m.cuda->device());
  std::vector<std::shared_ptr<void>> storages(m.storage_buffers.size());
  RunMemory rm;
  if (m.cuda && !m.memory.empty()) m.place_run_memory(rc, rm);
  const bool prof = m.profiling.load(std::memory_order_relaxed);
  if (prof) m.profiled_runs.fetch_add(1, std::memory_order_relaxed);
  for (size_t si = 0; si < m.steps.size(); ++si) {
    const StepOp& s = m.steps[si];
    const auto t0 =
        prof ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    switch (s.kind) {
      case StepOp::Alloc: {
        const detail::Place place = m.memory.place(s.index);
        if (place == detail::Place::Arena || place == detail::Place::Small) {
          const bool arena = place == detail::Place::Arena;
          void* p = (arena ? rm.arena_base : rm.small_base) + m.memory.offset(s.index);
          storages[s.index] = std::shared_ptr<void>(arena ? rm.arena : rm.small, p);
          for (BufferId b : m.storage_buffers[s.index]) bufs[b] = p;
        } else {
          m.allocate_own(s.index, env, rc, storages, bufs);
        }
        break;
      }
      case StepOp::Free:
        storages[s.index].reset();
        break;
      case StepOp::Kernel:
        if (m.cuda) {
          m.cuda->launch(s.index, bufs, env, m.code.data(), m.num_size_symbols, rng, rc.rng_device,
                         rc.stream);
        } else {
          m.kernels[s.index](bufs.data(), env);
        }
        break;
      case StepOp::Extern:
        m.run_extern(m.externs[s.index], bufs, env, storages, in, rc, rm);
        break;
      case StepOp::Release:
        if (owned) (*owned)[s.index].owner.reset();
        break;
    }
    if (prof) {
      auto dt = std::chrono::steady_clock::now() - t0;
      m.step_ns[si].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count(),
                              std::memory_order_relaxed);
    }
  }
  std::vector<RuntimeTensor> out;
  out.reserve(m.outputs.size());
  for (const ViewSpec& v : m.outputs) out.push_back(m.view(v, bufs, env, storages, in));
  return out;
}

}  // namespace coil::runtime
