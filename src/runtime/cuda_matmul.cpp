#include "cuda_matmul.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "coil/backend/common/disk_cache.h"
#include "coil/backend/common/sha256.h"
#include "coil/backend/cuda/gemm_template.h"
#include "coil/loop/program.h"
#include "coil/support/error.h"

namespace coil::runtime::detail {

namespace cu = backend::cuda;

namespace {

bool misaligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; }

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One operand [rows, cols] with strides (s0, s1): which way it is contiguous.
struct Side {
  bool row_major;  // unit column stride (else unit row stride)
  int64_t ld;      // the other stride
};

Side side_of(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  if (s1 == 1 || cols == 1) return {true, rows == 1 ? cols : s0};
  return {false, cols == 1 ? rows : s1};
}

}  // namespace

namespace {

// cuBLASLt, on zero-padded copies of the operands where a dimension is odd (cuda_matmul.h).
bool run_cublaslt(const cu::GemmArgs& g, const CudaSteps& steps, const RunContext& rc,
                  std::string* why) {
  const int64_t es = dtype_size(g.dtype);
  if (g.batch != 1 || es > 4 || g.m * g.n * g.k < loop::kMatmulPadMinWork ||
      !(g.c_stride1 == 1 || g.n == 1))
    return cu::gemm(g, rc.stream, why);
  const int64_t per = 16 / es;
  const Side a = side_of(g.m, g.k, g.a.stride0, g.a.stride1);
  const Side b = side_of(g.k, g.n, g.b.stride0, g.b.stride1);
  // A dimension is padded when it is some operand's contiguous one and not a multiple of `per`.
  const bool pad_m = !a.row_major && g.m % per != 0;
  const bool pad_k = (a.row_major || !b.row_major) && g.k % per != 0;
  const bool pad_n = g.n % per != 0;  // C is row-major
  const int64_t mp = pad_m ? round_up(g.m, per) : g.m;
  const int64_t kp = pad_k ? round_up(g.k, per) : g.k;
  const int64_t np = pad_n ? round_up(g.n, per) : g.n;
  // An operand padded only along its contiguous dim, whose storage holds zeros there up to
  // its (aligned) leading stride, is read padded in place.
  const bool a_in_place =
      g.a_zero_padded && a.ld >= (a.row_major ? kp : mp) && (a.row_major ? !pad_m : !pad_k);
  const bool b_in_place =
      g.b_zero_padded && b.ld >= (b.row_major ? np : kp) && (b.row_major ? !pad_k : !pad_n);
  const bool repack_a =
      ((pad_m || pad_k) && !a_in_place) || (a.ld * es) % 16 != 0 || misaligned(g.a.data);
  const bool repack_b =
      ((pad_k || pad_n) && !b_in_place) || (b.ld * es) % 16 != 0 || misaligned(g.b.data);
  // C written in place: its rows are aligned and, when N is padded, hold N_pad columns (the
  // lowering gave a CUDA mm's product such a buffer: src/lower/linalg.cpp).
  const bool c_room = g.c_cols >= np && (g.c_stride0 * es) % 16 == 0 && !misaligned(g.c);
  const bool temp_c = pad_m || !c_room;
  if (!repack_a && !repack_b && !temp_c) return cu::gemm(g, rc.stream, why);

  std::vector<std::shared_ptr<void>> keep;  // freed after the work is queued: stream-ordered
  auto block = [&](int64_t elements) {
    void* p = nullptr;
    keep.push_back(steps.allocate(static_cast<size_t>(elements * es), rc, &p));
    return p;
  };
  // A dense zero-padded copy of operand [rows, cols] (s0, s1) -> [rows_p, cols_p], keeping its
  // orientation; returns the operand's new strides.
  auto repack = [&](const cu::GemmOperand& op, Side side, int64_t rows, int64_t cols,
                    int64_t rows_p, int64_t cols_p) {
    cu::GemmOperand out;
    if (side.row_major) {
      out.data = block(rows_p * cols_p);
      steps.pad_copy(op.data, g.dtype, rows, cols, op.stride0, op.stride1,
                     const_cast<void*>(out.data), rows_p, cols_p, cols_p, rc.stream);
      out.stride0 = cols_p;
      out.stride1 = 1;
    } else {  // column-major: copy the transpose [cols, rows] row by row
      out.data = block(rows_p * cols_p);
      steps.pad_copy(op.data, g.dtype, cols, rows, op.stride1, op.stride0,
                     const_cast<void*>(out.data), cols_p, rows_p, rows_p, rc.stream);
      out.stride0 = 1;
      out.stride1 = rows_p;
    }
    return out;
  };
  cu::GemmArgs p = g;
  p.m = mp;
  p.k = kp;
  p.n = np;
  if (repack_a) p.a = repack(g.a, a, g.m, g.k, mp, kp);
  if (repack_b) p.b = repack(g.b, b, g.k, g.n, kp, np);
  if (g.bias && pad_n) {
    void* bias = block(np);
    steps.pad_copy(g.bias, g.dtype, 1, g.n, 0, 1, bias, 1, np, np, rc.stream);
    p.bias = bias;
  }
  if (temp_c) {
    p.c = block(mp * np);
    p.c_stride0 = np;
    p.c_stride1 = 1;
  }
  if (!cu::gemm(p, rc.stream, why)) return false;
  if (temp_c) steps.pad_copy(p.c, g.dtype, g.m, g.n, np, 1, g.c, g.m, g.n, g.c_stride0, rc.stream);
  return true;
}

// ---- coil's GEMM template (gemm_template.h) against cuBLASLt: which one runs a product.
//
// Per key (device name, dtype, sizes, strides, layouts, epilogue) the choice is made once per
// process: forced (option cuda_gemm_force), read from the disk cache (<cache_dir>/cuda/gemm/
// <sha256 of key>.txt), or measured on the call's own operands: cuBLASLt writes a scratch
// output (the reference), each candidate tile shape writes another, which must agree with the
// reference (kMaxRelError of the largest |value|) before it is timed; a template is chosen
// only if it beats cuBLASLt's time twice. Nothing is measured while the stream captures a CUDA
// graph (cuBLASLt runs and the choice waits for an ordinary call).

// A template kernel loaded in a device's context.
struct LoadedKernel {
  std::shared_ptr<cu::Module> module;
  cu::CUfunction fn = nullptr;
};

struct TemplateState {
  std::mutex mu;                                                    // guards the maps
  std::map<std::string, std::optional<cu::GemmTileConfig>> choice;  // nullopt: cuBLASLt
  std::map<std::string, LoadedKernel> kernels;                      // "<ordinal> <kernel name>"
  std::map<int, LoadedKernel> compare;      // per device ordinal and dtype: ordinal*4+dtype
  std::map<int, std::string> device_names;  // per ordinal (a driver call otherwise)
  std::mutex measure_mu;                    // one measurement at a time (each holds scratch memory)
};
TemplateState& state() {
  static auto* s = new TemplateState();  // process lifetime, as the modules it holds
  return *s;
}

// The largest relative error (of the largest |reference| element) a candidate may show against
// cuBLASLt's result: above the output rounding and accumulation-order differences of the
// dtype, far below what a wrong tile, edge or layout gives (order 1).
double max_rel_error(DType t) { return t == DType::BFloat16 ? 3e-2 : 1e-2; }

// The two scratch outputs of a measurement may take at most this much device memory; larger
// products stay on cuBLASLt (at that size cuBLASLt's large-tile kernels are the ones to beat).
constexpr int64_t kMaxScratchBytes = int64_t{2} << 30;

// The device's name (a driver call the first time per ordinal) and its SM count.
std::string device_label(const CudaSteps& steps) {
  const cu::DeviceInfo& dev = steps.device();
  TemplateState& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.device_names.find(dev.ordinal);
  if (it == st.device_names.end()) {
    std::string found = cu::device_name(dev.ordinal);
    if (found.empty()) found = "sm_" + std::to_string(dev.cc_major * 10 + dev.cc_minor);
    it = st.device_names.emplace(dev.ordinal, found).first;
  }
  return it->second + " " + std::to_string(dev.sm_count) + "sm";
}

std::string key_of(const cu::GemmArgs& g, const cu::GemmTemplateProblem& p,
                   const CudaSteps& steps) {
  std::ostringstream k;
  k << device_label(steps) << " " << p.spec.name() << " b" << g.batch << " " << g.m << "x" << g.n
    << "x" << g.k << " ld " << p.lda << "," << p.ldb << "," << g.c_stride0 << " bs "
    << g.a.batch_stride << "," << g.b.batch_stride << "," << g.c_batch_stride;
  return k.str();
}

int compile_jobs(const CompileOptions& o) {
  if (o.cuda_compile_jobs > 0) return static_cast<int>(o.cuda_compile_jobs);
  return std::max(1u, std::thread::hardware_concurrency());
}

// The kernels of `configs` for `spec` on the steps' device, compiled in parallel (NVRTC;
// cubins cached on disk) and loaded; an entry is empty where compiling or loading failed,
// with the reason in errors[i].
std::vector<LoadedKernel> load_kernels(const std::vector<cu::GemmTileConfig>& configs,
                                       const cu::GemmKernelSpec& spec, const CudaSteps& steps,
                                       std::vector<std::string>* errors) {
  TemplateState& st = state();
  const cu::DeviceInfo& dev = steps.device();
  const CompileOptions& o = steps.options();
  std::vector<LoadedKernel> out(configs.size());
  errors->assign(configs.size(), "");
  std::vector<size_t> todo;
  std::vector<std::string> sources, keys, names;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    for (size_t i = 0; i < configs.size(); ++i) {
      const std::string name = cu::gemm_template_kernel_name(configs[i], spec);
      const std::string key = std::to_string(dev.ordinal) + " " + name;
      auto it = st.kernels.find(key);
      if (it != st.kernels.end()) {
        out[i] = it->second;
        continue;
      }
      todo.push_back(i);
      sources.push_back(cu::gemm_template_source(configs[i], spec));
      keys.push_back(key);
      names.push_back(name);
    }
  }
  if (todo.empty()) return out;
  std::vector<cu::CubinResult> cubins;
  try {
    cubins = cu::compile_to_cubins(sources, dev.cc_major, dev.cc_minor, o, compile_jobs(o));
  } catch (const std::exception&) {
    // One at a time, to tell which failed (those that compiled come from NVRTC's and coil's
    // caches).
    cubins.assign(sources.size(), {});
    for (size_t j = 0; j < sources.size(); ++j) {
      try {
        cubins[j] = cu::compile_to_cubin(sources[j], dev.cc_major, dev.cc_minor, o);
      } catch (const std::exception& e) {
        (*errors)[todo[j]] = std::string("compile: ") + e.what();
      }
    }
  }
  for (size_t j = 0; j < todo.size(); ++j) {
    if (cubins[j].cubin.empty()) continue;
    try {
      LoadedKernel k;
      k.module = std::make_shared<cu::Module>(cubins[j].cubin);
      k.fn = k.module->function(names[j]);
      out[todo[j]] = k;
      std::lock_guard<std::mutex> lock(st.mu);
      st.kernels[keys[j]] = k;
    } catch (const std::exception& e) {
      (*errors)[todo[j]] = std::string("load: ") + e.what();
    }
  }
  return out;
}

// The compare kernel of gemm_template_compare_source for `dtype` on the steps' device.
cu::CUfunction compare_kernel(DType dtype, const CudaSteps& steps) {
  TemplateState& st = state();
  const cu::DeviceInfo& dev = steps.device();
  const int slot = dev.ordinal * 4 + static_cast<int>(dtype == DType::BFloat16  ? 1
                                                      : dtype == DType::Float16 ? 2
                                                                                : 0);
  {
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.compare.find(slot);
    if (it != st.compare.end()) return it->second.fn;
  }
  cu::CubinResult r = cu::compile_to_cubin(cu::gemm_template_compare_source(), dev.cc_major,
                                           dev.cc_minor, steps.options());
  LoadedKernel k;
  k.module = std::make_shared<cu::Module>(r.cubin);
  k.fn = k.module->function(cu::gemm_template_compare_kernel(dtype));
  std::lock_guard<std::mutex> lock(st.mu);
  st.compare[slot] = k;
  return k.fn;
}

// Fastest of `reps` launches, each timed on its own pair of events (ms); 1e30 where a launch
// failed.
float time_min(const std::function<bool()>& launch, void* stream, int reps = 5) {
  const cu::Driver* d = cu::Driver::get();
  auto s = static_cast<cu::CUstream>(stream);
  std::vector<cu::CUevent> ev(reps + 1);
  for (auto& e : ev) d->check_run(d->cuEventCreate(&e, 0), "cuEventCreate");
  bool ok = true;
  d->cuEventRecord(ev[0], s);
  for (int r = 0; r < reps && ok; ++r) {
    ok = launch();
    d->cuEventRecord(ev[r + 1], s);
  }
  d->check_run(d->cuEventSynchronize(ev[reps]), "cuEventSynchronize (GEMM measurement)");
  float best = 1e30f;
  for (int r = 0; r < reps && ok; ++r) {
    float ms = 0;
    d->cuEventElapsedTime(&ms, ev[r], ev[r + 1]);
    best = std::min(best, ms);
  }
  for (auto& e : ev) d->cuEventDestroy(e);
  return ok ? best : 1e30f;
}

std::string ms_text(double ms) {
  std::ostringstream t;
  t.precision(4);
  t << ms << " ms";
  return t.str();
}

// Measures cuBLASLt and the candidates on g's operands (cuda_matmul.h); the template to run,
// or nullopt for cuBLASLt. *ev gets the times and every candidate's fate.
std::optional<cu::GemmTileConfig> measure(const cu::GemmArgs& g, const cu::GemmTemplateProblem& p,
                                          const CudaSteps& steps, const RunContext& rc,
                                          cu::GemmTemplateEvent* ev) {
  const cu::Driver* d = cu::Driver::get();
  auto stream = static_cast<cu::CUstream>(rc.stream);
  const int64_t es = dtype_size(g.dtype);
  if (g.c_stride0 < 0 || g.c_batch_stride < 0) {
    ev->detail = "negative output strides";
    return std::nullopt;
  }
  // Scratch outputs with C's own strides (cuBLASLt's padded paths see what they would see).
  const int64_t extent = (g.batch > 1 ? (g.batch - 1) * g.c_batch_stride : 0) +
                         (g.m - 1) * g.c_stride0 + std::max(g.n, g.c_cols);
  if (2 * extent * es > kMaxScratchBytes) {
    ev->detail = "output too large to measure on scratch copies";
    return std::nullopt;
  }
  std::vector<std::shared_ptr<void>> keep;
  void *ref = nullptr, *out = nullptr, *cmp = nullptr;
  keep.push_back(steps.allocate(static_cast<size_t>(extent * es), rc, &ref));
  keep.push_back(steps.allocate(static_cast<size_t>(extent * es), rc, &out));
  keep.push_back(steps.allocate(16, rc, &cmp));
  cu::GemmArgs gr = g, go = g;
  gr.c = ref;
  go.c = out;
  std::string why;
  if (!run_cublaslt(gr, steps, rc, &why)) {
    ev->detail = "cuBLASLt cannot run it (" + why + "): no reference";
    return std::nullopt;
  }
  const float blas_ms = time_min([&] { return run_cublaslt(gr, steps, rc, &why); }, rc.stream);
  ev->cublaslt_ms = blas_ms;

  const std::vector<cu::GemmTileConfig> cands =
      cu::gemm_template_candidates(g, steps.device().sm_count);
  std::vector<std::string> errors;
  std::vector<LoadedKernel> kernels = load_kernels(cands, p.spec, steps, &errors);
  const cu::CUfunction compare = compare_kernel(g.dtype, steps);
  std::ostringstream detail;
  detail << "cublaslt " << ms_text(blas_ms);
  float best_ms = 1e30f;
  int best = -1;
  for (size_t i = 0; i < cands.size(); ++i) {
    detail << "; " << cands[i].name() << " ";
    if (!kernels[i].fn) {
      detail << errors[i].substr(0, 300);
      continue;
    }
    // NaN-filled output first: a candidate that leaves elements unwritten fails the check.
    d->check_run(d->cuMemsetD8Async(reinterpret_cast<cu::CUdeviceptr>(out), 0xFF,
                                    static_cast<size_t>(extent * es), stream),
                 "cuMemsetD8Async");
    if (cu::CUresult r = cu::launch_gemm_template(kernels[i].fn, cands[i], p, go, rc.stream);
        r != 0) {
      detail << "launch failed: " << d->error_text(r);
      continue;
    }
    d->check_run(d->cuMemsetD8Async(reinterpret_cast<cu::CUdeviceptr>(cmp), 0, 8, stream),
                 "cuMemsetD8Async");
    int64_t batch = g.batch, rows = g.m, cols = g.n, ld = g.c_stride0, bs = g.c_batch_stride;
    void* cmp_args[] = {&out, &ref, &batch, &rows, &cols, &ld, &bs, &cmp};
    const int64_t total = batch * rows * cols;
    const unsigned blocks =
        static_cast<unsigned>(std::clamp<int64_t>((total + 255) / 256, 1, 1024));
    d->check_run(d->cuLaunchKernel(compare, blocks, 1, 1, 256, 1, 1, 0, stream, cmp_args, nullptr),
                 "cuLaunchKernel GEMM compare");
    d->check_run(d->cuStreamSynchronize(stream), "cuStreamSynchronize (GEMM template check)");
    uint32_t bits[2] = {0, 0};
    d->check_run(d->cuMemcpyDtoH(bits, reinterpret_cast<cu::CUdeviceptr>(cmp), 8), "cuMemcpyDtoH");
    float err = 0, mag = 0;
    std::memcpy(&err, &bits[0], 4);
    std::memcpy(&mag, &bits[1], 4);
    const double rel = err / std::max(static_cast<double>(mag), 1e-30);
    if (!(rel <= max_rel_error(g.dtype))) {
      detail << "WRONG (max error " << err << ", max |ref| " << mag << ", relative " << rel << ")";
      cu::GemmTemplateEvent bad = *ev;
      bad.choice = cands[i].name();
      bad.how = "rejected";
      bad.detail = "max error " + std::to_string(err) + " of max |ref| " + std::to_string(mag);
      cu::record_gemm_template_event(bad);
      continue;
    }
    const float ms = time_min(
        [&] { return cu::launch_gemm_template(kernels[i].fn, cands[i], p, go, rc.stream) == 0; },
        rc.stream);
    detail << ms_text(ms) << " (rel err " << rel << ")";
    if (ms < best_ms) {
      best_ms = ms;
      best = static_cast<int>(i);
    }
  }
  std::optional<cu::GemmTileConfig> chosen;
  if (best >= 0 && best_ms < blas_ms) {
    // Timed again, both: a single quick run must not decide.
    const float t2 = time_min(
        [&] {
          return cu::launch_gemm_template(kernels[best].fn, cands[best], p, go, rc.stream) == 0;
        },
        rc.stream);
    const float b2 = time_min([&] { return run_cublaslt(gr, steps, rc, &why); }, rc.stream);
    best_ms = std::min(best_ms, t2);
    ev->cublaslt_ms = std::min(blas_ms, b2);
    detail << "; again: cublaslt " << ms_text(b2) << ", " << cands[best].name() << " "
           << ms_text(t2);
    if (best_ms < ev->cublaslt_ms) chosen = cands[best];
  }
  ev->template_ms = best >= 0 ? best_ms : -1;
  if (best >= 0) ev->best_template = cands[best].name();
  ev->detail = detail.str();
  return chosen;
}

// The disk cache of choices: <cache_dir>/<folder>/<sha256 of key>.txt holding a word (coil/
// backend/common/disk_cache.h's rules): in cuda/gemm "cublaslt" or a template configuration
// name, in cuda/gemm_algorithm cuBLASLt's algorithm index. Warnings are dropped, as the launch
// cache's are: the same folder's were given when the graph's cubins were compiled.
struct ChoiceCache {
  std::vector<std::string> warnings;
  std::optional<backend::DiskCache> cache;
  std::string file;
  ChoiceCache(const CompileOptions& o, const std::string& key, const char* folder) {
    if (o.cache_dir.empty()) return;
    backend::Sha256 h;
    h.update(key);
    file = h.hex() + ".txt";
    cache.emplace(o.cache_dir, folder, &warnings);
    if (!cache->enabled()) cache.reset();
  }
  std::optional<std::string> load_word(const std::string& key) {
    if (!cache) return std::nullopt;
    std::optional<backend::CacheEntry> hit = cache->load(file, key);
    if (!hit) return std::nullopt;
    std::string word;
    std::istringstream(hit->content) >> word;
    return word;
  }
  void evict(const char* why) {
    if (cache) cache->evict(file, why);
  }
  void store_word(const std::string& key, const std::string& word, const std::string& detail) {
    if (cache) cache->store(file, key, word + "\n" + detail + "\n", 0600);
  }
  // Template choices. nullopt: no entry; an engaged nullopt inside: cuBLASLt.
  std::optional<std::optional<cu::GemmTileConfig>> load(const std::string& key) {
    std::optional<std::string> word = load_word(key);
    if (!word) return std::nullopt;
    if (*word == "cublaslt") return std::optional<cu::GemmTileConfig>();
    if (auto c = cu::parse_gemm_config(*word)) return std::optional<cu::GemmTileConfig>(c);
    evict("not a GEMM provider choice");
    return std::nullopt;
  }
  void store(const std::string& key, const std::optional<cu::GemmTileConfig>& c,
             const std::string& detail) {
    store_word(key, c ? c->name() : "cublaslt", detail);
  }
};

// Runs g through the template where it was chosen (or forced) for g's key; false where
// cuBLASLt should run instead.
bool run_gemm_template(const cu::GemmArgs& g, const CudaSteps& steps, const RunContext& rc) {
  const CompileOptions& o = steps.options();
  const bool forced = !o.cuda_gemm_force.empty();
  TemplateState& st = state();
  std::string why;
  std::optional<cu::GemmTemplateProblem> p = cu::gemm_template_plan(g, &why);
  if (!p) {
    if (forced) {
      const std::string key = std::string(dtype_name(g.dtype)) + " b" + std::to_string(g.batch) +
                              " " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                              std::to_string(g.k);
      cu::record_gemm_template_event({key, "cublaslt", "fallback", why});
    }
    return false;
  }
  const std::string key = key_of(g, *p, steps);
  std::optional<cu::GemmTileConfig> config;
  if (forced) {
    config = cu::parse_gemm_config(o.cuda_gemm_force);
    if (!config)
      throw std::runtime_error("coil: option cuda_gemm_force: '" + o.cuda_gemm_force +
                               "' is not a tile configuration (as 128x128x32_w4_s3)");
    // Every forced call is recorded (a test option: the tests check what ran, call by call).
    cu::record_gemm_template_event({key, config->name(), "forced", ""});
  } else {
    bool known = false;
    {
      std::lock_guard<std::mutex> lock(st.mu);
      auto it = st.choice.find(key);
      if ((known = it != st.choice.end())) config = it->second;
    }
    if (!known) {
      if (cu::stream_capturing(rc.stream)) return false;
      std::lock_guard<std::mutex> measuring(st.measure_mu);
      {
        std::lock_guard<std::mutex> lock(st.mu);
        auto it = st.choice.find(key);
        if ((known = it != st.choice.end())) config = it->second;
      }
      if (!known) {
        ChoiceCache cache(o, key, "cuda/gemm");
        cu::GemmTemplateEvent ev{key, "", "", ""};
        if (auto hit = cache.load(key)) {
          config = *hit;
          ev.how = "disk cache";
        } else {
          // A measurement that cannot be made (no memory for the scratch outputs) leaves the
          // product on cuBLASLt for this process, not on disk: a later process may measure.
          try {
            config = measure(g, *p, steps, rc, &ev);
            ev.how = "measured";
            if (ev.cublaslt_ms > 0) cache.store(key, config, ev.detail);
          } catch (const std::exception& e) {
            config = std::nullopt;
            ev.how = "fallback";
            ev.detail = std::string("measurement failed: ") + e.what();
          }
        }
        ev.choice = config ? config->name() : "cublaslt";
        cu::record_gemm_template_event(ev);
        std::lock_guard<std::mutex> lock(st.mu);
        st.choice[key] = config;
      }
    }
    if (!config) return false;
  }
  std::vector<std::string> errors;
  std::vector<LoadedKernel> k = load_kernels({*config}, p->spec, steps, &errors);
  cu::CUresult r = 0;
  if (k[0].fn) r = cu::launch_gemm_template(k[0].fn, *config, *p, g, rc.stream);
  if (k[0].fn && r == 0) return true;
  const std::string reason =
      k[0].fn ? "launch failed: " + cu::Driver::get()->error_text(r) : errors[0];
  cu::record_gemm_template_event({key, "cublaslt", "fallback", config->name() + ": " + reason});
  if (!forced) {
    std::lock_guard<std::mutex> lock(st.mu);
    st.choice[key] = std::nullopt;
  }
  return false;
}

// ---- cuBLASLt's algorithms by measurement (option cuda_gemm_measure).
//
// cuBLASLt's heuristic ranks algorithms by a model of the device; its first is not always the
// fastest for a shape. Per key (device, cuBLASLt version, dtype, sizes, strides, epilogue) the
// first call times the heuristic's first kGemmAlgorithms algorithms on the call's own operands
// and output (every algorithm computes the same product; the last run writes the result), and
// keeps another than the first only where it was faster by kMinAlgorithmGain twice, the
// second time against the first again: a single quick run must not decide. The choice is kept
// in memory and in <cache_dir>/cuda/gemm_algorithm; it is recorded as a GemmTemplateEvent
// (how "algorithm measured" or "algorithm disk cache", choice "cublaslt#i/n"). Nothing is
// measured while the stream captures a CUDA graph.

// What a choice depends on, as numbers: looked up on every product call, so no text is built
// there (algorithm_key spells the same fields, with the device's name and cuBLASLt's version,
// for the disk cache and the events, on a miss only).
using AlgorithmFields = std::array<int64_t, 22>;

AlgorithmFields algorithm_fields(const cu::GemmArgs& g, const CudaSteps& steps) {
  int64_t alpha_bits = 0;
  std::memcpy(&alpha_bits, &g.alpha, sizeof g.alpha);
  return {steps.device().ordinal,
          static_cast<int64_t>(g.dtype),
          g.allow_tf32,
          g.batch,
          g.m,
          g.n,
          g.k,
          g.a.stride0,
          g.a.stride1,
          g.a.batch_stride,
          g.b.stride0,
          g.b.stride1,
          g.b.batch_stride,
          g.c_stride0,
          g.c_stride1,
          g.c_batch_stride,
          g.c_cols,
          g.bias ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(g.bias) % 16) : -1,
          g.activation,
          alpha_bits,
          g.a_zero_padded,
          g.b_zero_padded};
}

struct AlgorithmState {
  std::mutex mu;                          // guards `choice`
  std::map<AlgorithmFields, int> choice;  // -> algorithm index
  std::mutex measure_mu;                  // one measurement at a time
};
AlgorithmState& algorithm_state() {
  static auto* s = new AlgorithmState();
  return *s;
}

constexpr double kMinAlgorithmGain = 0.03;

std::string algorithm_key(const cu::GemmArgs& g, const CudaSteps& steps) {
  std::ostringstream k;
  k << device_label(steps) << " cublaslt " << cu::cublaslt_version() << " " << dtype_name(g.dtype)
    << (g.allow_tf32 ? " tf32" : "") << " b" << g.batch << " " << g.m << "x" << g.n << "x" << g.k
    << " a " << g.a.stride0 << "," << g.a.stride1 << "," << g.a.batch_stride << " b " << g.b.stride0
    << "," << g.b.stride1 << "," << g.b.batch_stride << " c " << g.c_stride0 << "," << g.c_stride1
    << "," << g.c_batch_stride << "," << g.c_cols << " bias "
    << (g.bias ? std::to_string(reinterpret_cast<uintptr_t>(g.bias) % 16) : "none") << " act "
    << g.activation << " alpha " << g.alpha << " pad " << g.a_zero_padded << g.b_zero_padded;
  return k.str();
}

// Times the algorithms on g (its output written each time) and returns the index to keep, or
// -1 where cuBLASLt cannot run g (nothing is cached).
int measure_algorithm(const cu::GemmArgs& g, const CudaSteps& steps, const RunContext& rc,
                      cu::GemmTemplateEvent* ev) {
  std::string why;
  std::vector<float> ms;
  for (int i = 0; i < cu::kGemmAlgorithms; ++i) {
    cu::GemmArgs gi = g;
    gi.algorithm = i;
    if (i > 0 && !run_cublaslt(gi, steps, rc, &why)) break;  // past the heuristic's list
    ms.push_back(time_min([&] { return run_cublaslt(gi, steps, rc, &why); }, rc.stream));
  }
  std::ostringstream detail;
  int best = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    detail << (i ? ", " : "") << "#" << i << " " << ms_text(ms[i]);
    if (ms[i] < ms[best]) best = static_cast<int>(i);
  }
  if (ms.empty() || ms[0] >= 1e30f) {  // the heuristic's first did not run: nothing to keep
    ev->detail = "cuBLASLt could not run the product: " + why;
    ev->choice = "cublaslt";
    return -1;
  }
  ev->cublaslt_ms = ms[0];
  if (best > 0 && ms[best] < (1 - kMinAlgorithmGain) * ms[0]) {
    cu::GemmArgs gb = g, g0 = g;
    gb.algorithm = best;
    const float t0 = time_min([&] { return run_cublaslt(g0, steps, rc, &why); }, rc.stream);
    const float tb = time_min([&] { return run_cublaslt(gb, steps, rc, &why); }, rc.stream);
    detail << "; again: #0 " << ms_text(t0) << ", #" << best << " " << ms_text(tb);
    if (!(tb < (1 - kMinAlgorithmGain) * t0)) best = 0;
  } else {
    best = 0;
  }
  ev->detail = detail.str();
  ev->choice = "cublaslt#" + std::to_string(best) + "/" + std::to_string(ms.size());
  return best;
}

// The algorithm index to run g with (0 where none was measured or measuring is off).
int chosen_algorithm(const cu::GemmArgs& g, const CudaSteps& steps, const RunContext& rc) {
  AlgorithmState& st = algorithm_state();
  const AlgorithmFields fields = algorithm_fields(g, steps);
  auto known = [&]() -> std::optional<int> {
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.choice.find(fields);
    return it == st.choice.end() ? std::nullopt : std::optional<int>(it->second);
  };
  if (std::optional<int> index = known()) return *index;
  if (cu::stream_capturing(rc.stream)) return 0;
  std::lock_guard<std::mutex> measuring(st.measure_mu);
  if (std::optional<int> index = known()) return *index;
  const std::string key = algorithm_key(g, steps);
  ChoiceCache cache(steps.options(), key, "cuda/gemm_algorithm");
  cu::GemmTemplateEvent ev{key, "", "", ""};
  int index = -1;
  if (std::optional<std::string> word = cache.load_word(key)) {
    char* end = nullptr;
    const long v = std::strtol(word->c_str(), &end, 10);
    if (end && *end == 0 && v >= 0 && v < cu::kGemmAlgorithms) {
      index = static_cast<int>(v);
      ev.how = "algorithm disk cache";
      ev.choice = "cublaslt#" + *word;
    } else {
      cache.evict("not an algorithm index");
    }
  }
  if (index < 0) {
    try {
      index = measure_algorithm(g, steps, rc, &ev);
      ev.how = "algorithm measured";
      if (index >= 0) cache.store_word(key, std::to_string(index), ev.detail);
    } catch (const std::exception& e) {
      ev.how = "fallback";
      ev.choice = "cublaslt";
      ev.detail = std::string("algorithm measurement failed: ") + e.what();
    }
  }
  cu::record_gemm_template_event(ev);
  index = std::max(index, 0);
  std::lock_guard<std::mutex> lock(st.mu);
  st.choice[fields] = index;
  return index;
}

}  // namespace

bool run_gemm(const cu::GemmArgs& given, const CudaSteps& steps, const RunContext& rc,
              std::string* why) {
  const CompileOptions& o = steps.options();
  cu::GemmArgs g = given;
  if (o.cuda_gemm_measure && g.m > 0 && g.n > 0) g.algorithm = chosen_algorithm(g, steps, rc);
  if ((o.cuda_gemm_templates || !o.cuda_gemm_force.empty()) && run_gemm_template(g, steps, rc))
    return true;
  if (run_cublaslt(g, steps, rc, why)) return true;
  if (g.algorithm == 0) return false;
  g.algorithm = 0;  // a cached index the heuristic no longer offers
  return run_cublaslt(g, steps, rc, why);
}

}  // namespace coil::runtime::detail
