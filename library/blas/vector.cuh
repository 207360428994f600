// Routines of the vector geometry: thread t of a block holds the VEC values
// c.i .. c.i+VEC-1 of a vector (mapping `vec`).

__device__ __forceinline__ void vec_load(const real* __restrict__ x, real* e, const fusec_chunk& c) {
  load_values(x, c.i, c.n, c.vec_ok, e);
}

__device__ __forceinline__ void vec_store(const real* e, real* __restrict__ x, const fusec_chunk& c) {
  store_values(x, c.i, c.n, c.vec_ok, e);
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
