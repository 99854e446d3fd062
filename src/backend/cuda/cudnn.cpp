#include "coil/backend/cuda/cudnn.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "coil/backend/cuda/driver.h"
#include "coil/support/dims_text.h"
#include "dynamic_library.h"

namespace coil::backend::cuda {
namespace {

using Status = int;
using Handle = void*;
using Desc = void*;

// Values of cuDNN's enums (cudnn_graph.h, cuDNN 9; the backend API keeps them stable).
enum : int {
  // cudnnBackendDescriptorType_t
  kConvolutionDesc = 1,
  kEngineDesc = 2,
  kEngineCfgDesc = 3,
  kEngineHeurDesc = 4,
  kExecutionPlanDesc = 5,
  kOpConvForwardDesc = 10,
  kOpConvBackwardFilterDesc = 11,
  kOpConvBackwardDataDesc = 12,
  kOperationGraphDesc = 15,
  kVariantPackDesc = 16,
  kTensorDesc = 17,
  // cudnnBackendAttributeType_t
  kTypeHandle = 0,
  kTypeDataType = 1,
  kTypeInt64 = 3,
  kTypeFloat = 4,
  kTypeVoidPtr = 6,
  kTypeConvolutionMode = 7,
  kTypeHeurMode = 8,
  kTypeNumericalNote = 11,
  kTypeBackendDescriptor = 15,
  kTypeBehaviorNote = 19,
  // cudnnBackendAttributeName_t
  kConvCompType = 100,
  kConvMode = 101,
  kConvDilations = 102,
  kConvFilterStrides = 103,
  kConvPostPaddings = 104,
  kConvPrePaddings = 105,
  kConvSpatialDims = 106,
  kHeurMode = 200,
  kHeurOperationGraph = 201,
  kHeurResults = 202,
  kEngineCfgEngine = 300,
  kPlanHandle = 400,
  kPlanEngineConfig = 401,
  kPlanWorkspaceSize = 402,
  kOpConvForwardAlpha = 700,         // then beta, conv desc, W, X, Y
  kOpConvBackwardDataAlpha = 706,    // then beta, conv desc, W, dX, dY
  kOpConvBackwardFilterAlpha = 712,  // then beta, conv desc, dW, X, dY
  kGraphHandle = 800,
  kGraphOps = 801,
  kTensorByteAlignment = 900,
  kTensorDataType = 901,
  kTensorDimensions = 902,
  kTensorStrides = 903,
  kTensorUniqueId = 906,
  kPackUniqueIds = 1000,
  kPackDataPointers = 1001,
  kPackWorkspace = 1003,
  kEngineGlobalIndex = 1301,
  kEngineNumericalNote = 1303,
  kEngineBehaviorNote = 1305,
  // cudnnDataType_t
  kDataFloat = 0,
  kDataHalf = 2,
  kDataBFloat16 = 9,
  // others
  kCrossCorrelation = 1,
  kHeurInstant = 0,
  kHeurFallback = 2,
  kNoteTensorCore = 0,
  kNoteDownConvertInputs = 1,
  kBehaviorRuntimeCompilation = 0,
};

// Engines needing more workspace than this are passed over while another can run the problem.
constexpr int64_t kPreferredMaxWorkspace = int64_t{256} << 20;

struct Api {
  Status (*create)(Handle*);
  Status (*set_stream)(Handle, CUstream);
  size_t (*version)();
  const char* (*error_string)(Status);
  Status (*create_desc)(int type, Desc*);
  Status (*destroy_desc)(Desc);
  Status (*finalize)(Desc);
  Status (*set)(Desc, int name, int type, int64_t count, const void* values);
  Status (*get)(Desc, int name, int type, int64_t requested, int64_t* count, void* values);
  Status (*execute)(Handle, Desc plan, Desc pack);
  std::string why;
};

const Api& api() {
  static const Api* a = [] {
    auto* r = new Api();  // never destroyed (process lifetime, as the library)
    detail::DynamicLibrary lib({"libcudnn.so.9", "libcudnn.so"}, "libcudnn.so.9 not found");
    auto bind = [&](auto& f, const char* name) { lib.bind(f, name); };
    bind(r->create, "cudnnCreate");
    bind(r->set_stream, "cudnnSetStream");
    bind(r->version, "cudnnGetVersion");
    bind(r->error_string, "cudnnGetErrorString");
    bind(r->create_desc, "cudnnBackendCreateDescriptor");
    bind(r->destroy_desc, "cudnnBackendDestroyDescriptor");
    bind(r->finalize, "cudnnBackendFinalize");
    bind(r->set, "cudnnBackendSetAttribute");
    bind(r->get, "cudnnBackendGetAttribute");
    bind(r->execute, "cudnnBackendExecute");
    r->why = lib.why;
    if (r->why.empty() && r->version() < 90000)
      r->why = "cuDNN " + std::to_string(r->version()) + " is older than 9";
    return r;
  }();
  return *a;
}

// Descriptors freed together (the plan's whole graph lives as long as the plan).
struct Descs {
  std::vector<Desc> all;
  ~Descs() {
    for (auto it = all.rbegin(); it != all.rend(); ++it) api().destroy_desc(*it);
  }
  Desc make(int type) {
    Desc d = nullptr;
    if (api().create_desc(type, &d) != 0) return nullptr;
    all.push_back(d);
    return d;
  }
};

// Engines timed per problem where measuring is on: the heuristics' first few.
constexpr size_t kMaxTimedEngines = 6;

// One engine's finalized execution plan.
struct Candidate {
  Desc plan = nullptr;
  int64_t workspace = 0;
  int64_t engine = -1;  // cuDNN's global engine index (for the event log)
  bool runtime_compiled = false;
};

// The execution plans for one problem, or why there is none. `chosen` is the one that runs:
// -1 until decided (measured, or the heuristics' first where nothing is measured).
struct Plan {
  Descs descs;
  std::vector<Candidate> candidates;
  int chosen = -1;
  double build_ms = 0;  // finalizing the candidates' plans (run-time compilation included)
  std::string why;
};

struct State {
  std::mutex mu;  // guards everything below and the handles' streams while executing
  std::map<CUcontext, Handle> handles;
  std::map<std::vector<int64_t>, std::shared_ptr<Plan>> plans;
  std::vector<ConvEngineChoice> choices;  // the log of measured choices, bounded
};
constexpr size_t kMaxChoices = 4096;

State& state() {
  static State* s = new State();  // never destroyed: plans may be used until process exit
  return *s;
}

int data_type(DType t) {
  switch (t) {
    case DType::Float32:
      return kDataFloat;
    case DType::BFloat16:
      return kDataBFloat16;
    case DType::Float16:
      return kDataHalf;
    default:
      return -1;
  }
}

// Largest power of two up to 16 dividing the address.
int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t r = 16;
  while (r > 1 && a % r != 0) r /= 2;
  return r;
}

// cuDNN convolves 2-d and 3-d; a 1-d problem runs as 2-d with a unit H dim.
ConvTensor as_2d(const ConvTensor& t) {
  if (t.sizes.size() != 3) return t;
  ConvTensor r = t;
  r.sizes.insert(r.sizes.begin() + 2, 1);
  r.strides.insert(r.strides.begin() + 2, t.sizes[2] * t.strides[2]);
  return r;
}

std::string status_text(Status s) {
  const char* t = api().error_string ? api().error_string(s) : nullptr;
  return t ? std::string(t) : "status " + std::to_string(s);
}

// Builds and finalizes the plan for `a` (already 2-d or 3-d) on `handle`.
void build_plan(const ConvArgs& a, Handle handle, Plan& p) {
  const Api& c = api();
  const int64_t nd = static_cast<int64_t>(a.x.sizes.size()) - 2;
  const int type = data_type(a.dtype);
  bool ok = true;
  auto set = [&](Desc d, int name, int t, int64_t n, const void* v) {
    if (ok && c.set(d, name, t, n, v) != 0) ok = false;
  };
  auto tensor = [&](const ConvTensor& t, int64_t uid) {
    Desc d = p.descs.make(kTensorDesc);
    if (!d) return d;
    const int64_t align = alignment(t.data);
    set(d, kTensorDataType, kTypeDataType, 1, &type);
    set(d, kTensorDimensions, kTypeInt64, static_cast<int64_t>(t.sizes.size()), t.sizes.data());
    set(d, kTensorStrides, kTypeInt64, static_cast<int64_t>(t.strides.size()), t.strides.data());
    set(d, kTensorUniqueId, kTypeInt64, 1, &uid);
    set(d, kTensorByteAlignment, kTypeInt64, 1, &align);
    if (ok && c.finalize(d) != 0) ok = false;
    return d;
  };
  Desc x = tensor(a.x, 'x'), w = tensor(a.w, 'w'), y = tensor(a.y, 'y');
  Desc conv = p.descs.make(kConvolutionDesc);
  if (!ok || !x || !w || !y || !conv) {
    p.why = "cuDNN rejected the tensor descriptors";
    return;
  }
  const int comp = kDataFloat, mode = kCrossCorrelation;
  set(conv, kConvCompType, kTypeDataType, 1, &comp);
  set(conv, kConvMode, kTypeConvolutionMode, 1, &mode);
  set(conv, kConvSpatialDims, kTypeInt64, 1, &nd);
  set(conv, kConvDilations, kTypeInt64, nd, a.dilation.data());
  set(conv, kConvFilterStrides, kTypeInt64, nd, a.stride.data());
  set(conv, kConvPrePaddings, kTypeInt64, nd, a.padding.data());
  set(conv, kConvPostPaddings, kTypeInt64, nd, a.padding.data());
  if (ok && c.finalize(conv) != 0) ok = false;
  if (!ok) {
    p.why = "cuDNN rejected the convolution descriptor";
    return;
  }
  int op_type = kOpConvForwardDesc, first = kOpConvForwardAlpha;
  Desc operands[3] = {w, x, y};  // the three descriptor attributes after alpha, beta, conv
  if (a.pass == ConvPass::BackwardData) {
    op_type = kOpConvBackwardDataDesc;
    first = kOpConvBackwardDataAlpha;
  } else if (a.pass == ConvPass::BackwardFilter) {
    op_type = kOpConvBackwardFilterDesc;
    first = kOpConvBackwardFilterAlpha;
  }
  Desc op = p.descs.make(op_type);
  const float alpha = 1.0f, beta = 0.0f;
  if (!op) ok = false;
  set(op, first, kTypeFloat, 1, &alpha);
  set(op, first + 1, kTypeFloat, 1, &beta);
  set(op, first + 2, kTypeBackendDescriptor, 1, &conv);
  for (int i = 0; i < 3; ++i) set(op, first + 3 + i, kTypeBackendDescriptor, 1, &operands[i]);
  if (ok && c.finalize(op) != 0) ok = false;
  Desc graph = p.descs.make(kOperationGraphDesc);
  if (!graph) ok = false;
  set(graph, kGraphHandle, kTypeHandle, 1, &handle);
  set(graph, kGraphOps, kTypeBackendDescriptor, 1, &op);
  Status st = ok ? c.finalize(graph) : -1;
  if (st != 0) {
    p.why = "cuDNN has no operation graph for this convolution" +
            (st > 0 ? " (" + status_text(st) + ")" : std::string());
    return;
  }
  // Candidates from the heuristics, then from the fallback list.
  std::vector<Desc> configs;
  for (int mode_value : {kHeurInstant, kHeurFallback}) {
    Desc heur = p.descs.make(kEngineHeurDesc);
    if (!heur) continue;
    if (c.set(heur, kHeurOperationGraph, kTypeBackendDescriptor, 1, &graph) != 0 ||
        c.set(heur, kHeurMode, kTypeHeurMode, 1, &mode_value) != 0 || c.finalize(heur) != 0)
      continue;
    int64_t count = 0;
    if (c.get(heur, kHeurResults, kTypeBackendDescriptor, 0, &count, nullptr) != 0 || count <= 0)
      continue;
    std::vector<Desc> got(static_cast<size_t>(count));
    for (Desc& d : got) d = p.descs.make(kEngineCfgDesc);
    if (std::find(got.begin(), got.end(), nullptr) != got.end()) continue;
    int64_t n = 0;
    if (c.get(heur, kHeurResults, kTypeBackendDescriptor, count, &n, got.data()) != 0) continue;
    configs.insert(configs.end(), got.begin(), got.begin() + std::min(n, count));
  }
  // Notes of each configuration's engine: which PyTorch would reject, which compile at run time.
  struct Config {
    Desc config;
    bool runtime_compiled;
    int64_t engine;
  };
  std::vector<Config> usable;
  for (Desc cfg : configs) {
    Desc engine = p.descs.make(kEngineDesc);
    int64_t n = 0;
    if (!engine || c.get(cfg, kEngineCfgEngine, kTypeBackendDescriptor, 1, &n, &engine) != 0)
      continue;
    int notes[32] = {}, behaviors[32] = {};
    int64_t n_notes = 0, n_behaviors = 0, index = -1;
    if (c.get(engine, kEngineNumericalNote, kTypeNumericalNote, 32, &n_notes, notes) != 0)
      n_notes = 0;
    if (c.get(engine, kEngineBehaviorNote, kTypeBehaviorNote, 32, &n_behaviors, behaviors) != 0)
      n_behaviors = 0;
    if (c.get(engine, kEngineGlobalIndex, kTypeInt64, 1, &n, &index) != 0) index = -1;
    bool rejected = false, runtime_compiled = false;
    for (int64_t i = 0; i < std::min<int64_t>(n_notes, 32); ++i) {
      if (notes[i] == kNoteDownConvertInputs && a.dtype == DType::Float32) rejected = true;
      if (notes[i] == kNoteTensorCore && a.dtype == DType::Float32 && !a.allow_tf32)
        rejected = true;
    }
    for (int64_t i = 0; i < std::min<int64_t>(n_behaviors, 32); ++i)
      if (behaviors[i] == kBehaviorRuntimeCompilation) runtime_compiled = true;
    if (!rejected) usable.push_back({cfg, runtime_compiled, index});
  }
  // In the heuristics' order, up to kMaxTimedEngines of them within the preferred workspace
  // (one engine can appear twice: once per heuristics mode); failing that, the first that
  // finalizes with any workspace. Engines that cuDNN compiles at run time are taken as PyTorch
  // takes them (MobileNetV2's depthwise layers run ~20x faster on one than on the best
  // precompiled engine), but at most one per problem: each costs ~0.5 s of NVRTC.
  const size_t wanted = a.measure ? kMaxTimedEngines : 1;
  for (int round = 0; round < 2 && p.candidates.empty(); ++round) {
    bool compiled_one = false;
    for (const Config& cand : usable) {
      if (p.candidates.size() >= wanted) break;
      if (cand.runtime_compiled && compiled_one) continue;
      bool seen = false;
      for (const Candidate& have : p.candidates) seen = seen || have.engine == cand.engine;
      if (seen && cand.engine >= 0) continue;
      Desc plan = nullptr;
      if (c.create_desc(kExecutionPlanDesc, &plan) != 0) continue;
      int64_t ws = 0, n = 0;
      bool good = c.set(plan, kPlanHandle, kTypeHandle, 1, &handle) == 0 &&
                  c.set(plan, kPlanEngineConfig, kTypeBackendDescriptor, 1, &cand.config) == 0 &&
                  c.finalize(plan) == 0 &&
                  c.get(plan, kPlanWorkspaceSize, kTypeInt64, 1, &n, &ws) == 0 &&
                  (round == 1 || ws <= kPreferredMaxWorkspace);
      if (!good) {
        c.destroy_desc(plan);
        continue;
      }
      p.descs.all.push_back(plan);
      p.candidates.push_back({plan, ws, cand.engine, cand.runtime_compiled});
      compiled_one = compiled_one || cand.runtime_compiled;
      if (round == 1) break;
    }
  }
  if (p.candidates.empty())
    p.why =
        "no cuDNN engine runs this convolution (" + std::to_string(configs.size()) + " candidates)";
  else if (!a.measure)
    p.chosen = 0;
}

// cuDNN reads a layout from the strides, size-1 dims included, although their strides never
// address anything: a depthwise weight [C, 1, 3, 3] of strides (9, 9, 3, 1) reads as NCHW next
// to an NHWC input, and such a mix gets a generic grouped engine (350 us where the NHWC one
// takes 22 us for MobileNetV2's layers). The strides of size-1 dims are set as if each tensor
// were dense in the input's layout (as PyTorch does before its cuDNN calls).
void unit_dims_in_layout(ConvTensor& t, bool channels_last) {
  const int rank = static_cast<int>(t.sizes.size());
  std::vector<int> inner_first;
  if (channels_last) inner_first.push_back(1);
  for (int d = rank - 1; d >= 2; --d) inner_first.push_back(d);
  if (!channels_last) inner_first.push_back(1);
  inner_first.push_back(0);
  int64_t next = 1;
  for (int d : inner_first) {
    if (t.sizes[d] == 1)
      t.strides[d] = next;
    else
      next = std::max(next, t.strides[d] * t.sizes[d]);
  }
}

bool channels_last(const ConvTensor& x) {
  if (x.sizes[1] == 1) return false;
  bool spatial = false;
  for (size_t d = 2; d < x.sizes.size(); ++d) {
    if (x.sizes[d] == 1) continue;
    spatial = true;
    if (x.strides[d] <= x.strides[1]) return false;
  }
  return spatial && x.strides[1] == 1;
}

// "forward x[..]s[..] w[..]s[..] y[..]s[..] bfloat16 stride[..] padding[..] dilation[..]"
std::string problem_text(const ConvArgs& a) {
  static const char* const passes[] = {"forward", "backward_data", "backward_filter"};
  std::string r = passes[static_cast<int>(a.pass)];
  const char* names[] = {" x", " w", " y"};
  const ConvTensor* ts[] = {&a.x, &a.w, &a.y};
  for (int i = 0; i < 3; ++i)
    r += names[i] + dims_text(ts[i]->sizes) + "s" + dims_text(ts[i]->strides);
  r += " " + std::string(dtype_name(a.dtype)) + " stride" + dims_text(a.stride) + " padding" +
       dims_text(a.padding) + " dilation" + dims_text(a.dilation);
  return r;
}

// Times each candidate on the call's own operands (every pass writes only its output, which
// the chosen plan then writes again) and returns the fastest, or -1 where none ran.
int fastest(const Api& c, const Driver& d, Handle handle, const Plan& plan, Desc pack,
            CUstream stream, std::vector<float>& ms_each) {
  constexpr int kReps = 3;
  ms_each.assign(plan.candidates.size(), -1.0f);
  int best = -1;
  float best_ms = 0;
  CUevent start = nullptr, end = nullptr;
  d.check_run(d.cuEventCreate(&start, 0), "cuEventCreate");
  d.check_run(d.cuEventCreate(&end, 0), "cuEventCreate");
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    if (c.execute(handle, plan.candidates[i].plan, pack) != 0) continue;  // warm-up
    d.cuEventRecord(start, stream);
    bool ran = true;
    for (int r = 0; r < kReps && ran; ++r)
      ran = c.execute(handle, plan.candidates[i].plan, pack) == 0;
    d.cuEventRecord(end, stream);
    d.check_run(d.cuEventSynchronize(end), "cuEventSynchronize (cuDNN engine measurement)");
    float ms = 0;
    if (!ran || d.cuEventElapsedTime(&ms, start, end) != 0) continue;
    ms /= kReps;
    ms_each[i] = ms;
    if (best < 0 || ms < best_ms) {
      best = static_cast<int>(i);
      best_ms = ms;
    }
  }
  d.cuEventDestroy(start);
  d.cuEventDestroy(end);
  return best;
}

}  // namespace

std::string cudnn_unavailable_reason() { return api().why; }

bool convolution(const ConvArgs& args, void* stream, const WorkspaceFn& workspace,
                 std::string* why) {
  const Api& c = api();
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (!c.why.empty()) return fail(c.why);
  if (data_type(args.dtype) < 0) return fail("dtype " + std::string(dtype_name(args.dtype)));
  const size_t rank = args.x.sizes.size();
  if (rank < 3 || rank > 5 || args.w.sizes.size() != rank || args.y.sizes.size() != rank ||
      args.x.strides.size() != rank || args.w.strides.size() != rank ||
      args.y.strides.size() != rank || args.stride.size() != rank - 2 ||
      args.padding.size() != rank - 2 || args.dilation.size() != rank - 2)
    return fail("convolution ranks");
  for (const ConvTensor* t : {&args.x, &args.w, &args.y})
    for (int64_t s : t->sizes)
      if (s == 0) return fail("an empty tensor");
  ConvArgs a = args;
  if (rank == 3) {
    a.x = as_2d(args.x);
    a.w = as_2d(args.w);
    a.y = as_2d(args.y);
    a.stride.insert(a.stride.begin(), 1);
    a.padding.insert(a.padding.begin(), 0);
    a.dilation.insert(a.dilation.begin(), 1);
  }
  const bool nhwc = channels_last(a.x);
  for (ConvTensor* t : {&a.x, &a.w, &a.y}) unit_dims_in_layout(*t, nhwc);
  const Driver* d = Driver::get(why);
  if (!d) return false;
  CUcontext ctx = nullptr;
  if (d->cuCtxGetCurrent(&ctx) != 0 || !ctx) return fail("no current CUDA context");

  // The problem's key: everything the plan depends on.
  std::vector<int64_t> key = {reinterpret_cast<int64_t>(ctx), static_cast<int64_t>(a.pass),
                              static_cast<int64_t>(a.dtype), a.allow_tf32 ? 1 : 0,
                              a.measure ? 1 : 0};
  for (const ConvTensor* t : {&a.x, &a.w, &a.y}) {
    key.insert(key.end(), t->sizes.begin(), t->sizes.end());
    key.insert(key.end(), t->strides.begin(), t->strides.end());
    key.push_back(alignment(t->data));
  }
  for (const auto* v : {&a.stride, &a.padding, &a.dilation})
    key.insert(key.end(), v->begin(), v->end());

  State& s = state();
  std::shared_ptr<Plan> plan;
  Handle handle = nullptr;
  int64_t ws_bytes = 0;  // undecided: room for every candidate's (the measurement runs them all)
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Handle& h = s.handles[ctx];
    if (!h && c.create(&h) != 0) {
      h = nullptr;
      return fail("cudnnCreate failed");
    }
    handle = h;
    auto it = s.plans.find(key);
    if (it == s.plans.end()) {
      auto p = std::make_shared<Plan>();
      const auto t0 = std::chrono::steady_clock::now();
      build_plan(a, handle, *p);
      p->build_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      it = s.plans.emplace(std::move(key), std::move(p)).first;
    }
    plan = it->second;
    if (plan->chosen >= 0)
      ws_bytes = plan->candidates[plan->chosen].workspace;
    else
      for (const Candidate& cand : plan->candidates) ws_bytes = std::max(ws_bytes, cand.workspace);
  }
  if (plan->candidates.empty()) return fail(plan->why);
  void* ws = ws_bytes > 0 ? workspace(static_cast<size_t>(ws_bytes)) : nullptr;
  if (ws_bytes > 0 && !ws) return fail("no memory for cuDNN's workspace");
  int64_t uids[3] = {'x', 'w', 'y'};
  void* ptrs[3] = {a.x.data, a.w.data, a.y.data};
  Desc pack = nullptr;
  if (c.create_desc(kVariantPackDesc, &pack) != 0) return fail("cuDNN: no variant pack");
  Status st = c.set(pack, kPackUniqueIds, kTypeInt64, 3, uids);
  if (st == 0) st = c.set(pack, kPackDataPointers, kTypeVoidPtr, 3, ptrs);
  if (st == 0) st = c.set(pack, kPackWorkspace, kTypeVoidPtr, 1, &ws);
  if (st == 0) st = c.finalize(pack);
  if (st == 0) {
    std::lock_guard<std::mutex> lock(s.mu);  // the handle's stream, then the work on it
    const auto cu_stream = static_cast<CUstream>(stream);
    st = c.set_stream(handle, cu_stream);
    int run = plan->chosen;
    // Measured once, outside any CUDA graph capture (a capture runs the heuristics' first
    // engine and leaves the choice to a later call).
    if (st == 0 && run < 0 && !stream_capturing(stream)) {
      ConvEngineChoice choice;
      choice.problem = problem_text(a);
      run = plan->chosen = plan->candidates.size() == 1
                               ? 0
                               : fastest(c, *d, handle, *plan, pack, cu_stream, choice.ms);
      for (const Candidate& cand : plan->candidates) {
        choice.engines.push_back(cand.engine);
        choice.runtime_compiled.push_back(cand.runtime_compiled);
      }
      choice.build_ms = plan->build_ms;
      choice.chosen = run;
      if (s.choices.size() >= kMaxChoices) s.choices.erase(s.choices.begin());
      s.choices.push_back(std::move(choice));
    }
    if (st == 0) st = c.execute(handle, plan->candidates[std::max(run, 0)].plan, pack);
  }
  c.destroy_desc(pack);
  if (st != 0) throw std::runtime_error("coil: cuDNN convolution failed: " + status_text(st));
  return true;
}

std::vector<ConvEngineChoice> conv_engine_choices() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.choices;
}

}  // namespace coil::backend::cuda
