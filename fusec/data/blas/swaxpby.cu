/*@fusec
function   swaxpby(alpha: scalar, x: vector[n], beta: scalar, y: vector[n]) -> w: vector[n]
summary    w = alpha x + beta y
hof        map
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
element    w subvector(ELEMENT)
threads    32
reference  alpha * x + beta * y

load       x vec_load as vec
load       y vec_load as vec
compute    waxpby_compute(alpha, x:vec, beta, y:vec) -> w:vec
store      w vec_store as vec
@*/

__device__ __forceinline__ void waxpby_compute(real alpha, const real* x, real beta, const real* y,
                                               real* w, const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) w[v] = alpha * x[v] + beta * y[v];
}
