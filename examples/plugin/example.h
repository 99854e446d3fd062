// The example plugin's pieces (examples/plugin/README.md): one op with its meta function and
// lowering, one graph pass and one backend. plugin.cpp registers them.
#pragma once

#include <memory>
#include <vector>

#include "coil/backend/api/backend.h"
#include "coil/graph/graph.h"
#include "coil/lower/lowering.h"
#include "coil/ops/registry.h"
#include "coil/passes/pass.h"

namespace coil_example {

// coil_example.scaled_softsign.default(Tensor self, float scale) -> Tensor:
// scale * self / (1 + |self|), the op torch.ops.coil_example.scaled_softsign
// (examples/plugin/coil_example.py) defines for PyTorch.
inline constexpr const char* kScaledSoftsign = "coil_example.scaled_softsign.default";
std::vector<coil::TensorMeta> scaled_softsign_meta(coil::sym::Context& ctx,
                                                   const coil::ops::OpCall& call);
std::vector<coil::lower::TensorValue> lower_scaled_softsign(coil::lower::LoweringContext& lc,
                                                            const coil::Node& node);

// The pass "coil_example_identity_arith": x * 1, x / 1, x + 0 and x - 0 (a Python number on
// the right) whose result has x's meta are x; their readers read x (dce removes the dead node).
std::unique_ptr<coil::passes::Pass> make_identity_arith_pass();

// The backend "coil_example_portable" (counting_backend.cpp): the portable backend's code
// under this name, counting the modules and kernels it builds.
inline constexpr const char* kBackendName = "coil_example_portable";
std::shared_ptr<const coil::backend::Backend> make_counting_backend();

}  // namespace coil_example
