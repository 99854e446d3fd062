// Memory-aware execution order: the fused kernels and extern calls are re-listed so that fewer
// intermediate buffers are alive at once. Program order computes every projection of an
// attention block (q, k, v) before q @ k^T frees anything; running v after the scores' matmul
// and softmax keeps one 32 MiB buffer fewer alive (bench/gpu.py's attention case).
//
// The order must keep every hazard of the current one: for each storage (views resolved), a
// reader stays after the writer before it, a writer after the readers and the writer before
// it; every step that touches the random-number state keeps its place among those that do.
// Among the steps whose hazards are all satisfied, the greedy pick is the one that adds the
// fewest bytes (its new outputs less the storages it is the last to touch), the earlier in
// the current order on ties. Bytes are size hints (symbols take a hint value). The new order
// is kept only where its simulated peak is lower than the current one's, so this never makes
// the plan worse by the same measure; the decision goes to the fusion log.
#include <algorithm>
#include <set>

#include "coil/support/error.h"
#include "sched_internal.h"

namespace coil::sched::detail {

using loop::BufferId;

namespace {

struct StepAccess {
  std::vector<BufferId> writes;  // storage roots first written or rewritten here
  std::vector<BufferId> roots;   // every storage root touched (reads and writes), unique
};

// Peak of live intermediate bytes when the steps run in `order` (indices into `acc`).
int64_t simulate_peak(const std::vector<StepAccess>& acc, const std::vector<int>& order,
                      const std::vector<int64_t>& bytes, const std::vector<bool>& pinned,
                      const std::vector<int>& accesses) {
  std::vector<int> left = accesses;
  std::vector<bool> allocated(bytes.size(), false);
  int64_t live = 0, peak = 0;
  for (int t : order) {
    for (BufferId r : acc[t].writes) {
      if (bytes[r] > 0 && !allocated[r]) {
        allocated[r] = true;
        live += bytes[r];
      }
    }
    peak = std::max(peak, live);
    for (BufferId r : acc[t].roots) {
      if (--left[r] == 0 && allocated[r] && !pinned[r]) live -= bytes[r];
    }
  }
  return peak;
}

}  // namespace

void order_for_memory(const loop::LoopProgram& p, const std::vector<StepDeps>& deps, Schedule& s) {
  const size_t n = s.order.size();
  if (n < 3) return;
  const size_t nb = p.buffers.size();
  std::vector<bool> local(nb, false);
  for (const KernelPlan& k : s.kernels)
    for (BufferId b : k.local_buffers) local[b] = true;
  std::vector<bool> pinned(nb, false);
  for (BufferId o : p.outputs) pinned[storage_root(p, o)] = true;
  const BufferId rng = p.rng_state >= 0 ? storage_root(p, p.rng_state) : -1;

  // What each scheduled step touches, by storage root.
  std::vector<StepAccess> acc(n);
  std::vector<std::vector<BufferId>> reads(n);
  for (size_t t = 0; t < n; ++t) {
    std::vector<int> steps;
    if (s.order[t].kind == ScheduledStep::Kind::Kernel)
      steps = s.kernels.at(s.order[t].index).steps;
    else
      steps = {s.order[t].index};
    auto add = [](std::vector<BufferId>& v, BufferId b) {
      if (std::find(v.begin(), v.end(), b) == v.end()) v.push_back(b);
    };
    for (int st : steps) {
      for (BufferId w : deps[st].writes) {
        if (local[w]) continue;
        const BufferId r = storage_root(p, w);
        add(acc[t].writes, r);
        add(acc[t].roots, r);
      }
      for (BufferId r : deps[st].read_roots) {
        if (local[r]) continue;
        add(r == rng ? acc[t].writes : reads[t], r);  // the random state: an ordered resource
        add(acc[t].roots, r);
      }
    }
  }

  // Hazards of the current order, per storage root.
  std::vector<std::set<int>> preds(n);
  {
    std::vector<int> last_writer(nb, -1);
    std::vector<std::vector<int>> readers_since(nb);
    for (size_t t = 0; t < n; ++t) {
      const int ti = static_cast<int>(t);
      for (BufferId r : reads[t]) {
        if (last_writer[r] >= 0 && last_writer[r] != ti) preds[t].insert(last_writer[r]);
        readers_since[r].push_back(ti);
      }
      for (BufferId r : acc[t].writes) {
        if (last_writer[r] >= 0 && last_writer[r] != ti) preds[t].insert(last_writer[r]);
        for (int q : readers_since[r])
          if (q != ti) preds[t].insert(q);
        readers_since[r].clear();
        last_writer[r] = ti;
      }
    }
  }

  // Bytes of the storages the memory plan allocates (materialized intermediates).
  std::vector<int64_t> bytes(nb, 0);
  std::vector<int> accesses(nb, 0);
  for (size_t t = 0; t < n; ++t) {
    for (BufferId r : acc[t].roots) {
      ++accesses[r];
      if (p.buffer(r).kind == loop::BufferKind::Intermediate && !local[r])
        bytes[r] = size_hint(*p.ctx, buffer_bytes(p, p.buffer(r)));
    }
  }

  // Greedy list scheduling.
  std::vector<int> waiting(n);
  std::vector<std::vector<int>> succs(n);
  for (size_t t = 0; t < n; ++t) {
    waiting[t] = static_cast<int>(preds[t].size());
    for (int q : preds[t]) succs[q].push_back(static_cast<int>(t));
  }
  std::set<int> ready;
  for (size_t t = 0; t < n; ++t)
    if (waiting[t] == 0) ready.insert(static_cast<int>(t));
  std::vector<int> left = accesses;
  std::vector<bool> allocated(nb, false);
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    int best = -1;
    int64_t best_delta = 0;
    for (int t : ready) {
      int64_t delta = 0;
      for (BufferId r : acc[t].writes)
        if (!allocated[r]) delta += bytes[r];
      for (BufferId r : acc[t].roots)
        if (left[r] == 1 && !pinned[r]) delta -= bytes[r];
      if (best < 0 || delta < best_delta) {
        best = t;
        best_delta = delta;
      }
    }
    ready.erase(best);
    order.push_back(best);
    for (BufferId r : acc[best].writes) allocated[r] = true;
    for (BufferId r : acc[best].roots) --left[r];
    for (int u : succs[best])
      if (--waiting[u] == 0) ready.insert(u);
  }
  COIL_CHECK(order.size() == n) << "cycle among the hazards of the schedule";

  std::vector<int> current(n);
  for (size_t t = 0; t < n; ++t) current[t] = static_cast<int>(t);
  const int64_t before = simulate_peak(acc, current, bytes, pinned, accesses);
  const int64_t after = simulate_peak(acc, order, bytes, pinned, accesses);
  size_t moved = 0;
  for (size_t t = 0; t < n; ++t) moved += order[t] != static_cast<int>(t);
  std::string& log = s.fusion_log;
  if (moved == 0) return;
  if (after >= before) {
    log += "memory order: kept program order (peak of intermediates " + std::to_string(before) +
           " bytes; the memory-aware order " + std::to_string(after) + ")\n";
    return;
  }
  std::vector<ScheduledStep> reordered;
  reordered.reserve(n);
  for (int t : order) reordered.push_back(s.order[t]);
  s.order = std::move(reordered);
  log += "memory order: " + std::to_string(moved) + " of " + std::to_string(n) +
         " steps moved, peak of intermediates " + std::to_string(before) + " -> " +
         std::to_string(after) + " bytes\n";
}

}  // namespace coil::sched::detail
