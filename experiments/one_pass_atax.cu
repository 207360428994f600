// experiments.one_pass_atax: ATAX (y = A^T (A x), row-major A) in ONE pass over A, written by hand with a
// band geometry, outside fusec's library, to ask whether ATAX needs the two passes fusec makes.
//
// t = A x is a row reduction: a block that owns whole rows has t_r complete as soon as it has read
// row r, and y = A^T t needs row r only once t_r is known. So each block walks its band of rows U
// at a time, the next U rows' loads in flight: each thread owns the same PER 16-byte pieces of
// every row (consecutive threads, consecutive pieces: the block spans a whole row), adds its
// partial of each row's t, the block sums those (warp shuffles, then the warps' totals in shared
// memory, double-buffered so that one __syncthreads per batch suffices), and every thread adds
// t_r times its pieces of row r to its partials of y, kept in registers over the band. At the end
// the partials go out with vector atomics (sm_90's atomicAdd on float4; two double atomics in
// fp64) into a workspace that is zero between launches; the last block to arrive (a ticket)
// copies it to y and zeroes it again. x sits in shared memory (read by every row).
// One block per SM, rows dealt evenly: block b owns rows [b m / G, (b + 1) m / G).
// No guards on columns: n == PER * BLOCK * VEC (the launcher checks).

template <class T> struct V;
template <> struct V<float> { using t = float4; static constexpr int n = 4; };
template <> struct V<double> { using t = double2; static constexpr int n = 2; };

template <class T>
__device__ __forceinline__ void add_vec(T* p, const typename V<T>::t& v) {
  if constexpr (sizeof(T) == 4) atomicAdd(reinterpret_cast<float4*>(p), v);
  else { atomicAdd(p, v.x); atomicAdd(p + 1, v.y); }
}

template <class T, int BLOCK, int PER, int U>
__global__ void __launch_bounds__(BLOCK, 1) atax_band(
    const T* __restrict__ A, const T* __restrict__ x, T* __restrict__ y, T* acc, unsigned* counter, int m)
{
  using VT = typename V<T>::t;
  constexpr int VEC = V<T>::n, N = PER * BLOCK * VEC, WARPS = BLOCK / 32;
  static_assert(U == 1 || U == 2 || U == 4, "U: rows per batch, a power of two up to 4");
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int r0 = (int)((long long)blockIdx.x * m / gridDim.x);
  const int r1 = (int)((long long)(blockIdx.x + 1) * m / gridDim.x);
  auto col = [&](int j) { return (j * BLOCK + tid) * VEC; };

  extern __shared__ __align__(16) unsigned char smem_raw[];
  VT* xs = reinterpret_cast<VT*>(smem_raw);  // x, as each thread reads it: [PER][BLOCK]
  __shared__ T part[2][U][WARPS];
  #pragma unroll
  for (int j = 0; j < PER; ++j) xs[j * BLOCK + tid] = *reinterpret_cast<const VT*>(x + col(j));

  T yp[PER * VEC];
  #pragma unroll
  for (int e = 0; e < PER * VEC; ++e) yp[e] = T(0);
  VT next[U][PER];
  auto fetch = [&](int g) {
    #pragma unroll
    for (int u = 0; u < U; ++u)
      #pragma unroll
      for (int j = 0; j < PER; ++j)
        next[u][j] = g + u < r1 ? __ldcs(reinterpret_cast<const VT*>(A + (long long)(g + u) * N + col(j))) : VT{};
  };
  __syncthreads();  // x is in shared memory
  fetch(r0);
  int buf = 0;
  for (int g = r0; g < r1; g += U, buf ^= 1) {
    VT a[U][PER];
    #pragma unroll
    for (int u = 0; u < U; ++u)
      #pragma unroll
      for (int j = 0; j < PER; ++j) a[u][j] = next[u][j];
    fetch(g + U);  // in flight while this batch's sums are made
    T d[U];
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      d[u] = T(0);
      #pragma unroll
      for (int j = 0; j < PER; ++j) {
        const VT xv = xs[j * BLOCK + tid];
        const T* e = reinterpret_cast<const T*>(&a[u][j]);
        const T* f = reinterpret_cast<const T*>(&xv);
        #pragma unroll
        for (int k = 0; k < VEC; ++k) d[u] += e[k] * f[k];
      }
      #pragma unroll
      for (int o = 16; o > 0; o /= 2) d[u] += __shfl_xor_sync(0xffffffffu, d[u], o);
    }
    if (lane == 0) {
      #pragma unroll
      for (int u = 0; u < U; ++u) part[buf][u][warp] = d[u];
    }
    __syncthreads();  // the other buffer is written next batch, after every thread has read this one
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      T t = T(0);
      #pragma unroll
      for (int k = 0; k < WARPS; ++k) t += part[buf][u][k];
      #pragma unroll
      for (int j = 0; j < PER; ++j) {
        const T* e = reinterpret_cast<const T*>(&a[u][j]);
        #pragma unroll
        for (int k = 0; k < VEC; ++k) yp[j * VEC + k] += t * e[k];
      }
    }
  }
  #pragma unroll
  for (int j = 0; j < PER; ++j) add_vec<T>(acc + col(j), *reinterpret_cast<const VT*>(&yp[j * VEC]));
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (tid == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  #pragma unroll
  for (int j = 0; j < PER; ++j) {
    VT* p = reinterpret_cast<VT*>(acc + col(j));
    *reinterpret_cast<VT*>(y + col(j)) = __ldcg(p);
    *p = VT{};
  }
  if (tid == 0) *counter = 0;
}

__global__ void spin(long long cycles) {  // keeps the GPU busy while work is queued
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}
