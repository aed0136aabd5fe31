// The emulator's execution of one launch: blocks one after another, the
// threads of a block as fibers on the calling thread. A fiber runs until it
// reaches __syncthreads, a warp shuffle or its end; the scheduler then
// releases a barrier once every live thread it concerns has reached it
// (__syncthreads: the block's, a shuffle: the warp's), and reports a
// deadlock (threads of one barrier waiting on others stuck at another) as the
// launch's error.
//
// Fibers switch with a few instructions on x86-64 (callee-saved registers,
// stack pointer, MXCSR and the x87 control word), with ucontext elsewhere.
// Under AddressSanitizer every switch is announced to it.
#include "backend/cuda/emu/grid.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/emu/cuda_emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define LR_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LR_EMU_ASAN 1
#endif
#endif
#ifdef LR_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace lr::cuda_emu {
namespace {

constexpr int kWarp = 32;
#ifdef LR_EMU_ASAN
constexpr size_t kStack = 512 << 10;
#else
constexpr size_t kStack = 128 << 10;
#endif

#if defined(__x86_64__)
// switch(save, load): pushes the callee-saved state, stores the stack pointer
// in *save, loads `load` and pops the state saved there. A fresh stack starts
// in lr_emu_fiber_start with its entry function in r12 and argument in r13.
extern "C" void lr_emu_switch(void** save, void* load);
extern "C" void lr_emu_fiber_start();
asm(R"(
  .text
  .globl lr_emu_switch
  .type lr_emu_switch, @function
lr_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lr_emu_switch, .-lr_emu_switch
  .globl lr_emu_fiber_start
  .type lr_emu_fiber_start, @function
lr_emu_fiber_start:
  movq %r13, %rdi
  callq *%r12
  ud2
  .size lr_emu_fiber_start, .-lr_emu_fiber_start
)");
#endif

struct Fiber;
void fiber_main(Fiber* f);

struct Fiber {
  enum State { Ready, AtSync, AtShuffle, Done };
  char* stack = nullptr;  // mmap'ed, the lowest page a guard
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t ctx;
#endif
  State state = Done;
  uint3 tid{0, 0, 0};
  int linear = 0, phase = 0;

  Fiber() {
    void* p = mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) std::abort();
    stack = static_cast<char*>(p);
    mprotect(stack, size_t(sysconf(_SC_PAGESIZE)), PROT_NONE);
  }
  ~Fiber() {
    munmap(stack, kStack);
  }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // A fresh start of fiber_main(this) at the top of the stack.
  void reset() {
#if defined(__x86_64__)
    auto top = reinterpret_cast<uintptr_t>(stack + kStack) & ~uintptr_t(15);
    auto* frame = reinterpret_cast<uint64_t*>(top - 88);  // 16 + 6 registers + return address
    uint32_t mxcsr;
    uint16_t fcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fcw));
    frame[0] = fcw;
    frame[1] = mxcsr;
    frame[2] = frame[3] = 0;                             // r15, r14
    frame[4] = reinterpret_cast<uint64_t>(this);         // r13: the argument
    frame[5] = reinterpret_cast<uint64_t>(&fiber_main);  // r12: the entry
    frame[6] = frame[7] = 0;                             // rbx, rbp
    frame[8] = reinterpret_cast<uint64_t>(&lr_emu_fiber_start);
    sp = frame;
#else
    getcontext(&ctx);
    ctx.uc_stack.ss_sp = stack;
    ctx.uc_stack.ss_size = kStack;
    ctx.uc_link = nullptr;
    makecontext(&ctx, reinterpret_cast<void (*)()>(&fiber_main), 1, this);
#endif
  }
};

// The block being run on this thread.
struct Block {
  const std::function<void()>* body = nullptr;
  std::vector<std::unique_ptr<Fiber>> pool;  // grows to the largest block seen
  int n = 0, live = 0;
  Fiber* current = nullptr;
  uint3 bid{0, 0, 0};
  dim3 bdim, gdim;
  std::vector<char> smem_store;
  char* smem = nullptr;
  std::vector<uint32_t> lanes;  // [warps][2][32]: shuffle values, double-buffered
  std::string error;
#if defined(__x86_64__)
  void* sched_sp = nullptr;
#else
  ucontext_t sched;
#endif
#ifdef LR_EMU_ASAN
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif
};
thread_local Block t_block;

// Scheduler -> fiber.
void resume(Fiber* f) {
  Block& b = t_block;
  b.current = f;
#ifdef LR_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, kStack);
#endif
#if defined(__x86_64__)
  lr_emu_switch(&b.sched_sp, f->sp);
#else
  swapcontext(&b.sched, &f->ctx);
#endif
#ifdef LR_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  b.current = nullptr;
}

// Fiber -> scheduler; `done`: never resumed (its stack is started afresh).
void yield(Fiber* f, bool done) {
  Block& b = t_block;
  (void)done;
#ifdef LR_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(done ? nullptr : &fake, b.sched_bottom, b.sched_size);
#endif
#if defined(__x86_64__)
  lr_emu_switch(&f->sp, b.sched_sp);
#else
  swapcontext(&f->ctx, &b.sched);
#endif
#ifdef LR_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void fiber_main(Fiber* f) {
#ifdef LR_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &t_block.sched_bottom, &t_block.sched_size);
#endif
  (*t_block.body)();
  f->state = Fiber::Done;
  --t_block.live;
  yield(f, true);
  std::abort();  // a finished fiber is never resumed
}

// Waits at a barrier of `kind` until the scheduler releases it.
void wait(Fiber::State kind) {
  Fiber* f = t_block.current;
  f->state = kind;
  yield(f, false);
}

// Runs one block; false (and b.error) on a deadlock. Between two barriers the
// threads run one after another, in ascending order in every other round and
// descending in the rest (`parity` alternates it between blocks too): a read
// of another thread's write that lacks a barrier between them sees the value
// unwritten in one of the two, wherever the reader comes first.
bool run_block(Block& b, unsigned parity) {
  for (int i = 0; i < b.n; ++i) {
    Fiber& f = *b.pool[size_t(i)];
    f.reset();
    f.state = Fiber::Ready;
    f.linear = i;
    f.phase = 0;
    f.tid = {unsigned(i) % b.bdim.x, unsigned(i) / b.bdim.x % b.bdim.y,
             unsigned(i) / (b.bdim.x * b.bdim.y)};
  }
  b.live = b.n;
  const int warps = (b.n + kWarp - 1) / kWarp;
  std::vector<int> at_shuffle(static_cast<size_t>(warps)), live_in(static_cast<size_t>(warps));
  for (unsigned round = parity;; ++round) {
    for (int k = 0; k < b.n; ++k) {
      const int i = round % 2 ? b.n - 1 - k : k;
      if (b.pool[size_t(i)]->state == Fiber::Ready) resume(b.pool[size_t(i)].get());
    }
    if (!b.error.empty()) return false;
    if (b.live == 0) return true;
    int at_sync = 0;
    std::fill(at_shuffle.begin(), at_shuffle.end(), 0);
    std::fill(live_in.begin(), live_in.end(), 0);
    for (int i = 0; i < b.n; ++i) {
      const Fiber& f = *b.pool[size_t(i)];
      if (f.state == Fiber::Done) continue;
      ++live_in[size_t(i / kWarp)];
      at_sync += f.state == Fiber::AtSync;
      at_shuffle[size_t(i / kWarp)] += f.state == Fiber::AtShuffle;
    }
    bool released = false;
    if (at_sync == b.live) {
      for (int i = 0; i < b.n; ++i)
        if (b.pool[size_t(i)]->state == Fiber::AtSync) b.pool[size_t(i)]->state = Fiber::Ready;
      released = true;
    } else {
      for (int w = 0; w < warps; ++w) {
        if (at_shuffle[size_t(w)] == 0 || at_shuffle[size_t(w)] != live_in[size_t(w)]) continue;
        for (int i = w * kWarp; i < std::min(b.n, (w + 1) * kWarp); ++i)
          if (b.pool[size_t(i)]->state == Fiber::AtShuffle) b.pool[size_t(i)]->state = Fiber::Ready;
        released = true;
      }
    }
    if (!released) {
      b.error = "deadlock: " + std::to_string(at_sync) + " of " + std::to_string(b.live) +
                " live threads wait at __syncthreads, the others at a warp shuffle their warp "
                "never completes";
      return false;
    }
  }
}

}  // namespace

const uint3& thread_index() {
  return t_block.current->tid;
}
const uint3& block_index() {
  return t_block.bid;
}
const dim3& block_dim() {
  return t_block.bdim;
}
const dim3& grid_dim() {
  return t_block.gdim;
}
void* dynamic_shared() {
  return t_block.smem;
}

void sync_threads() {
  wait(Fiber::AtSync);
}

uint32_t shuffle_xor(uint32_t v, int lane_mask, int width) {
  Block& b = t_block;
  Fiber* f = b.current;
  const int warp = f->linear / kWarp, lane = f->linear % kWarp;  // lanes count linear thread ids
  const int src = (lane & ~(width - 1)) | ((lane ^ lane_mask) & (width - 1));
  const int p = f->phase;  // shuffles this lane has done before
  uint32_t* buf = &b.lanes[(size_t(warp) * 2 + size_t(p & 1)) * kWarp];
  buf[lane] = v;
  wait(Fiber::AtShuffle);
  f->phase = p + 1;
  const int other = warp * kWarp + src;
  // A lane that took part has done p shuffles and is still to resume, or p + 1
  // (it may have exited since); one that has exited before this shuffle did not.
  const Fiber* o = other < b.n ? b.pool[size_t(other)].get() : nullptr;
  if (!o || !(o->phase == p + 1 || (o->phase == p && o->state != Fiber::Done))) {
    if (b.error.empty())
      b.error = "warp shuffle of thread " + std::to_string(f->linear) + " reads lane " +
                std::to_string(src) + ", which " +
                (other >= b.n ? "the block does not have" : "did not take part");
    return 0;
  }
  return buf[src];
}

std::string run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()>& body) {
  Block& b = t_block;
  if (b.body) return "a kernel launched from inside a kernel";
  b.n = int(block.x * block.y * block.z);
  while (b.pool.size() < size_t(b.n)) b.pool.push_back(std::make_unique<Fiber>());
  b.body = &body;
  b.bdim = block;
  b.gdim = grid;
  b.lanes.assign(size_t((b.n + kWarp - 1) / kWarp) * 2 * kWarp, 0);
  b.smem_store.resize(smem + 16);
  b.smem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(b.smem_store.data()) + 15) &
                                   ~uintptr_t(15));
  b.error.clear();
  std::string err;
  for (unsigned z = 0; z < grid.z && err.empty(); ++z)
    for (unsigned y = 0; y < grid.y && err.empty(); ++y)
      for (unsigned x = 0; x < grid.x && err.empty(); ++x) {
        b.bid = {x, y, z};
        std::memset(b.smem, 0xff, smem);  // NaN: reads of unwritten shared memory show
        if (!run_block(b, x + y + z))
          err = "block (" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) +
                "): " + b.error;
      }
  b.body = nullptr;
  return err;
}

}  // namespace lr::cuda_emu
