/*@fusec
function   svdiv(x: vector[n], y: vector[n]) -> z: vector[n]
summary    z = x / y (element-wise quotient)
hof        map
element    x subvector(ELEMENT)
element    y subvector(ELEMENT)
element    z subvector(ELEMENT)
threads    32
reference  x / y

load       x vec_load as vec
load       y vec_load as vec
compute    vdiv_compute(x:vec, y:vec) -> z:vec
store      z vec_store as vec
@*/

// Padded lanes (at or past c.n) load 0, and 0 / 0 is NaN: they are set to 0 instead,
// since a reduction fused after this call (svdiv then sdot) adds them up. A full chunk
// has no padded lane and takes the unguarded loop.
__device__ __forceinline__ void vdiv_compute(const real* x, const real* y, real* z, const fusec_chunk& c) {
  if (c.full) {
    #pragma unroll
    for (int v = 0; v < VEC; ++v) z[v] = x[v] / y[v];
  } else {
    #pragma unroll
    for (int v = 0; v < VEC; ++v) z[v] = c.i + v < c.n ? x[v] / y[v] : real(0);
  }
}
