// experiments.band: BiCGK (q = A p, s = A^T r, row-major A) written by hand with a *band* geometry,
// outside fusec's library, to ask whether that geometry is worth adding to it.
//
// Block b owns the band of rows [b R, b R + R). Each thread owns the same PER 16-byte pieces of
// every row (consecutive threads, consecutive pieces: one block spans a whole row), so a row's
// loads are PER wide accesses per thread, U rows' loads leave together, the next U rows' loads
// are in flight while these are computed.
//   q: the thread keeps its partial of each of the band's R rows in registers; at the end one
//      block-wide sum (a warp's lanes, then the warps in shared memory) writes the band's rows of
//      q directly: no partials in global memory, no ticket.
//   s: the thread keeps its PER * VEC columns' partials over the band in registers and adds them
//      with vector atomics (sm_90's atomicAdd on float4; two double atomics in fp64).
//        ACC 0: into s itself, which the caller zeroes first (a memset on the stream).
//        ACC 1: into a workspace that is zero between launches; the last block to arrive (a
//               ticket) copies it to s and zeroes it again, so no memset is needed.
// No guards on columns: n == PER * BLOCK * VEC (the launcher checks); rows past m read as 0.

template <class T> struct V;
template <> struct V<float> { using t = float4; static constexpr int n = 4; };
template <> struct V<double> { using t = double2; static constexpr int n = 2; };

template <class T>
__device__ __forceinline__ void add_vec(T* p, const typename V<T>::t& v) {
  if constexpr (sizeof(T) == 4) atomicAdd(reinterpret_cast<float4*>(p), v);
  else { atomicAdd(p, v.x); atomicAdd(p + 1, v.y); }
}

// Sums each of K values over a warp's lanes; lane l returns the total of value l / (32 / K)
// (fusec's warp_sum_scatter, library/blas/prelude.cuh). Each step a lane keeps half of its values
// and adds its partner's copy of that half; HALF is a template constant so that every step's loop
// unrolls (with a runtime bound nvcc leaves K = 32 rolled, and the values in local memory).
template <class T, int K, int HALF>
__device__ __forceinline__ void scatter_step(T* v, int lane) {
  constexpr int OFFSET = 32 * HALF / K;  // 16 at the first step (HALF = K / 2), then 8, ...
  const bool upper = lane & OFFSET;
  #pragma unroll
  for (int j = 0; j < HALF; ++j) {
    const T lo = v[j], hi = v[j + HALF];
    v[j] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, OFFSET);
  }
  if constexpr (HALF > 1) scatter_step<T, K, HALF / 2>(v, lane);
}

template <class T, int K>
__device__ __forceinline__ T warp_sum_scatter(T* v, int lane) {
  if constexpr (K > 1) scatter_step<T, K, K / 2>(v, lane);
  T x = v[0];
  #pragma unroll
  for (int offset = 16 / K; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <class T, int BLOCK, int PER, int R, int U, int ACC>
__global__ void __launch_bounds__(BLOCK) bicgk_band(
    const T* __restrict__ A, const T* __restrict__ p, const T* __restrict__ r, T* __restrict__ q,
    T* s, T* acc, unsigned* counter, int m)
{
  using VT = typename V<T>::t;
  constexpr int VEC = V<T>::n, N = PER * BLOCK * VEC, WARPS = BLOCK / 32, LANES = 32 / R;
  static_assert(R <= 32 && (R & (R - 1)) == 0 && R % U == 0, "R: a power of two up to 32, whole batches of U");
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int r0 = blockIdx.x * R;
  auto col = [&](int j) { return (j * BLOCK + tid) * VEC; };

  T pv[PER * VEC], sp[PER * VEC], qp[R];
  #pragma unroll
  for (int j = 0; j < PER; ++j) {
    const VT v = *reinterpret_cast<const VT*>(p + col(j));
    const T* e = reinterpret_cast<const T*>(&v);
    #pragma unroll
    for (int k = 0; k < VEC; ++k) { pv[j * VEC + k] = e[k]; sp[j * VEC + k] = T(0); }
  }
  VT next[U][PER];
  auto fetch = [&](int k0) {
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      const int row = r0 + k0 + u;
      #pragma unroll
      for (int j = 0; j < PER; ++j)
        next[u][j] = row < m ? __ldcs(reinterpret_cast<const VT*>(A + (long long)row * N + col(j))) : VT{};
    }
  };
  fetch(0);
  #pragma unroll R
  for (int k0 = 0; k0 < R; k0 += U) {  // fully unrolled: qp's index must be a constant
    VT a[U][PER];
    T rr[U];
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      rr[u] = r0 + k0 + u < m ? r[r0 + k0 + u] : T(0);
      #pragma unroll
      for (int j = 0; j < PER; ++j) a[u][j] = next[u][j];
    }
    if (k0 + U < R) fetch(k0 + U);
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      T d = T(0);
      #pragma unroll
      for (int j = 0; j < PER; ++j) {
        const T* e = reinterpret_cast<const T*>(&a[u][j]);
        #pragma unroll
        for (int k = 0; k < VEC; ++k) { d += e[k] * pv[j * VEC + k]; sp[j * VEC + k] += e[k] * rr[u]; }
      }
      qp[k0 + u] = d;
    }
  }
  __shared__ T part[R][WARPS + 1];
  const T w = warp_sum_scatter<T, R>(qp, lane);
  if (lane % LANES == 0) part[lane / LANES][warp] = w;
  T* const into = ACC ? acc : s;
  #pragma unroll
  for (int j = 0; j < PER; ++j) {
    VT v;
    T* e = reinterpret_cast<T*>(&v);
    #pragma unroll
    for (int k = 0; k < VEC; ++k) e[k] = sp[j * VEC + k];
    add_vec<T>(into + col(j), v);
  }
  if constexpr (ACC) __threadfence();
  __syncthreads();
  if (tid < R && r0 + tid < m) {
    T t = T(0);
    #pragma unroll
    for (int k = 0; k < WARPS; ++k) t += part[tid][k];
    q[r0 + tid] = t;
  }
  if constexpr (ACC) {
    __shared__ bool last;
    if (tid == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    #pragma unroll
    for (int j = 0; j < PER; ++j) {
      VT* a = reinterpret_cast<VT*>(acc + col(j));
      *reinterpret_cast<VT*>(s + col(j)) = __ldcg(a);
      *a = VT{};
    }
    if (tid == 0) *counter = 0;
  }
}

__global__ void spin(long long cycles) {  // keeps the GPU busy while work is queued
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}
