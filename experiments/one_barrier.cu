// GEMVER and SGEMVT in one launch with one grid barrier, the matrix held on chip across it, written
// by hand to ask one question: where the matrix is about the size of the chip's memory (fp32
// n = 4096: 64 MB against 33 MB of registers, 30 MB of shared memory and 50 MB of L2), can the
// second pass read it from chip instead of DRAM? Timed by experiments/one_barrier.py beside fusec's
// tuned plans; not fusec's library.
//
// GEMVER: B = A + u1 v1^T + u2 v2^T, x = beta B^T y + z, w = alpha B x (SGEMVT: B = A, not stored).
// At most one block per SM, every block running at once; block b owns a band of whole rows. Each thread
// owns the same E columns of every row (16-byte pieces, consecutive threads consecutive pieces).
//   pass 1: walk the band's rows U at a time, the next U rows' loads in flight while these are
//           computed: B's row is computed and stored, the thread's partial of x kept in registers;
//           the first RROWS rows stay in registers, the next SROWS in shared memory, the rest only
//           in global memory (written last, so L2 still has them; A's loads and the held rows'
//           stores are evict-first so that L2 keeps those rows rather than A).
//           The partials of x go to xsum with vector atomics; one grid barrier.
//   pass 2: x = beta xsum + z (block 0 stores it); the band's rows of w = alpha B x, the rows in
//           global memory first (most recently written), then shared memory, then registers.
// So the matrix leaves DRAM once for the rows held on chip and at most twice for the others.
// DEAL 1: a band is only the HELD rows; the rows past every band are dealt out in tickets of U rows
// (pass 1) and U2 rows (pass 2, each summed whole by the block that took it), so that blocks that
// DRAM serves faster take more of them, and pass 2's first dealt rows are loaded during the wait.
// xsum has two halves, used by alternate launches (epoch parity); each launch clears the half the
// next one uses, and the ticket counters alike. The barrier counter only grows: launch `epoch`
// (1, 2, ...) waits for epoch * grid.
// No edge guards on columns: n must be a multiple of BLOCK * VEC; at most RMAX rows per block
// (DEAL: HELD + U2).
// DEFER 1: the held rows of B are not stored in pass 1 but after the barrier, from chip, before the
// unheld rows are re-read: pass 1 then moves fewer bytes, and pass 2's writes keep DRAM busy while
// the re-reads come from L2 (GEMVER only; SGEMVT stores no matrix).
// stop_after_pass_1 (1: after adding x's partials, 2: before) is a diagnostic; its results are wrong.

template <class T> struct V;
template <> struct V<float> { using t = float4; static constexpr int n = 4; };
template <> struct V<double> { using t = double2; static constexpr int n = 2; };

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <class T>
__device__ __forceinline__ void add_partial(T* p, const typename V<T>::t& v) {
  if constexpr (sizeof(T) == 4) atomicAdd(reinterpret_cast<float4*>(p), v);  // sm_90: one vector atomic
  else { atomicAdd(p, v.x); atomicAdd(p + 1, v.y); }
}

template <class T, int E> struct Row { T v[E]; };

template <class T, int N, int BLOCK, int RROWS, int SROWS, int U, int DEAL, bool GEMVER, int DEFER>
__global__ void __launch_bounds__(BLOCK, 1) one_barrier(
    const T* __restrict__ A, T* __restrict__ B, const T* __restrict__ u1, const T* __restrict__ v1,
    const T* __restrict__ u2, const T* __restrict__ v2, const T* __restrict__ y, const T* __restrict__ z,
    T* __restrict__ x, T* __restrict__ w, T alpha, T beta, int m, T* __restrict__ xsum,
    unsigned* __restrict__ counter, unsigned epoch, int stop_after_pass_1)
{
  using VT = typename V<T>::t;
  constexpr int VEC = V<T>::n, PER = N / VEC / BLOCK, E = PER * VEC, WARPS = BLOCK / 32, RMAX = 64;
  constexpr int HELD = RROWS + SROWS, U2 = 4;  // rows held on chip per block; rows re-read at once in pass 2
  static_assert(N % (VEC * BLOCK) == 0, "n must be a multiple of BLOCK * VEC");
  static_assert(RROWS % U == 0, "the rows held in registers come in whole batches");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  VT* held = reinterpret_cast<VT*>(smem_raw);                                     // [SROWS][N / VEC]
  T* warpsum = reinterpret_cast<T*>(smem_raw + (size_t)SROWS * N * sizeof(T));  // [RMAX][WARPS]
  __shared__ int ticket;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // The band of rows this block owns: DEAL 0, its share of every row (the first HELD held, the rest
  // re-read from L2); DEAL 1, HELD rows, all held, the rows past every band dealt out in tickets.
  int r0, rows, pool = m;
  if constexpr (DEAL) {
    pool = min(m, (int)gridDim.x * HELD);
    r0 = blockIdx.x * HELD;
    rows = max(0, min(HELD, m - r0));
  } else {
    r0 = (int)((long long)blockIdx.x * m / gridDim.x);
    rows = (int)((long long)(blockIdx.x + 1) * m / gridDim.x) - r0;  // at most RMAX (the host checks)
  }
  T* const sum_now = xsum + (epoch & 1) * N;
  T* const sum_next = xsum + ((epoch + 1) & 1) * N;
  // DEAL's ticket counters (pass 1, pass 2) live after the barrier counter, two per epoch parity.
  unsigned* const tickets = counter + 1 + (epoch & 1) * 2;
  auto col = [&](int j) { return (j * BLOCK + tid) * VEC; };

  T v1c[GEMVER ? E : 1], v2c[GEMVER ? E : 1], xp[E];
  #pragma unroll
  for (int j = 0; j < PER; ++j) {
    #pragma unroll
    for (int e = 0; e < VEC; ++e) {
      if constexpr (GEMVER) { v1c[j * VEC + e] = v1[col(j) + e]; v2c[j * VEC + e] = v2[col(j) + e]; }
      xp[j * VEC + e] = T(0);
    }
  }
  // DEAL: thread 0 asks for each pass's first two tickets now, so that no block waits for an answer.
  unsigned pending = 0, pending2 = 0, first2 = 0;
  if (DEAL && tid == 0) {
    ticket = (int)atomicAdd(tickets, (unsigned)U);
    pending = atomicAdd(tickets, (unsigned)U);
    first2 = atomicAdd(tickets + 1, (unsigned)U2);
    pending2 = atomicAdd(tickets + 1, (unsigned)U2);
  }
  if (blockIdx.x == gridDim.x - 1) {  // the next launch's half of xsum and tickets
    for (int i = tid; i < N; i += BLOCK) sum_next[i] = T(0);
    if (tid < 2) counter[1 + ((epoch + 1) & 1) * 2 + tid] = 0;
  }

  // Pass 1, U rows at a time (rows [g, g + U) of the matrix, those below `end`), the next U rows'
  // loads in flight while these are computed. `slot`: the first row's place in the band (-1: dealt).
  VT next[U][PER];
  auto fetch = [&](int g, int end, int slot) {
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      if (g + u >= end) break;
      const bool on_chip = slot >= 0 && slot + u < HELD;
      #pragma unroll
      for (int j = 0; j < PER; ++j) {
        const VT* p = reinterpret_cast<const VT*>(A + (long long)(g + u) * N + col(j));
        next[u][j] = (!GEMVER && !on_chip) ? __ldcg(p) : __ldcs(p);  // SGEMVT re-reads A's other rows from L2
      }
    }
  };
  auto produce = [&](int g, int end, int slot, const VT (&a)[U][PER], Row<T, E> (&out)[U]) {
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = g + u, k = slot < 0 ? -1 : slot + u;
      if (r >= end) break;
      const T yr = y[r];
      T ur1 = T(0), ur2 = T(0);
      if constexpr (GEMVER) { ur1 = u1[r]; ur2 = u2[r]; }
      #pragma unroll
      for (int j = 0; j < PER; ++j) {
        const T* av = reinterpret_cast<const T*>(&a[u][j]);
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {
          T b = av[e];
          if constexpr (GEMVER) b = b + ur1 * v1c[j * VEC + e] + ur2 * v2c[j * VEC + e];
          out[u].v[j * VEC + e] = b;
          xp[j * VEC + e] += b * yr;
        }
        const VT bv = *reinterpret_cast<const VT*>(&out[u].v[j * VEC]);
        if constexpr (GEMVER) {
          VT* p = reinterpret_cast<VT*>(B + (long long)r * N + col(j));
          if (k < 0 || k >= HELD) *p = bv;
          else if (!DEFER) __stcs(p, bv);  // rows held on chip need not stay in L2
        }
        if (k >= RROWS && k < HELD) held[(size_t)(k - RROWS) * (N / VEC) + j * BLOCK + tid] = bv;
      }
    }
  };

  Row<T, E> reg[RROWS > 0 ? RROWS : 1];
  const int band_end = r0 + rows;
  fetch(r0, band_end, 0);
  #pragma unroll
  for (int k0 = 0; k0 < RROWS; k0 += U) {  // the band's rows held in registers
    VT a[U][PER];
    #pragma unroll
    for (int u = 0; u < U; ++u)
      #pragma unroll
      for (int j = 0; j < PER; ++j) a[u][j] = next[u][j];
    fetch(r0 + k0 + U, band_end, k0 + U);
    Row<T, E> out[U];
    produce(r0 + k0, band_end, k0, a, out);
    #pragma unroll
    for (int u = 0; u < U; ++u) reg[k0 + u] = out[u];
  }
  for (int k0 = RROWS; k0 < rows; k0 += U) {  // the band's other rows
    VT a[U][PER];
    #pragma unroll
    for (int u = 0; u < U; ++u)
      #pragma unroll
      for (int j = 0; j < PER; ++j) a[u][j] = next[u][j];
    fetch(r0 + k0 + U, band_end, k0 + U);
    Row<T, E> out[U];
    produce(r0 + k0, band_end, k0, a, out);
  }
  if constexpr (DEAL) {  // the rows past every band, U per ticket; the next ticket asked for a batch ahead
    __syncthreads();
    int g = pool + ticket;
    fetch(g, m, -1);
    while (g < m) {
      __syncthreads();  // every thread has read `ticket`
      if (tid == 0) {
        ticket = (int)pending;
        pending = atomicAdd(tickets, (unsigned)U);
      }
      __syncthreads();
      const int g1 = pool + ticket;
      VT a[U][PER];
      #pragma unroll
      for (int u = 0; u < U; ++u)
        #pragma unroll
        for (int j = 0; j < PER; ++j) a[u][j] = next[u][j];
      fetch(g1, m, -1);
      Row<T, E> out[U];
      produce(g, m, -1, a, out);
      g = g1;
    }
  }
  const int in_smem = max(0, min(SROWS, rows - RROWS));
  if (stop_after_pass_1 == 2) return;  // a diagnostic: pass 1 without adding x's partials
  #pragma unroll
  for (int j = 0; j < PER; ++j) add_partial<T>(sum_now + col(j), *reinterpret_cast<const VT*>(&xp[j * VEC]));
  if (stop_after_pass_1) return;  // a diagnostic: what pass 1 alone takes

  // The grid barrier: every block's partials are in xsum. DEAL: the first rows pass 2 re-reads
  // are on their way while the block waits.
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    if constexpr (DEAL) ticket = (int)first2;
  }
  T b2[U2][E];
  int g2 = m;
  auto fetch2 = [&](int g, int end) {
    #pragma unroll
    for (int u = 0; u < U2; ++u) {
      if (g + u >= end) break;
      #pragma unroll
      for (int j = 0; j < PER; ++j)
        *reinterpret_cast<VT*>(&b2[u][j * VEC]) =
            __ldcs(reinterpret_cast<const VT*>((GEMVER ? B : A) + (long long)(g + u) * N + col(j)));
    }
  };
  if constexpr (DEAL) {
    __syncthreads();
    g2 = pool + ticket;
    fetch2(g2, m);
  }
  if (tid == 0) {
    const unsigned target = epoch * gridDim.x;
    while (load_acquire(counter) < target) {}
  }
  __syncthreads();

  T xc[E];
  #pragma unroll
  for (int j = 0; j < PER; ++j) {
    const VT s = __ldcg(reinterpret_cast<const VT*>(sum_now + col(j)));
    const VT zz = *reinterpret_cast<const VT*>(z + col(j));
    const T* sv = reinterpret_cast<const T*>(&s);
    const T* zv = reinterpret_cast<const T*>(&zz);
    #pragma unroll
    for (int e = 0; e < VEC; ++e) xc[j * VEC + e] = beta * sv[e] + zv[e];
    if (blockIdx.x == 0) *reinterpret_cast<VT*>(x + col(j)) = *reinterpret_cast<const VT*>(&xc[j * VEC]);
  }
  auto dot = [&](int k, const T* b) {  // this warp's part of row k's sum, into warpsum[k]
    T s = T(0);
    #pragma unroll
    for (int e = 0; e < E; ++e) s += b[e] * xc[e];
    #pragma unroll
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) warpsum[k * WARPS + warp] = s;
  };
  const int reg_rows = min(rows, RROWS);
  if constexpr (GEMVER && DEFER) {  // the held rows stored now, from chip, their sums with them
    for (int k = 0; k < in_smem; ++k) {
      T b[E];
      #pragma unroll
      for (int j = 0; j < PER; ++j) {
        const VT v = held[(size_t)k * (N / VEC) + j * BLOCK + tid];
        *reinterpret_cast<VT*>(&b[j * VEC]) = v;
        __stcs(reinterpret_cast<VT*>(B + (long long)(r0 + RROWS + k) * N + col(j)), v);
      }
      dot(RROWS + k, b);
    }
    #pragma unroll
    for (int k = 0; k < RROWS; ++k)
      if (k < reg_rows) {
        #pragma unroll
        for (int j = 0; j < PER; ++j)
          __stcs(reinterpret_cast<VT*>(B + (long long)(r0 + k) * N + col(j)),
                 *reinterpret_cast<const VT*>(&reg[k].v[j * VEC]));
        dot(k, reg[k].v);
      }
  }
  if constexpr (DEAL) {  // the dealt rows, U2 per ticket, each summed whole here (warpsum rows HELD..)
    while (g2 < m) {
      #pragma unroll
      for (int u = 0; u < U2; ++u)
        if (g2 + u < m) dot(HELD + u, b2[u]);
      if (tid == 0) {
        ticket = (int)pending2;
        pending2 = atomicAdd(tickets + 1, (unsigned)U2);
      }
      __syncthreads();
      if (tid < U2 && g2 + tid < m) {
        T s = T(0);
        #pragma unroll 4
        for (int q = 0; q < WARPS; ++q) s += warpsum[(HELD + tid) * WARPS + q];
        w[g2 + tid] = alpha * s;
      }
      g2 = pool + ticket;
      fetch2(g2, m);
      __syncthreads();  // warpsum's dealt rows and `ticket` are free again
    }
  } else {
    for (int k0 = HELD; k0 < rows; k0 += U2) {  // the band's rows not held, from L2 (GEMVER: B, SGEMVT: A)
      fetch2(r0 + k0, band_end);
      #pragma unroll
      for (int u = 0; u < U2; ++u)
        if (k0 + u < rows) dot(k0 + u, b2[u]);
    }
  }
  if constexpr (!(GEMVER && DEFER)) {
    for (int k = 0; k < in_smem; ++k) {
      T b[E];
      #pragma unroll
      for (int j = 0; j < PER; ++j) *reinterpret_cast<VT*>(&b[j * VEC]) = held[(size_t)k * (N / VEC) + j * BLOCK + tid];
      dot(RROWS + k, b);
    }
    #pragma unroll
    for (int k = 0; k < RROWS; ++k)
      if (k < reg_rows) dot(k, reg[k].v);
  }
  __syncthreads();
  const int summed = DEAL ? min(rows, HELD) : rows;
  if (tid < summed) {
    T s = T(0);
    #pragma unroll 4
    for (int q = 0; q < WARPS; ++q) s += warpsum[tid * WARPS + q];
    w[r0 + tid] = alpha * s;
  }
}

__global__ void spin(long long cycles) {  // keeps the GPU busy while work is queued
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
