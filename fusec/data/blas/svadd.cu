/*@fusec
function   svadd(x: vector[n], y: vector[n]) -> z: vector[n]
summary    z = x + y
hof        map
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
element    z subvector(ELEMENT)
threads    32
reference  x + y

load       x vec_load as vec
load       y vec_load as vec
compute    vadd_compute(x:vec, y:vec) -> z:vec
store      z vec_store as vec
@*/

__device__ __forceinline__ void vadd_compute(const real* x, const real* y, real* z, const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) z[v] = x[v] + y[v];
}
