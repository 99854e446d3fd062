// The plugin API: what a shared library built outside coil's tree includes to add ops,
// lowerings, graph passes and backends to coil when it is loaded (coil.load_plugin(path), or
// the `coil.plugins` entry point group; docs/extending/write-a-plugin.md walks through one, and
// examples/plugin/ is a complete one).
//
// A plugin defines two C-linkage symbols:
//
//   #include "coil/plugin/plugin.h"
//
//   COIL_PLUGIN_ABI("my_plugin");  // coil_plugin_abi(): name, API version, ABI fingerprint
//
//   extern "C" COIL_PLUGIN_EXPORT void coil_plugin_register(coil::plugin::Registrar& r) {
//     r.add_op("mylib.softsign.default", coil::ops::OpFamily::Pointwise, softsign_meta);
//     r.add_lowering("mylib.softsign.default", lower_softsign);
//     r.add_pass("my_pass", "what it does", [] { return std::make_unique<MyPass>(); });
//     r.add_backend(std::make_shared<MyBackend>());  // backend_target="<its name()>"
//   }
//
// The loader (coil/plugin/loader.h) reads coil_plugin_abi() first, through a C struct whose
// layout never changes, and refuses a plugin whose API version or ABI fingerprint differs from
// its own: a plugin built against another coil is a clear error, not a crash. Only then does
// it call coil_plugin_register. The Registrar only collects; after the entry point returns, the
// loader adds everything at once, or nothing when a name is taken (an op, lowering, pass or
// backend that coil or an earlier plugin already has: an error naming it).
//
// What a plugin calls besides the Registrar (meta helpers, LoweringContext, BodyBuilder) is
// coil's own code, resolved at load time against the coil library that loads it (the Python
// extension makes its symbols visible to the plugin first): a plugin does not link coil.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coil/backend/api/backend.h"
#include "coil/graph/dtype.h"
#include "coil/graph/graph.h"
#include "coil/loop/body.h"
#include "coil/lower/lowering.h"
#include "coil/ops/registry.h"
#include "coil/passes/pass.h"
#include "coil/support/options.h"

// Bumped whenever the plugin API itself (this header's Registrar, AbiInfo, the entry points)
// changes meaning.
#define COIL_PLUGIN_API_VERSION 1
// coil's release; keep it equal to pyproject.toml's version (tests/python/test_plugin.py
// checks that it is).
#define COIL_VERSION_STRING "0.1.0"

#define COIL_PLUGIN_EXPORT __attribute__((visibility("default")))

namespace coil::plugin {

// What coil_plugin_abi() returns. Plain C data whose first two fields never move, so that a
// loader of any version can read a plugin of any version far enough to refuse it.
struct AbiInfo {
  uint32_t struct_size;      // sizeof(AbiInfo) of the plugin's header
  uint32_t api_version;      // COIL_PLUGIN_API_VERSION
  uint64_t fingerprint;      // abi_fingerprint() as the plugin was compiled
  const char* coil_version;  // COIL_VERSION_STRING
  const char* plugin_name;   // for messages and coil.loaded_plugins()
};

namespace detail {
constexpr uint64_t mix(uint64_t h, uint64_t v) {  // FNV-1a over the 8 bytes of v
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}
constexpr uint64_t mix(uint64_t h, std::string_view s) {
  for (char c : s) h = mix(h, static_cast<uint64_t>(static_cast<unsigned char>(c)));
  return mix(h, s.size());
}
}  // namespace detail

// A hash of what a plugin's compiled code depends on: coil's version, the API version, the
// names and order of the scalar ops (InstrKind values), dtypes and compile options, the
// sizes of the types a plugin's meta functions, lowerings, passes and backends handle, and the
// C++ library's string ABI. Computed at compile time on both sides; the loader compares them.
// It is a guard against the usual accidents (an old build of a plugin after coil changed),
// not a proof of compatibility.
constexpr uint64_t abi_fingerprint() {
  uint64_t h = 1469598103934665603ull;
  h = detail::mix(h, std::string_view(COIL_VERSION_STRING));
  h = detail::mix(h, uint64_t{COIL_PLUGIN_API_VERSION});
#define COIL_FP_BODY_OP(name, arity, text) h = detail::mix(h, std::string_view(text));
  COIL_BODY_OPS(COIL_FP_BODY_OP)
#undef COIL_FP_BODY_OP
#define COIL_FP_DTYPE(e, name, ctype, size, fp, torch) h = detail::mix(h, std::string_view(name));
  COIL_DTYPES(COIL_FP_DTYPE)
#undef COIL_FP_DTYPE
#define COIL_FP_OPTION(type, name, def, affects) h = detail::mix(h, std::string_view(#type #name));
  COIL_OPTION_FIELDS(COIL_FP_OPTION)
#undef COIL_FP_OPTION
  for (uint64_t size :
       {sizeof(CompileOptions), sizeof(TensorMeta), sizeof(Arg), sizeof(Node), sizeof(Value),
        sizeof(Graph), sizeof(ops::OpDef), sizeof(ops::OpCall), sizeof(loop::Instr),
        sizeof(loop::Body), sizeof(loop::BodyBuilder), sizeof(lower::TensorValue),
        sizeof(lower::LoweringContext), sizeof(passes::PassRegistry::Entry), sizeof(std::string),
        sizeof(std::vector<int>), sizeof(lower::LoweringFn)})
    h = detail::mix(h, size);
  // What a plugin's backend (Registrar::add_backend) hands to coil or reads from it.
  for (uint64_t size : {sizeof(backend::TargetPolicy), sizeof(backend::GeneratedCode),
                        sizeof(backend::KernelModule)})
    h = detail::mix(h, size);
#ifdef _GLIBCXX_USE_CXX11_ABI
  h = detail::mix(h, uint64_t{_GLIBCXX_USE_CXX11_ABI});
#endif
  return h;
}

// Collects a plugin's registrations; the loader commits them after coil_plugin_register
// returns (all or nothing). Its members are inline on purpose: they are compiled into the
// plugin, so registering needs nothing from coil's binary.
class Registrar {
 public:
  struct Lowering {
    std::string op;
    lower::LoweringFn fn;
  };

  // An op as the graph text names it ("mylib.softsign.default" for torch.ops.mylib.softsign),
  // its family, its meta function (required: the verifier checks graphs with it), and
  // optionally its schema as PyTorch prints it (str(torch.ops.mylib.softsign.default._schema)):
  // with one, the verifier checks each node's arguments against it (coil/ops/schema.h).
  void add_op(std::string name, ops::OpFamily family, ops::MetaFn meta, std::string schema = {}) {
    ops_.push_back(ops::OpDef{std::move(name), family, meta, std::move(schema)});
  }
  // How lowering turns a node of `op` into loop IR (coil/lower/lowering.h). An op without a
  // lowering still verifies and runs through the per-op eager fallback.
  void add_lowering(std::string op, lower::LoweringFn fn) {
    lowerings_.push_back(Lowering{std::move(op), std::move(fn)});
  }
  // A graph pass (coil/passes/pass.h), run where the `passes` option names it.
  void add_pass(std::string name, std::string description, passes::PassRegistry::Factory make) {
    passes_.push_back(
        passes::PassRegistry::Entry{std::move(name), std::move(description), std::move(make)});
  }

  // A backend (coil/backend/api/backend.h), registered under its name() for graphs on its
  // device(): option backend_target="<name>" selects it. A device's default backend stays
  // coil's (the first registered for it). Its name must be new (not cpu, cuda, portable or an
  // earlier plugin's), without blanks or commas. The loader keeps it for the whole process.
  void add_backend(std::shared_ptr<const backend::Backend> backend) {
    backends_.push_back(std::move(backend));
  }

  const std::vector<ops::OpDef>& ops() const { return ops_; }
  const std::vector<Lowering>& lowerings() const { return lowerings_; }
  const std::vector<passes::PassRegistry::Entry>& passes() const { return passes_; }
  const std::vector<std::shared_ptr<const backend::Backend>>& backends() const { return backends_; }

 private:
  std::vector<ops::OpDef> ops_;
  std::vector<Lowering> lowerings_;
  std::vector<passes::PassRegistry::Entry> passes_;
  std::vector<std::shared_ptr<const backend::Backend>> backends_;
};

}  // namespace coil::plugin

// The entry points' signatures (what the loader looks up by name).
extern "C" {
using coil_plugin_abi_fn = const coil::plugin::AbiInfo* (*)();
using coil_plugin_register_fn = void (*)(coil::plugin::Registrar&);
}

// Defines coil_plugin_abi() for plugin `name` (a string literal). Use once per plugin.
#define COIL_PLUGIN_ABI(name)                                                                    \
  extern "C" COIL_PLUGIN_EXPORT const coil::plugin::AbiInfo* coil_plugin_abi() {                 \
    static const coil::plugin::AbiInfo info{                                                     \
        sizeof(coil::plugin::AbiInfo), COIL_PLUGIN_API_VERSION, coil::plugin::abi_fingerprint(), \
        COIL_VERSION_STRING, name};                                                              \
    return &info;                                                                                \
  }                                                                                              \
  static_assert(true, "")
