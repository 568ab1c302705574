#include "dtrun/worker/cuda_check.h"

namespace dtrun::worker::detail {
namespace {

std::string where(const char* file, int line) {
  return std::string(" at ") + file + ":" + std::to_string(line);
}

}  // namespace

void throwNccl(ncclResult_t result, const char* call, const std::string& context, const char* file,
               int line) {
  std::string msg = context + ": " + call + " failed: " + ::ncclGetErrorString(result);
  // ncclGetLastError(NULL) holds NCCL's own explanation (which socket, which peer, which env).
  const char* last = ::ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') msg += " (" + std::string(last) + ")";
  throw NcclError(msg + where(file, line), result);
}

void throwCuda(cudaError_t error, const char* call, const std::string& context, const char* file,
               int line) {
  // cudaGetLastError clears the sticky per-thread error so a later, unrelated call does not
  // report this one again.
  (void)::cudaGetLastError();
  throw CudaError(context + ": " + call + " failed: " + ::cudaGetErrorString(error) + " (" +
                      ::cudaGetErrorName(error) + ")" + where(file, line),
                  error);
}

}  // namespace dtrun::worker::detail
