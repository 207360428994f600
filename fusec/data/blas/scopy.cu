/*@fusec
function   scopy(x: vector[n]) -> y: vector[n]
summary    y = x (a new vector with x's values)
hof        map
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
threads    32
reference  x

load       x vec_load as vec
compute    copy_compute(x:vec) -> y:vec
store      y vec_store as vec
@*/

__device__ __forceinline__ void copy_compute(const real* x, real* y, const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) y[v] = x[v];
}
