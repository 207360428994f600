// Cluster-resident GEMVER and SGEMVT, written by hand to ask one question: with Hopper's thread
// block clusters, can the blocks that must meet once per stripe be few and close (one cluster's
// hardware barrier and distributed shared memory) instead of the whole grid (experiments/resident.cu)?
// Timed by experiments/cluster_resident.py beside fusec's tuned plans; not fusec's library.
//
// GEMVER: B = A + u1 v1^T + u2 v2^T, x = beta B^T y + z, w = alpha B x (SGEMVT: B = A, not stored).
// A cluster of CL blocks covers every row: block `rank` owns rows [rank*ROWS, (rank+1)*ROWS), so
// x's stripe is summed inside the cluster, and clusters never wait for one another. Cluster c
// walks column stripes c, c + clusters, ... (W columns each). For each stripe every block:
//   producer: its A tile arrives by cp.async PREF stripes ahead; B = A + u1 v1^T + u2 v2^T is
//             stored, and kept on chip (HOLD 1: in its shared-memory slot; 0: in registers);
//             its partial of x's stripe is pushed into every cluster block's shared memory;
//   arrives on the cluster barrier, then runs the previous stripe's consumer step
//   (its rows of w += B x) while the others arrive; waits; sums the CL partials in rank order
//   (so every block gets the same x, bit for bit).
// So the matrix leaves DRAM once and L2 is never re-read. w: each cluster's partial rows go to
// ws[c * n + row]; the last cluster to finish a rank's rows sums them in cluster order.
// SYNC 0 leaves out the cluster barrier (results wrong: a diagnostic of what the meeting costs).
// No edge guards: n must be CL * ROWS and a multiple of W.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

template <class T> struct V;
template <> struct V<float> { using t = float4; static constexpr int n = 4; };
template <> struct V<double> { using t = double2; static constexpr int n = 2; };

template <int WIDE>
__device__ __forceinline__ void cp16(void* s, const void* g) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(s);
  if constexpr (WIDE)  // L2 fetches the whole 256-byte piece: the neighbouring stripes' clusters read the rest
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" :: "r"(a), "l"(g) : "memory");
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

template <class T, int CL, int BLOCK, int QW, int ITERS, int PREF, bool GEMVER, int HOLD, int SYNC, int WIDE, int WARM>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(BLOCK, 1) cluster_resident(
    const T* __restrict__ A, T* __restrict__ B, const T* __restrict__ u1, const T* __restrict__ v1,
    const T* __restrict__ u2, const T* __restrict__ v2, const T* __restrict__ y, const T* __restrict__ z,
    T* __restrict__ x, T* __restrict__ w, T alpha, T beta, int n, T* __restrict__ ws, unsigned* __restrict__ counters)
{
  using VT = typename V<T>::t;
  constexpr int VEC = V<T>::n, W = QW * VEC, BY = BLOCK / QW, ROWS = BY * ITERS, NSLOT = PREF + 1 + HOLD, WARPS = BLOCK / 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  VT* slots = reinterpret_cast<VT*>(smem_raw);
  __shared__ T part[2][CL][W];
  __shared__ T warpsum[WARPS][W];
  __shared__ T xs[2][W];
  __shared__ int last;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = (int)cluster.block_rank();
  const int tid = threadIdx.x, q = tid % QW, ty = tid / QW, lane = tid % 32, warp = tid / 32;
  const int ncl = gridDim.x / CL, c = blockIdx.x / CL, stripes = n / W;
  const int K = (stripes - c + ncl - 1) / ncl;  // my cluster's stripes
  const int r0 = rank * ROWS;
  const T* arow = A + (long long)(r0 + ty) * n + q * VEC;
  T* brow = B + (long long)(r0 + ty) * n + q * VEC;

  auto prefetch = [&](int k) {
    if (k < K) {
      VT* slot = slots + (k % NSLOT) * ITERS * BLOCK;
      const int col = (c + k * ncl) * W;
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) cp16<WIDE>(slot + it * BLOCK + tid, arow + (long long)it * BY * n + col);
    }
    cp_commit();
  };

  T u1r[ITERS], u2r[ITERS], yr[ITERS], acc[ITERS];
  VT cur[HOLD ? 1 : ITERS], prev[HOLD ? 1 : ITERS];
  #pragma unroll
  for (int j = 0; j < PREF; ++j) prefetch(j);
  #pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const int row = r0 + it * BY + ty;
    yr[it] = y[row];
    if constexpr (GEMVER) { u1r[it] = u1[row]; u2r[it] = u2[row]; }
    acc[it] = T(0);
  }

  for (int k = 0; k <= K; ++k) {
    if constexpr (WARM > 0) {
      // every cluster's step k reads super-stripe k (columns [k, k + 1) * ncl * W): all blocks of the
      // grid warm L2 with super-stripe k + WARM, a row each, in whole rows' pieces DRAM serves well
      const int col0 = (k + WARM) * ncl * W;
      if (col0 < n) {
        const unsigned bytes = (unsigned)(min(ncl * W, n - col0) * sizeof(T));
        const int blocks = ncl * CL;
        for (int r = blockIdx.x + tid * blocks; r < n; r += BLOCK * blocks)
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(A + (long long)r * n + col0), "r"(bytes) : "memory");
      }
    }
    if (k < K) {
      prefetch(k + PREF);
      const int col = (c + k * ncl) * W + q * VEC;
      VT vv1, vv2;
      if constexpr (GEMVER) { vv1 = *reinterpret_cast<const VT*>(v1 + col); vv2 = *reinterpret_cast<const VT*>(v2 + col); }
      T xp[VEC];
      #pragma unroll
      for (int v = 0; v < VEC; ++v) xp[v] = T(0);
      VT* slot = slots + (k % NSLOT) * ITERS * BLOCK;
      cp_wait<PREF>();
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        VT a = slot[it * BLOCK + tid];
        T* e = reinterpret_cast<T*>(&a);
        if constexpr (GEMVER) {
          const T* p1 = reinterpret_cast<const T*>(&vv1); const T* p2 = reinterpret_cast<const T*>(&vv2);
          #pragma unroll
          for (int v = 0; v < VEC; ++v) e[v] = e[v] + u1r[it] * p1[v] + u2r[it] * p2[v];
          VT* dst = reinterpret_cast<VT*>(brow + (long long)it * BY * n + (c + k * ncl) * W);
          *dst = a;
        }
        if constexpr (HOLD) { if constexpr (GEMVER) slot[it * BLOCK + tid] = a; } else cur[it] = a;
        #pragma unroll
        for (int v = 0; v < VEC; ++v) xp[v] += e[v] * yr[it];
      }
      // lanes of one warp with the same q hold the same columns
      #pragma unroll
      for (int v = 0; v < VEC; ++v) {
        #pragma unroll
        for (int o = QW; o < 32; o *= 2) xp[v] += __shfl_xor_sync(0xffffffffu, xp[v], o);
      }
      if (lane < QW) {
        #pragma unroll
        for (int v = 0; v < VEC; ++v) warpsum[warp][lane * VEC + v] = xp[v];
      }
      __syncthreads();
      if (tid < W) {
        T s = T(0);
        #pragma unroll
        for (int p = 0; p < WARPS; ++p) s += warpsum[p][tid];
        #pragma unroll
        for (int r = 0; r < CL; ++r) *cluster.map_shared_rank(&part[k & 1][rank][tid], r) = s;
      }
      if constexpr (SYNC) cluster_arrive();
    }
    if (k > 0) {
      const T* xv = xs[(k - 1) & 1] + q * VEC;
      #pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        VT held;
        if constexpr (HOLD) held = slots[((k - 1) % NSLOT) * ITERS * BLOCK + it * BLOCK + tid]; else held = prev[it];
        const T* e = reinterpret_cast<const T*>(&held);
        #pragma unroll
        for (int v = 0; v < VEC; ++v) acc[it] += e[v] * xv[v];
      }
    }
    if (k < K) {
      if constexpr (SYNC) cluster_wait();
      if (tid < W) {
        T s = T(0);
        #pragma unroll
        for (int r = 0; r < CL; ++r) s += part[k & 1][r][tid];
        const int col = (c + k * ncl) * W + tid;
        const T xv = beta * s + z[col];
        xs[k & 1][tid] = xv;
        if (rank == 0) x[col] = xv;
      }
      __syncthreads();
      #pragma unroll
      for (int it = 0; it < (HOLD ? 0 : ITERS); ++it) prev[it] = cur[it];
    }
  }
  // w: this cluster's partial of my rows, then the last cluster to finish these rows sums them
  #pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    T s = acc[it];
    #pragma unroll
    for (int o = QW / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (q == 0) ws[(long long)c * n + r0 + it * BY + ty] = s;
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(counters + rank, 1u) == (unsigned)ncl - 1;
  __syncthreads();
  if (last) {
    __threadfence();
    for (int r = tid; r < ROWS; r += BLOCK) {
      T s = T(0);
      for (int p = 0; p < ncl; ++p) s += __ldcg(ws + (long long)p * n + r0 + r);
      w[r0 + r] = alpha * s;
    }
    if (tid == 0) counters[rank] = 0;
  }
  // nobody may leave while a partial may still be pushed into its shared memory
  cluster.sync();
}

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}
