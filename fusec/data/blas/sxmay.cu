/*@fusec
function   sxmay(w: vector[n], alpha: scalar, v: vector[n]) -> z: vector[n]
summary    z = w - alpha v (the first half of AXPYDOT)
hof        map
element    w subvector(ELEMENT)
element    v subvector(ELEMENT)
element    z subvector(ELEMENT)
threads    32
reference  w - alpha * v

load       w vec_load as vec
load       v vec_load as vec
compute    xmay_compute(w:vec, alpha, v:vec) -> z:vec
store      z vec_store as vec
@*/

__device__ __forceinline__ void xmay_compute(const real* w, real alpha, const real* v_, real* z,
                                             const fusec_chunk& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) z[v] = w[v] - alpha * v_[v];
}
