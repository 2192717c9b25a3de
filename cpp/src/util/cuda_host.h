// Page-locked ("pinned") host memory through the CUDA runtime, without linking it: the runtime
// is the one already loaded in the process (a CUDA build of torch loads libcudart), found with
// dlopen at first use. Pinned slabs let torch copy batches to a GPU asynchronously, with no
// staging copy.
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cstddef>

#include "stoker/error.h"

namespace stoker {

/// OK when a CUDA runtime can be used to pin memory; otherwise an error saying why.
Status CudaHostAvailable();

/// cudaHostRegister(data, bytes): the memory stays pinned until UnpinHostMemory.
Status PinHostMemory(void* data, size_t bytes);
void UnpinHostMemory(void* data);

}  // namespace stoker
