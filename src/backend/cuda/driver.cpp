#include "coil/backend/cuda/driver.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "coil/support/error.h"

namespace coil::backend::cuda {
namespace {

struct Loaded {
  Driver driver{};
  std::string why;  // empty: usable
};

template <typename F>
bool bind(void* lib, F& fn, const char* name, const char* versioned, std::string& why) {
  void* p = versioned ? dlsym(lib, versioned) : nullptr;
  if (!p) p = dlsym(lib, name);
  if (!p) {
    why = std::string("libcuda.so.1 has no ") + name + " (driver too old)";
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

Loaded* load() {
  auto* r = new Loaded();  // never destroyed: the library stays loaded for the process
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    r->why = "no NVIDIA driver on this machine (libcuda.so.1 not found)";
    return r;
  }
  Driver& d = r->driver;
  std::string& why = r->why;
#define COIL_BIND(field, versioned) \
  if (!bind(lib, d.field, #field, versioned, why)) return r;
  COIL_BIND(cuInit, nullptr)
  COIL_BIND(cuDriverGetVersion, nullptr)
  COIL_BIND(cuDeviceGetCount, nullptr)
  COIL_BIND(cuDeviceGet, nullptr)
  COIL_BIND(cuDeviceGetAttribute, nullptr)
  COIL_BIND(cuDevicePrimaryCtxRetain, nullptr)
  COIL_BIND(cuCtxGetCurrent, nullptr)
  COIL_BIND(cuCtxSetCurrent, nullptr)
  COIL_BIND(cuCtxSynchronize, nullptr)
  COIL_BIND(cuModuleLoadData, nullptr)
  COIL_BIND(cuModuleUnload, nullptr)
  COIL_BIND(cuModuleGetFunction, nullptr)
  COIL_BIND(cuLaunchKernel, nullptr)
  COIL_BIND(cuMemAlloc, "cuMemAlloc_v2")
  COIL_BIND(cuMemFree, "cuMemFree_v2")
  COIL_BIND(cuMemcpyHtoD, "cuMemcpyHtoD_v2")
  COIL_BIND(cuMemcpyDtoH, "cuMemcpyDtoH_v2")
  COIL_BIND(cuMemsetD8Async, nullptr)
  COIL_BIND(cuStreamSynchronize, nullptr)
  COIL_BIND(cuEventCreate, nullptr)
  COIL_BIND(cuEventDestroy, "cuEventDestroy_v2")
  COIL_BIND(cuEventRecord, nullptr)
  COIL_BIND(cuEventSynchronize, nullptr)
  COIL_BIND(cuEventElapsedTime, nullptr)
  COIL_BIND(cuGetErrorString, nullptr)
#undef COIL_BIND
  CUresult rc = d.cuInit(0);
  if (rc != 0) {
    why = "the CUDA driver failed to initialize (" + d.error_text(rc) + ")";
    return r;
  }
  int count = 0;
  if (d.cuDeviceGetCount(&count) != 0 || count == 0) why = "no CUDA device on this machine";
  return r;
}

}  // namespace

const Driver* Driver::get(std::string* why) {
  static Loaded* loaded = load();
  if (!loaded->why.empty()) {
    if (why) *why = loaded->why;
    return nullptr;
  }
  return &loaded->driver;
}

std::string Driver::error_text(CUresult r) const {
  const char* s = nullptr;
  if (cuGetErrorString && cuGetErrorString(r, &s) == 0 && s) return s;
  return "CUDA error " + std::to_string(r);
}

void Driver::check(CUresult r, const char* what) const {
  COIL_USER_CHECK(r == 0) << "CUDA " << what << " failed: " << error_text(r);
}

void Driver::check_run(CUresult r, const char* what) const {
  if (r != 0)
    throw std::runtime_error("coil: CUDA " + std::string(what) + " failed: " + error_text(r));
}

const DeviceInfo& device_info(int ordinal) {
  static std::mutex mu;
  static auto* cache = new std::map<int, DeviceInfo>();  // per ordinal; never destroyed
  std::string why;
  const Driver* d = Driver::get(&why);
  COIL_USER_CHECK(d != nullptr) << "no CUDA backend: " << why;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(ordinal);
  if (it != cache->end()) {
    ensure_context(it->second);
    return it->second;
  }
  DeviceInfo info;
  info.ordinal = ordinal;
  CUdevice dev = 0;
  d->check(d->cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  d->check(d->cuDeviceGetAttribute(&info.cc_major, kAttrComputeCapabilityMajor, dev), "attribute");
  d->check(d->cuDeviceGetAttribute(&info.cc_minor, kAttrComputeCapabilityMinor, dev), "attribute");
  d->check(d->cuDeviceGetAttribute(&info.sm_count, kAttrMultiprocessorCount, dev), "attribute");
  d->check(d->cuDeviceGetAttribute(&info.max_threads_per_sm, kAttrMaxThreadsPerMultiprocessor, dev),
           "attribute");
  d->check(d->cuDevicePrimaryCtxRetain(&info.context, dev), "cuDevicePrimaryCtxRetain");
  ensure_context(info);
  return cache->emplace(ordinal, info).first->second;
}

void ensure_context(const DeviceInfo& dev) {
  const Driver* d = Driver::get();
  if (!d) return;
  CUcontext cur = nullptr;
  if (d->cuCtxGetCurrent(&cur) == 0 && cur == dev.context) return;
  if (cur == nullptr) d->check(d->cuCtxSetCurrent(dev.context), "cuCtxSetCurrent");
}

ScopedContext::ScopedContext(const DeviceInfo& dev) {
  const Driver* d = Driver::get();
  if (!d) return;
  if (d->cuCtxGetCurrent(&previous_) != 0) previous_ = nullptr;
  if (previous_ == dev.context) return;
  d->check_run(d->cuCtxSetCurrent(dev.context), "cuCtxSetCurrent");
  switched_ = true;
}

ScopedContext::~ScopedContext() {
  if (!switched_) return;
  // A thread that had no context keeps the device's (as ensure_context would leave it).
  if (previous_ != nullptr) Driver::get()->cuCtxSetCurrent(previous_);
}

void* driver_symbol(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? dlsym(lib, name) : nullptr;
}

std::string device_name(int ordinal) {
  using GetName = CUresult (*)(char*, int, CUdevice);
  static const auto get_name = reinterpret_cast<GetName>(driver_symbol("cuDeviceGetName"));
  const Driver* d = Driver::get();
  CUdevice dev = 0;
  char name[256] = {};
  if (!d || !get_name || d->cuDeviceGet(&dev, ordinal) != 0 || get_name(name, 255, dev) != 0)
    return "";
  return name;
}

bool stream_capturing(void* stream) {
  using IsCapturing = CUresult (*)(CUstream, int*);
  static const auto is_capturing =
      reinterpret_cast<IsCapturing>(driver_symbol("cuStreamIsCapturing"));
  int status = 0;  // CU_STREAM_CAPTURE_STATUS_NONE
  // Unknown counts as capturing: measuring inside a capture would break it.
  if (!is_capturing || is_capturing(static_cast<CUstream>(stream), &status) != 0) return true;
  return status != 0;
}

}  // namespace coil::backend::cuda
