// Memory planning: one storage per materialized intermediate buffer, allocated before its first
// writer, released after its last reader, and reused for a later buffer of provably equal byte
// size (not for a host op's result that the runtime adopts on the GPU: SchedulePolicy). Graph
// outputs (and the storages their views alias) are never released or reused. Each graph input's
// last reader is recorded too, for runs that may drop inputs early.
#include <algorithm>

#include "coil/support/error.h"
#include "sched_internal.h"

namespace coil::sched::detail {

using loop::BufferId;

MemoryPlan plan_memory(const loop::LoopProgram& p, const std::vector<StepDeps>& deps,
                       const Schedule& s, const backend::SchedulePolicy& policy) {
  const size_t nb = p.buffers.size();
  const size_t nt = s.order.size();
  MemoryPlan m;
  m.buffer_storage.assign(nb, -1);
  m.alloc_before.assign(nt, {});
  m.free_after.assign(nt, {});

  std::vector<bool> local(nb, false);
  for (const KernelPlan& k : s.kernels) {
    for (BufferId b : k.local_buffers) local[b] = true;
  }
  std::vector<bool> pinned(nb, false);
  for (BufferId o : p.outputs) pinned[storage_root(p, o)] = true;
  // A mutated input is written at the end: the run must hold it to the last step.
  for (size_t st = 0; st < p.steps.size(); ++st) {
    if (const BufferId in = mutated_input(p, static_cast<int>(st)); in >= 0) pinned[in] = true;
  }

  std::vector<int> first_write(nb, -1), last_use(nb, -1);
  std::vector<std::vector<BufferId>> writes_at(nt);
  for (size_t t = 0; t < nt; ++t) {
    std::vector<int> steps;
    if (s.order[t].kind == ScheduledStep::Kind::Kernel) {
      steps = s.kernels.at(s.order[t].index).steps;
    } else {
      steps = {s.order[t].index};
    }
    for (int st : steps) {
      for (BufferId b : deps[st].writes) {
        if (local[b] || p.buffer(b).kind != loop::BufferKind::Intermediate) continue;
        if (first_write[b] < 0) {
          first_write[b] = static_cast<int>(t);
          writes_at[t].push_back(b);
        }
        last_use[b] = std::max(last_use[b], static_cast<int>(t));
      }
      for (BufferId r : deps[st].read_roots) {
        if (local[r]) continue;
        last_use[r] = std::max(last_use[r], static_cast<int>(t));
      }
    }
  }

  struct Free {
    int storage;
    int released_after;
  };
  std::vector<Free> pool;
  std::vector<std::vector<BufferId>> release_at(nt);
  for (size_t b = 0; b < nb; ++b) {
    if (first_write[b] >= 0 && !pinned[b]) release_at[last_use[b]].push_back(static_cast<int>(b));
  }
  for (size_t t = 0; t < nt; ++t) {
    for (BufferId b : writes_at[t]) {
      sym::Expr bytes = buffer_bytes(p, p.buffer(b));
      int sid = -1;
      // On the GPU the result of an op the host runs (ATen) comes in its own allocation,
      // which the runtime adopts as the storage; a reused storage would cost a device copy of
      // the result instead (attention's v projection after the scores: a 32 MiB copy), while
      // the caching allocator reuses the freed memory anyway (SchedulePolicy).
      const bool adopted =
          policy.adopt_host_results && s.order[t].kind == ScheduledStep::Kind::Extern &&
          std::get<loop::ExternNode>(p.steps[s.order[t].index]).kind == loop::ExternKind::Fallback;
      if (!pinned[b] && !adopted) {
        auto it = std::find_if(pool.begin(), pool.end(), [&](const Free& f) {
          sym::Expr fb = m.storage_bytes[f.storage];
          return fb == bytes || p.ctx->provably_eq(fb, bytes);
        });
        if (it != pool.end()) {
          sid = it->storage;
          pool.erase(it);
        }
      }
      if (sid < 0) {
        sid = static_cast<int>(m.storage_bytes.size());
        m.storage_bytes.push_back(bytes);
        m.alloc_before[t].push_back(sid);
      }
      m.buffer_storage[b] = sid;
    }
    for (BufferId b : release_at[t]) pool.push_back({m.buffer_storage[b], static_cast<int>(t)});
  }
  for (const Free& f : pool) m.free_after[f.released_after].push_back(f.storage);
  for (BufferId in : p.inputs) {
    const BufferId root = storage_root(p, in);
    m.input_last_read.push_back(pinned[root] ? MemoryPlan::kInputOutlives : last_use[root]);
  }
  for (auto& v : m.free_after) std::sort(v.begin(), v.end());
  return m;
}

}  // namespace coil::sched::detail
