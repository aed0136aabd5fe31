// What the host has left to give.
#pragma once

#include <cstdint>

namespace lr {

// MemAvailable from /proc/meminfo (free plus reclaimable memory), else the
// free pages; 0 when neither can be read.
uint64_t available_memory_bytes();

}  // namespace lr
