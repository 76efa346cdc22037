# Test helpers shared by Weir's test directories.
#
# Tests against a real Kafka broker: the CTest fixture "kafka" starts one single-node
# broker per build tree with scripts/kafka.sh (in ${WEIR_TEST_KAFKA_DIR}) before the
# first test that needs it and stops it after the last one. `ctest -L kafka` runs just
# those tests (CTest adds the fixture's start/stop tests by itself). The few tests that
# kill brokers use the fixture "kafka_cluster" instead: three nodes
# (scripts/kafka.sh start-cluster, in ${WEIR_TEST_KAFKA_CLUSTER_DIR}); `ctest -L
# kafka-cluster` runs those.
include_guard(GLOBAL)

set(WEIR_TEST_KAFKA_DIR "${CMAKE_BINARY_DIR}/test-kafka"
    CACHE INTERNAL "Where the test Kafka broker keeps its config, data, log and pid")

# Defines the tests kafka_broker_start (FIXTURES_SETUP kafka) and kafka_broker_stop
# (FIXTURES_CLEANUP kafka). Safe to call more than once.
function(weir_add_kafka_fixture)
  # The first start also downloads Kafka from Maven Central.
  _weir_add_kafka_fixture_tests(kafka kafka_broker 180 60 start "${WEIR_TEST_KAFKA_DIR}")
endfunction()

# _weir_add_kafka_fixture_tests(<fixture> <prefix> <start timeout> <stop timeout> <start arguments>...):
# what the two fixtures share. Defines, once, the tests <prefix>_start
# (FIXTURES_SETUP <fixture>: scripts/kafka.sh <start arguments>) and <prefix>_stop
# (FIXTURES_CLEANUP <fixture>: scripts/kafka.sh stop <dir>, <dir> the second start
# argument), labelled "kafka".
function(_weir_add_kafka_fixture_tests fixture prefix start_timeout stop_timeout command dir)
  get_property(done GLOBAL PROPERTY "WEIR_${fixture}_FIXTURE_DEFINED")
  if(done)
    return()
  endif()
  set_property(GLOBAL PROPERTY "WEIR_${fixture}_FIXTURE_DEFINED" TRUE)
  set(script "${PROJECT_SOURCE_DIR}/scripts/kafka.sh")
  add_test(NAME "${prefix}_start" COMMAND "${script}" "${command}" "${dir}" ${ARGN})
  set_tests_properties("${prefix}_start" PROPERTIES
    FIXTURES_SETUP "${fixture}"
    LABELS kafka
    TIMEOUT "${start_timeout}")
  add_test(NAME "${prefix}_stop" COMMAND "${script}" stop "${dir}")
  set_tests_properties("${prefix}_stop" PROPERTIES
    FIXTURES_CLEANUP "${fixture}"
    LABELS kafka
    TIMEOUT "${stop_timeout}")
endfunction()

# The three-node test cluster (scripts/kafka.sh start-cluster) of the tests that
# kill brokers. Apart from the single broker: those tests SIGKILL and restart its
# nodes.
set(WEIR_TEST_KAFKA_CLUSTER_DIR "${CMAKE_BINARY_DIR}/test-kafka-cluster"
    CACHE INTERNAL "Where the three-node test Kafka cluster keeps its nodes' config, data, logs and pids")

# Defines the tests kafka_cluster_start (FIXTURES_SETUP kafka_cluster) and
# kafka_cluster_stop (FIXTURES_CLEANUP kafka_cluster). Safe to call more than once.
function(weir_add_kafka_cluster_fixture)
  _weir_add_kafka_fixture_tests(kafka_cluster kafka_cluster 240 90 start-cluster "${WEIR_TEST_KAFKA_CLUSTER_DIR}" 3)
endfunction()

# weir_add_kafka_test(<name> [TARGET <target>] [TIMEOUT <seconds>] [LABELS <label>...]
#                     [ARGS <arg>...])
#
# Adds test <name> running executable target <target> (default: <name>) against the
# test broker: it requires the "kafka" fixture, gets WEIR_TEST_KAFKA_DIR in its
# environment (tests/kafka/test_kafka.h reads the bootstrap address from there) and the
# label "kafka".
function(weir_add_kafka_test name)
  weir_add_kafka_fixture()
  _weir_add_test_against_kafka(weir_add_kafka_test kafka "${WEIR_TEST_KAFKA_DIR}" kafka ${ARGV})
endfunction()

# _weir_add_test_against_kafka(<function> <fixture> <dir> <labels> <name> <arguments>...):
# what weir_add_kafka_test and weir_add_kafka_cluster_test share. The test requires
# <fixture> (the caller defines it), gets WEIR_TEST_KAFKA_DIR=<dir> and the labels
# <labels> besides its own; <function> names the caller in errors.
function(_weir_add_test_against_kafka function fixture dir labels name)
  cmake_parse_arguments(PARSE_ARGV 5 arg "" "TARGET;TIMEOUT" "LABELS;ARGS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${function}(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_TARGET)
    set(arg_TARGET "${name}")
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 300)
  endif()
  add_test(NAME "${name}" COMMAND "$<TARGET_FILE:${arg_TARGET}>" ${arg_ARGS})
  set_tests_properties("${name}" PROPERTIES
    FIXTURES_REQUIRED "${fixture}"
    ENVIRONMENT "WEIR_TEST_KAFKA_DIR=${dir}"
    LABELS "${labels};${arg_LABELS}"
    TIMEOUT "${arg_TIMEOUT}")
endfunction()

# weir_add_unit_test(<name> <source> <libraries>...): an in-process GoogleTest
# binary, labelled "unit".
function(weir_add_unit_test name source)
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE ${ARGN} weir_testing GTest::gmock GTest::gtest_main)
  weir_target_defaults(${name})
  add_test(NAME ${name} COMMAND ${name})
  # ThreadSanitizer slows code 5-15 times.
  if(WEIR_TSAN)
    set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 900)
  else()
    set_tests_properties(${name} PROPERTIES LABELS unit TIMEOUT 120)
  endif()
  set_property(GLOBAL APPEND PROPERTY WEIR_UNIT_TESTS ${name})
endfunction()

# weir_add_integration_test(<name> <source> <libraries>...): a GoogleTest
# binary that starts the real weir binaries from <build>/bin, labelled
# "integration". Its tests run one after another.
function(weir_add_integration_test name source)
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE ${ARGN} weir_testing GTest::gtest_main)
  add_dependencies(${name} weir weir-jobmanager weir-taskmanager)
  weir_target_defaults(${name})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS integration TIMEOUT 600)
endfunction()

# weir_add_kafka_cluster_test(<name> [TARGET <target>] [TIMEOUT <seconds>]
#                             [LABELS <label>...] [ARGS <arg>...])
#
# As weir_add_kafka_test, against the three-node cluster: requires the
# "kafka_cluster" fixture and gets WEIR_TEST_KAFKA_DIR pointing at it (its
# bootstrap file lists every node; tests/kafka/kafka_cluster.h reads the rest).
function(weir_add_kafka_cluster_test name)
  weir_add_kafka_cluster_fixture()
  _weir_add_test_against_kafka(weir_add_kafka_cluster_test kafka_cluster "${WEIR_TEST_KAFKA_CLUSTER_DIR}"
                               "kafka;kafka-cluster" ${ARGV})
endfunction()

# Tests against a real etcd server: the CTest fixture "etcd" starts one
# single-member server per build tree with scripts/etcd.sh (in
# ${WEIR_TEST_ETCD_DIR}) before the first test that needs it and stops it after
# the last one. `ctest -L etcd` runs those tests.
set(WEIR_TEST_ETCD_DIR "${CMAKE_BINARY_DIR}/test-etcd"
    CACHE INTERNAL "Where the test etcd server keeps its data, log and pid")

# weir_add_etcd_test(<name> [TIMEOUT <seconds>] [LABELS <label>...]): test
# <name> (the target of the same name) requires the "etcd" fixture, gets
# WEIR_TEST_ETCD_DIR in its environment and the label "etcd".
function(weir_add_etcd_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TIMEOUT" "LABELS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "weir_add_etcd_test(${name}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 300)
  endif()
  get_property(done GLOBAL PROPERTY WEIR_etcd_FIXTURE_DEFINED)
  if(NOT done)
    set_property(GLOBAL PROPERTY WEIR_etcd_FIXTURE_DEFINED TRUE)
    set(script "${PROJECT_SOURCE_DIR}/scripts/etcd.sh")
    add_test(NAME etcd_server_start COMMAND "${script}" start "${WEIR_TEST_ETCD_DIR}")
    set_tests_properties(etcd_server_start PROPERTIES FIXTURES_SETUP etcd LABELS etcd TIMEOUT 60)
    add_test(NAME etcd_server_stop COMMAND "${script}" stop "${WEIR_TEST_ETCD_DIR}")
    set_tests_properties(etcd_server_stop PROPERTIES FIXTURES_CLEANUP etcd LABELS etcd TIMEOUT 60)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES
    FIXTURES_REQUIRED etcd
    ENVIRONMENT "WEIR_TEST_ETCD_DIR=${WEIR_TEST_ETCD_DIR}"
    LABELS "etcd;${arg_LABELS}"
    TIMEOUT "${arg_TIMEOUT}")
endfunction()
