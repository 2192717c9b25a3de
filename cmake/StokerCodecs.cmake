# The system libraries the C++ core links (issue 27: a source build that needs as little as
# possible).
#
# Required: xxHash (XXH64, the cache checksums), libjpeg-turbo (TurboJPEG for decoding, libjpeg's
# API for region decoding) and zlib (NumPy .npz arrays). A missing one stops the configure step
# with the Debian package to install.
#
# Optional: libspng (PNG) and libwebp (WebP). STOKER_WITH_PNG / STOKER_WITH_WEBP are AUTO (use the
# library when it is found), ON (required) or OFF (never used). Without one, the build works and
# decode_image raises UnsupportedInputError naming the missing library on such bytes (never at
# import); the configure step says which codecs this build has. The choice reaches only
# cpp/src/transform/image_codec.cc, through the generated header stoker_codecs.h, so the other
# sources compile the same either way.
set(STOKER_WITH_PNG AUTO CACHE STRING "PNG decoding with libspng: AUTO (if found), ON (required) or OFF")
set(STOKER_WITH_WEBP AUTO CACHE STRING "WebP decoding with libwebp: AUTO (if found), ON (required) or OFF")
set_property(CACHE STOKER_WITH_PNG PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE STOKER_WITH_WEBP PROPERTY STRINGS AUTO ON OFF)

# Defines stoker::<target> and sets <target>_FOUND (in the caller's scope) when `header` and
# `library` are found. `mode`: REQUIRED, AUTO or OFF.
function(stoker_find_system_library target header library package mode)
  set(${target}_FOUND FALSE PARENT_SCOPE)
  if(mode STREQUAL "OFF")
    return()
  endif()
  find_path(${target}_INCLUDE_DIR ${header})
  find_library(${target}_LIBRARY ${library})
  if(NOT ${target}_INCLUDE_DIR OR NOT ${target}_LIBRARY)
    if(mode STREQUAL "AUTO")
      return()
    endif()
    message(FATAL_ERROR "${header} / lib${library} not found: install the Debian package "
                        "'${package}' (apt-get install ${package}, or `make setup`)")
  endif()
  add_library(stoker::${target} UNKNOWN IMPORTED)
  set_target_properties(stoker::${target} PROPERTIES
    IMPORTED_LOCATION "${${target}_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${${target}_INCLUDE_DIR}")
  set(${target}_FOUND TRUE PARENT_SCOPE)
endfunction()

function(_stoker_codec_mode option out)
  string(TOUPPER "${${option}}" value)
  if(value STREQUAL "AUTO")
    set(${out} AUTO PARENT_SCOPE)
  elseif(value)  # ON, TRUE, 1, YES
    set(${out} REQUIRED PARENT_SCOPE)
  else()
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()

stoker_find_system_library(xxhash xxhash.h xxhash libxxhash-dev REQUIRED)
stoker_find_system_library(turbojpeg turbojpeg.h turbojpeg libturbojpeg0-dev REQUIRED)
stoker_find_system_library(jpeg jpeglib.h jpeg libjpeg62-turbo-dev REQUIRED)  # region decoding
stoker_find_system_library(zlib zlib.h z zlib1g-dev REQUIRED)
_stoker_codec_mode(STOKER_WITH_PNG _png_mode)
_stoker_codec_mode(STOKER_WITH_WEBP _webp_mode)
stoker_find_system_library(spng spng.h spng libspng-dev ${_png_mode})
stoker_find_system_library(webp webp/decode.h webp libwebp-dev ${_webp_mode})

set(STOKER_HAVE_PNG 0)
set(STOKER_HAVE_WEBP 0)
set(STOKER_CODEC_LIBRARIES stoker::xxhash stoker::turbojpeg stoker::jpeg stoker::zlib)
set(_codecs "JPEG")
set(_missing "")
if(spng_FOUND)
  set(STOKER_HAVE_PNG 1)
  list(APPEND STOKER_CODEC_LIBRARIES stoker::spng)
  list(APPEND _codecs "PNG")
elseif(_png_mode STREQUAL "OFF")
  list(APPEND _missing "PNG (STOKER_WITH_PNG=OFF)")
else()
  list(APPEND _missing "PNG (spng.h / libspng not found: apt-get install libspng-dev)")
endif()
if(webp_FOUND)
  set(STOKER_HAVE_WEBP 1)
  list(APPEND STOKER_CODEC_LIBRARIES stoker::webp)
  list(APPEND _codecs "WebP")
elseif(_webp_mode STREQUAL "OFF")
  list(APPEND _missing "WebP (STOKER_WITH_WEBP=OFF)")
else()
  list(APPEND _missing "WebP (webp/decode.h / libwebp not found: apt-get install libwebp-dev)")
endif()
list(JOIN _codecs ", " _codecs)
message(STATUS "stoker image codecs: ${_codecs}")
foreach(_item IN LISTS _missing)
  message(STATUS "stoker image codecs: without ${_item}; decode_image raises "
                 "UnsupportedInputError on such images")
endforeach()

set(STOKER_GENERATED_INCLUDE_DIR "${CMAKE_CURRENT_BINARY_DIR}/generated")
configure_file("${CMAKE_CURRENT_LIST_DIR}/stoker_codecs.h.in"
               "${STOKER_GENERATED_INCLUDE_DIR}/stoker_codecs.h" @ONLY)
