// Greedy fusion of ComputeNodes into kernels (see schedule.h for the kernel model).
//
// Steps are visited in program order. A ComputeNode first tries to join a kernel that produces
// one of its inputs (vertical), best saving first, then a kernel with the same outer iteration
// space that reads one of its inputs (horizontal); otherwise it starts a kernel. Every decision
// is logged.
#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>
#include <set>
#include <sstream>

#include "coil/support/error.h"
#include "sched_internal.h"

namespace coil::sched::detail {
namespace {

// Buffers one kernel may read and write, at most (Fuser::too_many_buffers).
constexpr int kMaxKernelBuffers = 96;

using loop::BufferId;
using loop::ComputeNode;

struct Group {
  bool is_kernel = true;
  std::vector<int> steps;
  std::set<loop::BufferId> buffers;  // storage roots the steps read or write
  std::vector<sym::Expr> outer;
  std::string name;
};

class Fuser {
 public:
  Fuser(const loop::LoopProgram& p, const std::vector<StepDeps>& deps,
        const CompileOptions& options, const backend::SchedulePolicy& policy)
      : p_(p), ctx_(*p.ctx), deps_(deps), options_(options), policy_(policy) {
    producer_ = buffer_producers(p, deps);
    step_group_.assign(p.steps.size(), -1);
    // The prefix starts every kernel's name, a C identifier in the generated code.
    for (char c : options.kernel_prefix)
      COIL_USER_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_')
          << "kernel_prefix must be letters, digits and '_', got '" << options.kernel_prefix << "'";
  }

  void run(Schedule& out) {
    for (size_t s = 0; s < p_.steps.size(); ++s) {
      if (const auto* n = std::get_if<ComputeNode>(&p_.steps[s])) {
        place_node(static_cast<int>(s), *n);
      } else {
        const auto& e = std::get<loop::ExternNode>(p_.steps[s]);
        Group g;
        g.is_kernel = false;
        g.steps = {static_cast<int>(s)};
        g.name = "extern " + std::string(loop::extern_kind_name(e.kind)) + " (step " +
                 std::to_string(s) + ")";
        add_group(std::move(g));
      }
    }
    // Kernels in creation order.
    std::vector<int> kernel_of_group(groups_.size(), -1);
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (!groups_[g].is_kernel) continue;
      kernel_of_group[g] = static_cast<int>(out.kernels.size());
      KernelPlan k;
      k.name = groups_[g].name;
      k.steps = groups_[g].steps;
      k.outer_ranges = groups_[g].outer;
      out.kernels.push_back(std::move(k));
    }
    // Execution order: topological over group dependencies, earliest first step first.
    size_t n = groups_.size();
    std::vector<std::set<int>> gdeps(n);
    std::vector<int> indeg(n, 0);
    std::vector<std::vector<int>> users(n);
    for (size_t g = 0; g < n; ++g) {
      gdeps[g] = group_deps(static_cast<int>(g));
      indeg[g] = static_cast<int>(gdeps[g].size());
      for (int d : gdeps[g]) users[d].push_back(static_cast<int>(g));
    }
    std::set<std::pair<int, int>> ready;  // (first step, group)
    for (size_t g = 0; g < n; ++g) {
      if (indeg[g] == 0) ready.insert({groups_[g].steps.front(), static_cast<int>(g)});
    }
    while (!ready.empty()) {
      int g = ready.begin()->second;
      ready.erase(ready.begin());
      if (groups_[g].is_kernel) {
        out.order.push_back({ScheduledStep::Kind::Kernel, kernel_of_group[g]});
      } else {
        out.order.push_back({ScheduledStep::Kind::Extern, groups_[g].steps.front()});
      }
      for (int u : users[g]) {
        if (--indeg[u] == 0) ready.insert({groups_[u].steps.front(), u});
      }
    }
    COIL_CHECK(out.order.size() == n) << "cycle among scheduled groups";
    out.fusion_log = log_.str();
  }

 private:
  int add_group(Group g) {
    int id = static_cast<int>(groups_.size());
    for (int s : g.steps) {
      step_group_[s] = id;
      add_buffers(g.buffers, s);
    }
    groups_.push_back(std::move(g));
    return id;
  }

  const std::string& out_name(int step) const {
    return p_.buffer(std::get<ComputeNode>(p_.steps[step]).out).name;
  }

  // Groups whose outputs group g reads (excluding g), and for a group that writes a graph
  // input, the groups that read that input (they must run before the write).
  std::set<int> group_deps(int g) const {
    std::set<int> out;
    for (int s : groups_[g].steps) {
      for (BufferId r : deps_[s].read_roots) {
        int ps = producer_[r];
        if (ps < 0) continue;
        int pg = step_group_[ps];
        if (pg >= 0 && pg != g) out.insert(pg);
      }
      const BufferId in = mutated_input(p_, s);
      if (in < 0) continue;
      for (int t : input_readers(in)) {
        const int tg = step_group_[t];
        if (t != s && tg >= 0 && tg != g) out.insert(tg);
      }
    }
    return out;
  }

  // Steps that read graph input `in` (any view of it).
  std::vector<int> input_readers(BufferId in) const {
    std::vector<int> out;
    for (size_t t = 0; t < deps_.size(); ++t) {
      const auto& rr = deps_[t].read_roots;
      if (std::find(rr.begin(), rr.end(), in) != rr.end()) out.push_back(static_cast<int>(t));
    }
    return out;
  }

  // Why step s, which writes graph input `in`, cannot join group g (outer ranges `outer`);
  // empty if it can. The other readers of the input must all be members of g that read, one
  // element per outer point, the element s writes at that point; s itself must also be one
  // element per outer point (members with inner loops may spread an outer point's elements
  // over threads differently). The write then follows every read of its element.
  std::string mutation_hazard(int s, const ComputeNode& n, BufferId in, int g,
                              const std::vector<sym::Expr>& outer) const {
    const loop::Buffer& out = p_.buffer(n.out);
    for (int t : input_readers(in)) {
      if (t == s) continue;
      if (step_group_[t] != g) {
        return "writes input " + p_.buffer(in).name + ", read outside the kernel (step " +
               std::to_string(t) + ")";
      }
      const auto& r = std::get<ComputeNode>(p_.steps[t]);
      if (n.ranges.size() != outer.size() || r.ranges.size() != outer.size()) {
        return "writes input " + p_.buffer(in).name + " with inner loops in the kernel";
      }
      for (const Read& rd : deps_[t].reads) {
        if (storage_root(p_, rd.buffer) != in) continue;
        const loop::Buffer& B = p_.buffer(rd.buffer);
        bool same = B.strides == out.strides && B.offset == out.offset;
        for (size_t d = 0; same && d < n.store_index.size(); ++d) {
          sym::Expr want = n.store_index[d];
          for (size_t j = 0; j < n.index_vars.size(); ++j)
            if (want == n.index_vars[j]) want = r.index_vars.at(j);
          same = rd.load->index.at(d) == want;
        }
        if (!same) {
          return "writes input " + p_.buffer(in).name + " that step " + std::to_string(t) +
                 " reads at another element";
        }
      }
    }
    return "";
  }

  // A group other than `target` that `start` (less `target`) reaches through dependencies and
  // that depends on `target` itself, or -1 where none does. One walk over the groups: the
  // check that ran a walk per ancestor took 1.5 s of ResNet-50's forward graph at batch 64.
  int path_to_group(const std::set<int>& start, int target) const {
    std::vector<bool> seen(groups_.size(), false);
    std::vector<int> stack;
    for (int a : start)
      if (a != target) stack.push_back(a);
    while (!stack.empty()) {
      const int a = stack.back();
      stack.pop_back();
      if (seen[a]) continue;
      seen[a] = true;
      for (int d : group_deps(a)) {
        if (d == target) return a;
        stack.push_back(d);
      }
    }
    return -1;
  }

  // Groups producing the buffers step s reads.
  std::set<int> step_producer_groups(int s) const {
    std::set<int> out;
    for (BufferId r : deps_[s].read_roots) {
      int ps = producer_[r];
      if (ps >= 0 && step_group_[ps] >= 0) out.insert(step_group_[ps]);
    }
    return out;
  }

  bool ranges_eq(sym::Expr a, sym::Expr b) const { return a == b || ctx_.provably_eq(a, b); }

  // Node fits a kernel with outer ranges `outer`.
  bool compatible(const std::vector<sym::Expr>& outer, const ComputeNode& n) const {
    if (n.is_reduction() ? n.ranges.size() != outer.size() : n.ranges.size() < outer.size()) {
      return false;
    }
    for (size_t i = 0; i < outer.size(); ++i) {
      if (!ranges_eq(outer[i], n.ranges[i])) return false;
    }
    return true;
  }

  std::optional<std::vector<sym::Expr>> merged_outer(const Group& g, const ComputeNode& n) const {
    if (compatible(g.outer, n)) return g.outer;
    // The node's ranges may be a shorter prefix: the kernel's outer space shrinks to them.
    if (n.ranges.size() < g.outer.size()) {
      std::vector<sym::Expr> o = n.ranges;
      for (size_t i = 0; i < o.size(); ++i) {
        if (!ranges_eq(o[i], g.outer[i])) return std::nullopt;
      }
      for (int s : g.steps) {
        if (!compatible(o, std::get<ComputeNode>(p_.steps[s]))) return std::nullopt;
      }
      return o;
    }
    return std::nullopt;
  }

  std::string index_str(const std::vector<sym::Expr>& index) const {
    return ranges_str(ctx_, index);
  }

  // Why node s cannot join group g; empty if it can. Sets *outer to the kernel's new outer.
  std::string check(int s, const ComputeNode& n, int g, std::vector<sym::Expr>* outer) {
    const Group& grp = groups_[g];
    auto o = merged_outer(grp, n);
    if (!o) {
      return "outer ranges " + ranges_str(ctx_, grp.outer) + " vs " + ranges_str(ctx_, n.ranges);
    }
    if (policy_.unit_stride_inner_loops) {
      for (int m : grp.steps)
        if (std::string why = strided_inner_loops(std::get<ComputeNode>(p_.steps[m]), *o);
            !why.empty())
          return why;
      if (std::string why = strided_inner_loops(n, *o); !why.empty()) return why;
    }
    if (std::string why = serial_work_per_point(grp, n, *o); !why.empty()) return why;
    if (std::string why = too_many_buffers(grp, s); !why.empty()) return why;
    // Cycle: a group that n depends on depends (transitively) on g.
    if (const int a = path_to_group(step_producer_groups(s), g); a >= 0)
      return "would create a cycle through " + groups_[a].name;
    // Reads of buffers produced inside the kernel must be at the same outer point.
    for (const Read& r : deps_[s].reads) {
      BufferId root = storage_root(p_, r.buffer);
      int ps = producer_[root];
      if (ps < 0 || step_group_[ps] != g) continue;
      if (root != r.buffer) {
        return "reads " + p_.buffer(root).name + " through view " + p_.buffer(r.buffer).name;
      }
      const auto& prod = std::get<ComputeNode>(p_.steps[ps]);
      std::vector<int> dims = outer_store_dims(prod, o->size());
      if (dims.empty() && !o->empty()) {
        return p_.buffer(root).name + " is not stored along the outer dims";
      }
      for (size_t j = 0; j < o->size(); ++j) {
        if (r.load->index.at(dims[j]) != n.index_vars.at(j)) {
          return "reads " + p_.buffer(root).name + index_str(r.load->index) +
                 ", not at the kernel's outer point";
        }
      }
    }
    if (const BufferId in = mutated_input(p_, s); in >= 0) {
      if (std::string why = mutation_hazard(s, n, in, g, *o); !why.empty()) return why;
    }
    // An input that a member of g writes is read only outside g (group_deps runs the write
    // after): inside, another thread may have written the element already. Only another
    // input mutation comes after one in program order, so only they meet this.
    for (BufferId r : deps_[s].read_roots) {
      if (p_.buffer(r).kind != loop::BufferKind::Input) continue;
      for (int m : groups_[g].steps) {
        if (m != s && mutated_input(p_, m) == r)
          return "reads input " + p_.buffer(r).name + ", which " + out_name(m) +
                 " in the kernel writes";
      }
    }
    *outer = *o;
    return "";
  }

  // CPU: why pointwise node `n` would store across memory in a kernel with outer ranges
  // `outer` (its inner loops run over dims whose store stride is not 1 while the unit-stride
  // dim is an outer one), or "". A channels-last BatchNorm + activation fused under the
  // per-channel mean that reads it (squeeze-excitation) ran its inner loops at stride C,
  // scalar: EfficientNet-B0's worst kernel. Apart, the pointwise part vectorizes over the
  // channels and the reduction runs as an outer (column) reduction.
  std::string strided_inner_loops(const ComputeNode& n, const std::vector<sym::Expr>& outer) const {
    if (n.is_reduction() || n.ranges.size() <= outer.size()) return "";
    const loop::Buffer& b = p_.buffer(n.out);
    for (size_t d = 0; d < n.store_index.size() && d < b.strides.size(); ++d) {
      if (ctx_.as_const(b.strides[d]) != 1 || ctx_.as_const(b.sizes[d]) == 1) continue;
      for (size_t j = 0; j < outer.size(); ++j) {
        if (n.store_index[d] != n.index_vars[j]) continue;
        return b.name + " is unit-stride along outer dim " + std::to_string(j) +
               ": its inner loops would stride across memory";
      }
    }
    return "";
  }

  // Why node `n` would make group `grp`, with outer ranges `outer`, run too much of it serially
  // at each outer point (SchedulePolicy::max_work_per_outer_point), or "". Only where the
  // kernel's members ran less per point before: a reduction over long rows keeps its
  // epilogue, which adds no more than the rows already take.
  std::string serial_work_per_point(const Group& grp, const ComputeNode& n,
                                    const std::vector<sym::Expr>& outer) const {
    const int64_t limit = policy_.max_work_per_outer_point;
    if (limit <= 0) return "";
    int64_t points = 1;
    for (sym::Expr r : outer) points *= std::max<int64_t>(1, size_hint(ctx_, r));
    const int64_t per_point = work(n) / points;
    if (per_point <= limit) return "";
    for (int m : grp.steps)
      if (work(std::get<ComputeNode>(p_.steps[m])) / points >= per_point) return "";
    return "would run " + std::to_string(per_point) + " elements at each of " +
           std::to_string(points) + " outer points";
  }

  // Why step s would give kernel `grp` more buffers than a kernel takes, or "". A CUDA launch
  // takes at most 4 KiB of parameters (512 pointers); long before that a kernel of many
  // independent members (a backward that rebuilt twelve layers' residuals at its start, 64
  // buffers) is a sign of values computed far from where they are needed.
  std::string too_many_buffers(const Group& grp, int s) const {
    const size_t used = buffers_with(grp, s);
    if (used <= static_cast<size_t>(kMaxKernelBuffers)) return "";
    return "would use " + std::to_string(used) + " buffers (at most " +
           std::to_string(kMaxKernelBuffers) + " a kernel)";
  }

  // Whether a horizontal join of step s (node n) into group g, which reads `shared` bytes of
  // what n reads, would gain too little for what it costs. Where other kernels or extern
  // calls come between g's last step and s, the join computes n ahead of them and holds its
  // output from there on. A node that writes much more than it shares
  // (kHorizontalWritesPerShared times, and at least kHorizontalMinWrite bytes) then stays
  // apart. The attention probabilities recomputed in a backward share only the causal mask's
  // indices with each other (131 KB): joined, all twelve layers' [8, 12, 512, 512]
  // probabilities (1.2 GB) were computed at the backward's start. Logged.
  bool shares_too_little(int s, const ComputeNode& n, sym::Expr shared, int g) {
    const Group& grp = groups_[g];
    const int64_t writes = size_hint(ctx_, buffer_bytes(p_, p_.buffer(n.out)));
    const int64_t sh = size_hint(ctx_, shared);
    if (writes < kHorizontalMinWrite || writes <= kHorizontalWritesPerShared * sh) return false;
    bool ahead = false;
    for (int t = grp.steps.back() + 1; t < s && !ahead; ++t) ahead = step_group_[t] != g;
    if (!ahead) return false;
    log_ << "not fused " << out_name(s) << " into " << grp.name << " (horizontal): shares " << sh
         << " bytes, writes " << writes << " ahead of other work\n";
    return true;
  }
  static constexpr int64_t kHorizontalWritesPerShared = 8;
  static constexpr int64_t kHorizontalMinWrite = int64_t{1} << 20;

  static const char* kind(const ComputeNode& n) {
    return n.is_reduction() ? "reduction" : "pointwise";
  }

  void place_node(int s, const ComputeNode& n) {
    const std::string& name = out_name(s);
    if (options_.fuse) {
      // Vertical candidates: kernels producing what n reads, with the bytes n reads from them.
      struct Cand {
        int group;
        sym::Expr bytes;
        int64_t hint;
        int producer_step;
        int64_t max_single = 0;
      };
      std::vector<Cand> vertical, horizontal;
      for (BufferId r : deps_[s].read_roots) {
        int ps = producer_[r];
        if (ps < 0 || !groups_[step_group_[ps]].is_kernel) continue;
        int g = step_group_[ps];
        sym::Expr b = buffer_bytes(p_, p_.buffer(r));
        auto it = std::find_if(vertical.begin(), vertical.end(),
                               [&](const Cand& c) { return c.group == g; });
        int64_t h = size_hint(ctx_, b);
        if (it == vertical.end()) {
          vertical.push_back({g, b, h, ps, h});
        } else {
          it->bytes = ctx_.add(it->bytes, b);
          it->hint = size_hint(ctx_, it->bytes);
          if (h > it->max_single) {
            it->max_single = h;
            it->producer_step = ps;
          }
        }
      }
      // Horizontal candidates: other kernels reading one of n's inputs.
      for (size_t g = 0; g < groups_.size(); ++g) {
        if (!groups_[g].is_kernel) continue;
        if (std::any_of(vertical.begin(), vertical.end(),
                        [&](const Cand& c) { return c.group == static_cast<int>(g); })) {
          continue;
        }
        sym::Expr shared = nullptr;
        for (BufferId r : deps_[s].read_roots) {
          bool used = false;
          for (int ms : groups_[g].steps) {
            const auto& rr = deps_[ms].read_roots;
            used = used || std::find(rr.begin(), rr.end(), r) != rr.end();
          }
          if (!used) continue;
          sym::Expr b = buffer_bytes(p_, p_.buffer(r));
          shared = shared ? ctx_.add(shared, b) : b;
        }
        if (shared && !shares_too_little(s, n, shared, static_cast<int>(g))) {
          horizontal.push_back(
              {static_cast<int>(g), shared, size_hint(ctx_, shared), groups_[g].steps.back(), 0});
        }
      }
      auto by_score = [](const Cand& a, const Cand& b) {
        return a.hint != b.hint ? a.hint > b.hint : a.group > b.group;
      };
      std::stable_sort(vertical.begin(), vertical.end(), by_score);
      std::stable_sort(horizontal.begin(), horizontal.end(), by_score);
      for (int pass = 0; pass < 2; ++pass) {
        const bool vert = pass == 0;
        for (const Cand& c : vert ? vertical : horizontal) {
          std::vector<sym::Expr> outer;
          std::string why = check(s, n, c.group, &outer);
          Group& g = groups_[c.group];
          if (!why.empty()) {
            log_ << "not fused " << name << " into " << g.name << ": " << why << "\n";
            continue;
          }
          const auto& prod = std::get<ComputeNode>(p_.steps[c.producer_step]);
          log_ << "fused " << name << " into " << g.name << " ("
               << (vert ? "vertical, " : "horizontal, ") << kind(prod) << "+" << kind(n)
               << (vert ? ", saves " : ", shares ") << ctx_.str(c.bytes) << " bytes)\n";
          join(c.group, s, std::move(outer));
          return;
        }
      }
      if (join_small_kernel(s, n, name)) return;
    }
    Group g;
    g.steps = {s};
    g.outer = n.ranges;
    g.name = options_.kernel_prefix + "kernel" + std::to_string(num_kernels_++);
    log_ << name << " starts " << g.name << " over " << ranges_str(ctx_, g.outer)
         << (options_.fuse ? "" : " (fusion disabled)") << "\n";
    add_group(std::move(g));
  }

  // Step s joins group g, whose outer ranges become `outer` (check's).
  void join(int g, int s, std::vector<sym::Expr> outer) {
    groups_[g].outer = std::move(outer);
    groups_[g].steps.push_back(s);
    add_buffers(groups_[g].buffers, s);
    step_group_[s] = g;
  }

  // How many storage roots kernel `grp` would read or write with step s.
  size_t buffers_with(const Group& grp, int s) const {
    std::set<BufferId> step;
    add_buffers(step, s);
    size_t added = 0;
    for (BufferId b : step) added += !grp.buffers.count(b);
    return grp.buffers.size() + added;
  }

  // The storage roots step s reads or writes, into `into`.
  void add_buffers(std::set<BufferId>& into, int s) const {
    into.insert(deps_[s].read_roots.begin(), deps_[s].read_roots.end());
    for (BufferId w : deps_[s].writes) into.insert(storage_root(p_, w));
  }

  // Elements a node iterates over (its ranges and reduction ranges), as a size hint.
  int64_t work(const ComputeNode& n) const {
    int64_t w = 1;
    for (sym::Expr r : n.ranges) w *= std::max<int64_t>(1, size_hint(ctx_, r));
    for (sym::Expr r : n.reduction_ranges) w *= std::max<int64_t>(1, size_hint(ctx_, r));
    return w;
  }

  // A GPU node with nothing to share that is too small to fill the device joins one of the
  // last few kernels over the same outer ranges that is as small: its time is the launch, so
  // two launches become one (a BatchNorm's mean and variance, finalized from their partial
  // sums, read no common input). The CPU keeps them apart (a parallel region costs far less
  // than a launch). Returns whether it joined.
  bool join_small_kernel(int s, const ComputeNode& n, const std::string& name) {
    if (!policy_.join_small_kernels || work(n) > kSmallKernelWork) return false;
    int looked = 0;
    for (int g = static_cast<int>(groups_.size()) - 1; g >= 0 && looked < kSmallKernelLookBack;
         --g) {
      Group& grp = groups_[g];
      if (!grp.is_kernel) continue;
      ++looked;
      if (grp.outer.size() != n.ranges.size()) continue;
      bool small = true;
      for (int st : grp.steps)
        small = small && work(std::get<ComputeNode>(p_.steps[st])) <= kSmallKernelWork;
      // About the kernel's pointer parameters.
      if (!small || buffers_with(grp, s) > kSmallKernelMaxBuffers) continue;
      std::vector<sym::Expr> outer;
      if (const std::string why = check(s, n, g, &outer); !why.empty()) {
        log_ << "not fused " << name << " into " << grp.name << " (small): " << why << "\n";
        continue;
      }
      log_ << "fused " << name << " into " << grp.name << " (small, " << work(n)
           << " elements: one launch)\n";
      join(g, s, std::move(outer));
      return true;
    }
    return false;
  }
  static constexpr int64_t kSmallKernelWork = int64_t{1} << 16;
  static constexpr int kSmallKernelLookBack = 8;
  // Joined kernels stay well under the runtime's 64 pointer parameters (ResNet-50's 53
  // BatchNorm counters joined into one kernel needed 106).
  static constexpr size_t kSmallKernelMaxBuffers = 16;

  const loop::LoopProgram& p_;
  sym::Context& ctx_;
  const std::vector<StepDeps>& deps_;
  const CompileOptions& options_;
  std::vector<int> producer_;
  std::vector<int> step_group_;
  std::vector<Group> groups_;
  int num_kernels_ = 0;
  const backend::SchedulePolicy& policy_;  // the backend's fusion choices
  std::ostringstream log_;
};

}  // namespace

void fuse_program(const loop::LoopProgram& p, const std::vector<StepDeps>& deps,
                  const CompileOptions& options, const backend::SchedulePolicy& policy,
                  Schedule& out) {
  Fuser(p, deps, options, policy).run(out);
}

void find_locals(const loop::LoopProgram& p, const std::vector<StepDeps>& deps, Schedule& s) {
  std::vector<int> kernel_of_step(p.steps.size(), -1);
  for (size_t k = 0; k < s.kernels.size(); ++k) {
    for (int st : s.kernels[k].steps) kernel_of_step[st] = static_cast<int>(k);
  }
  std::vector<bool> is_output(p.buffers.size(), false);
  for (BufferId o : p.outputs) is_output[storage_root(p, o)] = true;
  // Buffers that some View aliases (used or not) stay materialized.
  std::vector<bool> has_view(p.buffers.size(), false);
  for (const loop::Buffer& b : p.buffers) {
    if (b.kind == loop::BufferKind::View) has_view[storage_root(p, b.id)] = true;
  }
  for (size_t k = 0; k < s.kernels.size(); ++k) {
    KernelPlan& kp = s.kernels[k];
    for (int st : kp.steps) {
      const auto& n = std::get<ComputeNode>(p.steps[st]);
      BufferId b = n.out;
      if (is_output[b] || has_view[b] || p.buffer(b).kind != loop::BufferKind::Intermediate) {
        continue;
      }
      // One element per outer point: the node has no inner pointwise dims.
      if (n.ranges.size() != kp.outer_ranges.size()) continue;
      std::vector<int> dims = outer_store_dims(n, n.ranges.size());
      if (dims.size() != n.ranges.size()) continue;
      bool other_dims_unit = true;
      for (size_t d = 0; d < p.buffer(b).sizes.size(); ++d) {
        if (std::find(dims.begin(), dims.end(), static_cast<int>(d)) != dims.end()) continue;
        other_dims_unit = other_dims_unit && p.ctx->as_const(p.buffer(b).sizes[d]) == 1;
      }
      if (!other_dims_unit) continue;
      bool ok = true;
      bool read = false;
      for (size_t t = 0; t < p.steps.size() && ok; ++t) {
        for (const Read& r : deps[t].reads) {
          if (storage_root(p, r.buffer) != b) continue;
          read = true;
          // Readers are later members of this kernel (fusion checked the outer point).
          if (kernel_of_step[t] != static_cast<int>(k) || r.buffer != b ||
              static_cast<int>(t) <= st) {
            ok = false;
          }
        }
      }
      if (ok && read) kp.local_buffers.push_back(b);
    }
  }
}

}  // namespace coil::sched::detail
