#include "coil/lower/lowering.h"

namespace coil::lower {

void register_creation_lowerings(LoweringRegistry& r) {}

}  // namespace coil::lower
