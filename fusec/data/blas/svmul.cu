/*@fusec
function   svmul(x: vector[n], y: vector[n]) -> z: vector[n]
summary    z = x * y (element-wise product)
hof        map
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
element    z subvector(ELEMENT)
threads    32
reference  x * y

load       x vec_load as vec
load       y vec_load as vec
compute    vmul_compute(x:vec, y:vec) -> z:vec
store      z vec_store as vec
@*/

__device__ __forceinline__ void vmul_compute(const real* x, const real* y, real* z, const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) z[v] = x[v] * y[v];
}
