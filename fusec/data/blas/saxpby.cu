/*@fusec
function   saxpby(alpha: scalar, x: vector[n], beta: scalar, y: vector[n]) -> z: vector[n]
summary    z = alpha x + beta y (BLAS axpby; a new vector, as swaxpby, since no call updates in place)
hof        map
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
element    z subvector(ELEMENT)
threads    32
reference  alpha * x + beta * y

load       x vec_load as vec
load       y vec_load as vec
compute    axpby_compute(alpha, x:vec, beta, y:vec) -> z:vec
store      z vec_store as vec
@*/

__device__ __forceinline__ void axpby_compute(real alpha, const real* x, real beta, const real* y,
                                              real* z, const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) z[v] = alpha * x[v] + beta * y[v];
}
