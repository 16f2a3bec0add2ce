# ctest -P script (test "gpu-skip" of test/CMakeLists.txt): the GPU tier is
# reported as skipped, not passed, when there is no GPU.
#   -DBUILD_DIR=<build tree> -DGPU_TESTS=<flashgen_tests_gpu>
# 1. ctest's description of the test named gpu carries a SKIP_RETURN_CODE.
# 2. flashgen_tests_gpu run without a GPU (CUDA_VISIBLE_DEVICES empty hides a
#    present one) prints doctest's summary with every case skipped, nothing
#    failed, and exits with exactly that code.
cmake_minimum_required(VERSION 3.25)
foreach(v BUILD_DIR GPU_TESTS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "gpu_skip.cmake needs -D${v}=...")
  endif()
endforeach()

# ctest's input for the test directory, read the way ctest reads it: the
# file is CMake code calling add_test / set_tests_properties / subdirs, which
# are defined here to record the gpu test's properties. (Not `ctest
# --show-only`: a nested ctest rewrites Testing/Temporary/LastTest.log under
# the ctest that is running this script.)
set(testfile ${BUILD_DIR}/test/CTestTestfile.cmake)
if(NOT EXISTS ${testfile})
  message(FATAL_ERROR "no ${testfile}")
endif()
set(gpu_tests 0)
set(skip_code "")
function(add_test name)
  if(name STREQUAL "gpu")
    math(EXPR n "${gpu_tests} + 1")
    set(gpu_tests ${n} PARENT_SCOPE)
  endif()
endfunction()
function(set_tests_properties name keyword)
  if(NOT name STREQUAL "gpu")
    return()
  endif()
  set(props ${ARGN})
  list(FIND props SKIP_RETURN_CODE at)
  if(at GREATER -1)
    math(EXPR at "${at} + 1")
    list(GET props ${at} code)
    set(skip_code ${code} PARENT_SCOPE)
  endif()
endfunction()
function(subdirs)
endfunction()
include(${testfile})
if(NOT gpu_tests EQUAL 1)
  message(FATAL_ERROR "expected one ctest test named gpu in ${testfile}, found ${gpu_tests}")
endif()
if(skip_code STREQUAL "")
  message(FATAL_ERROR "the gpu test has no SKIP_RETURN_CODE: without a GPU ctest would report it as Passed")
endif()
if(skip_code EQUAL 0)
  message(FATAL_ERROR "the gpu test's SKIP_RETURN_CODE is 0, the code of a real pass")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES= ${GPU_TESTS} --no-version
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}${err}")
if(NOT out MATCHES "\\[doctest\\] test cases: *([0-9]+) \\| *([0-9]+) passed \\| *([0-9]+) failed \\| *([0-9]+) skipped")
  message(FATAL_ERROR "no doctest summary in the GPU tier's output")
endif()
set(cases ${CMAKE_MATCH_1})
set(passed ${CMAKE_MATCH_2})
set(failed ${CMAKE_MATCH_3})
set(skipped ${CMAKE_MATCH_4})
if(NOT failed EQUAL 0 OR skipped EQUAL 0)
  message(FATAL_ERROR "without a GPU the GPU tier should skip its cases and fail none: "
    "${cases} cases, ${passed} passed, ${failed} failed, ${skipped} skipped")
endif()
if(NOT rc STREQUAL "${skip_code}")
  message(FATAL_ERROR "flashgen_tests_gpu without a GPU exited with '${rc}', not the gpu test's "
    "SKIP_RETURN_CODE ${skip_code}: ctest would not report the tier as skipped")
endif()
message(STATUS "gpu-skip: no GPU -> exit ${rc} = SKIP_RETURN_CODE (${skipped} cases skipped, none failed)")
