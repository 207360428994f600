/*@fusec
function   saxpy(alpha: scalar, x: vector[n], y: vector[n]) -> z: vector[n]
summary    z = alpha x + y
hof        map
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
element    z subvector(ELEMENT)
threads    32
reference  alpha * x + y

load       x vec_load as vec
load       y vec_load as vec
compute    axpy_compute(alpha, x:vec, y:vec) -> z:vec
store      z vec_store as vec
@*/

__device__ __forceinline__ void axpy_compute(real alpha, const real* x, const real* y, real* z,
                                             const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) z[v] = alpha * x[v] + y[v];
}
