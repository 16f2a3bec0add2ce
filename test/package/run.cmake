# ctest -P script (test "package" of test/CMakeLists.txt): libflashgen as an
# installed CMake package.
#   -DBUILD_DIR=<build tree> -DSOURCE_DIR=<repository> -DWORK=<scratch dir>
#   -DGENERATOR=<cmake generator> -DCXX=<C++ compiler> -DCC=<C compiler>
# 1. cmake --install BUILD_DIR into WORK/staged, then the tree is moved to
#    WORK/prefix: the package must not remember where it was installed.
# 2. The installed tree has the library, the public headers, the CMake
#    package, one profile file per profiles/*.yml and the docs; its CMake files
#    name neither the build nor the source tree.
# 3. A consumer project (package/consumer) is configured with
#    CMAKE_PREFIX_PATH=WORK/prefix only, built and run. It takes its C++
#    program's body and its find_package/target_link_libraries lines from the
#    README, as written (the README's "Using the library" C++ and CMake blocks),
#    and sets no C++ standard itself: the imported target has to bring C++20.
cmake_minimum_required(VERSION 3.25)
foreach(v BUILD_DIR SOURCE_DIR WORK GENERATOR CXX CC)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "package/run.cmake needs -D${v}=...")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}${err}")
  endif()
  set(run_output "${out}${err}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

# --- 1. install, then move ---------------------------------------------------------
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/staged)
file(RENAME ${WORK}/staged ${WORK}/prefix)
set(prefix ${WORK}/prefix)

# --- 2. what is installed ----------------------------------------------------------
set(missing "")
foreach(f include/flashgen/flashgen.hpp include/flashgen/flashgen.h share/doc/flashgen/design.md
    share/doc/flashgen/README.md share/doc/flashgen/bench/NOTES.md)
  if(NOT EXISTS ${prefix}/${f})
    list(APPEND missing ${f})
  endif()
endforeach()
file(GLOB source_profiles RELATIVE ${SOURCE_DIR}/profiles ${SOURCE_DIR}/profiles/*.yml)
if(source_profiles STREQUAL "")
  message(FATAL_ERROR "no profiles/*.yml in ${SOURCE_DIR}")
endif()
foreach(f ${source_profiles})
  if(NOT EXISTS ${prefix}/share/flashgen/profiles/${f})
    list(APPEND missing share/flashgen/profiles/${f})
  endif()
endforeach()
file(GLOB_RECURSE libs ${prefix}/*/libflashgen.so)
file(GLOB_RECURSE configs ${prefix}/*/flashgenConfig.cmake)
if(libs STREQUAL "")
  list(APPEND missing "lib*/libflashgen.so")
endif()
if(configs STREQUAL "")
  list(APPEND missing "lib*/cmake/flashgen/flashgenConfig.cmake")
endif()
if(missing)
  message(FATAL_ERROR "not installed: ${missing}")
endif()
file(GLOB_RECURSE cmake_files ${prefix}/*.cmake)
foreach(f ${cmake_files})
  file(READ ${f} text)
  foreach(tree ${BUILD_DIR} ${SOURCE_DIR} ${WORK}/staged)
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${f} names ${tree}: the installed package is not relocatable")
    endif()
  endforeach()
endforeach()

# --- 3. the consumer, with the README's snippets ---------------------------------
file(READ ${SOURCE_DIR}/README.md readme)
string(FIND "${readme}" "## Using the library" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md has no '## Using the library' section")
endif()
string(SUBSTRING "${readme}" ${at} -1 section)
# The first ```cpp and the first ```cmake block of that section.
function(fenced_block lang out)
  string(FIND "${section}" "```${lang}\n" begin)
  if(begin EQUAL -1)
    message(FATAL_ERROR "README.md 'Using the library' has no ```${lang} block")
  endif()
  string(LENGTH "```${lang}\n" skip)
  math(EXPR begin "${begin} + ${skip}")
  string(SUBSTRING "${section}" ${begin} -1 rest)
  string(FIND "${rest}" "```" end)
  string(SUBSTRING "${rest}" 0 ${end} block)
  set(${out} "${block}" PARENT_SCOPE)
endfunction()
fenced_block(cpp cpp_block)
fenced_block(cmake cmake_block)
set(src ${WORK}/src)
file(COPY ${SOURCE_DIR}/test/package/consumer/ DESTINATION ${src})
# The C++ block: its #include lines open the program, the rest is the body of
# a function (readme_forward in app.cpp).
# (Regexes, not a CMake list of lines: the statements hold semicolons.)
string(REGEX MATCHALL "#include[^\n]*\n" include_lines "${cpp_block}")
list(JOIN include_lines "" includes)
string(REGEX REPLACE "#include[^\n]*\n" "" body "${cpp_block}")
if(includes STREQUAL "")
  message(FATAL_ERROR "the README's C++ block includes no header")
endif()
file(WRITE ${src}/readme_includes.inc "${includes}")
file(WRITE ${src}/readme_body.inc "${body}")
file(WRITE ${src}/readme.cmake "${cmake_block}")

run("configuring the consumer" ${CMAKE_COMMAND} -S ${src} -B ${WORK}/consumer-build -G ${GENERATOR}
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_C_COMPILER=${CC}
  -DCMAKE_BUILD_TYPE=RelWithDebInfo)
run("building the consumer" ${CMAKE_COMMAND} --build ${WORK}/consumer-build)
# No GPU for the programs, even where there is one (they pass fake device
# pointers to forward); kernels and tune files stay in WORK.
set(env ${CMAKE_COMMAND} -E env CUDA_VISIBLE_DEVICES= FLASHGEN_CACHE_DIR=${WORK}/cache
  --unset=FLASHGEN_TUNE_FILE --unset=FLASHGEN_PROFILE --unset=FLASHGEN_CACHE_PATH)
run("the C++ consumer (app)" ${env} ${WORK}/consumer-build/app)
message("${run_output}")
run("the C consumer (capp)" ${env} ${WORK}/consumer-build/capp)
message("${run_output}")
message(STATUS "package: installed, moved, found by find_package(flashgen); app and capp passed")
