#include "coil/lower/lowering.h"

namespace coil::lower {

void register_pointwise_lowerings(LoweringRegistry& r) {}

}  // namespace coil::lower
