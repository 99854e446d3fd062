// BackendRegistry: selection by device and by name (option backend_target), and its errors.
#include <gtest/gtest.h>

#include "coil/backend/api/registry.h"
#include "coil/support/error.h"

namespace coil::backend {
namespace {

// A backend that only names itself: selection never generates code.
class FakeBackend final : public Backend {
 public:
  FakeBackend(std::string name, Device device) : name_(std::move(name)), device_(device) {
    policy_.name = name_;
  }
  std::string_view name() const override { return name_; }
  Device device() const override { return device_; }
  const TargetPolicy& policy() const override { return policy_; }
  GeneratedCode generate(const loop::LoopProgram&, const sched::Schedule&,
                         const CompileOptions&) const override {
    return {};
  }
  KernelModule build(const GeneratedCode*, const loop::LoopProgram&, const sched::Schedule&,
                     const CompileOptions&) const override {
    return {};
  }

 private:
  std::string name_;
  Device device_;
  TargetPolicy policy_;
};

BackendRegistry three() {
  BackendRegistry r;
  r.add(std::make_unique<FakeBackend>("cpu", Device::CPU));
  r.add(std::make_unique<FakeBackend>("cuda", Device::CUDA));
  r.add(std::make_unique<FakeBackend>("portable", Device::CPU));
  return r;
}

TEST(BackendRegistry, DefaultIsTheFirstForTheDevice) {
  const BackendRegistry r = three();
  EXPECT_EQ(r.select(Device::CPU, "").name(), "cpu");
  EXPECT_EQ(r.select(Device::CUDA, "").name(), "cuda");
  EXPECT_EQ(r.names(), (std::vector<std::string>{"cpu", "cuda", "portable"}));
}

TEST(BackendRegistry, NamedBackendIsSelected) {
  const BackendRegistry r = three();
  const Backend& b = r.select(Device::CPU, "portable");
  EXPECT_EQ(b.name(), "portable");
  EXPECT_EQ(b.policy().name, "portable");
  EXPECT_EQ(r.find("portable"), &b);
  EXPECT_EQ(r.find("nope"), nullptr);
}

TEST(BackendRegistry, UnknownNameOrOtherDeviceIsACompileError) {
  const BackendRegistry r = three();
  try {
    r.select(Device::CPU, "metal");
    FAIL() << "no error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend_target 'metal' (registered: cpu, cuda, "
                                         "portable)"),
              std::string::npos)
        << e.what();
  }
  try {
    r.select(Device::CUDA, "portable");
    FAIL() << "no error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("runs cpu graphs; this graph's tensors are on cuda"),
              std::string::npos)
        << e.what();
  }
  BackendRegistry cpu_only;
  cpu_only.add(std::make_unique<FakeBackend>("cpu", Device::CPU));
  EXPECT_THROW(cpu_only.select(Device::CUDA, ""), CompileError);
}

TEST(BackendRegistry, NameRegisteredTwiceIsAnInternalError) {
  BackendRegistry r = three();
  EXPECT_THROW(r.add(std::make_unique<FakeBackend>("cpu", Device::CPU)), InternalError);
}

}  // namespace
}  // namespace coil::backend
