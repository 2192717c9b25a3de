# Finds Arrow and Parquet C++ inside the pinned pyarrow wheel.
#
# The wheel ships headers and versioned shared libraries (libarrow.so.2600 for 26.0) but no CMake package
# config, so we ask the interpreter where pyarrow lives and create IMPORTED targets ourselves.
# Defines Pyarrow::arrow, Pyarrow::parquet and, when the wheel has it (Arrow >= 26),
# Pyarrow::arrow_s3. Sets Pyarrow_LIBRARY_DIR for RPATHs.
find_package(Python3 REQUIRED COMPONENTS Interpreter)

execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c
          "import pyarrow as pa; print(pa.get_include()); print(pa.get_library_dirs()[0]); print(pa.__version__)"
  OUTPUT_VARIABLE _pyarrow_out
  RESULT_VARIABLE _pyarrow_rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _pyarrow_rc EQUAL 0)
  message(FATAL_ERROR "pyarrow is not importable by ${Python3_EXECUTABLE}; run `make setup` first")
endif()
string(REPLACE "\n" ";" _pyarrow_out "${_pyarrow_out}")
list(GET _pyarrow_out 0 Pyarrow_INCLUDE_DIR)
list(GET _pyarrow_out 1 Pyarrow_LIBRARY_DIR)
list(GET _pyarrow_out 2 Pyarrow_VERSION)

function(_pyarrow_import target stem required)
  file(GLOB _candidates "${Pyarrow_LIBRARY_DIR}/lib${stem}.so.[0-9]*")
  list(FILTER _candidates EXCLUDE REGEX "\\.so\\.[0-9]+\\.[0-9]")
  if(NOT _candidates)
    if(required)
      message(FATAL_ERROR "lib${stem}.so.* not found in ${Pyarrow_LIBRARY_DIR}")
    endif()
    return()
  endif()
  list(GET _candidates 0 _lib)
  add_library(Pyarrow::${target} SHARED IMPORTED GLOBAL)
  set_target_properties(Pyarrow::${target} PROPERTIES
    IMPORTED_LOCATION "${_lib}"
    INTERFACE_INCLUDE_DIRECTORIES "${Pyarrow_INCLUDE_DIR}")
endfunction()

_pyarrow_import(arrow arrow TRUE)
_pyarrow_import(parquet parquet TRUE)
_pyarrow_import(arrow_s3 arrow_s3 FALSE)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Pyarrow
  REQUIRED_VARS Pyarrow_INCLUDE_DIR Pyarrow_LIBRARY_DIR
  VERSION_VAR Pyarrow_VERSION)
