// Helpers shared by every routine of the BLAS library; they do not depend on the
// kernel's geometry, so they are emitted once.

// Reads x[i .. i+VEC) into out; values at or past n read as 0, the padding
// (0 is the identity of every reduction here, so padded lanes change nothing).
// A whole piece that may not use a 16-byte access (a row that does not start on a
// 16-byte boundary) takes VEC plain accesses behind one branch: guarding each value
// instead made a matrix add 37 % slower on the H100 (docs/optimization-space.md).
__device__ __forceinline__ void load_values(const real* __restrict__ x, long long i, long long n,
                                            bool vec_ok, real* out) {
  if (vec_ok && i + VEC <= n) {
    const fusec_vec v = *reinterpret_cast<const fusec_vec*>(x + i);
    #pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = v.v[k];
  } else if (i + VEC <= n) {
    #pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = x[i + k];
  } else {
    #pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = i + k < n ? x[i + k] : real(0);
  }
}

// Writes in[0 .. VEC) to x[i ..]; nothing at or past n.
__device__ __forceinline__ void store_values(real* __restrict__ x, long long i, long long n,
                                             bool vec_ok, const real* in) {
  if (vec_ok && i + VEC <= n) {
    fusec_vec v;
    #pragma unroll
    for (int k = 0; k < VEC; ++k) v.v[k] = in[k];
    *reinterpret_cast<fusec_vec*>(x + i) = v;
  } else if (i + VEC <= n) {  // a whole piece, as load_values
    #pragma unroll
    for (int k = 0; k < VEC; ++k) x[i + k] = in[k];
  } else {
    #pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (i + k < n) x[i + k] = in[k];
  }
}

// Sum over the 32 lanes of a warp; every lane gets the total.
__device__ __forceinline__ real warp_sum(real x) {
  #pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Sums each of K values (K a power of two <= 32) over the 32 lanes of a warp, with
// K - 1 + log2(32/K) shuffles instead of 5K: each step, a lane keeps half of its
// values and adds its partner's copy of that half. Returns, in lane l, the total of
// value l / (32/K); v is clobbered.
template <int K>
__device__ __forceinline__ real warp_sum_scatter(real* v, int lane) {
  #pragma unroll
  for (int half = K / 2, offset = 16; half >= 1; half /= 2, offset /= 2) {
    const bool upper = lane & offset;
    #pragma unroll
    for (int j = 0; j < half; ++j) {
      const real send = upper ? v[j] : v[j + half];
      const real keep = upper ? v[j + half] : v[j];
      v[j] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
    }
  }
  real x = v[0];
  #pragma unroll
  for (int offset = 16 / K; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Finish epilogues of the reductions: out = f(acc, ...).
__device__ __forceinline__ real scale_finish(real acc, real alpha) { return alpha * acc; }
__device__ __forceinline__ real axpby_finish(real acc, real alpha, real beta, real y) {
  return alpha * acc + beta * y;
}
