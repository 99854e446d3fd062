// A pointwise op from existing scalar ops: its meta function (what the verifier checks the
// graph's metas against) and its lowering (a loader that coil inlines into whatever reads it).
#include "coil/graph/tensor_meta.h"
#include "coil/ops/meta_util.h"
#include "coil/support/error.h"
#include "example.h"

namespace coil_example {

using namespace coil;

std::vector<TensorMeta> scaled_softsign_meta(sym::Context& ctx, const ops::OpCall& call) {
  const TensorMeta& x = ops::tensor_arg(call, 0, "self");
  const Arg* scale = call.arg(1, "scale");
  COIL_USER_CHECK(scale != nullptr && (scale->is_double() || scale->is_int()))
      << call.op << ": scale must be a number";
  TensorMeta out;
  out.dtype = dtype_is_floating(x.dtype) ? x.dtype : DType::Float32;  // ints compute in f32
  out.device = x.device;
  out.sizes = x.sizes;
  out.strides = ops::pointwise_strides(ctx, x.sizes, {&x});  // as torch.empty_like(x)
  return {out};
}

std::vector<lower::TensorValue> lower_scaled_softsign(lower::LoweringContext& lc,
                                                      const Node& node) {
  const lower::TensorValue x = lc.arg_value(node, 0, "self");
  const double scale = node.arg(1, "scale")->as_double();
  const DType out = node.output()->meta().dtype;
  const DType ct = dtype_compute(out);  // f16 and bf16 compute in f32
  // A loader returns the element at `index` in the compute dtype; nothing is computed until a
  // kernel that reads this value (or stores it) is generated.
  lower::Loader load = [x, scale, ct](loop::BodyBuilder& b, const std::vector<sym::Expr>& index) {
    using loop::InstrKind;
    loop::InstrId v = b.cast(x.load(b, index), ct);
    loop::InstrId den = b.op(InstrKind::Add, ct, b.constant(1, ct), b.op(InstrKind::Abs, ct, v));
    return b.op(InstrKind::Mul, ct, b.constant(scale, ct), b.op(InstrKind::Div, ct, v, den));
  };
  // The cost (instructions per element) and reads let coil's realize rule decide whether to
  // inline this value into its readers or store it once.
  return {lc.pointwise(out, x.sizes, std::move(load), x.inline_cost + 4, x.inline_reads)};
}

}  // namespace coil_example
