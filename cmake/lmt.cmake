# GCC < 12.3 warns "'__Y' may be used uninitialized" inside its own AVX-512 headers
# (_mm512_undefined_ps after inlining; GCC bug 105593) and -Wrestrict inside std::string (bug 105329).
# Those warnings are false and drown real ones.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 12.3)
  list(APPEND LMT_WARNINGS -Wno-maybe-uninitialized -Wno-restrict)
endif()

# LMT_SANITIZE (docs/RELIABILITY.md, "Sanitizers"): the flags go on every target of the project,
# libraries, tests and the lmtrain binary alike, so a test that runs `lmtrain` runs it instrumented.
# System libraries (oneDNN, Open MPI, libgomp, GoogleTest) stay uninstrumented.
if(LMT_SANITIZE STREQUAL "address")
  set(LMT_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(LMT_SANITIZE STREQUAL "thread")
  set(LMT_SANITIZE_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT LMT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "LMT_SANITIZE=${LMT_SANITIZE}: expected address, thread or nothing")
endif()
if(LMT_SANITIZE_FLAGS)
  # -O1 -g1 (line tables: enough for symbolised reports) builds in about two thirds of the time of
  # -O2 -g: UBSan's checks in every inlined template make instrumented code slow to compile.
  set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -g1 -DNDEBUG")
  message(STATUS "LMT_SANITIZE=${LMT_SANITIZE}: ${LMT_SANITIZE_FLAGS}")
  add_compile_options(${LMT_SANITIZE_FLAGS})
  add_link_options(${LMT_SANITIZE_FLAGS})
endif()

# Tests that start processes under mpirun. Open MPI's libraries have no frame pointers, so ASan's fast
# unwinder stops in them after one frame, and Open MPI unloads its plugins at MPI_Finalize: LeakSanitizer
# then reports what Open MPI keeps until exit with stacks of "<unknown module>" that no suppression can
# match. The slow unwinder (fast_unwind_on_malloc=0) records whole stacks, which
# tests/sanitizers/lsan.supp matches by Open MPI's own functions; it costs time on every allocation, so
# only these tests use it.
set(LMT_MPI_TESTS dist_fault_test plan_cli_test)
set(LMT_MPI_TEST_ENV_MODIFICATION "")
if(LMT_SANITIZE STREQUAL "address")
  set(LMT_MPI_TEST_ENV_MODIFICATION "ASAN_OPTIONS=string_append::fast_unwind_on_malloc=0")
endif()

# Tests that run threads of lmtrain's own carry the ctest label "threads": `make test-tsan` runs them.
# The loader's prefetch thread: loader_test, trainer_test, fault_test; the asynchronous checkpointer:
# fault_test (`lmtrain train` with checkpoint.async on, killed and signalled mid-save); the tokenizer
# and data preparation pools: bpe_trainer_test, tokenizer_test, the CLI tests, prepare_test;
# data-parallel overlap (non-blocking all-reduce during backward): dist_test, dist_fault_test; the
# `data clean` workers: clean_cli_test.
set(LMT_THREADED_TESTS loader_test prepare_test data_cli_test bpe_trainer_test tokenizer_test
    tokenizer_cli_test tokenizer_train_cli_test trainer_test fault_test dist_fault_test clean_cli_test)

# lmt_library(NAME SOURCES ... DEPS ...)
# One library per folder of src/lmt. Dependencies are named explicitly and are PUBLIC, so a module
# that includes a header of a module it does not list fails to link (dependencies flow one way).
function(lmt_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${LMT_WARNINGS} ${LMT_ARCH_FLAGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

# lmt_test(NAME SOURCES ... DEPS ...): one GoogleTest binary registered with ctest.
function(lmt_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${LMT_WARNINGS} ${LMT_ARCH_FLAGS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)  # tests/common helpers
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE LMT_SHARED_DATA="${PROJECT_SOURCE_DIR}/../shared/data")
  if(name IN_LIST LMT_THREADED_TESTS)
    list(APPEND ARG_LABELS threads)
    add_dependencies(lmt_threaded_tests ${name})
  endif()
  # A gpu-labelled binary built from another test's source (cuda_attention_test is
  # attention_bf16_test.cpp for "cuda") has that test's names: its names get the binary as a prefix,
  # so every ctest name is one test, and the gpu label never lands on the cpu binary's tests (it
  # did: `ctest -LE gpu` left them out).
  if("gpu" IN_LIST ARG_LABELS)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_PREFIX "${name}.")
  else()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
  endif()
  # The discovered tests get their properties from a file ctest includes after them, not from
  # gtest_discover_tests(PROPERTIES): that flattens a list value, so a second label would have
  # swallowed the properties after it.
  # Tests run two at a time on two cores: OpenMP threads that spin while waiting would fight the
  # other test for the cores (and a descheduled spinner stalls every parallel region), so they sleep.
  # The measured-peak cache (metrics/peak_cache.h) of tests, and of the lmtrain they start, is a
  # file in the build tree, never the user's ~/.cache.
  set(env_modification "")
  if(name IN_LIST LMT_MPI_TESTS AND LMT_MPI_TEST_ENV_MODIFICATION)
    set(env_modification " ENVIRONMENT_MODIFICATION [==[${LMT_MPI_TEST_ENV_MODIFICATION}]==]")
  endif()
  set(properties_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_properties.cmake)
  file(WRITE ${properties_file}
       "if(${name}_TESTS)\n"
       "  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS [==[${ARG_LABELS}]==]\n"
       "                       ENVIRONMENT [==[OMP_WAIT_POLICY=passive;LMT_PEAK_CACHE=${CMAKE_BINARY_DIR}/tests/peak_cache.json]==]${env_modification})\n"
       "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${properties_file})
endfunction()

# lmt_venv_test(NAME GROUP group SCRIPT file.py [ARGS ...] [LABELS ...] [DEPENDS targets ...])
# A Python check against a real peer library (transformers, llama.cpp, lm-eval, datatrove...) from
# the venv that scripts/venv.sh installs under the build tree. Without that venv (or its GROUP) the
# test is reported as skipped, with the command that installs it. The script gets the lmtrain binary
# as $LMTRAIN_BIN, the shared data as $LMT_SHARED_DATA and a scratch directory as $LMT_TEST_TMP.
function(lmt_venv_test name)
  cmake_parse_arguments(ARG "" "GROUP;SCRIPT" "ARGS;LABELS;DEPENDS" ${ARGN})
  add_test(NAME ${name}
           COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/venv_run.sh ${CMAKE_BINARY_DIR} ${ARG_GROUP} ${ARG_SCRIPT} ${ARG_ARGS})
  set(tmp ${CMAKE_CURRENT_BINARY_DIR}/${name}.tmp)
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "venv;${ARG_GROUP};${ARG_LABELS}"
    ENVIRONMENT "OMP_WAIT_POLICY=passive;LMT_PEAK_CACHE=${CMAKE_BINARY_DIR}/tests/peak_cache.json;LMTRAIN_BIN=$<TARGET_FILE:lmtrain>;LMT_SHARED_DATA=${PROJECT_SOURCE_DIR}/../shared/data;LMT_TEST_TMP=${tmp};LMT_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
