// The plugin layer in process: registrations reach the registries all at once or not at all,
// taken names and broken plugins are clear errors, and the ABI check refuses other builds.
// (Loading a real plugin library is tests/python/test_plugin.py: it builds examples/plugin.)
// Registrations are process-wide, so every test uses names of its own.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>

#include "coil/graph/parser.h"
#include "coil/lower/lowering.h"
#include "coil/ops/meta_util.h"
#include "coil/ops/registry.h"
#include "coil/ops/verify.h"
#include "coil/passes/pass.h"
#include "coil/plugin/loader.h"

namespace coil::plugin {
namespace {

std::vector<TensorMeta> same_as_self(sym::Context&, const ops::OpCall& c) {
  return {ops::tensor_arg(c, 0, "self")};
}

std::vector<lower::TensorValue> identity(lower::LoweringContext& lc, const Node& n) {
  return {lc.arg_value(n, 0, "self")};
}

class CountingPass final : public passes::Pass {
 public:
  std::string_view name() const override { return "test_plugin_nop"; }
  bool run(Graph&, const CompileOptions&) override { return false; }
};

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

TEST(PluginRegistration, AddsOpsLoweringsAndPasses) {
  const ops::OpDef* add_before = ops::find_op("aten.add.Tensor");
  ASSERT_NE(add_before, nullptr);
  LoadedPlugin p = register_plugin("t1", [](Registrar& r) {
    r.add_op("test_plugin.same.default", ops::OpFamily::Pointwise, same_as_self);
    r.add_lowering("test_plugin.same.default", identity);
    r.add_pass("test_plugin_nop", "does nothing", [] { return std::make_unique<CountingPass>(); });
  });
  EXPECT_EQ(p.name, "t1");
  EXPECT_EQ(p.ops, std::vector<std::string>{"test_plugin.same.default"});
  const ops::OpDef* def = ops::find_op("test_plugin.same.default");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->family, ops::OpFamily::Pointwise);
  EXPECT_NE(lower::lowering_registry().find("test_plugin.same.default"), nullptr);
  EXPECT_TRUE(passes::registered_passes().contains("test_plugin_nop"));
  EXPECT_FALSE(passes::builtin_passes().contains("test_plugin_nop"));
  // The compile path's pipeline finds it by name.
  CompileOptions o;
  o.passes = "dce,test_plugin_nop";
  EXPECT_EQ(passes::build_pipeline(o).passes().size(), 2u);
  // A pointer taken before the registration still points at the same op: old tables stay.
  EXPECT_EQ(add_before->name, "aten.add.Tensor");
  EXPECT_EQ(ops::find_op("aten.add.Tensor")->meta, add_before->meta);

  // The meta function is what the verifier uses for the new op.
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%0: f32[2, 3]):\n"
      "  %1: f32[2, 3] = test_plugin.same.default(%0)\n"
      "  return (%1)\n",
      ctx);
  auto metas = ops::infer_meta(ctx, *g->nodes()[0]);
  ASSERT_EQ(metas.size(), 1u);
  EXPECT_EQ(metas[0].sizes, g->nodes()[0]->output()->meta().sizes);
}

TEST(PluginRegistration, TakenNameIsAnErrorAndNothingIsAdded) {
  std::string e = error_of([] {
    register_plugin("t2", [](Registrar& r) {
      r.add_op("test_plugin.fresh.default", ops::OpFamily::Pointwise, same_as_self);
      r.add_lowering("test_plugin.fresh.default", identity);
      r.add_op("aten.add.Tensor", ops::OpFamily::Pointwise, same_as_self);  // coil's
    });
  });
  EXPECT_NE(e.find("plugin 't2'"), std::string::npos) << e;
  EXPECT_NE(e.find("op aten.add.Tensor is already registered"), std::string::npos) << e;
  EXPECT_EQ(ops::find_op("test_plugin.fresh.default"), nullptr);
  EXPECT_EQ(lower::lowering_registry().find("test_plugin.fresh.default"), nullptr);

  e = error_of([] {
    register_plugin("t3", [](Registrar& r) { r.add_lowering("aten.exp.default", identity); });
  });
  EXPECT_NE(e.find("aten.exp.default already has a lowering"), std::string::npos) << e;
  e = error_of([] {
    register_plugin("t4", [](Registrar& r) {
      r.add_pass("cse", "mine", [] { return std::make_unique<CountingPass>(); });
    });
  });
  EXPECT_NE(e.find("pass 'cse' is already registered"), std::string::npos) << e;
  // Twice within one plugin.
  e = error_of([] {
    register_plugin("t5", [](Registrar& r) {
      r.add_op("test_plugin.twice.default", ops::OpFamily::Pointwise, same_as_self);
      r.add_op("test_plugin.twice.default", ops::OpFamily::Pointwise, same_as_self);
    });
  });
  EXPECT_NE(e.find("test_plugin.twice.default"), std::string::npos) << e;
  EXPECT_EQ(ops::find_op("test_plugin.twice.default"), nullptr);
  // The second plugin to claim a name loses.
  register_plugin("t6", [](Registrar& r) {
    r.add_op("test_plugin.first.default", ops::OpFamily::Other, same_as_self);
  });
  e = error_of([] {
    register_plugin("t7", [](Registrar& r) {
      r.add_op("test_plugin.first.default", ops::OpFamily::Other, same_as_self);
    });
  });
  EXPECT_NE(e.find("plugin 't7': op test_plugin.first.default is already registered"),
            std::string::npos)
      << e;
}

TEST(PluginRegistration, BrokenEntriesAreErrors) {
  std::string e = error_of(
      [] { register_plugin("t8", [](Registrar& r) { throw std::runtime_error("no GPU here"); }); });
  EXPECT_NE(e.find("coil_plugin_register threw: no GPU here"), std::string::npos) << e;
  e = error_of([] {
    register_plugin("t9", [](Registrar& r) {
      r.add_op("test_plugin.nometa.default", ops::OpFamily::Other, nullptr);
    });
  });
  EXPECT_NE(e.find("has no meta function"), std::string::npos) << e;
  e = error_of([] {
    register_plugin("t10", [](Registrar& r) {
      r.add_pass("a,b", "bad", [] { return std::make_unique<CountingPass>(); });
    });
  });
  EXPECT_NE(e.find("bad pass name 'a,b'"), std::string::npos) << e;
  // A lowering for an op without a meta function (neither the plugin's nor coil's).
  e = error_of([] {
    register_plugin("t11",
                    [](Registrar& r) { r.add_lowering("test_plugin.orphan.default", identity); });
  });
  EXPECT_NE(e.find("gets a lowering but has no meta function"), std::string::npos) << e;
  EXPECT_EQ(lower::lowering_registry().find("test_plugin.orphan.default"), nullptr);
}

// A plugin op with a schema: found by id, and the verifier checks its nodes' arguments with
// it; a schema that does not parse is refused with the rest of the plugin.
TEST(PluginRegistration, OpSchemasAreParsedAndChecked) {
  register_plugin("t12", [](Registrar& r) {
    r.add_op("test_plugin.scaled.default", ops::OpFamily::Pointwise, same_as_self,
             "test_plugin::scaled(Tensor self, *, float scale=1.0) -> Tensor");
    r.add_lowering("test_plugin.scaled.default", identity);
  });
  const OpId id = OpId::of("test_plugin.scaled.default");
  const ops::OpDef* def = ops::find_op(id);
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->id, id);
  ASSERT_TRUE(def->schema.known);
  ASSERT_EQ(def->schema.args.size(), 2u);
  EXPECT_TRUE(def->schema.args[1].kwarg_only);
  const lower::OpEntry entry = lower::op_entry(id);
  EXPECT_EQ(entry.def, def);
  EXPECT_NE(entry.lowering, nullptr);
  auto verify = [](const std::string& call) -> std::string {
    sym::Context ctx;
    auto g = parse_graph("graph(%0: f32[2]):\n  %1: f32[2] = " + call + "\n  return (%1)\n", ctx);
    try {
      ops::verify_graph_meta(*g);
    } catch (const CompileError& e) {
      return e.what();
    }
    return "<ok>";
  };
  EXPECT_EQ(verify("test_plugin.scaled.default(%0, scale=2.0)"), "<ok>");
  EXPECT_NE(verify("test_plugin.scaled.default(%0, factor=2.0)")
                .find("keyword argument 'factor' is not an argument of its op"),
            std::string::npos);

  std::string e = error_of([] {
    register_plugin("t13", [](Registrar& r) {
      r.add_op("test_plugin.badschema.default", ops::OpFamily::Pointwise, same_as_self,
               "test_plugin::badschema(Tensor self");
    });
  });
  EXPECT_NE(e.find("cannot parse its schema"), std::string::npos) << e;
  EXPECT_EQ(ops::find_op("test_plugin.badschema.default"), nullptr);
}

TEST(PluginAbi, OtherBuildsAreRefused) {
  AbiInfo ok{sizeof(AbiInfo), COIL_PLUGIN_API_VERSION, abi_fingerprint(), COIL_VERSION_STRING, "x"};
  EXPECT_NO_THROW(check_abi(ok, "p"));
  AbiInfo api = ok;
  api.api_version += 1;
  std::string e = error_of([&] { check_abi(api, "p"); });
  EXPECT_NE(e.find("plugin API version"), std::string::npos) << e;
  AbiInfo other = ok;
  other.fingerprint ^= 1;
  other.coil_version = "0.0.1";
  e = error_of([&] { check_abi(other, "p"); });
  EXPECT_NE(e.find("built against another coil (coil 0.0.1"), std::string::npos) << e;
  // The fingerprint is a compile-time constant.
  static_assert(abi_fingerprint() != 0);
}

TEST(PluginLoader, MissingFileAndNonPlugins) {
  std::string e = error_of([] { load_plugin("/nonexistent/libnothing.so"); });
  EXPECT_NE(e.find("no such file"), std::string::npos) << e;
  // A shared library that is no coil plugin: the C math library.
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(static_cast<double (*)(double)>(&::cos)), &info), 0);
  e = error_of([&] { load_plugin(info.dli_fname); });
  EXPECT_NE(e.find("is not a coil plugin: it has no coil_plugin_abi symbol"), std::string::npos)
      << e;
  // A file that is no shared library.
  e = error_of([] { load_plugin(COIL_SOURCE_DIR "/CMakeLists.txt"); });
  EXPECT_NE(e.find("cannot load it"), std::string::npos) << e;
  EXPECT_TRUE(loaded_plugins().empty());
}

TEST(PluginRegistration, ReadersRunWhileAPluginRegisters) {
  std::atomic<bool> stop{false};
  std::atomic<long> lookups{0};
  std::thread reader([&] {
    while (!stop) {
      ASSERT_NE(ops::find_op("aten.mul.Tensor"), nullptr);
      ASSERT_NE(lower::lowering_registry().find("aten.mul.Tensor"), nullptr);
      ++lookups;
    }
  });
  while (lookups == 0) std::this_thread::yield();
  for (int k = 0; k < 20; ++k) {
    static int counter = 0;
    counter = k;
    register_plugin("t11", [](Registrar& r) {
      std::string op = "test_plugin.many" + std::to_string(counter) + ".default";
      r.add_op(op, ops::OpFamily::Pointwise, same_as_self);
      r.add_lowering(op, identity);
    });
  }
  stop = true;
  reader.join();
  EXPECT_GT(lookups.load(), 0);
  for (int k = 0; k < 20; ++k)
    EXPECT_NE(ops::find_op("test_plugin.many" + std::to_string(k) + ".default"), nullptr);
}

}  // namespace
}  // namespace coil::plugin
