# The ctest loop.scalar_ops_exhaustive (CMakeLists.txt): every consumer of the scalar ops
# handles every one, checked by the compiler. It adds two scalar ops to a copy of
# include/coil/loop/body.h (COIL_BODY_OPS: one unary, one binary), which shadows the real one,
# and compiles each consumer with it (-fsyntax-only): each must fail to compile, naming both
# new ops in -Wswitch errors. The unchanged files compile in the normal build.
#   cmake -DCXX=<compiler> -DSOURCE_DIR=<checkout> -DWORK_DIR=<scratch> -P exhaustive_switch_test.cmake
if(NOT CXX OR NOT SOURCE_DIR OR NOT WORK_DIR)
  message(FATAL_ERROR "usage: cmake -DCXX=... -DSOURCE_DIR=... -DWORK_DIR=... -P ...")
endif()
file(READ "${SOURCE_DIR}/include/coil/loop/body.h" body)
set(last [[X(Where, 3, "where")]])
string(FIND "${body}" "${last}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "COIL_BODY_OPS no longer ends with ${last}: update this test")
endif()
string(REPLACE "${last}" "${last} X(ProbeUnary, 1, \"probe_unary\") X(ProbeBinary, 2, \"probe_binary\")"
       probed "${body}")
file(MAKE_DIRECTORY "${WORK_DIR}/include/coil/loop")
file(WRITE "${WORK_DIR}/include/coil/loop/body.h" "${probed}")

# The consumers whose switch is the op's meaning: the interpreter (unary_f in
# scalar_semantics.h, binary in interpreter.cpp) and the expression printer of all emitters.
set(consumers src/loop/interpreter.cpp src/backend/common/scalar_expr.cpp)
set(failures 0)
foreach(src ${consumers})
  execute_process(
    COMMAND "${CXX}" -std=c++20 -fsyntax-only -Werror=switch -I "${WORK_DIR}/include"
            -I "${SOURCE_DIR}/include" "${SOURCE_DIR}/${src}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(SEND_ERROR "${src} compiles with scalar ops it does not handle")
    math(EXPR failures "${failures} + 1")
    continue()
  endif()
  foreach(op ProbeUnary ProbeBinary)
    if(NOT err MATCHES "${op}[^ ]* not handled in switch")
      message(SEND_ERROR "${src}: no -Wswitch error for ${op}; the compiler said:\n${err}")
      math(EXPR failures "${failures} + 1")
    endif()
  endforeach()
endforeach()
if(failures GREATER 0)
  message(FATAL_ERROR "${failures} failure(s)")
endif()
message(STATUS "each consumer refuses to compile without a case for a new scalar op")
