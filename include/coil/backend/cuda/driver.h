// The CUDA driver API, loaded with dlopen (libcuda.so.1) so that building coil needs no CUDA
// toolkit and a machine without a GPU or driver gets a clear message instead of a link error.
// Only the few entry points coil uses are declared here, with the driver's own types spelled
// as plain integers and opaque pointers (ABI-identical to cuda.h).
//
// Why a process-wide instance: the driver library is loaded once per process, as the driver
// itself is; Driver::get() returns an immutable table of function pointers (no configuration).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace coil::backend::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

// cuDeviceGetAttribute attributes (values of cuda.h's CUdevice_attribute).
enum : int {
  kAttrMaxThreadsPerBlock = 1,
  kAttrMultiprocessorCount = 16,
  kAttrComputeCapabilityMajor = 75,
  kAttrComputeCapabilityMinor = 76,
  kAttrMaxThreadsPerMultiprocessor = 39,
};

struct Driver {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* dev, int ordinal);
  CUresult (*cuDeviceGetAttribute)(int* value, int attr, CUdevice dev);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev);
  CUresult (*cuCtxGetCurrent)(CUcontext* ctx);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction* fn, CUmodule module, const char* name);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared_bytes, CUstream stream,
                             void** params, void** extra);
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr ptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags);
  CUresult (*cuEventDestroy)(CUevent event);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float* ms, CUevent start, CUevent end);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);

  // The loaded driver with cuInit done, or nullptr with a one-line reason in *why ("libcuda.so.1
  // not found: no NVIDIA driver on this machine", "no CUDA device").
  static const Driver* get(std::string* why = nullptr);

  // Throws CompileError "coil: CUDA <what> failed: <driver's message>" unless r == 0.
  void check(CUresult r, const char* what) const;
  // The same as a std::runtime_error (errors while running, not compiling).
  void check_run(CUresult r, const char* what) const;
  std::string error_text(CUresult r) const;
};

// What the generated code and the launch heuristics need to know about a device.
struct DeviceInfo {
  int ordinal = 0;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int max_threads_per_sm = 0;
  CUcontext context = nullptr;
};

// Device `ordinal`, with its primary context made current on the calling thread (the context
// PyTorch uses too). CompileError when there is no driver or no such device.
const DeviceInfo& device_info(int ordinal = 0);

// A driver entry point Driver does not hold, from the already-loaded libcuda (nullptr where
// the driver is not loaded or lacks it): for the few calls only one caller makes.
void* driver_symbol(const char* name);

// The device's name ("" where unknown; part of the disk cache keys of measured choices).
std::string device_name(int ordinal);

// Whether `stream` is capturing a CUDA graph: nothing may be measured (synchronized) then.
// Unknown counts as capturing.
bool stream_capturing(void* stream);

// Makes the device's primary context current on this thread if no context is (threads that
// PyTorch never used, the C++ library without PyTorch).
void ensure_context(const DeviceInfo& dev);

// Makes `dev`'s primary context current for its lifetime and restores the thread's previous
// one after (none restored where none was current). A graph compiled for cuda:1 loads its
// modules, allocates and launches in device 1's context whatever device the calling thread
// has current (PyTorch's current device may be another; autograd's device threads). Costs two
// driver calls where the context is already current.
class ScopedContext {
 public:
  explicit ScopedContext(const DeviceInfo& dev);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

}  // namespace coil::backend::cuda
