/*@fusec
function   snrm2(x: vector[n]) -> r: scalar
summary    r = ||x||_2 = sqrt(x . x), unscaled (LAPACK's snrm2 scales to avoid overflow; this does not)
hof        reduce(+)
element    x subvector(ELEMENT)
threads    32
reference  sqrt(dot(x, x))
finish     sqrt_finish(acc)

load       x vec_load as vec
compute    nrm2_compute(x:vec) -> r:partial
store      r partial_store as partial scratch INSTANCES sync
@*/

// r_partial += x . x over this thread's values (x is loaded once, not twice as sdot(x, x) reads it).
__device__ __forceinline__ void nrm2_compute(const real* x, real* r, const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) r[0] += x[v] * x[v];
}

// The square root of the whole sum, taken once by the block that finishes it.
__device__ __forceinline__ real sqrt_finish(real acc) { return sqrt(acc); }
