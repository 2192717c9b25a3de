#include "util/cuda_host.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace stoker {
namespace {

using RegisterFn = int (*)(void*, size_t, unsigned int);
using UnregisterFn = int (*)(void*);
using ErrorStringFn = const char* (*)(int);
using DeviceCountFn = int (*)(int*);

struct CudaRuntime {
  RegisterFn host_register = nullptr;
  UnregisterFn host_unregister = nullptr;
  ErrorStringFn error_string = nullptr;
  std::string missing;  // why it is unusable, or empty
};

const CudaRuntime& Runtime() {
  static CudaRuntime runtime;
  static std::once_flag once;
  std::call_once(once, [] {
    void* handle = nullptr;
    // The process's own runtime first (loaded by torch), then any on the library path.
    for (int flags : {RTLD_NOW | RTLD_NOLOAD, RTLD_NOW}) {
      for (const char* name :
           {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}) {
        handle = dlopen(name, flags);
        if (handle != nullptr) break;
      }
      if (handle != nullptr) break;
    }
    if (handle == nullptr) {
      runtime.missing = "no CUDA runtime (libcudart) is loaded or installed";
      return;
    }
    runtime.host_register = reinterpret_cast<RegisterFn>(dlsym(handle, "cudaHostRegister"));
    runtime.host_unregister = reinterpret_cast<UnregisterFn>(dlsym(handle, "cudaHostUnregister"));
    runtime.error_string = reinterpret_cast<ErrorStringFn>(dlsym(handle, "cudaGetErrorString"));
    auto device_count = reinterpret_cast<DeviceCountFn>(dlsym(handle, "cudaGetDeviceCount"));
    if (!runtime.host_register || !runtime.host_unregister || !runtime.error_string ||
        !device_count) {
      runtime.missing = "the CUDA runtime found lacks cudaHostRegister";
      return;
    }
    // A runtime without a driver or a device (a toolkit on a CPU machine) cannot pin memory.
    int devices = 0;
    const int code = device_count(&devices);
    if (code != 0 || devices == 0) {
      runtime.missing = std::string("the CUDA runtime sees no GPU (") +
                        (code != 0 ? runtime.error_string(code) : "0 devices") + ")";
    }
  });
  return runtime;
}

}  // namespace

Status CudaHostAvailable() {
  const CudaRuntime& runtime = Runtime();
  if (!runtime.missing.empty()) {
    return MakeError(ErrorKind::kInvalidOption,
                     "pin_memory=True: " + runtime.missing +
                         "; import a CUDA build of torch first, or leave pin_memory off");
  }
  return Status::OK();
}

Status PinHostMemory(void* data, size_t bytes) {
  STOKER_RETURN_NOT_OK(CudaHostAvailable());
  const CudaRuntime& runtime = Runtime();
  const int code = runtime.host_register(data, bytes, 0);
  if (code != 0) {
    return Status::IOError("cudaHostRegister of ", bytes,
                           " bytes failed: ", runtime.error_string(code));
  }
  return Status::OK();
}

void UnpinHostMemory(void* data) {
  const CudaRuntime& runtime = Runtime();
  if (runtime.missing.empty()) runtime.host_unregister(data);
}

}  // namespace stoker
