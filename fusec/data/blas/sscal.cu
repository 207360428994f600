/*@fusec
function   sscal(alpha: scalar, x: vector[n]) -> y: vector[n]
summary    y = alpha x
hof        map
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
threads    32
reference  alpha * x

load       x vec_load as vec
compute    scal_compute(alpha, x:vec) -> y:vec
store      y vec_store as vec
@*/

__device__ __forceinline__ void scal_compute(real alpha, const real* x, real* y, const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) y[v] = alpha * x[v];
}
