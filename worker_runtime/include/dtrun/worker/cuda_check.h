// Check macros for NCCL and CUDA calls (only with DTRUN_WORKER_HAS_NCCL). They convert the C
// error code at the call site into an exception that names the call, the library's
// error string, a context supplied by the caller (rank, communicator, store key) and file:line.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "common/error.h"

namespace dtrun::worker {

/// An NCCL call failed. result() is its ncclResult_t.
class NcclError : public Error {
 public:
  /// `what` is the whole message.
  NcclError(const std::string& what, ncclResult_t result) : Error(what), result_(result) {}
  /// The failing call's result.
  ncclResult_t result() const { return result_; }

 private:
  ncclResult_t result_;
};

/// A CUDA runtime call failed. error() is its cudaError_t.
class CudaError : public Error {
 public:
  /// `what` is the whole message.
  CudaError(const std::string& what, cudaError_t error) : Error(what), error_(error) {}
  /// The failing call's error.
  cudaError_t error() const { return error_; }

 private:
  cudaError_t error_;
};

namespace detail {
/// Throws NcclError: "<context>: <call> failed: <ncclGetErrorString> (<ncclGetLastError>) at f:l".
[[noreturn]] void throwNccl(ncclResult_t result, const char* call, const std::string& context,
                            const char* file, int line);
/// Throws CudaError: "<context>: <call> failed: <cudaGetErrorString> (<name>) at file:line".
[[noreturn]] void throwCuda(cudaError_t error, const char* call, const std::string& context,
                            const char* file, int line);
}  // namespace detail

}  // namespace dtrun::worker

/// Evaluates an NCCL call and returns its result; anything but ncclSuccess or ncclInProgress
/// (the normal answer of a nonblocking communicator) throws NcclError. `context` (a string
/// expression naming rank, communicator, key) is evaluated only on failure.
#define DTRUN_NCCL_CHECK(expr, context)                                                       \
  ([&]() {                                                                                    \
    ::ncclResult_t dtrunNcclRc_ = (expr);                                                     \
    if (dtrunNcclRc_ != ::ncclSuccess && dtrunNcclRc_ != ::ncclInProgress) {                  \
      ::dtrun::worker::detail::throwNccl(dtrunNcclRc_, #expr, (context), __FILE__, __LINE__); \
    }                                                                                         \
    return dtrunNcclRc_;                                                                      \
  }())

/// Evaluates a CUDA runtime call; anything but cudaSuccess throws CudaError with `context`
/// (evaluated only on failure).
#define DTRUN_CUDA_CHECK(expr, context)                                                       \
  ([&]() {                                                                                    \
    ::cudaError_t dtrunCudaRc_ = (expr);                                                      \
    if (dtrunCudaRc_ != ::cudaSuccess) {                                                      \
      ::dtrun::worker::detail::throwCuda(dtrunCudaRc_, #expr, (context), __FILE__, __LINE__); \
    }                                                                                         \
  }())
