// A plugin's backends (Registrar::add_backend): registered under their names in the runtime's
// backend table, selected by option backend_target, compiling and running a graph; a taken or
// repeated name is a PluginError and leaves nothing of the plugin behind; tables that readers
// hold stay valid. Registrations are process-wide, so every test uses names of its own.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>

#include "../runtime/test_util.h"
#include "coil/backend/portable/portable_backend.h"
#include "coil/ops/meta_util.h"
#include "coil/ops/registry.h"
#include "coil/plugin/loader.h"
#include "coil/runtime/backends.h"
#include "coil/runtime/compiled_graph.h"

namespace coil::plugin {
namespace {

using namespace runtime::testing;

std::atomic<int> builds{0};

// The portable backend's code under another name, counting its builds (what
// examples/plugin/counting_backend.cpp does out of tree).
class RenamedPortable final : public backend::Backend {
 public:
  explicit RenamedPortable(std::string name) : name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  Device device() const override { return Device::CPU; }
  const backend::TargetPolicy& policy() const override { return inner_->policy(); }
  backend::GeneratedCode generate(const loop::LoopProgram& p, const sched::Schedule& s,
                                  const CompileOptions& o) const override {
    backend::GeneratedCode code = inner_->generate(p, s, o);
    code.text = "// " + name_ + "\n" + code.text;
    return code;
  }
  backend::KernelModule build(const backend::GeneratedCode* code, const loop::LoopProgram& p,
                              const sched::Schedule& s, const CompileOptions& o) const override {
    if (code != nullptr) ++builds;
    return inner_->build(code, p, s, o);
  }

 private:
  std::string name_;
  std::unique_ptr<backend::Backend> inner_ = backend::portable::make_portable_backend();
};

std::vector<TensorMeta> same_as_self(sym::Context&, const ops::OpCall& c) {
  return {ops::tensor_arg(c, 0, "self")};
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

const char* kGraph = R"(graph(%0: f32[5, 37]):
  %1: f32[5, 1] = aten.amax.default(%0, [1], true)
  %2: f32[5, 37] = aten.sub.Tensor(%0, %1)
  %3: f32[5, 37] = aten.exp.default(%2)
  return (%3)
)";

TEST(PluginBackend, SelectedByNameCompilesAndRuns) {
  const backend::BackendRegistry& before = runtime::backends();
  const backend::Backend& cpu = before.select(Device::CPU, "");
  const std::vector<std::string> names_before = before.names();
  LoadedPlugin p = register_plugin("b1", [](Registrar& r) {
    r.add_backend(std::make_shared<RenamedPortable>("test_backend_b1"));
  });
  EXPECT_EQ(p.backends, std::vector<std::string>{"test_backend_b1"});
  const backend::BackendRegistry& after = runtime::backends();
  ASSERT_NE(after.find("test_backend_b1"), nullptr);
  EXPECT_EQ(after.names().back(), "test_backend_b1");
  // The device's default is still coil's, the same object; the old table is intact.
  EXPECT_EQ(&after.select(Device::CPU, ""), &cpu);
  EXPECT_EQ(before.find("test_backend_b1"), nullptr);
  EXPECT_EQ(before.names(), names_before);
  EXPECT_EQ(after.names().size(), names_before.size() + 1);

  CompileOptions o;
  o.backend_target = "test_backend_b1";
  const int builds_before = builds;
  auto g = runtime::compile_graph(kGraph, o, nullptr);
  EXPECT_EQ(builds - builds_before, 1);
  EXPECT_EQ(g->artifacts().source.rfind("// test_backend_b1\n", 0), 0u) << g->artifacts().source;
  auto x = make_tensor<float>(DType::Float32, {5, 37});
  fill_random<float>(x, 7, -4, 4);
  auto y = g->run({x})[0];
  for (int64_t i = 0; i < 5; ++i) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < 37; ++j) mx = std::max(mx, at<float>(x, {i, j}));
    for (int64_t j = 0; j < 37; ++j)
      EXPECT_NEAR(at<float>(y, {i, j}), std::exp(at<float>(x, {i, j}) - mx), 1e-6);
  }
}

TEST(PluginBackend, TakenOrRepeatedNameIsAnErrorAndNothingIsAdded) {
  std::string e = error_of([] {
    register_plugin("b2", [](Registrar& r) {
      r.add_op("test_plugin_b2.same.default", ops::OpFamily::Pointwise, same_as_self);
      r.add_backend(std::make_shared<RenamedPortable>("portable"));
    });
  });
  EXPECT_NE(e.find("plugin 'b2': backend 'portable' is already registered"), std::string::npos)
      << e;
  EXPECT_EQ(ops::find_op("test_plugin_b2.same.default"), nullptr);  // all or nothing

  e = error_of([] {
    register_plugin("b3", [](Registrar& r) {
      r.add_backend(std::make_shared<RenamedPortable>("test_backend_b3"));
      r.add_backend(std::make_shared<RenamedPortable>("test_backend_b3"));
    });
  });
  EXPECT_NE(e.find("backend 'test_backend_b3' is already registered"), std::string::npos) << e;
  EXPECT_EQ(runtime::backends().find("test_backend_b3"), nullptr);

  register_plugin("b4", [](Registrar& r) {
    r.add_backend(std::make_shared<RenamedPortable>("test_backend_b4"));
  });
  e = error_of([] {  // a second plugin with the first one's backend
    register_plugin("b5", [](Registrar& r) {
      r.add_backend(std::make_shared<RenamedPortable>("test_backend_b4"));
    });
  });
  EXPECT_NE(e.find("plugin 'b5': backend 'test_backend_b4' is already registered"),
            std::string::npos)
      << e;
}

TEST(PluginBackend, BrokenBackendsAreErrors) {
  std::string e =
      error_of([] { register_plugin("b6", [](Registrar& r) { r.add_backend(nullptr); }); });
  EXPECT_NE(e.find("null backend"), std::string::npos) << e;
  e = error_of([] {
    register_plugin("b7",
                    [](Registrar& r) { r.add_backend(std::make_shared<RenamedPortable>("a,b")); });
  });
  EXPECT_NE(e.find("bad backend name 'a,b'"), std::string::npos) << e;
  // The runtime's own entry checks the same (for programs that register without a plugin).
  EXPECT_THROW(runtime::register_backends({std::make_shared<RenamedPortable>("cpu")}),
               CompileError);
  EXPECT_THROW(runtime::register_backends({nullptr}), CompileError);
}

TEST(PluginBackend, UnknownTargetStillNamesTheRegisteredOnes) {
  register_plugin("b8", [](Registrar& r) {
    r.add_backend(std::make_shared<RenamedPortable>("test_backend_b8"));
  });
  CompileOptions o;
  o.backend_target = "no_such_backend";
  try {
    runtime::compile_graph(kGraph, o, nullptr);
    FAIL() << "no error";
  } catch (const CompileError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown backend_target 'no_such_backend' (registered: cpu, cuda, portable"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("test_backend_b8"), std::string::npos) << msg;
  }
}

TEST(PluginBackend, ReadersSelectWhileBackendsAreRegistered) {
  std::atomic<bool> stop{false};
  std::atomic<long> selections{0};
  std::thread reader([&] {
    while (!stop) {
      const backend::BackendRegistry& r = runtime::backends();
      ASSERT_EQ(r.select(Device::CPU, "").name(), "cpu");
      ASSERT_EQ(r.select(Device::CPU, "portable").name(), "portable");
      ++selections;
    }
  });
  while (selections == 0) std::this_thread::yield();
  for (int k = 0; k < 20; ++k) {
    static int counter = 0;
    counter = k;
    register_plugin("b9", [](Registrar& r) {
      r.add_backend(
          std::make_shared<RenamedPortable>("test_backend_many" + std::to_string(counter)));
    });
  }
  stop = true;
  reader.join();
  EXPECT_GT(selections.load(), 0);
  for (int k = 0; k < 20; ++k)
    EXPECT_NE(runtime::backends().find("test_backend_many" + std::to_string(k)), nullptr);
}

}  // namespace
}  // namespace coil::plugin
