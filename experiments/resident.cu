// Row-resident striped kernels for GEMVER and SGEMVT, written by hand to ask one question:
// would a block that keeps its tiles on chip beat fusec's striped fusion (which re-reads them
// from L2)? Timed by experiments/resident.py beside fusec's tuned plans; not fusec's library.
//
// GEMVER: B = A + u1 v1^T + u2 v2^T, x = beta B^T y + z, w = alpha B x (SGEMVT: B = A, not stored).
// Each block owns ROWS = (BLOCK / WL) * ITERS rows for the whole launch and walks the column
// stripes (W = WL * VEC columns each). Its tiles of a stripe arrive by cp.async PREF stripes
// ahead, into a shared-memory slot that it keeps until its consumer step LAG stripes later:
// w's rows are the block's own, so w needs no cross-block sum and B is read from DRAM once.
// x's stripe J is the sum of every block's partial, so the blocks meet once per stripe; the
// three kernels differ only in how:
//   resident_elected: each block fences and counts itself in; the last to arrive sums (fusec's
//                     way) and raises ready[J]; consumers wait on ready[J].
//   resident_fixed:   arrivals are fire-and-forget (red.release); block J % grid sums stripe J
//                     one iteration later.
//   resident_ll:      as fixed, but x travels with the launch's epoch in one 8-byte word (NCCL's
//                     LL protocol): a consumer loads its x words before its producer step and
//                     checks them after, with no flag and no barrier (float only).
// Every block must be resident at once (the launcher checks the occupancy); the kernels have
// no edge guards (n a multiple of the rows per block and of W).
template <class T> struct V;
template <> struct V<float> { using t = float4; static constexpr int n = 4; };
template <> struct V<double> { using t = double2; static constexpr int n = 2; };

__device__ __forceinline__ void cp16(void* s, const void* g) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

template <class T, int BLOCK, int WL, int ITERS, int LAG, int PREF, bool GEMVER>
__global__ void __launch_bounds__(BLOCK) resident_elected(
    const T* __restrict__ A, T* __restrict__ B, const T* __restrict__ u1, const T* __restrict__ v1,
    const T* __restrict__ u2, const T* __restrict__ v2, const T* __restrict__ y, const T* __restrict__ z,
    T* x, T* __restrict__ w, T alpha, T beta, int n, T* ws, unsigned* sched)
{
  using VT = typename V<T>::t;
  constexpr int VEC = V<T>::n, W = WL * VEC, BY = BLOCK / WL, ROWS = BY * ITERS, NSLOT = LAG + 1 + PREF;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  VT* slots = reinterpret_cast<VT*>(smem_raw);
  T* scratch = reinterpret_cast<T*>(slots + NSLOT * ITERS * BLOCK);  // BY * W reals
  __shared__ int flag;
  const int tid = threadIdx.x, tx = tid % WL, ty = tid / WL;
  const int grid = gridDim.x, b = blockIdx.x, stripes = n / W;
  const int r0 = b * ROWS;
  unsigned* cnt = sched; unsigned* ready = sched + stripes; unsigned* leave = sched + 2 * stripes;
  const T* arow = A + (long long)(r0 + ty) * n + tx * VEC;

  auto prefetch = [&](int J) {
    if (J < stripes) {
      VT* slot = slots + (J % NSLOT) * ITERS * BLOCK;
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) cp16(slot + it * BLOCK + tid, arow + (long long)it * BY * n + J * W);
    }
    cp_commit();
  };

  T u1r[ITERS], u2r[ITERS], yr[ITERS], acc[ITERS];
  #pragma unroll
  for (int j = 0; j < PREF; ++j) prefetch(j);
  #pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int row = r0 + it * BY + ty;
    yr[it] = y[row];
    if constexpr (GEMVER) { u1r[it] = u1[row]; u2r[it] = u2[row]; }
    acc[it] = T(0);
  }

  for (int J = 0; J < stripes + LAG; ++J) {
    prefetch(J + PREF);
    if (J < stripes) {
      const int col = J * W + tx * VEC;
      VT vv1, vv2;
      if constexpr (GEMVER) { vv1 = *reinterpret_cast<const VT*>(v1 + col); vv2 = *reinterpret_cast<const VT*>(v2 + col); }
      T xp[VEC];
      #pragma unroll
      for (int v = 0; v < VEC; ++v) xp[v] = T(0);
      VT* slot = slots + (J % NSLOT) * ITERS * BLOCK;
      cp_wait<PREF>();
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        VT a = slot[it * BLOCK + tid];
        T* e = reinterpret_cast<T*>(&a);
        if constexpr (GEMVER) {
          const T* p1 = reinterpret_cast<const T*>(&vv1); const T* p2 = reinterpret_cast<const T*>(&vv2);
          #pragma unroll
          for (int v = 0; v < VEC; ++v) e[v] = e[v] + u1r[it] * p1[v] + u2r[it] * p2[v];
          *reinterpret_cast<VT*>(B + (long long)(r0 + it * BY + ty) * n + col) = a;
          slot[it * BLOCK + tid] = a;
        }
        #pragma unroll
        for (int v = 0; v < VEC; ++v) xp[v] += e[v] * yr[it];
      }
      #pragma unroll
      for (int v = 0; v < VEC; ++v) scratch[ty * W + v * WL + tx] = xp[v];
      __syncthreads();
      for (int p = tid; p < W; p += BLOCK) {
        T s = T(0);
        #pragma unroll
        for (int r = 0; r < BY; ++r) s += scratch[r * W + p];
        const int c = (p % WL) * VEC + p / WL;
        ws[((long long)J * grid + b) * W + c] = s;
      }
      __threadfence();
      __syncthreads();
      if (tid == 0) flag = atomicAdd(cnt + J, 1u) == (unsigned)grid - 1;
      __syncthreads();
      if (flag) {
        constexpr int PARTS = BLOCK / W;
        const int c = tid % W, part = tid / W;
        T s = T(0);
        #pragma unroll 8
        for (int p = part; p < grid; p += PARTS) s += __ldcg(ws + ((long long)J * grid + p) * W + c);
        scratch[tid] = s;
        __syncthreads();
        if (part == 0) {
          T t = T(0);
          for (int q = 0; q < PARTS; ++q) t += scratch[q * W + c];
          x[J * W + c] = beta * t + z[J * W + c];
        }
        __syncthreads();
        if (tid == 0) {
          cnt[J] = 0;
          __threadfence();
          asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(ready + J), "r"(1u) : "memory");
        }
      }
      __syncthreads();
    }
    if (J >= LAG) {
      const int K = J - LAG;
      if (tid == 0) {
        unsigned r;
        while (true) {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(r) : "l"(ready + K) : "memory");
          if (r) break;
          __nanosleep(32);
        }
        __threadfence();
      }
      __syncthreads();
      const VT xv = __ldcg(reinterpret_cast<const VT*>(x + K * W + tx * VEC));
      const T* xs = reinterpret_cast<const T*>(&xv);
      const VT* slot = slots + (K % NSLOT) * ITERS * BLOCK;
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        const VT bv = slot[it * BLOCK + tid];
        const T* e = reinterpret_cast<const T*>(&bv);
        #pragma unroll
        for (int v = 0; v < VEC; ++v) acc[it] += e[v] * xs[v];
      }
    }
  }
  cp_wait<0>();
  #pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    T s = acc[it];
    #pragma unroll
    for (int o = WL / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (tx == 0) w[r0 + it * BY + ty] = alpha * s;
  }
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    if (atomicAdd(leave, 1u) == (unsigned)grid - 1) {
      for (int j = 0; j < stripes; ++j) ready[j] = 0;
      *leave = 0;
      __threadfence();
    }
  }
}

template <class T, int BLOCK, int WL, int ITERS, int LAG, int PREF, bool GEMVER>
__global__ void __launch_bounds__(BLOCK) resident_fixed(
    const T* __restrict__ A, T* __restrict__ B, const T* __restrict__ u1, const T* __restrict__ v1,
    const T* __restrict__ u2, const T* __restrict__ v2, const T* __restrict__ y, const T* __restrict__ z,
    T* x, T* __restrict__ w, T alpha, T beta, int n, T* ws, unsigned* sched)
{
  using VT = typename V<T>::t;
  constexpr int VEC = V<T>::n, W = WL * VEC, BY = BLOCK / WL, ROWS = BY * ITERS, NSLOT = LAG + 1 + PREF;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  VT* slots = reinterpret_cast<VT*>(smem_raw);
  T* scratch = reinterpret_cast<T*>(slots + NSLOT * ITERS * BLOCK);  // BY * W reals
  __shared__ int flag;
  const int tid = threadIdx.x, tx = tid % WL, ty = tid / WL;
  const int grid = gridDim.x, b = blockIdx.x, stripes = n / W;
  const int r0 = b * ROWS;
  unsigned* cnt = sched; unsigned* ready = sched + stripes; unsigned* leave = sched + 2 * stripes;
  const T* arow = A + (long long)(r0 + ty) * n + tx * VEC;

  auto prefetch = [&](int J) {
    if (J < stripes) {
      VT* slot = slots + (J % NSLOT) * ITERS * BLOCK;
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) cp16(slot + it * BLOCK + tid, arow + (long long)it * BY * n + J * W);
    }
    cp_commit();
  };

  T u1r[ITERS], u2r[ITERS], yr[ITERS], acc[ITERS];
  #pragma unroll
  for (int j = 0; j < PREF; ++j) prefetch(j);
  #pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int row = r0 + it * BY + ty;
    yr[it] = y[row];
    if constexpr (GEMVER) { u1r[it] = u1[row]; u2r[it] = u2[row]; }
    acc[it] = T(0);
  }

  for (int J = 0; J < stripes + LAG; ++J) {
    prefetch(J + PREF);
    if (J < stripes) {
      const int col = J * W + tx * VEC;
      VT vv1, vv2;
      if constexpr (GEMVER) { vv1 = *reinterpret_cast<const VT*>(v1 + col); vv2 = *reinterpret_cast<const VT*>(v2 + col); }
      T xp[VEC];
      #pragma unroll
      for (int v = 0; v < VEC; ++v) xp[v] = T(0);
      VT* slot = slots + (J % NSLOT) * ITERS * BLOCK;
      cp_wait<PREF>();
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        VT a = slot[it * BLOCK + tid];
        T* e = reinterpret_cast<T*>(&a);
        if constexpr (GEMVER) {
          const T* p1 = reinterpret_cast<const T*>(&vv1); const T* p2 = reinterpret_cast<const T*>(&vv2);
          #pragma unroll
          for (int v = 0; v < VEC; ++v) e[v] = e[v] + u1r[it] * p1[v] + u2r[it] * p2[v];
          *reinterpret_cast<VT*>(B + (long long)(r0 + it * BY + ty) * n + col) = a;
          slot[it * BLOCK + tid] = a;
        }
        #pragma unroll
        for (int v = 0; v < VEC; ++v) xp[v] += e[v] * yr[it];
      }
      #pragma unroll
      for (int v = 0; v < VEC; ++v) scratch[ty * W + v * WL + tx] = xp[v];
      __syncthreads();
      for (int p = tid; p < W; p += BLOCK) {
        T s = T(0);
        #pragma unroll
        for (int r = 0; r < BY; ++r) s += scratch[r * W + p];
        const int c = (p % WL) * VEC + p / WL;
        ws[((long long)J * grid + b) * W + c] = s;
      }
      __syncthreads();
      if (tid == 0) asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(cnt + J), "r"(1u) : "memory");
    }
    // a fixed block finishes stripe J - 1 (every block finishes about one): the others never
    // wait on an atomic's answer, and LAG >= 2 leaves it a whole iteration
    if (J >= 1 && J - 1 < stripes && (J - 1) % grid == b) {
      const int F = J - 1;
      if (tid == 0) {
        unsigned r;
        while (true) {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(r) : "l"(cnt + F) : "memory");
          if (r >= (unsigned)grid) break;
          __nanosleep(32);
        }
      }
      __syncthreads();
      constexpr int PARTS = BLOCK / W;
      const int c = tid % W, part = tid / W;
      T s = T(0);
      #pragma unroll 8
      for (int p = part; p < grid; p += PARTS) s += __ldcg(ws + ((long long)F * grid + p) * W + c);
      scratch[tid] = s;
      __syncthreads();
      if (part == 0) {
        T t = T(0);
        for (int q = 0; q < PARTS; ++q) t += scratch[q * W + c];
        x[F * W + c] = beta * t + z[F * W + c];
      }
      __syncthreads();
      if (tid == 0) asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(ready + F), "r"(1u) : "memory");
    }
    if (J >= LAG) {
      const int K = J - LAG;
      if (tid == 0) {
        unsigned r;
        while (true) {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(r) : "l"(ready + K) : "memory");
          if (r) break;
          __nanosleep(32);
        }
        __threadfence();
      }
      __syncthreads();
      const VT xv = __ldcg(reinterpret_cast<const VT*>(x + K * W + tx * VEC));
      const T* xs = reinterpret_cast<const T*>(&xv);
      const VT* slot = slots + (K % NSLOT) * ITERS * BLOCK;
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        const VT bv = slot[it * BLOCK + tid];
        const T* e = reinterpret_cast<const T*>(&bv);
        #pragma unroll
        for (int v = 0; v < VEC; ++v) acc[it] += e[v] * xs[v];
      }
    }
  }
  cp_wait<0>();
  #pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    T s = acc[it];
    #pragma unroll
    for (int o = WL / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (tx == 0) w[r0 + it * BY + ty] = alpha * s;
  }
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    if (atomicAdd(leave, 1u) == (unsigned)grid - 1) {
      for (int j = 0; j < stripes; ++j) { ready[j] = 0; cnt[j] = 0; }
      *leave = 0;
      __threadfence();
    }
  }
}

// Counters count up across launches (epoch * grid): nothing to reset.
template <int BLOCK, int WL, int ITERS, int LAG, int PREF, bool GEMVER>
__global__ void __launch_bounds__(BLOCK) resident_ll(
    const float* __restrict__ A, float* __restrict__ B, const float* __restrict__ u1, const float* __restrict__ v1,
    const float* __restrict__ u2, const float* __restrict__ v2, const float* __restrict__ y, const float* __restrict__ z,
    unsigned long long* xf, float* __restrict__ w, float alpha, float beta, int n, float* ws, unsigned* cnt, unsigned epoch)
{
  using T = float; using VT = float4;
  constexpr int VEC = 4, W = WL * VEC, BY = BLOCK / WL, ROWS = BY * ITERS, NSLOT = LAG + 1 + PREF;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  VT* slots = reinterpret_cast<VT*>(smem_raw);
  T* scratch = reinterpret_cast<T*>(slots + NSLOT * ITERS * BLOCK);
  const int tid = threadIdx.x, tx = tid % WL, ty = tid / WL;
  const int grid = gridDim.x, b = blockIdx.x, stripes = n / W;
  const int r0 = b * ROWS;
  const float* arow = A + (long long)(r0 + ty) * n + tx * VEC;
  auto prefetch = [&](int J) {
    if (J < stripes) {
      VT* slot = slots + (J % NSLOT) * ITERS * BLOCK;
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) cp16(slot + it * BLOCK + tid, arow + (long long)it * BY * n + J * W);
    }
    cp_commit();
  };
  auto load_x = [&](int K, ulonglong2* q) {
    const ulonglong2* p = reinterpret_cast<const ulonglong2*>(xf + K * W + tx * VEC);
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(q[0].x), "=l"(q[0].y) : "l"(p) : "memory");
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(q[1].x), "=l"(q[1].y) : "l"(p + 1) : "memory");
  };
  auto ok = [&](const ulonglong2* q) {
    return (unsigned)(q[0].x >> 32) == epoch && (unsigned)(q[0].y >> 32) == epoch &&
           (unsigned)(q[1].x >> 32) == epoch && (unsigned)(q[1].y >> 32) == epoch;
  };
  T u1r[ITERS], u2r[ITERS], yr[ITERS], acc[ITERS];
  #pragma unroll
  for (int j = 0; j < PREF; ++j) prefetch(j);
  #pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int row = r0 + it * BY + ty;
    yr[it] = y[row];
    if constexpr (GEMVER) { u1r[it] = u1[row]; u2r[it] = u2[row]; }
    acc[it] = T(0);
  }
  for (int J = 0; J < stripes + LAG; ++J) {
    prefetch(J + PREF);
    ulonglong2 q[2];
    if (J >= LAG) load_x(J - LAG, q);  // early: checked after the producer's work
    if (J < stripes) {
      const int col = J * W + tx * VEC;
      VT vv1, vv2;
      if constexpr (GEMVER) { vv1 = *reinterpret_cast<const VT*>(v1 + col); vv2 = *reinterpret_cast<const VT*>(v2 + col); }
      T xp[VEC];
      #pragma unroll
      for (int v = 0; v < VEC; ++v) xp[v] = T(0);
      VT* slot = slots + (J % NSLOT) * ITERS * BLOCK;
      cp_wait<PREF>();
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        VT a = slot[it * BLOCK + tid];
        T* e = reinterpret_cast<T*>(&a);
        if constexpr (GEMVER) {
          const T* p1 = reinterpret_cast<const T*>(&vv1); const T* p2 = reinterpret_cast<const T*>(&vv2);
          #pragma unroll
          for (int v = 0; v < VEC; ++v) e[v] = e[v] + u1r[it] * p1[v] + u2r[it] * p2[v];
          *reinterpret_cast<VT*>(B + (long long)(r0 + it * BY + ty) * n + col) = a;
          slot[it * BLOCK + tid] = a;
        }
        #pragma unroll
        for (int v = 0; v < VEC; ++v) xp[v] += e[v] * yr[it];
      }
      #pragma unroll
      for (int v = 0; v < VEC; ++v) scratch[ty * W + v * WL + tx] = xp[v];
      __syncthreads();
      for (int p = tid; p < W; p += BLOCK) {
        T s = T(0);
        #pragma unroll
        for (int r = 0; r < BY; ++r) s += scratch[r * W + p];
        const int c = (p % WL) * VEC + p / WL;
        ws[((long long)J * grid + b) * W + c] = s;
      }
      __syncthreads();
      if (tid == 0) asm volatile("red.release.gpu.global.add.u32 [%0], %1;" :: "l"(cnt + J), "r"(1u) : "memory");
    }
    if (J >= 1 && J - 1 < stripes && (J - 1) % grid == b) {
      const int F = J - 1;
      if (tid == 0) {
        unsigned r;
        while (true) {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(r) : "l"(cnt + F) : "memory");
          if (r >= epoch * (unsigned)grid) break;
          __nanosleep(32);
        }
      }
      __syncthreads();
      constexpr int PARTS = BLOCK / W;
      const int c = tid % W, part = tid / W;
      T s = T(0);
      #pragma unroll 8
      for (int p = part; p < grid; p += PARTS) s += __ldcg(ws + ((long long)F * grid + p) * W + c);
      scratch[tid] = s;
      __syncthreads();
      if (part == 0) {
        T t = T(0);
        for (int q2 = 0; q2 < PARTS; ++q2) t += scratch[q2 * W + c];
        const float xv = beta * t + z[F * W + c];
        const unsigned long long word = ((unsigned long long)epoch << 32) | __float_as_uint(xv);
        asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" :: "l"(xf + F * W + c), "l"(word) : "memory");
      }
      __syncthreads();
    }
    if (J >= LAG) {
      const int K = J - LAG;
      while (!ok(q)) { __nanosleep(20); load_x(K, q); }
      const float xs[4] = {__uint_as_float((unsigned)q[0].x), __uint_as_float((unsigned)q[0].y),
                           __uint_as_float((unsigned)q[1].x), __uint_as_float((unsigned)q[1].y)};
      const VT* slot = slots + (K % NSLOT) * ITERS * BLOCK;
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        const VT bv = slot[it * BLOCK + tid];
        const T* e = reinterpret_cast<const T*>(&bv);
        #pragma unroll
        for (int v = 0; v < VEC; ++v) acc[it] += e[v] * xs[v];
      }
    }
  }
  cp_wait<0>();
  #pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    T s = acc[it];
    #pragma unroll
    for (int o = WL / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (tx == 0) w[r0 + it * BY + ty] = alpha * s;
  }
}

__global__ void spin(long long cycles) {  // keeps the GPU busy while work is queued
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
