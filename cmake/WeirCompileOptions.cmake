# Warnings and sanitizers for Weir's own targets. Third-party headers are
# included as system headers by their imported targets, so -Werror-free
# warnings here only speak about our code.
function(weir_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter -Wno-missing-field-initializers)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # librdkafka's producev macros use statement expressions.
    # Thread-safety analysis of ABSL_GUARDED_BY and friends: a finding fails the build.
    target_compile_options(${target} PRIVATE -Wthread-safety -Werror=thread-safety -Wno-gnu-statement-expression)
  endif()
endfunction()

if(WEIR_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

if(WEIR_TSAN)
  # Data races and lock-order inversions. The process must load an Abseil
  # built with TSan as well (scripts/build-tsan-abseil.sh), or every
  # absl::Mutex is invisible to it.
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

if(WEIR_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "WEIR_FUZZ needs clang (CXX=clang++): libFuzzer is part of clang")
  endif()
  # Coverage for libFuzzer in all of Weir's code, and ASan + UBSan to turn
  # memory errors into crashes it reports.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Debug information. A full -g build of every test binary (each links gRPC,
# protobuf and Abseil statically) takes over 3 GiB of disk, three quarters
# of it DWARF; line tables alone (-g1) keep symbolized backtraces, sanitizer
# reports and gdb's `bt` with file:line, at about a third of the size.
# -DWEIR_DEBUG_INFO=full brings back variables and types for a debugging
# session.
set(WEIR_DEBUG_INFO "lines" CACHE STRING "Debug information in RelWithDebInfo builds: lines (-g1) or full (-g)")
set_property(CACHE WEIR_DEBUG_INFO PROPERTY STRINGS lines full)
if(WEIR_DEBUG_INFO STREQUAL "lines")
  string(REGEX REPLACE "(^| )-g( |$)" "\\1-g1\\2" CMAKE_CXX_FLAGS_RELWITHDEBINFO "${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
  string(REGEX REPLACE "(^| )-g( |$)" "\\1-g1\\2" CMAKE_C_FLAGS_RELWITHDEBINFO "${CMAKE_C_FLAGS_RELWITHDEBINFO}")
elseif(NOT WEIR_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "WEIR_DEBUG_INFO is '${WEIR_DEBUG_INFO}': use lines (-g1, the default) or full (-g)")
endif()
