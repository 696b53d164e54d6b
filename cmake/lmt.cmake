# GCC < 12.3 warns "'__Y' may be used uninitialized" inside its own AVX-512 headers
# (_mm512_undefined_ps after inlining; GCC bug 105593) and -Wrestrict inside std::string (bug 105329).
# Those warnings are false and drown real ones.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 12.3)
  list(APPEND LMT_WARNINGS -Wno-maybe-uninitialized -Wno-restrict)
endif()

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
  # Tests run two at a time on two cores: OpenMP threads that spin while waiting would fight the
  # other test for the cores (and a descheduled spinner stalls every parallel region), so they sleep.
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "${ARG_LABELS}" ENVIRONMENT "OMP_WAIT_POLICY=passive")
endfunction()
