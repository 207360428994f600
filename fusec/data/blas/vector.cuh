// Routines of the vector geometry: thread t of a block holds the VEC values
// c.i .. c.i+VEC-1 of a vector (mapping `vec`).

// Full chunks go through the kernel's L2 policy (STREAM_LOADS, STREAM_STORES: evict-first
// loads or stores, chosen per kernel by the space); the guarded edges use plain accesses.

__device__ __forceinline__ void vec_load(const real* __restrict__ x, real* e, const fusec_chunk& c) {
  if (c.full) {  // the whole chunk is inside and aligned: one 16-byte load, no guard
    const fusec_vec v = fusec_load16<STREAM_LOADS>(x + c.i);
    #pragma unroll
    for (int k = 0; k < VEC; ++k) e[k] = v.v[k];
  } else {
    load_values(x, c.i, c.n, c.vec_ok, e);
  }
}

__device__ __forceinline__ void vec_store(const real* e, real* __restrict__ x, const fusec_chunk& c) {
  if (c.full) {
    fusec_vec v;
    #pragma unroll
    for (int k = 0; k < VEC; ++k) v.v[k] = e[k];
    fusec_store16<STREAM_STORES>(x + c.i, v);
  } else {
    store_values(x, c.i, c.n, c.vec_ok, e);
  }
}

// Sums the block's per-thread partials (mapping `partial`) and writes the total
// to out[0]. scratch: INSTANCES reals, one per warp.
__device__ __forceinline__ void partial_store(const real* e, real* __restrict__ out, real* scratch,
                                              const fusec_chunk& c) {
  const real s = warp_sum(e[0]);
  if (c.t % 32 == 0) scratch[c.t / 32] = s;
  BARRIER();
  if (c.t < 32) {
    const real total = warp_sum(c.t < INSTANCES ? scratch[c.t] : real(0));
    if (c.t == 0) out[0] = total;
  }
}
