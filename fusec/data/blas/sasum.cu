/*@fusec
function   sasum(x: vector[n]) -> r: scalar
summary    r = sum_i |x_i|
hof        reduce(+)
element    x subvector(ELEMENT)
threads    32
reference  sum(abs(x))

load       x vec_load as vec
compute    asum_compute(x:vec) -> r:partial
store      r partial_store as partial scratch INSTANCES sync
@*/

// r_partial += |x| over this thread's values (padded lanes are 0: |0| adds nothing).
__device__ __forceinline__ void asum_compute(const real* x, real* r, const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) r[0] += fabs(x[v]);
}
