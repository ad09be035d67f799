/* cuda_runtime.h (cuda-emu stand-in): the runtime API, and in C++ the device
 * side (types, built-ins, intrinsics) of tests/cuda-emu/include/slemu_device.h. */
#ifndef SLEMU_CUDA_RUNTIME_H
#define SLEMU_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "slemu_device.h"
#endif
#endif
