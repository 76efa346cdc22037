# `cmake --install <build> [--prefix P]`: the daemons and the client in
# P/bin, the job API headers in P/include/weir with a CMake package
# (find_package(Weir), P/lib/cmake/Weir), the systemd units in
# P/lib/systemd/system and a commented configuration in /etc/weir/weir.yaml
# (P/etc/weir/weir.yaml unless P is /usr). Units and paths are filled in for
# the prefix given at install time.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS weir weir-jobmanager weir-taskmanager RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(DIRECTORY ${PROJECT_SOURCE_DIR}/api/weir DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS weir_api EXPORT WeirTargets)
install(EXPORT WeirTargets NAMESPACE Weir:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Weir)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/WeirConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/WeirConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Weir)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/WeirConfigVersion.cmake
  COMPATIBILITY ExactVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/WeirConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/WeirConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Weir)

# Evaluated at install time, so that --prefix reaches the units.
install(CODE "set(WEIR_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")")
install(CODE [[
  set(prefix "${CMAKE_INSTALL_PREFIX}")
  if(prefix STREQUAL "/usr")
    set(confdir "/etc/weir")
  else()
    set(confdir "${prefix}/etc/weir")
  endif()
  set(WEIR_INSTALL_BINDIR "${prefix}/bin")
  set(WEIR_CONFIG_FILE "${confdir}/weir.yaml")
  foreach(unit weir-jobmanager.service weir-taskmanager@.service)
    configure_file("${WEIR_SOURCE_DIR}/deploy/systemd/${unit}.in" "$ENV{DESTDIR}${prefix}/lib/systemd/system/${unit}" @ONLY)
    message(STATUS "Installing: $ENV{DESTDIR}${prefix}/lib/systemd/system/${unit}")
  endforeach()
  if(EXISTS "$ENV{DESTDIR}${confdir}/weir.yaml")
    message(STATUS "Keeping: $ENV{DESTDIR}${confdir}/weir.yaml (an existing configuration is never overwritten)")
  else()
    # file(INSTALL) adds DESTDIR itself.
    file(INSTALL "${WEIR_SOURCE_DIR}/deploy/systemd/weir.yaml" DESTINATION "${confdir}")
  endif()
]])
