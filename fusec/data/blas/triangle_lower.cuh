// Routines of a square matrix's lower triangle in the tile geometry (triangle_lower.fusec):
// triangle.cuh's upper-triangle routines mirrored. Mapping `tril_tile` is tile.cuh's `tile`
// layout (thread (tx, ty) holds rows ty + k*BLOCK_Y, columns tx*VEC .. +VEC-1) of A[r][c] for
// c <= r, and 0 above the diagonal. A tile wholly above the diagonal is zeros with no memory
// access, so a kernel reads about half of A: n(n+1)/2 values and the upper part of the tiles
// the diagonal crosses.

// The whole tile lies strictly above the diagonal: its first column is past its last row.
// The same for the whole block, so the branch on it does not diverge.
__device__ __forceinline__ bool tril_tile_above(const fusec_tile& c) {
  return c.col0 >= c.row0 + TILE_ROWS;
}

// The whole tile lies on or below the diagonal: its last column is at most its first row.
__device__ __forceinline__ bool tril_tile_below(const fusec_tile& c) {
  return c.col0 + TILE_COLS - 1 <= c.row0;
}

__device__ __forceinline__ void tril_tile_load(const real* __restrict__ A, real* a, const fusec_tile& c) {
  if (tril_tile_above(c)) {
    #pragma unroll
    for (int k = 0; k < ROWS_PER_THREAD * VEC; ++k) a[k] = real(0);
    return;
  }
  if (tril_tile_below(c)) {
    tile_load(A, a, c);
    return;
  }
  // The diagonal crosses the tile: a 16-byte piece wholly above it (its first column past
  // the row) is not read, the others go through load_values' guards.
  const int col = c.col0 + c.tx * VEC;
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    if (row < c.rows && col <= row) {
      load_values(A + (long long)row * c.cols, col, c.cols, c.vec_ok, a + k * VEC);
      #pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (col + j > row) a[k * VEC + j] = real(0);
    } else {
      #pragma unroll
      for (int j = 0; j < VEC; ++j) a[k * VEC + j] = real(0);
    }
  }
}

// y_partial[v] += sum_k A[k][v] x[k] over the rows k below column v's diagonal
// (row > column): this thread's share of tril(A, -1)^T x, the diagonal left out.
__device__ __forceinline__ void strict_lower_gemtv_compute(const real* a, const real* x, real* y,
                                                           const fusec_tile& c) {
  if (c.row0 >= c.col0 + TILE_COLS) {  // the whole tile strictly below the diagonal
    gemtv_compute(a, x, y, c);
    return;
  }
  const int col = c.col0 + c.tx * VEC;
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    #pragma unroll
    for (int v = 0; v < VEC; ++v)
      if (row > col + v) y[v] += a[k * VEC + v] * x[k];
  }
}

// As strict_lower_gemtv_compute, x from `tri_x` (its rows piece), read where it is used.
__device__ __forceinline__ void strict_lower_gemtv_x_compute(const real* a, const real* s, real* y,
                                                             const fusec_tile& c) {
  if (c.row0 >= c.col0 + TILE_COLS) {  // the whole tile strictly below the diagonal
    #pragma unroll
    for (int k = 0; k < ROWS_PER_THREAD; ++k) {
      const real x = s[TILE_COLS + c.ty + k * BLOCK_Y];
      #pragma unroll
      for (int v = 0; v < VEC; ++v) y[v] += a[k * VEC + v] * x;
    }
    return;
  }
  const int col = c.col0 + c.tx * VEC;
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    // values v < below lie below the diagonal (a select on it: a branch made ptxas spill in float32, 64 rows)
    const int below = c.row0 + c.ty + k * BLOCK_Y - col;
    const real x = s[TILE_COLS + c.ty + k * BLOCK_Y];
    #pragma unroll
    for (int v = 0; v < VEC; ++v)
      y[v] += v < below ? a[k * VEC + v] * x : real(0);
  }
}

// The store of a result of one stored lower triangle (`stored B tril`), held in `tril_tile`:
// only the values on and below the diagonal are written, n(n+1)/2 of them: a tile wholly
// above the diagonal writes nothing, a tile the diagonal crosses writes its values with
// column <= row. The rest of B keeps whatever its array held.
__device__ __forceinline__ void tril_tile_store(const real* b, real* __restrict__ B, const fusec_tile& c) {
  if (tril_tile_above(c)) return;
  if (tril_tile_below(c)) {
    tile_store(b, B, c);
    return;
  }
  // The diagonal crosses the tile: a 16-byte piece wholly on or below it goes whole (through
  // store_values' guards at the matrix's end), a piece the diagonal crosses value by value,
  // a piece wholly above it not at all.
  const int col = c.col0 + c.tx * VEC;
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    if (row >= c.rows || col > row) continue;
    real* p = B + (long long)row * c.cols;
    if (col + VEC - 1 <= row) {
      store_values(p, col, c.cols, c.vec_ok, b + k * VEC);
    } else {
      #pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (col + j <= row && col + j < c.cols) p[col + j] = b[k * VEC + j];
    }
  }
}
