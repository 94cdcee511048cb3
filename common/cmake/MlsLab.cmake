# Helpers every lab uses, so that every lab is laid out and registered the same way.
include_guard(GLOBAL)

# mls_add_tests(<target> LABEL <labN> SOURCES <files...> LIBS <libs...>)
# One Catch2 executable per lab; each TEST_CASE becomes its own CTest test, labelled <labN>.
# mls_add_graded_twin(<target> LIBS <libs...>): <target>_graded (not built by default), test
# program <target>'s sources compiled with MLS_GRADED_BUILD: their oracles compiled out
# (common/tests/include/mls/testing.hpp), its include folders (also those added later), linked
# with the Catch2 main and <libs>. mls-grader links a submission with it where lab.json says
# "oracle_free": true.
function(mls_add_graded_twin target)
  cmake_parse_arguments(ARG "" "" "LIBS" ${ARGN})
  get_target_property(sources ${target} SOURCES)
  add_executable(${target}_graded EXCLUDE_FROM_ALL ${sources})
  target_link_libraries(${target}_graded PRIVATE mls_catch_main ${ARG_LIBS} mls_warnings)
  target_include_directories(${target}_graded PRIVATE $<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>)
  target_compile_definitions(${target}_graded PRIVATE MLS_GRADED_BUILD=1)
  # What only an oracle used (a test's Ref operands, its tolerance) is unused there.
  target_compile_options(${target}_graded PRIVATE -Wno-unused-parameter -Wno-unused-variable
                         -Wno-unused-but-set-variable -Wno-unused-function -Wno-unused-lambda-capture)
endfunction()

# ORACLE_FREE: also its graded twin (mls_add_graded_twin).
function(mls_add_tests target)
  cmake_parse_arguments(ARG "ORACLE_FREE" "LABEL" "SOURCES;LIBS;EXTRA_LABELS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE mls_catch_main ${ARG_LIBS} mls_warnings)
  if(ARG_ORACLE_FREE)
    mls_add_graded_twin(${target} LIBS ${ARG_LIBS})
  endif()
  # mls-grader's builds of a submission (MLS_GRADER_BUILD) register no CTest tests: discovery
  # would run the student's code at build time, in the build's sandbox step.
  if(MLS_GRADER_BUILD)
    return()
  endif()
  # -w NoTests: a name CTest got wrong (it splits discovered names at ';') fails instead of
  # passing with no test run.
  catch_discover_tests(${target}
    TEST_PREFIX "${ARG_LABEL}:"
    EXTRA_ARGS --rng-seed 1234 -w NoTests
    PROPERTIES LABELS ${ARG_LABEL} TIMEOUT 120 SKIP_REGULAR_EXPRESSION "SKIPPED:")
  if(ARG_EXTRA_LABELS)
    # catch_discover_tests cannot pass a list-valued property through, so the extra labels are
    # appended by a CTest include file that runs after the discovered tests are defined.
    set(extra_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_extra_labels.cmake)
    file(WRITE ${extra_file}
      "foreach(t IN LISTS ${target}_TESTS)\n  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${ARG_LABEL};${ARG_EXTRA_LABELS}\")\nendforeach()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${extra_file})
  endif()
endfunction()

# mls_add_script_test(<name> LABEL <labN> TOOL <target> SCRIPT <tests/x.sh> [ARGS <args...>] [SERIAL]): a
# CTest that runs `bash <script> <tool's file> <args...>` (a tool used as its write-up uses it), labelled
# <labN>, 120 s; registered only where <target> is built. SERIAL: the script times MPI ranks against
# each other (e.g. a calibration that needs the machine to itself), so CTest runs it alone, first,
# like the MPI tests (RUN_SERIAL, COST 100000).
function(mls_add_script_test name)
  cmake_parse_arguments(ARG "SERIAL" "LABEL;TOOL;SCRIPT" "ARGS" ${ARGN})
  if(NOT TARGET ${ARG_TOOL})
    return()
  endif()
  add_test(NAME "${name}" COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_SCRIPT} $<TARGET_FILE:${ARG_TOOL}> ${ARG_ARGS})
  set_tests_properties("${name}" PROPERTIES LABELS ${ARG_LABEL} TIMEOUT 120)
  if(ARG_SERIAL)
    set_tests_properties("${name}" PROPERTIES RUN_SERIAL ON COST 100000)
  endif()
endfunction()

# mls_add_lab_tests(<labN> LIBS <libs...>): tests/test_*.cpp of the calling lab become one Catch2
# program, mls_<labN>_tests (tests/ on its include path), each TEST_CASE a CTest test labelled <labN>.
function(mls_add_lab_tests lab)
  cmake_parse_arguments(ARG "ORACLE_FREE" "" "LIBS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_*.cpp)
  if(NOT sources)
    return()
  endif()
  set(oracle_free "")
  if(ARG_ORACLE_FREE)
    set(oracle_free ORACLE_FREE)
  endif()
  mls_add_tests(mls_${lab}_tests LABEL ${lab} SOURCES ${sources} LIBS ${ARG_LIBS} ${oracle_free})
  target_include_directories(mls_${lab}_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tests)
endfunction()

# ---- tools and benchmarks of a lab: one naming scheme (README, "Layout"; scripts/check_conventions.py)
#   tools/<name>.cpp             -> mls-<name>          a command-line tool, in bin/   (mls_add_lab_tools)
#   tools/<name>_oracle.cpp      -> mls-<name>-oracle   the driver of a differential test, in bin/
#                                                       (mls_add_oracle, not mls_add_lab_tools)
#   bench/bench_<name>.cpp       -> mls_<labN>_bench_<name>  a Google Benchmark program, in the
#                                                       lab's build folder, with MLS_BENCH (mls_add_lab_benches)
#   bench/<name>_bench.cpp       -> mls-<name>-bench    a benchmark driver with its own command line
#                                                       (run by hand, by a script, under mpirun), in bin/
#   tools/<backend>/..., bench/<backend>/... (backend: cuda, mpi, nccl): the same, built only where
#   the lab's backend library mls_<word>_<backend> is, and linked with it.
# <name> is lower_snake_case; in a program name its underscores become dashes.

# The backend subfolders of a lab's tools/ and bench/, and its word (labN_<word>).
set(MLS_BACKENDS cuda mpi nccl)
function(_mls_lab_word out)
  get_filename_component(dir ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  string(REGEX REPLACE "^lab[0-9]+_" "" word ${dir})
  set(${out} ${word} PARENT_SCOPE)
endfunction()

# Sources of <folder>/<glob> and <folder>/<backend>/<glob>: sets <out>_<i> pairs as a flat list
# "<file>;<backend library or ->", only for backends whose library is built.
function(_mls_lab_sources out folder glob)
  _mls_lab_word(word)
  set(result "")
  file(GLOB plain CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${folder}/${glob})
  foreach(src ${plain})
    list(APPEND result ${src} -)
  endforeach()
  foreach(backend ${MLS_BACKENDS})
    file(GLOB found CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${folder}/${backend}/${glob})
    if(found AND TARGET mls_${word}_${backend})
      foreach(src ${found})
        list(APPEND result ${src} mls_${word}_${backend})
      endforeach()
    endif()
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# A program of bin/ from <src>: linked with <libs>, the backend library (unless "-") and CLI11
# where found; a source that includes CLI11 is left out, said once per lab, where CLI11 is missing.
function(_mls_add_bin_program lab target src backend)
  file(READ ${src} text)
  string(FIND "${text}" "<CLI/CLI.hpp>" uses_cli)
  if(NOT uses_cli EQUAL -1 AND NOT CLI11_FOUND)
    get_property(said GLOBAL PROPERTY mls_${lab}_said_cli11)
    if(NOT said)
      message(STATUS "mls: ${lab} tools not built (CLI11 not found: apt-get install libcli11-dev)")
      set_property(GLOBAL PROPERTY mls_${lab}_said_cli11 ON)
    endif()
    return()
  endif()
  set(libs ${ARGN})
  if(NOT backend STREQUAL "-")
    list(APPEND libs ${backend})
  endif()
  if(CLI11_FOUND)
    list(APPEND libs CLI11::CLI11)
  endif()
  mls_add_tool(${target} SOURCES ${src} LIBS ${libs})
endfunction()

# mls_add_lab_tools(<labN> LIBS <libs...>): tools/<name>.cpp of the calling lab (and
# tools/<backend>/<name>.cpp where the lab's backend library is built) becomes mls-<name>, linked
# with <libs> (and CLI11). tools/<name>_oracle.cpp is left to mls_add_oracle.
function(mls_add_lab_tools lab)
  cmake_parse_arguments(ARG "" "" "LIBS" ${ARGN})
  _mls_lab_sources(pairs tools "*.cpp")
  while(pairs)
    list(POP_FRONT pairs src backend)
    get_filename_component(name ${src} NAME_WE)
    if(name MATCHES "_oracle$")
      continue()
    endif()
    string(REPLACE "_" "-" name ${name})
    _mls_add_bin_program(${lab} mls-${name} ${src} ${backend} ${ARG_LIBS})
  endwhile()
endfunction()

# mls_add_lab_benches(<labN> LIBS <libs...> [NEEDS <name> <target> ...]): the calling lab's
# bench/bench_<name>.cpp becomes the Google Benchmark program mls_<labN>_bench_<name> (built with
# MLS_BENCH), bench/<name>_bench.cpp the driver mls-<name>-bench in bin/ (always built: scripts
# and tests run them), each linked with <libs>; bench/<backend>/ as tools/<backend>/. NEEDS: the
# benchmark <name> (bench_<name> or <name>_bench) is built only where <target> exists (its peer,
# e.g. mls_openblas) and linked with it.
function(mls_add_lab_benches lab)
  cmake_parse_arguments(ARG "" "" "LIBS;NEEDS" ${ARGN})
  _mls_lab_sources(pairs bench "*.cpp")
  while(pairs)
    list(POP_FRONT pairs src backend)
    get_filename_component(file ${src} NAME_WE)
    string(REGEX REPLACE "^bench_|_bench$" "" name ${file})
    set(libs ${ARG_LIBS})
    list(FIND ARG_NEEDS ${name} at)
    if(NOT at EQUAL -1)
      math(EXPR at "${at} + 1")
      list(GET ARG_NEEDS ${at} needed)
      if(NOT TARGET ${needed})
        message(STATUS "mls: ${lab} benchmark ${file} not built (no ${needed})")
        continue()
      endif()
      list(APPEND libs ${needed})
    endif()
    if(file MATCHES "^bench_")
      if(NOT backend STREQUAL "-")
        list(APPEND libs ${backend})
      endif()
      mls_add_bench(mls_${lab}_bench_${name} SOURCES ${src} LIBS ${libs})
    elseif(file MATCHES "_bench$")
      string(REPLACE "_" "-" name ${name})
      _mls_add_bin_program(${lab} mls-${name}-bench ${src} ${backend} ${libs})
    else()
      message(FATAL_ERROR "mls: ${src}: a benchmark source is bench_<name>.cpp (Google Benchmark) or "
                          "<name>_bench.cpp (a driver); see common/cmake/MlsLab.cmake")
    endif()
  endwhile()
endfunction()

# mls_add_bench(<target> SOURCES <files...> LIBS <libs...>): a Google Benchmark program.
function(mls_add_bench target)
  if(NOT MLS_BENCH)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE benchmark::benchmark ${ARG_LIBS} mls_warnings)
endfunction()

# mls_add_tool(<target> SOURCES <files...> LIBS <libs...>): a command-line program of a lab.
function(mls_add_tool target)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE ${ARG_LIBS} mls_warnings)
  # A tool of a lab gets lab 4's kernels wherever lab 4 is built, so MLS_MATMUL can pick a
  # student's own SGEMM in every lab's programs (lab 4 registers them by name at start-up).
  if(ARG_LIBS MATCHES "mls_(tensor|autodiff|graph_opt|kernels|parallel|llm)")
    target_link_libraries(${target} PRIVATE $<TARGET_NAME_IF_EXISTS:mls_kernels>)
  endif()
  set_target_properties(${target} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()

# mls_add_oracle(<test name> LABEL <labN> TOOL <target> SOURCES <cpp...> LIBS <libs...>
#                SCRIPT <file.py> COUNT <n>): a differential test against a Python peer (NumPy,
# PyTorch): the script generates seeded programs, runs them through the driver <target> (built
# here from SOURCES) and the peer, and compares. Seed 1 and <n> programs in CTest
# (labels <labN> and oracle); the script prints "SKIPPED: ..." where the peer is missing.
function(mls_add_oracle name)
  # The driver speaks JSON: without nlohmann-json neither it nor the test is built (said at configure).
  cmake_parse_arguments(ARG "" "LABEL;TOOL;SCRIPT;COUNT" "SOURCES;LIBS" ${ARGN})
  find_package(nlohmann_json 3 QUIET)
  if(NOT nlohmann_json_FOUND)
    message(STATUS "mls: ${ARG_LABEL} oracle not built (nlohmann-json not found)")
    return()
  endif()
  mls_add_tool(${ARG_TOOL} SOURCES ${ARG_SOURCES} LIBS ${ARG_LIBS} nlohmann_json::nlohmann_json)
  add_test(NAME ${name}
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_SCRIPT}
            --driver $<TARGET_FILE:${ARG_TOOL}> --seed 1 --count ${ARG_COUNT})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABEL};oracle" TIMEOUT 300
                       SKIP_REGULAR_EXPRESSION "SKIPPED:")
endfunction()
