// print_schedule: deterministic text of a Schedule.
//
//   alloc storage0: 512 bytes
//   kernel0 over [8]:
//     step0 buf1 = reduce max [8] over [16] (local)
//     step2 buf3 = pointwise [8, 16] -> storage0
//     step4 buf5 = pointwise [8] -> in2 (input mutation)
//     traffic: reads 512, writes 544 bytes
//   extern mm (step3): buf3, in1 -> buf4 -> storage1
//   free storage0
//   kernels' traffic: reads 512, writes 544 bytes
//   outputs: buf4
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "coil/sched/schedule.h"
#include "sched_internal.h"

namespace coil::sched {

namespace {

struct Traffic {
  int64_t in = 0, out = 0;
  bool hinted = false;  // some size was symbolic: the figures take its hint
};

// A kernel's memory traffic, as numbers (symbolic sizes at their hints): the bytes of every
// buffer it loads that no member writes, and of every buffer it stores that is not
// kernel-local. A load counts what its index can reach: the buffer's extent (a view's own: a
// broadcast per-channel vector is small), or fewer where the index takes only some of its
// node's loop variables (a variance's shift loads one element a row of a large input). Each
// buffer counts once however often it is loaded: a lower bound of what the kernel moves, the
// figure that a profile's kernel time turns into achieved bandwidth.
Traffic kernel_traffic(const loop::LoopProgram& p, const std::vector<detail::StepDeps>& deps,
                       const KernelPlan& k) {
  std::set<loop::BufferId> written;
  for (int st : k.steps) {
    const auto& n = std::get<loop::ComputeNode>(p.steps.at(st));
    written.insert(loop::storage_root(p, n.out));
    if (const loop::BufferId in = detail::mutated_input(p, st); in >= 0) written.insert(in);
  }
  Traffic t;
  auto bytes = [&](loop::BufferId b) {
    const sym::Expr e = detail::buffer_bytes(p, p.buffer(b));
    t.hinted = t.hinted || !p.ctx->as_const(e);
    return detail::size_hint(*p.ctx, e);
  };
  std::map<loop::BufferId, int64_t> reach;  // per buffer read: the most bytes one load reaches
  for (int st : k.steps) {
    const auto& n = std::get<loop::ComputeNode>(p.steps.at(st));
    for (const detail::Read& r : deps.at(st).reads) {
      if (written.count(loop::storage_root(p, r.buffer))) continue;
      if (r.load == nullptr) {  // not from a body: the whole buffer
        reach[r.buffer] = bytes(r.buffer);
        continue;
      }
      int64_t elements = 1;
      auto take = [&](const std::vector<sym::Expr>& vars, const std::vector<sym::Expr>& ranges) {
        for (size_t v = 0; v < vars.size() && v < ranges.size(); ++v)
          for (const sym::Expr& e : r.load->index)
            if (p.ctx->depends_on(e, vars[v])) {
              elements *= std::max<int64_t>(1, detail::size_hint(*p.ctx, ranges[v]));
              break;
            }
      };
      take(n.index_vars, n.ranges);
      take(n.reduction_vars, n.reduction_ranges);
      const int64_t b = std::min(bytes(r.buffer), elements * dtype_size(p.buffer(r.buffer).dtype));
      reach[r.buffer] = std::max(reach[r.buffer], b);
    }
  }
  for (const auto& [b, n] : reach) t.in += n;
  for (int st : k.steps) {
    const auto& n = std::get<loop::ComputeNode>(p.steps.at(st));
    if (std::find(k.local_buffers.begin(), k.local_buffers.end(), n.out) != k.local_buffers.end())
      continue;
    t.out += bytes(n.out);
  }
  return t;
}

}  // namespace

std::string print_schedule(const loop::LoopProgram& program, const Schedule& schedule) {
  const sym::Context& ctx = *program.ctx;
  const MemoryPlan& m = schedule.memory;
  const std::vector<detail::StepDeps> deps = detail::compute_dependencies(program);
  Traffic total;  // over every kernel
  std::ostringstream os;
  auto where = [&](loop::BufferId b) -> std::string {
    if (b < static_cast<int>(m.buffer_storage.size()) && m.buffer_storage[b] >= 0) {
      return " -> storage" + std::to_string(m.buffer_storage[b]);
    }
    return "";
  };
  for (size_t t = 0; t < schedule.order.size(); ++t) {
    if (t < m.alloc_before.size()) {
      for (int sid : m.alloc_before[t]) {
        os << "alloc storage" << sid << ": " << ctx.str(m.storage_bytes.at(sid)) << " bytes\n";
      }
    }
    const ScheduledStep& ss = schedule.order[t];
    if (ss.kind == ScheduledStep::Kind::Kernel) {
      const KernelPlan& k = schedule.kernels.at(ss.index);
      os << k.name << " over " << detail::ranges_str(ctx, k.outer_ranges) << ":\n";
      for (int st : k.steps) {
        const auto& n = std::get<loop::ComputeNode>(program.steps.at(st));
        os << "  step" << st << " " << program.buffer(n.out).name << " = ";
        if (n.is_reduction()) {
          os << "reduce " << loop::reduce_kind_name(n.reduce) << " "
             << detail::ranges_str(ctx, n.ranges) << " over "
             << detail::ranges_str(ctx, n.reduction_ranges);
        } else {
          os << "pointwise " << detail::ranges_str(ctx, n.ranges);
        }
        bool local = std::find(k.local_buffers.begin(), k.local_buffers.end(), n.out) !=
                     k.local_buffers.end();
        const loop::BufferId in = detail::mutated_input(program, st);
        if (in >= 0) {
          os << " -> " << program.buffer(in).name << " (input mutation)\n";
          continue;
        }
        os << (local ? " (local)" : where(n.out)) << "\n";
      }
      const Traffic t = kernel_traffic(program, deps, k);
      const char* about = t.hinted ? "~" : "";
      os << "  traffic: reads " << about << t.in << ", writes " << about << t.out << " bytes\n";
      total.in += t.in;
      total.out += t.out;
      total.hinted = total.hinted || t.hinted;
    } else {
      const auto& e = std::get<loop::ExternNode>(program.steps.at(ss.index));
      os << "extern " << loop::extern_kind_name(e.kind);
      if (!e.op.empty()) os << " " << e.op;
      os << " (step" << ss.index << "):";
      for (size_t i = 0; i < e.inputs.size(); ++i) {
        os << (i ? ", " : " ") << program.buffer(e.inputs[i]).name;
      }
      os << " ->";
      for (size_t i = 0; i < e.outputs.size(); ++i) {
        os << (i ? ", " : " ") << program.buffer(e.outputs[i]).name << where(e.outputs[i]);
      }
      os << "\n";
    }
    if (t < m.free_after.size()) {
      for (int sid : m.free_after[t]) os << "free storage" << sid << "\n";
    }
  }
  if (!schedule.kernels.empty()) {  // a schedule of extern steps alone moves nothing of its own
    const char* about = total.hinted ? "~" : "";  // "~": at the symbols' size hints
    os << "kernels' traffic: reads " << about << total.in << ", writes " << about << total.out
       << " bytes\n";
  }
  os << "outputs:";
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    os << (i ? ", " : " ") << program.buffer(program.outputs[i]).name;
  }
  os << "\n";
  return os.str();
}

}  // namespace coil::sched
