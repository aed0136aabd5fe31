// The emulator's runtime API: device memory is host memory (each allocation
// recorded, so copies are checked against the allocations they name), streams
// run their work when it is issued, a capturing stream records it into a
// graph, and a graph replays its nodes in order. The checks a GPU would make
// are made here too: launch geometry, the shared memory limit, copies of the
// wrong kind or past an allocation's end, synchronous calls while capturing.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/emu/cuda_emu.h"
#include "backend/cuda/emu/grid.h"

struct CUgraphNode_st {
  cudaGraphNodeType type;
  std::function<cudaError_t()> run;
};
struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};
struct CUgraphExec_st {
  std::vector<std::function<cudaError_t()>> steps;
};
struct CUstream_st {
  std::unique_ptr<CUgraph_st> capture;  // non-null while capturing
  bool invalidated = false;             // a prohibited call happened during the capture
};
struct CUevent_st {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};

namespace {

thread_local cudaError_t t_last = cudaSuccess;
thread_local std::string t_why;  // the emulator's detail on the last error
thread_local cudaError_t t_why_of = cudaSuccess;
thread_local std::string t_message;  // cudaGetErrorString's storage
thread_local int t_capturing = 0;    // streams this thread is capturing

std::mutex g_mu;
std::map<uintptr_t, size_t> g_device;  // allocation start -> bytes
std::map<const void*, size_t> g_shared_limit;

cudaError_t fail(cudaError_t e, std::string why) {
  t_why = std::move(why);
  t_why_of = e;
  return e;
}

}  // namespace

// Whether [p, p + n) lies inside one device allocation.
bool lr::cuda_emu::on_device(const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_device.upper_bound(a);
  if (it == g_device.begin()) return false;
  --it;
  return a >= it->first && n <= it->second && a - it->first <= it->second - n;
}

namespace {

using lr::cuda_emu::on_device;

// A synchronous call while this thread captures a stream: refused, as CUDA
// refuses it in the global and thread-local capture modes.
cudaError_t refuse_while_capturing(const char* what) {
  if (t_capturing == 0) return cudaSuccess;
  return fail(cudaErrorStreamCaptureUnsupported,
              std::string(what) + " while a stream of this thread is capturing");
}

cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  const bool d_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool s_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (n == 0) return cudaSuccess;
  if (d_dev != on_device(dst, n))
    return fail(cudaErrorInvalidValue, "copy of " + std::to_string(n) + " bytes: the destination " +
                                           (d_dev ? "is not inside a device allocation"
                                                  : "is device memory, the kind says host"));
  if (s_dev != on_device(src, n))
    return fail(cudaErrorInvalidValue, "copy of " + std::to_string(n) + " bytes: the source " +
                                           (s_dev ? "is not inside a device allocation"
                                                  : "is device memory, the kind says host"));
  return cudaSuccess;
}

}  // namespace

const char* cudaGetErrorString(cudaError_t e) {
  const char* base = "unknown error";
  switch (e) {
    case cudaSuccess:
      base = "no error";
      break;
    case cudaErrorInvalidValue:
      base = "invalid argument";
      break;
    case cudaErrorMemoryAllocation:
      base = "out of memory";
      break;
    case cudaErrorInvalidConfiguration:
      base = "invalid configuration argument";
      break;
    case cudaErrorInvalidDevicePointer:
      base = "invalid device pointer";
      break;
    case cudaErrorInvalidResourceHandle:
      base = "invalid resource handle";
      break;
    case cudaErrorLaunchFailure:
      base = "unspecified launch failure";
      break;
    case cudaErrorStreamCaptureUnsupported:
      base = "operation not permitted when stream is capturing";
      break;
    case cudaErrorStreamCaptureInvalidated:
      base = "operation failed due to a previous error during capture";
      break;
  }
  t_message = base;
  if (e == t_why_of && !t_why.empty()) t_message += " (CUDA emulator: " + t_why + ")";
  return t_message.c_str();
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (!p) return cudaErrorInvalidValue;
  if (cudaError_t e = refuse_while_capturing("cudaMalloc")) return e;
  void* m = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (!m) return fail(cudaErrorMemoryAllocation, std::to_string(bytes) + " bytes");
  std::lock_guard<std::mutex> lock(g_mu);
  g_device[reinterpret_cast<uintptr_t>(m)] = bytes;
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_device.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_device.end())
    return fail(cudaErrorInvalidDevicePointer, "cudaFree of a pointer cudaMalloc did not return");
  g_device.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  if (!p) return cudaErrorInvalidValue;
  *p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  if (cudaError_t e = refuse_while_capturing("cudaMemset")) return e;
  if (bytes && !on_device(p, bytes))
    return fail(cudaErrorInvalidValue, "cudaMemset past a device allocation");
  std::memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  if (!s) return cudaErrorInvalidValue;
  *s = new CUstream_st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s && s->capture) --t_capturing;
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return refuse_while_capturing("cudaStreamSynchronize");
}

cudaError_t cudaDeviceSynchronize() {
  return refuse_while_capturing("cudaDeviceSynchronize");
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t e = refuse_while_capturing("cudaMemcpy")) return e;
  if (cudaError_t e = check_copy(dst, src, bytes, kind)) return e;
  if (bytes) std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s) {
  if (cudaError_t e = check_copy(dst, src, bytes, kind)) return e;
  return lr::cuda_emu::enqueue(s, cudaGraphNodeTypeMemcpy, [dst, src, bytes]() {
    if (bytes) std::memcpy(dst, src, bytes);
    return cudaSuccess;
  });
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!s) return fail(cudaErrorStreamCaptureUnsupported, "capturing the legacy default stream");
  if (s->capture) return fail(cudaErrorInvalidValue, "the stream is already capturing");
  s->capture = std::make_unique<CUgraph_st>();
  s->invalidated = false;
  ++t_capturing;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  if (!s || !s->capture || !g) return cudaErrorInvalidValue;
  --t_capturing;
  std::unique_ptr<CUgraph_st> graph = std::move(s->capture);
  if (s->invalidated) {
    *g = nullptr;
    return fail(cudaErrorStreamCaptureInvalidated, "a launch failed during the capture");
  }
  *g = graph.release();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st) {
  if (!st) return cudaErrorInvalidValue;
  *st = s && s->capture
            ? (s->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive)
            : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n) {
  if (!g || !n) return cudaErrorInvalidValue;
  if (nodes)
    for (size_t i = 0; i < std::min(*n, g->nodes.size()); ++i) nodes[i] = g->nodes[i].get();
  *n = g->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (!node || !type) return cudaErrorInvalidValue;
  *type = node->type;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long) {
  if (!e || !g) return cudaErrorInvalidValue;
  auto x = std::make_unique<CUgraphExec_st>();
  for (const auto& n : g->nodes) x->steps.push_back(n->run);
  *e = x.release();
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  if (!e) return cudaErrorInvalidResourceHandle;
  if (s && s->capture)
    return fail(cudaErrorStreamCaptureUnsupported, "a graph launched into a capture");
  for (const auto& step : e->steps)
    if (cudaError_t err = step()) return err;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  if (!e) return cudaErrorInvalidValue;
  *e = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  if (!e) return cudaErrorInvalidResourceHandle;
  e->at = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return e ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  if (!ms || !a || !b || !a->recorded || !b->recorded) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* n) {
  if (!n) return cudaErrorInvalidValue;
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (!p || device != 0) return cudaErrorInvalidValue;
  *p = {};
  std::snprintf(p->name, sizeof p->name, "lowrank CUDA emulator on the CPU (not a GPU)");
  p->totalGlobalMem = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int device) {
  if (!v || device != 0 || attr != cudaDevAttrMultiProcessorCount) return cudaErrorInvalidValue;
  *v = 1;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return cudaErrorInvalidValue;
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return cudaErrorInvalidValue;
  *v = 0;
  return cudaSuccess;
}

namespace lr::cuda_emu {

cudaError_t set_shared_limit(const void* kernel, int bytes) {
  if (bytes < 0 || size_t(bytes) > kMaxSharedLimit)
    return fail(cudaErrorInvalidValue, "a dynamic shared memory limit of " + std::to_string(bytes) +
                                           " bytes, past the device's " +
                                           std::to_string(kMaxSharedLimit));
  std::lock_guard<std::mutex> lock(g_mu);
  g_shared_limit[kernel] = size_t(bytes);
  return cudaSuccess;
}

void submit(const LaunchConfig& c, std::function<void()> body) {
  const uint64_t threads = uint64_t(c.block.x) * c.block.y * c.block.z;
  const auto bad = [&c](const std::string& why) {
    t_last = fail(cudaErrorInvalidConfiguration, why);
    if (c.stream && c.stream->capture) c.stream->invalidated = true;  // as CUDA does
  };
  if (threads == 0 || threads > 1024 || c.block.z > 64)
    return bad("a block of " + std::to_string(c.block.x) + "x" + std::to_string(c.block.y) + "x" +
               std::to_string(c.block.z) + " threads");
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.grid.x > 0x7fffffffu ||
      c.grid.y > 65535 || c.grid.z > 65535)
    return bad("a grid of " + std::to_string(c.grid.x) + "x" + std::to_string(c.grid.y) + "x" +
               std::to_string(c.grid.z) + " blocks");
  size_t limit = kDefaultSharedLimit;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_shared_limit.find(c.kernel);
    if (it != g_shared_limit.end()) limit = std::max(limit, it->second);
  }
  if (c.smem > limit) {
    t_last = fail(cudaErrorInvalidValue, std::to_string(c.smem) +
                                             " bytes of dynamic shared memory, past the kernel's "
                                             "limit of " +
                                             std::to_string(limit));
    if (c.stream && c.stream->capture) c.stream->invalidated = true;
    return;
  }
  auto run = [c, body = std::move(body)]() {
    const std::string err = lr::cuda_emu::run_grid(c.grid, c.block, c.smem, body);
    if (err.empty()) return cudaSuccess;
    std::fprintf(stderr, "CUDA emulator: a kernel failed: %s\n", err.c_str());
    return fail(cudaErrorLaunchFailure, err);
  };
  t_last = enqueue(c.stream, cudaGraphNodeTypeKernel, std::move(run));
}

cudaError_t enqueue(cudaStream_t s, cudaGraphNodeType type, std::function<cudaError_t()> work) {
  if (s && s->capture) {
    s->capture->nodes.push_back(
        std::make_unique<CUgraphNode_st>(CUgraphNode_st{type, std::move(work)}));
    return cudaSuccess;
  }
  if (!s) {
    if (cudaError_t e = refuse_while_capturing("work on the legacy default stream")) return e;
  }
  return work();
}

}  // namespace lr::cuda_emu
