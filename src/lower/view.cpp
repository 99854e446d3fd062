#include "coil/lower/lowering.h"

namespace coil::lower {

void register_view_lowerings(LoweringRegistry& r) {}

}  // namespace coil::lower
