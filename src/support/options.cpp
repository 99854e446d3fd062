#include "coil/support/options.h"

#include <sstream>

namespace coil {

std::string CompileOptions::cache_key() const {
  std::ostringstream out;
#define COIL_KEY_OPTION(type, name, def, affects) \
  if (affects) out << #name << "=" << name << ";";
  COIL_OPTION_FIELDS(COIL_KEY_OPTION)
#undef COIL_KEY_OPTION
  return out.str();
}

}  // namespace coil
