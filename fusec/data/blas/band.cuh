// Routines of the band geometry (band implementations of nested functions). An instance
// is BAND_ROWS whole rows, rows row0 .. row0+BAND_ROWS-1, on the whole block: thread t
// holds the 16-byte pieces j*BLOCK + t (j < PIECES) of each row, so consecutive threads
// read consecutive pieces and a row is whole inside the block (mapping `band`, slot
// (u*PIECES + j)*VEC + v: row row0+u, column (j*BLOCK + t)*VEC + v). A row has at most
// BAND_COLS = PIECES*BLOCK*VEC columns (the runtime checks).
//
// Sums along a row are whole once the block's warps have met (band_gemv_compute): every
// thread then holds the rows' sums (mapping `band_rows`), which later calls of the same
// kernel may read. Sums along a column stay partial in registers over the block's rows
// (`band_cols_partial`) and leave once, with vector atomics (band_cols_partial_store).

// The first column of this thread's piece j.
__device__ __forceinline__ long long band_col(int j, const fusec_band& c) {
  return ((long long)j * BLOCK + c.t) * VEC;
}

__device__ __forceinline__ void band_load(const real* __restrict__ A, real* a, const fusec_band& c) {
  if (c.full) {  // every load leaves at once
    #pragma unroll
    for (int u = 0; u < BAND_ROWS; ++u) {
      const real* row = A + (long long)(c.row0 + u) * c.cols;
      #pragma unroll
      for (int j = 0; j < PIECES; ++j) {
        const fusec_vec v = fusec_load16<STREAM_MATRIX>(row + band_col(j, c));
        #pragma unroll
        for (int k = 0; k < VEC; ++k) a[(u * PIECES + j) * VEC + k] = v.v[k];
      }
    }
    return;
  }
  #pragma unroll
  for (int u = 0; u < BAND_ROWS; ++u) {
    const int row = c.row0 + u;
    const real* p = A + (long long)row * c.cols;
    #pragma unroll
    for (int j = 0; j < PIECES; ++j) {
      real* e = a + (u * PIECES + j) * VEC;
      const long long col = band_col(j, c);
      if (row < c.rows && !c.vec_ok && col + VEC <= c.cols) {  // a whole piece of a row off 16 bytes
        #pragma unroll
        for (int k = 0; k < VEC; ++k) e[k] = fusec_load1<STREAM_MATRIX>(p + col + k);
      } else if (row < c.rows) {
        load_values(p, col, c.cols, c.vec_ok, e);
      } else {
        #pragma unroll
        for (int k = 0; k < VEC; ++k) e[k] = real(0);
      }
    }
  }
}

__device__ __forceinline__ void band_store(const real* a, real* __restrict__ A, const fusec_band& c) {
  if (c.full) {
    #pragma unroll
    for (int u = 0; u < BAND_ROWS; ++u) {
      real* row = A + (long long)(c.row0 + u) * c.cols;
      #pragma unroll
      for (int j = 0; j < PIECES; ++j) {
        fusec_vec v;
        #pragma unroll
        for (int k = 0; k < VEC; ++k) v.v[k] = a[(u * PIECES + j) * VEC + k];
        *reinterpret_cast<fusec_vec*>(row + band_col(j, c)) = v;
      }
    }
    return;
  }
  #pragma unroll
  for (int u = 0; u < BAND_ROWS; ++u) {
    const int row = c.row0 + u;
    if (row >= c.rows) break;
    #pragma unroll
    for (int j = 0; j < PIECES; ++j)
      store_values(A + (long long)row * c.cols, band_col(j, c), c.cols, c.vec_ok, a + (u * PIECES + j) * VEC);
  }
}

// A vector indexed by column, in this thread's pieces (mapping `band_cols`).
__device__ __forceinline__ void band_cols_load(const real* __restrict__ x, real* e, const fusec_band& c) {
  #pragma unroll
  for (int j = 0; j < PIECES; ++j) load_values(x, band_col(j, c), c.cols, c.aligned, e + j * VEC);
}

// A vector indexed by row: every thread holds the instance's rows (mapping `band_rows`).
__device__ __forceinline__ void band_rows_load(const real* __restrict__ y, real* e, const fusec_band& c) {
  #pragma unroll
  for (int u = 0; u < BAND_ROWS; ++u) e[u] = c.full || c.row0 + u < c.rows ? y[c.row0 + u] : real(0);
}

// Rows' whole values (mapping `band_rows`): thread u writes row row0+u.
__device__ __forceinline__ void band_rows_store(const real* e, real* __restrict__ y, const fusec_band& c) {
  #pragma unroll
  for (int u = 0; u < BAND_ROWS; ++u)
    if (c.t == u && c.row0 + u < c.rows) y[c.row0 + u] = e[u];
}

// Column sums over the block's rows (mapping `band_cols_partial`), added into the
// reduction's accumulator: one vector atomic per piece (fusec_atomic_add16).
__device__ __forceinline__ void band_cols_partial_store(const real* e, real* acc, const fusec_band& c) {
  #pragma unroll
  for (int j = 0; j < PIECES; ++j) {
    const long long col = band_col(j, c);
    if (c.aligned && col + VEC <= c.cols) {  // the accumulator is a vector: its base decides
      fusec_atomic_add16(acc + col, e + j * VEC);
    } else {
      #pragma unroll
      for (int k = 0; k < VEC; ++k)
        if (col + k < c.cols) atomicAdd(acc + col + k, e[j * VEC + k]);
    }
  }
}

// y[u] += row u . x, whole: each thread's share, a warp sum, then the warps' sums meet
// in scratch (WARPS*BAND_ROWS reals) and every thread adds them up, in the same order.
__device__ __forceinline__ void band_gemv_compute(const real* a, const real* x, real* y, real* scratch,
                                                  const fusec_band& c) {
  real d[BAND_ROWS];
  #pragma unroll
  for (int u = 0; u < BAND_ROWS; ++u) {
    d[u] = real(0);
    #pragma unroll
    for (int s = 0; s < PIECES * VEC; ++s) d[u] += a[u * PIECES * VEC + s] * x[s];
    d[u] = warp_sum(d[u]);
  }
  if (c.t % 32 == 0) {
    #pragma unroll
    for (int u = 0; u < BAND_ROWS; ++u) scratch[u * WARPS + c.t / 32] = d[u];
  }
  BARRIER();
  #pragma unroll
  for (int u = 0; u < BAND_ROWS; ++u) {
    real s = real(0);
    #pragma unroll
    for (int w = 0; w < WARPS; ++w) s += scratch[u * WARPS + w];
    y[u] += s;
  }
}

// y_partial[s] += sum_u A[u][s] x[u]: this thread's columns over the instance's rows.
__device__ __forceinline__ void band_gemtv_compute(const real* a, const real* x, real* y, const fusec_band& c) {
  #pragma unroll
  for (int u = 0; u < BAND_ROWS; ++u) {
    #pragma unroll
    for (int s = 0; s < PIECES * VEC; ++s) y[s] += a[u * PIECES * VEC + s] * x[u];
  }
}

__device__ __forceinline__ void band_ger_compute(const real* a, const real* u, const real* v, real* b,
                                                 const fusec_band& c) {
  #pragma unroll
  for (int r = 0; r < BAND_ROWS; ++r) {
    #pragma unroll
    for (int s = 0; s < PIECES * VEC; ++s) b[r * PIECES * VEC + s] = a[r * PIECES * VEC + s] + u[r] * v[s];
  }
}

__device__ __forceinline__ void band_madd_compute(const real* a, const real* b, real* out, const fusec_band& c) {
  #pragma unroll
  for (int s = 0; s < BAND_ROWS * PIECES * VEC; ++s) out[s] = a[s] + b[s];
}
