# Defines the imported target dtrun::nccl (nccl.h and libnccl) when NCCL can be found. Used by the
# build (worker_runtime/CMakeLists.txt) and by the installed package (dtrunConfig.cmake).
# Search order: DTRUN_NCCL_ROOT, $NCCL_HOME, the CUDA toolkit's directories, the directory the
# package was built against (DTRUN_NCCL_BUILD_HINT), /usr/local/cuda.
if(TARGET dtrun::nccl)
  return()
endif()

set(_dtrun_nccl_hints ${DTRUN_NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT}
    ${CUDAToolkit_TARGET_DIR} ${DTRUN_NCCL_BUILD_HINT} /usr/local/cuda)
find_path(DTRUN_NCCL_INCLUDE_DIR nccl.h
  HINTS ${_dtrun_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(DTRUN_NCCL_LIBRARY NAMES nccl
  HINTS ${_dtrun_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib64 lib)
unset(_dtrun_nccl_hints)

if(DTRUN_NCCL_INCLUDE_DIR AND DTRUN_NCCL_LIBRARY)
  add_library(dtrun::nccl UNKNOWN IMPORTED)
  set_target_properties(dtrun::nccl PROPERTIES
    IMPORTED_LOCATION "${DTRUN_NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${DTRUN_NCCL_INCLUDE_DIR}")
endif()
