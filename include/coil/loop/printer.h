// Text form of a LoopProgram, for golden tests, the debug dump and error messages.
// Deterministic: the same program prints the same text.
//
//   buffers:
//     in0: f32[8, 16] input 0
//     buf1: f32[16, 8]{1, 16} view of in0
//     buf2: f32[8, 1]
//   size s0 = in0.size(0)
//   buf2: f32[8, 1] = reduce max over (i0 < 8) (r0 < 16):
//     %0 = load in0[i0, r0] : f32
//     -> store [i0, 0] %0
//   extern mm(in0, buf1) -> (buf3)  # aten.mm.default, node 2
//   outputs: buf2, buf3
//
// Strides print only when not row-major, offsets (+N) only when nonzero, devices only when not
// cpu. A pointwise node prints "= pointwise over (...)"; ranges are "var < size".
#pragma once

#include <string>

#include "coil/loop/program.h"

namespace coil::loop {

std::string print_program(const LoopProgram& program);
// One step / one body, indented by `indent` spaces.
std::string print_step(const LoopProgram& program, const Step& step);
std::string print_body(const LoopProgram& program, const Body& body, int indent = 2);

}  // namespace coil::loop
