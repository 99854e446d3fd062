// coil._coil: the Python <-> C++ boundary (docs/python-binding.md).
//
// Tensors cross as DLPack through nb::ndarray, never copied: an input's RuntimeTensor owns a
// reference to its DLPack import (so an output that aliases an input keeps it alive), and an
// output becomes a torch tensor whose DLPack capsule owns the runtime storage.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "coil/backend/cuda/cudnn.h"
#include "coil/backend/cuda/driver.h"
#include "coil/backend/cuda/gemm_template.h"
#include "coil/backend/cuda/nvrtc.h"
#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/lower/lower.h"
#include "coil/lower/lowering.h"
#include "coil/plugin/loader.h"
#include "coil/runtime/allocator.h"
#include "coil/runtime/backends.h"
#include "coil/runtime/compiled_graph.h"
#include "coil/runtime/extern_kernels.h"
#include "coil/runtime/program.h"
#include "coil/support/error.h"
#include "coil/support/options.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace coil::python {
namespace {

using runtime::CompiledGraph;
using runtime::RuntimeTensor;

// --- dtypes

DType dtype_from_dlpack(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    switch (static_cast<C>(t.code)) {
      case C::Bool:
        if (t.bits == 8) return DType::Bool;
        break;
      case C::Int:
        if (t.bits == 8) return DType::Int8;
        if (t.bits == 16) return DType::Int16;
        if (t.bits == 32) return DType::Int32;
        if (t.bits == 64) return DType::Int64;
        break;
      case C::UInt:
        if (t.bits == 8) return DType::UInt8;
        break;
      case C::Float:
        if (t.bits == 16) return DType::Float16;
        if (t.bits == 32) return DType::Float32;
        if (t.bits == 64) return DType::Float64;
        break;
      case C::Bfloat:
        if (t.bits == 16) return DType::BFloat16;
        break;
      default:
        break;
    }
  }
  throw nb::type_error(("coil: unsupported tensor dtype (DLPack code " + std::to_string(t.code) +
                        ", " + std::to_string(t.bits) + " bits)")
                           .c_str());
}

nb::dlpack::dtype dtype_to_dlpack(DType d) {
  using C = nb::dlpack::dtype_code;
  auto make = [](C code, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (d) {
    case DType::Bool:
      return make(C::Bool, 8);
    case DType::UInt8:
      return make(C::UInt, 8);
    case DType::Int8:
      return make(C::Int, 8);
    case DType::Int16:
      return make(C::Int, 16);
    case DType::Int32:
      return make(C::Int, 32);
    case DType::Int64:
      return make(C::Int, 64);
    case DType::Float16:
      return make(C::Float, 16);
    case DType::BFloat16:
      return make(C::Bfloat, 16);
    case DType::Float32:
      return make(C::Float, 32);
    case DType::Float64:
      return make(C::Float, 64);
  }
  throw std::logic_error("bad dtype");
}

// --- DLPack (the unversioned ABI, stable since DLPack 0.2; what torch._C._from_dlpack reads)

struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// torch entry points, looked up once (the module does not import torch until first use).
struct Torch {
  nb::object tensor_type, to_dlpack, from_dlpack;
  static Torch& get() {
    static Torch* t = [] {
      auto* r = new Torch();  // never destroyed: interpreter shutdown order
      nb::module_ torch = nb::module_::import_("torch");
      nb::object c = torch.attr("_C");
      r->tensor_type = torch.attr("Tensor");
      r->to_dlpack = c.attr("_to_dlpack");
      r->from_dlpack = c.attr("_from_dlpack");
      return r;
    }();
    return *t;
  }
};

// --- tensors in

// Keeps a DLPack import alive; released under the GIL from whichever thread drops it.
struct ImportHolder {
  nb::ndarray<> array;
  explicit ImportHolder(nb::ndarray<>&& a) : array(std::move(a)) {}
  ~ImportHolder() {
    nb::gil_scoped_acquire gil;
    nb::ndarray<> drop = std::move(array);
  }
};

[[noreturn]] void bad_tensor(const char* what, size_t index, const char* why) {
  throw nb::type_error(
      ("coil: " + std::string(what) + " " + std::to_string(index) + " " + why).c_str());
}

RuntimeTensor from_torch(nb::handle obj, const char* what, size_t index) {
  nb::ndarray<> array;
  Torch& torch = Torch::get();
  bool ok = false;
  if (PyObject_IsInstance(obj.ptr(), torch.tensor_type.ptr()) == 1) {
    // torch._C._to_dlpack is a C function: far cheaper than Tensor.__dlpack__ (Python), and it
    // accepts tensors that require grad (the runtime only reads them).
    nb::object capsule = torch.to_dlpack(obj);
    ok = nb::try_cast<nb::ndarray<>>(capsule, array, /*convert=*/false);
  } else {
    ok = nb::try_cast<nb::ndarray<>>(obj, array, /*convert=*/false);
  }
  if (!ok) bad_tensor(what, index, "is not a tensor (DLPack import failed)");
  RuntimeTensor t;
  if (array.device_type() == nb::device::cuda::value) {
    t.device = Device::CUDA;
    t.device_index = array.device_id();
  } else if (array.device_type() != nb::device::cpu::value) {
    bad_tensor(what, index, "is neither on the cpu nor on a cuda device");
  }
  t.dtype = dtype_from_dlpack(array.dtype());
  size_t ndim = array.ndim();
  t.sizes.resize(ndim);
  t.strides.resize(ndim);
  for (size_t d = 0; d < ndim; ++d) {
    t.sizes[d] = static_cast<int64_t>(array.shape(d));
    t.strides[d] = array.stride(d);
  }
  t.data = array.data();  // byte offset already applied by nb::ndarray
  t.owner = std::make_shared<ImportHolder>(std::move(array));
  return t;
}

// --- tensors out

struct Export {
  DLManagedTensor managed;
  RuntimeTensor tensor;  // sizes/strides back the DLTensor; owner keeps the storage alive
};

void export_deleter(DLManagedTensor* self) {
  delete static_cast<Export*>(self->manager_ctx);  // may run without the GIL: owners cope
}

void capsule_destructor(PyObject* capsule) {
  // Unconsumed capsules still own their tensor (consumers rename them "used_dltensor").
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  } else {
    PyErr_Clear();
  }
}

nb::object to_torch(RuntimeTensor&& t) {
  auto* e = new Export();
  e->tensor = std::move(t);
  DLTensor& dl = e->managed.dl_tensor;
  nb::dlpack::dtype dt = dtype_to_dlpack(e->tensor.dtype);
  dl.data = e->tensor.data;
  // The CUDA device's ordinal matters: a cuda:1 buffer exported as cuda:0 is a tensor whose
  // device lies (PyTorch's kernels and device checks follow the tag, not the pointer).
  dl.device = e->tensor.device == Device::CUDA ? DLDevice{2 /* kDLCUDA */, e->tensor.device_index}
                                               : DLDevice{1 /* kDLCPU */, 0};
  dl.ndim = static_cast<int32_t>(e->tensor.sizes.size());
  dl.dtype = {dt.code, dt.bits, dt.lanes};
  dl.shape = e->tensor.sizes.data();
  dl.strides = e->tensor.strides.data();
  dl.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = &export_deleter;
  PyObject* cap = PyCapsule_New(&e->managed, "dltensor", &capsule_destructor);
  if (!cap) {
    delete e;
    throw nb::python_error();
  }
  return Torch::get().from_dlpack(nb::steal(cap));
}

// --- options

CompileOptions options_from_dict(nb::dict d) {
  CompileOptions o;
  for (auto [k, v] : d) {
    std::string key = nb::cast<std::string>(k);
    bool known = false;
#define COIL_SET_OPTION(type, name, def, affects)                                  \
  if (key == #name) {                                                              \
    known = true;                                                                  \
    try {                                                                          \
      o.name = nb::cast<type>(v);                                                  \
    } catch (const std::exception&) {                                              \
      throw nb::type_error(("coil: option '" + key + "' must be " #type).c_str()); \
    }                                                                              \
  }
    COIL_OPTION_FIELDS(COIL_SET_OPTION)
#undef COIL_SET_OPTION
    if (!known) throw nb::value_error(("coil: unknown option '" + key + "'").c_str());
  }
  return o;
}

// --- the fallback callable

struct PyCallable {
  nb::object fn;
  explicit PyCallable(nb::object f) : fn(std::move(f)) {}
  ~PyCallable() {
    nb::gil_scoped_acquire gil;
    nb::object drop = std::move(fn);
  }
};

runtime::FallbackFn make_fallback(nb::object fn) {
  if (fn.is_none()) return nullptr;
  auto callable = std::make_shared<PyCallable>(std::move(fn));
  return [callable](int node, const std::vector<RuntimeTensor>& inputs) {
    nb::gil_scoped_acquire gil;
    nb::list args;
    for (const RuntimeTensor& t : inputs) args.append(to_torch(RuntimeTensor(t)));
    nb::object result = callable->fn(node, args);
    std::vector<RuntimeTensor> outs;
    if (nb::hasattr(result, "__dlpack__")) {
      outs.push_back(from_torch(result, "fallback output", 0));
    } else {
      size_t i = 0;
      for (nb::handle h : result) outs.push_back(from_torch(h, "fallback output", i++));
    }
    return outs;
  };
}

// Device allocations through a Python callable alloc(nbytes) -> tensor (PyTorch's caching
// allocator, on the current stream); the tensor is the block's owner.
std::function<std::shared_ptr<void>(size_t, void**)> make_allocator(nb::object fn) {
  auto callable = std::make_shared<PyCallable>(std::move(fn));
  return [callable](size_t bytes, void** ptr) -> std::shared_ptr<void> {
    nb::gil_scoped_acquire gil;
    nb::object t = callable->fn(bytes);
    *ptr = reinterpret_cast<void*>(nb::cast<uintptr_t>(t.attr("data_ptr")()));
    auto* holder = new PyCallable(std::move(t));
    return std::shared_ptr<void>(holder, [](void* h) { delete static_cast<PyCallable*>(h); });
  };
}

nb::dict artifacts_dict(const runtime::CompileArtifacts& a) {
  nb::dict d;
  d["input_graph"] = a.input_graph;
  d["loop_program"] = a.loop_program;
  d["schedule"] = a.schedule;
  d["fusion_log"] = a.fusion_log;
  d["source"] = a.source;
  d["compiler_command"] = a.compiler_command;
  d["compiler_log"] = a.compiler_log;
  d["fallback_ops"] = a.fallback_ops;
  nb::list timings;
  for (const auto& [stage, s] : a.timings) timings.append(nb::make_tuple(stage, s));
  d["timings"] = timings;
  d["num_kernels"] = a.num_kernels;
  d["cache_hit"] = a.cache_hit;
  d["warnings"] = a.warnings;
  nb::list pass_graphs;
  for (const auto& [pass, text] : a.pass_graphs) pass_graphs.append(nb::make_tuple(pass, text));
  d["pass_graphs"] = pass_graphs;
  return d;
}

}  // namespace
}  // namespace coil::python

NB_MODULE(_coil, m) {
  // Compiled graphs live in Dynamo's caches until the interpreter exits; nanobind would report
  // them as leaks at shutdown although nothing is leaked while the program runs.
  nb::set_leak_warnings(false);
  using namespace coil;
  using namespace coil::python;
  m.doc() = "coil: the C++ core of the coil compiler (docs/python-binding.md)";

  nb::exception<CompileError>(m, "CompileError", PyExc_RuntimeError);
  nb::exception<InternalError>(m, "InternalError", PyExc_RuntimeError);
  nb::exception<runtime::InputMismatchError>(m, "InputMismatchError", PyExc_RuntimeError);

  nb::class_<runtime::CompiledGraph>(m, "CompiledGraph")
      .def(
          "run",
          [](runtime::CompiledGraph& g, nb::handle inputs, uintptr_t stream, nb::object alloc,
             nb::object checked, uintptr_t rng_device) {
            std::vector<runtime::RuntimeTensor> ins;
            ins.reserve(nb::len(inputs));
            size_t i = 0;
            for (nb::handle h : inputs) ins.push_back(from_torch(h, "input", i++));
            runtime::RunContext ctx;
            ctx.stream = reinterpret_cast<void*>(stream);
            ctx.rng_device = reinterpret_cast<const int64_t*>(rng_device);
            if (!alloc.is_none()) ctx.allocate = make_allocator(std::move(alloc));
            std::vector<runtime::RuntimeTensor> outs;
            if (checked.is_none()) {
              outs = g.run(ins, ctx);
            } else {
              // The GIL stays held for the whole run, so the callback may touch Python objects.
              outs = g.run_consuming(std::move(ins), ctx, [&checked] { checked(); });
            }
            nb::list result;
            for (auto& t : outs) result.append(to_torch(std::move(t)));
            return result;
          },
          "inputs"_a, "stream"_a = 0, "alloc"_a.none() = nb::none(),
          "checked"_a.none() = nb::none(), "rng_device"_a = 0,
          "Runs the graph: one torch tensor per graph input; returns the outputs. CUDA graphs\n"
          "run on `stream` (a CUstream as int) and allocate through alloc(nbytes) -> tensor.\n"
          "With `checked`, the run takes the inputs over: checked() is called once they passed\n"
          "the input checks (drop the caller's references to them there) and each input is\n"
          "dropped after its last reader, so its memory can hold later results.\n"
          "rng_device (CUDA): the address of a device int64 mixed into the random kernels'\n"
          "seed when they run (a captured CUDA graph's fresh numbers per replay).")
      .def_prop_ro("artifacts",
                   [](const runtime::CompiledGraph& g) { return artifacts_dict(g.artifacts()); })
      .def_prop_ro(
          "device",
          [](const runtime::CompiledGraph& g) { return std::string(device_name(g.device())); })
      .def("describe",
           [](const runtime::CompiledGraph& g) {
             const runtime::Program* p = g.program();
             return p ? p->describe() : std::string();
           })
      // Per-step timing: set_profiling(True), run, then profile() -> (runs, [(step, s)]).
      .def("set_profiling",
           [](const runtime::CompiledGraph& g, bool on) {
             if (const runtime::Program* p = g.program()) p->set_profiling(on);
           })
      .def("profile", [](const runtime::CompiledGraph& g) {
        nb::list steps;
        int64_t runs = 0;
        if (const runtime::Program* p = g.program()) {
          for (const auto& st : p->profile(&runs))
            steps.append(nb::make_tuple(st.step, st.seconds));
        }
        return nb::make_tuple(runs, steps);
      });

  m.def(
      "compile",
      [](const std::string& text, nb::dict options, nb::object fallback) {
        CompileOptions o = options_from_dict(options);
        return runtime::compile_graph(text, o, make_fallback(std::move(fallback)));
      },
      "text"_a, "options"_a = nb::dict(), "fallback"_a = nb::none(),
      "Compiles a graph (text form) into a CompiledGraph.");

  m.def("parse_and_print", [](const std::string& text) {
    sym::Context ctx;
    return print_graph(*parse_graph(text, ctx));
  });

  m.def("lowered_ops", [] { return lower::lowering_registry().ops(); });
  // CompileOptions field -> "bool" | "int" | "str", from the one field list (options.h), so the
  // Python glue validates exactly the fields C++ has.
  m.def("option_fields", [] {
    nb::dict d;
    auto kind = [](const char* type) -> const char* {
      std::string_view t(type);
      return t == "bool" ? "bool" : t == "int64_t" ? "int" : "str";
    };
#define COIL_LIST_OPTION(type, name, def, affects) d[#name] = kind(#type);
    COIL_OPTION_FIELDS(COIL_LIST_OPTION)
#undef COIL_LIST_OPTION
    return d;
  });

  // "" when CUDA graphs can compile here, else the one-line reason (no driver, no device, no
  // NVRTC) that the glue reports when it falls back.
  m.def("cuda_unavailable_reason", [](nb::dict options) -> std::string {
    std::string why;
    if (backend::cuda::Driver::get(&why) == nullptr) return why;
    return backend::cuda::nvrtc_unavailable_reason(options_from_dict(options));
  });
  m.def("allocator_stats", [] {
    auto s = runtime::Allocator::global().stats();
    nb::dict d;
    d["allocations"] = s.allocations;
    d["cache_hits"] = s.cache_hits;
    d["system_allocations"] = s.system_allocations;
    d["bytes_cached"] = s.bytes_cached;
    d["bytes_in_use"] = s.bytes_in_use;
    return d;
  });
  m.def("empty_cache", [] { runtime::Allocator::global().empty_cache(); });
  // coil's GEMM template (coil/backend/cuda/gemm_template.h): what the product provider choice
  // did (tests, bench/gemm_template.py), and the NVRTC compile of one kernel (the CPU test).
  m.def("gemm_template_events", [] {
    nb::list out;
    for (const auto& e : backend::cuda::gemm_template_events()) {
      nb::dict d;
      d["key"] = e.key;
      d["choice"] = e.choice;
      d["how"] = e.how;
      d["detail"] = e.detail;
      d["cublaslt_ms"] = e.cublaslt_ms;
      d["template_ms"] = e.template_ms;
      d["best_template"] = e.best_template;
      out.append(d);
    }
    return out;
  });
  m.def("clear_gemm_template_events", [] { backend::cuda::clear_gemm_template_events(); });
  // cuDNN engines timed per convolution problem (option cuda_conv_measure; tests, benchmarks).
  m.def("cudnn_engine_choices", [] {
    nb::list out;
    for (const auto& c : backend::cuda::conv_engine_choices()) {
      nb::dict d;
      d["problem"] = c.problem;
      d["engines"] = c.engines;
      d["ms"] = c.ms;
      d["chosen"] = c.chosen;
      d["runtime_compiled"] = c.runtime_compiled;
      d["build_ms"] = c.build_ms;
      out.append(d);
    }
    return out;
  });
  auto parse_dtype = [](const std::string& name) {
    std::optional<DType> t = dtype_from_name(name);
    if (!t) throw std::invalid_argument("unknown dtype " + name);
    return *t;
  };
  m.def("gemm_template_configs", [parse_dtype](const std::string& dtype) {
    std::vector<std::string> names;
    for (const auto& c : backend::cuda::gemm_template_configs(parse_dtype(dtype)))
      names.push_back(c.name());
    return names;
  });
  // The kernel's source in its parts {preamble, constants, ptx, kernel} (gemm_template.h; the
  // host emulation test runs the kernel's text with the PTX part emulated).
  m.def("gemm_template_source_parts",
        [parse_dtype](const std::string& config, const std::string& dtype, bool a_k_contig,
                      bool b_k_contig, bool bias, int activation) {
          auto c = backend::cuda::parse_gemm_config(config);
          if (!c) throw std::invalid_argument("not a GEMM tile configuration: " + config);
          backend::cuda::GemmKernelSpec s;
          s.dtype = parse_dtype(dtype);
          s.a_k_contig = a_k_contig;
          s.b_k_contig = b_k_contig;
          s.bias = bias;
          s.activation = activation;
          auto p = backend::cuda::gemm_template_source_parts(*c, s);
          nb::dict d;
          d["preamble"] = p.preamble;
          d["constants"] = p.constants;
          d["ptx"] = p.ptx;
          d["kernel"] = p.kernel;
          d["smem_bytes"] = backend::cuda::gemm_template_smem_bytes(*c, s);
          d["threads"] = 32 * c->warps;
          return d;
        });
  // Compiles the kernel of `config` for (dtype, operand layouts, epilogue) to a cubin for
  // sm_<cc>; returns the kernel's name and the cubin's size. CompileError with NVRTC's log.
  m.def("gemm_template_compile",
        [parse_dtype](const std::string& config, const std::string& dtype, bool a_k_contig,
                      bool b_k_contig, bool bias, int activation, int cc, nb::dict options) {
          auto c = backend::cuda::parse_gemm_config(config);
          if (!c) throw std::invalid_argument("not a GEMM tile configuration: " + config);
          backend::cuda::GemmKernelSpec s;
          s.dtype = parse_dtype(dtype);
          s.a_k_contig = a_k_contig;
          s.b_k_contig = b_k_contig;
          s.bias = bias;
          s.activation = activation;
          auto r = backend::cuda::compile_to_cubin(backend::cuda::gemm_template_source(*c, s),
                                                   cc / 10, cc % 10, options_from_dict(options));
          return std::make_pair(backend::cuda::gemm_template_kernel_name(*c, s), r.cubin.size());
        });
  // Whether the CPU products can run PyTorch's MKL (options.cpu_gemm; gemm_libraries.h).
  m.def("mkl_gemm_available", [] { return runtime::kernels::mkl_gemm_available(); });

  // Plugins (coil/plugin/loader.h; python/coil/plugin.py wraps these).
  nb::exception<plugin::PluginError>(m, "PluginError", PyExc_RuntimeError);
  auto plugin_dict = [](const plugin::LoadedPlugin& p) {
    nb::dict d;
    d["path"] = p.path;
    d["name"] = p.name;
    d["ops"] = p.ops;
    d["lowerings"] = p.lowerings;
    d["passes"] = p.passes;
    d["backends"] = p.backends;
    return d;
  };
  m.def(
      "load_plugin",
      [plugin_dict](const std::string& path) { return plugin_dict(plugin::load_plugin(path)); },
      "path"_a,
      "Loads a coil plugin library (a no-op for a path loaded before); returns what it\n"
      "registered. PluginError when it cannot.");
  m.def("loaded_plugins", [plugin_dict] {
    nb::list l;
    for (const auto& p : plugin::loaded_plugins()) l.append(plugin_dict(p));
    return l;
  });
  m.def("plugin_abi", [] {
    nb::dict d;
    d["api_version"] = COIL_PLUGIN_API_VERSION;
    d["coil_version"] = COIL_VERSION_STRING;
    d["fingerprint"] = plugin::abi_fingerprint();
    return d;
  });
  m.def("registered_passes", [] {
    const passes::PassRegistry registry = passes::registered_passes();
    std::vector<std::string> names;
    for (const auto& e : registry.entries()) names.push_back(e.name);
    return names;
  });
  m.def("registered_ops", [] {
    std::vector<std::string> names;
    for (const auto& d : ops::op_registry().ops()) names.push_back(d.name);
    return names;
  });
  // What option backend_target may name: the built-in backends, then the plugins'.
  m.def("registered_backends", [] { return runtime::backends().names(); });
}
