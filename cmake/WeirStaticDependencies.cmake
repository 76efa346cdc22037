# WEIR_STATIC_GRPC: link gRPC, protobuf and Abseil into Weir's binaries from
# the static archives Debian ships beside the shared libraries
# (libgrpc-dev, libprotobuf-dev, libabsl-dev), instead of loading some sixty
# shared libraries at start. A daemon then maps only the parts of them it
# uses, contiguously in its own binary: about 4 MiB less resident memory per
# daemon at rest (bench/README.md, memory_bench), and no symbol relocation
# of those libraries at every start.
#
# Safe because nothing else in a Weir process uses them: job binaries link
# only libstdc++ (they talk to the TaskManager through weir/ headers), and
# the shared libraries a daemon still loads (OpenSSL, librdkafka, RocksDB's
# compression libraries, c-ares, re2, spdlog, prometheus-cpp, systemd) do not
# link Abseil or protobuf. OpenSSL stays shared, so its security updates
# apply without rebuilding Weir.
#
# Included after find_package(absl) and find_package(gRPC); protobuf's
# archive comes from FindProtobuf (Protobuf_USE_STATIC_LIBS, set before it).
# Off by default in the sanitizer builds: the ThreadSanitizer build brings
# its own Abseil (scripts/build-tsan-abseil.sh).

# Points the imported shared-library target `target` at the static archive
# beside its shared library (libX.so[.N...] -> libX.a).
function(weir_link_archive_instead target)
  set(found FALSE)
  foreach(property IMPORTED_LOCATION IMPORTED_LOCATION_NONE IMPORTED_LOCATION_RELEASE
                   IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_DEBUG)
    get_target_property(location ${target} ${property})
    if(NOT location)
      continue()
    endif()
    string(REGEX REPLACE "\\.so(\\.[0-9]+)*$" ".a" archive "${location}")
    if(archive STREQUAL location OR NOT EXISTS "${archive}")
      message(FATAL_ERROR "WEIR_STATIC_GRPC: ${target} has no static archive beside ${location} "
                          "(install its -dev package, or configure with -DWEIR_STATIC_GRPC=OFF)")
    endif()
    set_target_properties(${target} PROPERTIES ${property} "${archive}")
    set(found TRUE)
  endforeach()
  if(NOT found)
    message(FATAL_ERROR "WEIR_STATIC_GRPC: ${target} names no library file")
  endif()
endfunction()

# What no code reaches is left out of the binaries (most of each archive).
add_link_options(LINKER:--gc-sections)

get_property(weir_imported DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY IMPORTED_TARGETS)
foreach(target IN LISTS weir_imported)
  if(NOT target MATCHES "^(absl::|gRPC::(grpc\\+\\+|grpc|gpr|upb|address_sorting)$)")
    continue()
  endif()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "SHARED_LIBRARY")
    weir_link_archive_instead(${target})
  endif()
endforeach()
