# The ctest coil_opt.passes (CMakeLists.txt): runs the coil-opt binary on every
# tests/golden/passes/<case>.graph with the passes its first line names ("# passes: a, b") and
# compares stdout with <case>.out (test_passes writes those, COIL_UPDATE_GOLDEN=1). Also: an
# unknown pass is a usage error (status 2), --final prints one graph, a pass list split over
# two --passes= options runs as one, stdin works.
#   cmake -DCOIL_OPT=<coil-opt> -DGOLDEN_DIR=<dir> -P coil_opt_test.cmake
if(NOT COIL_OPT OR NOT GOLDEN_DIR)
  message(FATAL_ERROR "usage: cmake -DCOIL_OPT=... -DGOLDEN_DIR=... -P coil_opt_test.cmake")
endif()
set(failures 0)
macro(fail msg)
  message(SEND_ERROR "${msg}")
  math(EXPR failures "${failures} + 1")
endmacro()

file(GLOB cases "${GOLDEN_DIR}/*.graph")
list(LENGTH cases n)
if(n LESS 8)
  fail("found only ${n} cases in ${GOLDEN_DIR}")
endif()
foreach(input ${cases})
  get_filename_component(name "${input}" NAME_WE)
  file(STRINGS "${input}" first LIMIT_COUNT 1)
  if(NOT first MATCHES "^# passes:(.*)$")
    fail("${name}: the first line must be '# passes: a,b'")
    continue()
  endif()
  string(REPLACE " " "" passes "${CMAKE_MATCH_1}")
  execute_process(COMMAND "${COIL_OPT}" "${input}" "--passes=${passes}"
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  file(READ "${GOLDEN_DIR}/${name}.out" expected)
  if(NOT rc EQUAL 0)
    fail("${name}: coil-opt --passes=${passes} exited with ${rc}: ${err}")
  elseif(NOT out STREQUAL expected)
    fail("${name}: coil-opt --passes=${passes} printed\n${out}\nexpected\n${expected}")
  endif()
endforeach()

set(input "${GOLDEN_DIR}/pipeline_dce_cse_dce.graph")
execute_process(COMMAND "${COIL_OPT}" "${input}" --passes=dce,nosuch
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "unknown pass 'nosuch' \\(known: dce, cse\\)")
  fail("unknown pass: status ${rc}, stderr: ${err}")
endif()

# --final: only the graph at the end, which is the last printout of the default mode.
execute_process(COMMAND "${COIL_OPT}" "${input}" --passes=dce --passes=cse,dce --final
                OUTPUT_VARIABLE final RESULT_VARIABLE rc)
file(READ "${GOLDEN_DIR}/pipeline_dce_cse_dce.out" all)
string(FIND "${all}" "# after cse\n" at REVERSE)
math(EXPR at "${at} + 12")
string(SUBSTRING "${all}" ${at} -1 last)
if(NOT rc EQUAL 0 OR NOT final STREQUAL last OR final MATCHES "# after")
  fail("--final: status ${rc}, printed\n${final}\nexpected\n${last}")
endif()

# stdin, no passes: the graph printed back.
execute_process(COMMAND "${COIL_OPT}" - INPUT_FILE "${GOLDEN_DIR}/dce_nothing.out"
                OUTPUT_VARIABLE out RESULT_VARIABLE rc)
file(READ "${GOLDEN_DIR}/dce_nothing.out" expected)
if(NOT rc EQUAL 0 OR NOT out STREQUAL expected)
  fail("stdin: status ${rc}, printed\n${out}")
endif()

# --emit=loops prints the loop program; --set=OPTION=VALUE changes the options it is lowered
# with (inline_pointwise=0 realizes every value: more buffers than the default), and an
# unknown option is a usage error.
set(input "${GOLDEN_DIR}/pipeline_dce_cse_dce.graph")
execute_process(COMMAND "${COIL_OPT}" "${input}" --final --emit=loops
                OUTPUT_VARIABLE inlined RESULT_VARIABLE rc)
execute_process(COMMAND "${COIL_OPT}" "${input}" --final --emit=loops --set=inline_pointwise=0
                OUTPUT_VARIABLE realized RESULT_VARIABLE rc2)
string(REGEX MATCHALL "\nbuf[0-9]+: [^\n]*= pointwise" inlined_bufs "${inlined}")
string(REGEX MATCHALL "\nbuf[0-9]+: [^\n]*= pointwise" realized_bufs "${realized}")
list(LENGTH inlined_bufs n_inlined)
list(LENGTH realized_bufs n_realized)
if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0 OR NOT inlined MATCHES "^buffers:\n" OR
   NOT n_realized GREATER n_inlined)
  fail("--emit=loops / --set: status ${rc} ${rc2}, ${n_inlined} vs ${n_realized} pointwise "
       "buffers:\n${inlined}\n--- with inline_pointwise=0:\n${realized}")
endif()
execute_process(COMMAND "${COIL_OPT}" "${input}" --emit=loops --set=no_such_option=1
                ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--set takes OPTION=VALUE")
  fail("unknown option: status ${rc}, stderr: ${err}")
endif()

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} failure(s)")
endif()
