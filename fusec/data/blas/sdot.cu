/*@fusec
function   sdot(x: vector[n], y: vector[n]) -> r: scalar
summary    r = x . y
hof        reduce(+)
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
threads    32
reference  dot(x, y)

load       x vec_load as vec
load       y vec_load as vec
compute    dot_compute(x:vec, y:vec) -> r:partial
store      r partial_store as partial scratch INSTANCES sync
@*/

// r_partial += x . y over this thread's values.
__device__ __forceinline__ void dot_compute(const real* x, const real* y, real* r, const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) r[0] += x[v] * y[v];
}
