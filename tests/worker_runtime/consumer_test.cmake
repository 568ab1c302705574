# ctest worker:install_consumer: installs the worker component of the build to a temporary
# prefix, builds tests/worker_runtime/consumer against it with find_package(dtrun) and runs it,
# then builds the same program with only pkg-config's flags and runs that too.
foreach(var BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER DTRUN_BIN)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "$ ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${shown}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --component worker)

# What the package promises: headers, library, CMake package, pkg-config file; and no Boost,
# spdlog or JSON in dtrun::worker's link interface.
file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
list(SORT installed)
string(REPLACE ";" "\n  " listing "${installed}")
message(STATUS "installed:\n  ${listing}")
foreach(expected include/dtrun/worker/worker.h include/dtrun/worker/c_api.h
        include/dtrun/common/abort_key.h include/dtrun/rendezvous/store.h)
  if(NOT EXISTS ${prefix}/${expected})
    message(FATAL_ERROR "${expected} was not installed")
  endif()
endforeach()
file(GLOB_RECURSE config ${prefix}/*/dtrunConfig.cmake)
file(GLOB_RECURSE targets ${prefix}/*/dtrunWorkerTargets.cmake)
file(GLOB_RECURSE pc ${prefix}/*/dtrun-worker.pc)
if(NOT config OR NOT targets OR NOT pc)
  message(FATAL_ERROR "missing CMake package or pkg-config file: '${config}' '${targets}' '${pc}'")
endif()
file(READ ${targets} targetsText)
if(targetsText MATCHES "Boost|spdlog|nlohmann|fmt::")
  message(FATAL_ERROR "dtrun::worker's interface names ${CMAKE_MATCH_0}:\n${targetsText}")
endif()

# find_package(dtrun) from a separate project.
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer ${DTRUN_BIN})
run(${WORK_DIR}/build/consumer_c)

# pkg-config alone.
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  get_filename_component(pcdir ${pc} DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} ${pcdir})
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs dtrun-worker
                  OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs dtrun-worker failed")
  endif()
  message(STATUS "pkg-config: ${flags}")
  separate_arguments(flagList UNIX_COMMAND "${flags}")
  # pkg-config gives -L but no run path; libnccl may live outside the loader's default path.
  foreach(flag ${flagList})
    if(flag MATCHES "^-L(.+)")
      list(APPEND flagList "-Wl,-rpath,${CMAKE_MATCH_1}")
    endif()
  endforeach()
  run(${CXX_COMPILER} -std=c++20 ${CONSUMER_SOURCE_DIR}/consumer.cpp ${flagList}
      -o ${WORK_DIR}/consumer_pkgconfig)
  run(${WORK_DIR}/consumer_pkgconfig ${DTRUN_BIN})
else()
  message(STATUS "SKIPPED the pkg-config build: pkg-config is not installed")
endif()
