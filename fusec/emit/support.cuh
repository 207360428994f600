// ---- fusec support: instance contexts and the cross-block finish of reductions ----
// (`real` and `VEC` are defined above by the generator.)

// Every generated kernel's first statement. fusec launches its kernels as programmatic
// dependent launches where the GPU has them (sm_90 on): the driver may start a kernel
// while the one before it in the stream still runs, so that its launch overlaps that
// one's end. Here it waits until the kernel before has ended and its writes are visible
// (a no-op for a plain launch), and then lets the kernel after it be launched in turn:
// one kernel ahead at most, so the blocks it keeps waiting take little room. A tile
// kernel whose sums run apart waits at its start and lets its sums kernel be launched
// at its end, once its partials are stored: the sums' blocks wait in no SM meanwhile.
__device__ __forceinline__ void fusec_wait_previous() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void fusec_release_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void fusec_follow_previous() {
  fusec_wait_previous();
  fusec_release_next();
}

// VEC reals moved by one 16-byte access.
struct __align__(16) fusec_vec { real v[VEC]; };

// One 16-byte load; EVICT_FIRST marks it read-once (ld.global.cs), so that L2 keeps
// what the kernel re-reads instead (tile routines pass the kernel's STREAM_MATRIX).
template <bool EVICT_FIRST>
__device__ __forceinline__ fusec_vec fusec_load16(const real* p) {
  if constexpr (EVICT_FIRST) {
    fusec_vec v;
    if constexpr (sizeof(real) == 4) {
      *reinterpret_cast<float4*>(&v) = __ldcs(reinterpret_cast<const float4*>(p));
    } else {
      *reinterpret_cast<double2*>(&v) = __ldcs(reinterpret_cast<const double2*>(p));
    }
    return v;
  } else {
    return *reinterpret_cast<const fusec_vec*>(p);
  }
}

// One value, loaded as fusec_load16 loads 16 bytes (rows that are not whole 16-byte pieces
// take a whole piece as VEC of these, under the same policy).
template <bool EVICT_FIRST>
__device__ __forceinline__ real fusec_load1(const real* p) {
  if constexpr (EVICT_FIRST) {
    return __ldcs(p);
  } else {
    return *p;
  }
}

// One 16-byte store; STREAMING marks it evict-first (st.global.cs), so that L2 keeps
// the kernel's inputs rather than its output (vector routines pass STREAM_STORES).
template <bool STREAMING>
__device__ __forceinline__ void fusec_store16(real* p, const fusec_vec& v) {
  if constexpr (STREAMING) {
    if constexpr (sizeof(real) == 4) {
      __stcs(reinterpret_cast<float4*>(p), *reinterpret_cast<const float4*>(&v));
    } else {
      __stcs(reinterpret_cast<double2*>(p), *reinterpret_cast<const double2*>(&v));
    }
  } else {
    *reinterpret_cast<fusec_vec*>(p) = v;
  }
}

// Where an instance of an unnested function is, as seen by one thread.
struct fusec_chunk {
  int t;          // thread index in the instance group (the block)
  long long i;    // first value this thread handles: chunk start + t*VEC
  long long n;    // vector length; accesses at or past it are guarded
  bool vec_ok;    // 16-byte accesses are aligned (every vector base is)
  bool full;      // the block's whole chunk lies inside and vec_ok: no guards needed
};

// Where an instance of a nested function (one tile) is, as seen by one thread.
struct fusec_tile {
  int tx, ty;     // thread coordinates: tx < BLOCK_X (a warp), ty < BLOCK_Y
  int row0, col0; // first row and column of the tile
  int rows, cols; // matrix size; accesses at or past it are guarded
  bool aligned;   // every base is 16-byte aligned: vectors move in 16-byte accesses
  bool vec_ok;    // aligned and cols % VEC == 0: every row starts on a 16-byte boundary
  bool full;      // the whole tile lies inside and vec_ok: no guards needed
};

// Where an instance of a nested function's band implementation (BAND_ROWS whole rows)
// is, as seen by one thread: it holds the 16-byte pieces j*BLOCK + t of each row.
struct fusec_band {
  int t;          // thread index in the block
  int row0;       // first row of the instance
  int rows, cols; // matrix size; accesses at or past it are guarded
  bool aligned;   // every base is 16-byte aligned (as fusec_tile's)
  bool vec_ok;    // aligned and cols % VEC == 0: every row starts on a 16-byte boundary
  bool full;      // all BAND_ROWS rows inside, cols == BAND_COLS and vec_ok: no guards needed
};

// p[0 .. VEC) += v with one vector atomic where sm_90 has it (float4), else one per value.
__device__ __forceinline__ void fusec_atomic_add16(real* p, const real* v) {
#if __CUDA_ARCH__ >= 900
  if constexpr (sizeof(real) == 4) {
    atomicAdd(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  } else  // an else, not a return: nvcc warns of an unreachable loop after a return
#endif
  {
    #pragma unroll
    for (int k = 0; k < VEC; ++k) atomicAdd(p + k, v[k]);
  }
}

// The barrier of the threads that run one kernel (library routines call it through
// BARRIER(), which the generator defines per kernel): the whole block's (ID 0), or, in
// a horizontally fused kernel (HFuse), the named barrier ID of one part's THREADS
// threads, whole warps, so the parts never wait for each other.
template <int ID, int THREADS>
__device__ __forceinline__ void fusec_barrier() {
  static_assert(ID >= 0 && ID < 16 && THREADS % 32 == 0, "a barrier id is 0-15, its threads whole warps");
  if constexpr (ID == 0) {
    BARRIER();  // the whole block's, as defined above
  } else {
    asm volatile("bar.sync %0, %1;" :: "n"(ID), "n"(THREADS) : "memory");
  }
}

// Reductions finish across blocks by the "last block" method (paper 3.2.2, way ii):
// every block stores its partial result, meets at a barrier, and one thread fences
// and counts the block in on each output tile it touched (kernel.py emits these: the
// thread issues every atomicAdd before it looks at any answer, so a block that
// touched several tiles waits for one round trip to L2, not one per tile); the block
// that arrives last at a tile sums its partials in a fixed order, so the result does
// not depend on which block was last, and needs no second launch and no atomics on data.
// `got` is what the block's atomicAdd on `counter` returned.
__device__ __forceinline__ bool fusec_came_last(unsigned* counter, unsigned got, unsigned arrivals) {
  const bool last = got == arrivals - 1;
  if (last) *counter = 0;  // ready for the next launch
  return last;
}

// One ticket at a time, as striped parts take them (kernel.py, Threads.tickets_at_once):
// thread `tid` 0 counts the block in, and the barrier shows every thread the answer.
// BAR, THREADS: the barrier of the threads finishing (see fusec_barrier).
template <int BAR = 0, int THREADS = 0>
__device__ __forceinline__ bool fusec_arrive(unsigned* counter, unsigned arrivals, int* flag, int tid) {
  if (tid == 0) *flag = atomicAdd(counter, 1u) == arrivals - 1;
  fusec_barrier<BAR, THREADS>();
  const bool last = *flag;
  if (last && tid == 0) *counter = 0;  // ready for the next launch
  return last;
}

// Partials of one output tile (or of a whole vector reduction) lie together, in a
// region of whole 128-byte L2 lines: the blocks' stores land in few lines, and the
// block that sums them discards the lines afterwards, so these scratch values are
// never written back to DRAM. Interleaved with the matrix stream, those write-backs
// cost 1-3% of a gemv on the H100 (experiments/results/h100-l2-policies.md). Workspaces start on a
// 256-byte boundary (cuMemAlloc), so every region is line-aligned.
#define FUSEC_LINE 128
__host__ __device__ constexpr long long fusec_region(long long reals) {
  return (reals * (long long)sizeof(real) + FUSEC_LINE - 1) / FUSEC_LINE * (FUSEC_LINE / (long long)sizeof(real));
}

// Drops a region's lines from L2 without writing them back (PTX discard.global.L2):
// its values become undefined, which is fine once summed; the next launch stores
// again before anything reads. Called after fusec_sum_partials, whose last barrier
// orders every read of the region before it.
template <int THREADS>
__device__ __forceinline__ void fusec_discard(const real* region, long long reals, int tid) {
  const char* base = reinterpret_cast<const char*>(region);
  const long long lines = reals * (long long)sizeof(real) / FUSEC_LINE;
  for (long long l = tid; l < lines; l += THREADS)
    asm volatile("discard.global.L2 [%0], 128;" :: "l"(base + l * FUSEC_LINE) : "memory");
}

// A tile kernel whose sums run apart (Kernel.sums_apart) stores its partials and ends; a
// second kernel then sums every output tile at once, each block one 128-byte line of a
// tile's outputs (or a whole tile narrower than a line), instead of the last block to
// arrive at a tile summing it in the grid's tail (experiments/results/h200-second-kernel-finish.md).
// The line of each block's partials that one such block summed, dropped from L2 as
// fusec_discard drops a whole region: after fusec_sum_partials, whose last barrier
// orders every read before it.
template <int THREADS>
__device__ __forceinline__ void fusec_discard_line_each(const real* first, int count, long long stride, int tid) {
  for (int p = tid; p < count; p += THREADS)
    asm volatile("discard.global.L2 [%0], 128;" :: "l"(first + (long long)p * stride) : "memory");
}

// Sums partials[p*stride + o] over p < count, for outputs o in [o0, o0 + width)
// that are < len, and hands each sum to emit(o, sum). Threads split both the
// outputs and the partials so a long list of partials does not serialize;
// the second stage is a fixed tree, so the order of additions is fixed.
// `scratch` holds THREADS reals of shared memory; BAR is the barrier of those threads.
// LOADS: the partials a thread has in flight, loaded into registers and then added in
// order, so the sum is the same whatever LOADS is. A tile's last blocks sum in the
// kernel's tail, where round trips to L2 are its time: 64 bytes a thread there (16 fp32,
// 8 fp64: more fp64 spilled in the triangle kernels); `#pragma unroll` deeper than 8 made
// nvcc issue the loads one at a time (experiments/results/h200-finish-cost.md).
template <int THREADS, int BAR = 0, int LOADS = 64 / sizeof(real), class Emit>
__device__ __forceinline__ void fusec_sum_partials(const real* partials, int count, long long stride,
                                                   long long o0, int width, long long len,
                                                   real* scratch, int tid, Emit emit) {
  for (int base = 0; base < width; base += THREADS) {
    const int w = min(width - base, THREADS);
    int parts = 1;
    while (parts * 2 * w <= THREADS) parts *= 2;
    const int o = tid % w, part = tid / w;
    const long long out = o0 + base + o;
    real s = real(0);
    if (part < parts && out < len) {
      for (int p = part; p < count; p += LOADS * parts) {
        real v[LOADS];
        #pragma unroll
        for (int k = 0; k < LOADS; ++k)
          v[k] = p + k * parts < count ? __ldcg(partials + (p + k * parts) * stride + out) : real(0);
        #pragma unroll
        for (int k = 0; k < LOADS; ++k) s += v[k];
      }
    }
    scratch[tid] = s;
    fusec_barrier<BAR, THREADS>();
    for (int half = parts / 2; half > 0; half /= 2) {
      if (part < half) scratch[tid] += scratch[tid + half * w];
      fusec_barrier<BAR, THREADS>();
    }
    if (part == 0 && out < len) emit(out, scratch[o]);
    fusec_barrier<BAR, THREADS>();
  }
}

// ---- striped kernels: a producer and a consumer across a global barrier ----
// (cuSync's tile semaphores, KTILER's L2 reuse.) The consumer needs the producer's
// reductions' results, one tile of them per stripe (one tile of the stripe axis, every
// tile along the other). Blocks take tickets in stripe order; a consumer block waits
// until the producer's blocks of its stripe are done, then reads the matrix tiles
// they just read or wrote, still in L2. `schedule` holds the ticket counter, the
// blocks-done counter, and one counter of finished producer blocks per stripe; the
// last block to leave clears them all for the next launch.

struct fusec_stripe_item {
  int part;    // 0: a producer block, 1: a consumer block
  int stripe;  // its stripe
  int across;  // which of its part's blocks of that stripe
};

// The ticket's work: the producer's first `lag` stripes, then per stripe j the
// producer's stripe j + lag (n0 blocks) and the consumer's stripe j (n1 blocks).
__device__ __forceinline__ fusec_stripe_item fusec_stripe_ticket(unsigned* schedule, int stripes, int n0,
                                                                 int n1, int lag) {
  __shared__ int ticket;
  if (threadIdx.x == 0) ticket = (int)atomicAdd(schedule, 1u);
  BARRIER();
  int t = ticket;
  lag = min(lag, stripes);
  if (t < lag * n0) return {0, t / n0, t % n0};
  t -= lag * n0;
  const int paired = stripes - lag;  // stripes whose consumer blocks follow a producer stripe
  if (t < paired * (n0 + n1)) {
    const int j = t / (n0 + n1), q = t % (n0 + n1);
    return q < n0 ? fusec_stripe_item{0, j + lag, q} : fusec_stripe_item{1, j, q - n0};
  }
  t -= paired * (n0 + n1);
  return {1, paired + t / n1, t % n1};
}

// A producer block is done with its stripe: its stores (the reductions' finished
// values too) are made visible before it counts itself in (cooperative groups'
// grid sync does the same: barrier, then one thread fences and counts).
__device__ __forceinline__ void fusec_stripe_done(unsigned* stripe_counter) {
  BARRIER();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(stripe_counter, 1u);
  }
}

// A consumer block waits for the `blocks` producer blocks of its stripe; they hold
// earlier tickets, so they are running or done.
__device__ __forceinline__ void fusec_stripe_wait(const unsigned* stripe_counter, unsigned blocks) {
  if (threadIdx.x == 0) {
    unsigned done;
    while (true) {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(done) : "l"(stripe_counter) : "memory");
      if (done >= blocks) break;
      __nanosleep(64);
    }
    __threadfence();  // as cooperative groups' grid sync: what the producers stored, then the rest
  }
  BARRIER();
}

// Every block leaves through here; the last one clears the schedule.
__device__ __forceinline__ void fusec_stripe_leave(unsigned* schedule, int stripes, unsigned blocks) {
  BARRIER();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(schedule + 1, 1u) == blocks - 1) {  // every block has waited and left
      for (int j = 0; j < stripes; ++j) schedule[2 + j] = 0;
      schedule[0] = 0;
      schedule[1] = 0;
      __threadfence();
    }
  }
}

// ---- held kernels: a producer and a consumer across one grid barrier ----
// The round of a launch of resident blocks: the launches of `blocks` before it, read
// from fusec_grid_sync's count of arrivals before this block arrives. Exact: every
// block of the launches before has arrived (the launch boundary orders it), and no
// block of this one passes the barrier before this block arrives.
__device__ __forceinline__ unsigned long long fusec_round(const unsigned long long* arrivals, unsigned blocks) {
  unsigned long long now;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(arrivals) : "memory");
  return now / blocks;
}

// Every block of the launch is resident at once (the runtime checks the occupancy
// before the first launch), so a block may wait for all the others. `arrivals` only
// grows: each launch adds one per block, and a block waits until the count reaches the
// end of its launch's round of `blocks`, so nothing needs clearing afterwards. Made
// visible first: the block's stores, its reductions' finished values among them.
__device__ __forceinline__ void fusec_grid_sync(unsigned long long* arrivals, unsigned blocks) {
  BARRIER();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned long long got = atomicAdd(arrivals, 1ull);
    const unsigned long long round_end = (got / blocks + 1) * blocks;
    unsigned long long now;
    while (true) {
      asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(arrivals) : "memory");
      if (now >= round_end) break;
      __nanosleep(32);
    }
    __threadfence();  // as cooperative groups' grid sync: what the others stored, then the rest
  }
  BARRIER();
}
