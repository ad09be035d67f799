/* cuda_bf16.h (cuda-emu stand-in): see slemu_device.h. */
#include "slemu_device.h"
