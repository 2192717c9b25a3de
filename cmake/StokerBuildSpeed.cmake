# Compile-time settings for `make build` and `make test` (issue 24, "CI in 10 minutes").
#
# Most of a stoker translation unit's compile time is Arrow's and Parquet's headers: parsing them
# and generating code for the templates they instantiate (Status, Result<T>, std containers of
# Arrow types) again in every .cc file. Measured on one core (g++ 12, -O3): eight files of
# resolve/ take 45 s compiled one by one and 13 s as one unity source.
#
# Precompiled headers were measured too and are not used: at -O3 they saved under 1 s of a 9 s
# file, loading the 220 MB .gch costs about 1 s in every small file, and clang-tidy (`make lint`)
# would try to read GCC's .gch file from the compile commands. Measured again for the ASan build
# (-O0 -g1, unity batches): a .gch of the common std, Arrow and Parquet headers costs 14.6 s to
# make; with it, core unity batch 0 took 16.8 s instead of 26.6 s but batch 5 took 8.9 s instead
# of 7.7 s (loading the 220 MB .gch outweighs a small batch's parse): not worth the complexity.

# Unity (jumbo) builds: the sources of a target are compiled in batches of STOKER_UNITY_BATCH
# files, each batch one translation unit. A batch shares its anonymous namespaces, so two files
# that define the same internal name cannot be in one batch: they are listed in
# STOKER_UNITY_SKIP and compiled alone. `cmake -DSTOKER_UNITY=OFF` compiles every file alone
# (quicker incremental rebuilds of a single file). A new clash shows as "redefinition of
# '... {anonymous}::Name'" naming two files: add one of them here.
set(STOKER_UNITY_BATCH 8 CACHE STRING "Source files per unity batch (STOKER_UNITY)")
set(STOKER_UNITY_SKIP
  # kNamespace is also defined by decode/cached_decoder.cc
  cpp/src/io/block_cache.cc
  # kStopPollSeconds is also defined by io/filesystem.cc
  cpp/src/io/prefetched_file.cc
  # Quote() is also defined by resolve/value_conversion.cc
  cpp/src/util/transform_spec.cc
  # defines ASSERT_OK_AND_ASSIGN and other macros that util/test_status_internal.h also defines
  cpp/src/cache/disk_cache_test.cc
  # ToDlpack() is also defined by python/bindings/register_tensor.cc
  python/bindings/register_transform.cc)

function(stoker_unity_build target)
  if(NOT STOKER_UNITY)
    return()
  endif()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${STOKER_UNITY_BATCH})
  foreach(file IN LISTS STOKER_UNITY_SKIP)
    set_source_files_properties("${PROJECT_SOURCE_DIR}/${file}" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endforeach()
endfunction()

# The unit tests' own code (fixtures, assertions, data writers) does not need -O3: -O1 compiles
# a test file in about 60 % of the time (10.4 s -> 6.5 s for catalog_test.cc). The library under
# test keeps the build type's flags; Debug (ASan) builds are left as they are.
function(stoker_light_test_optimization target)
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release,RelWithDebInfo,MinSizeRel>:-O1>)
endfunction()
