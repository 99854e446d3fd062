// The plugin's entry points: the ABI record coil checks first, then the registrations.
#include "coil/plugin/plugin.h"

#include "example.h"

COIL_PLUGIN_ABI("coil_example");

extern "C" COIL_PLUGIN_EXPORT void coil_plugin_register(coil::plugin::Registrar& r) {
  r.add_op(coil_example::kScaledSoftsign, coil::ops::OpFamily::Pointwise,
           coil_example::scaled_softsign_meta);
  r.add_lowering(coil_example::kScaledSoftsign, coil_example::lower_scaled_softsign);
  r.add_pass("coil_example_identity_arith", "forward x*1, x/1, x+0, x-0 to x (run before dce)",
             coil_example::make_identity_arith_pass);
  r.add_backend(coil_example::make_counting_backend());  // backend_target=coil_example_portable
}
