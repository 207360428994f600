// Routines of a square matrix's upper triangle in the tile geometry (triangle.fusec).
// Mapping `triu_tile` is tile.cuh's `tile` layout (thread (tx, ty) holds rows ty + k*BLOCK_Y,
// columns tx*VEC .. +VEC-1) of A[r][c] for c >= r, and 0 below the diagonal. A tile wholly
// below the diagonal is zeros with no memory access, so a kernel reads about half of A:
// n(n+1)/2 values and the lower part of the tiles the diagonal crosses.

// The whole tile lies strictly below the diagonal: its first row is past its last column.
// The same for the whole block, so the branch on it does not diverge.
__device__ __forceinline__ bool triu_tile_below(const fusec_tile& c) {
  return c.row0 >= c.col0 + TILE_COLS;
}

// The whole tile lies on or above the diagonal: its last row is at most its first column.
__device__ __forceinline__ bool triu_tile_above(const fusec_tile& c) {
  return c.row0 + TILE_ROWS - 1 <= c.col0;
}

__device__ __forceinline__ void triu_tile_load(const real* __restrict__ A, real* a, const fusec_tile& c) {
  if (triu_tile_below(c)) {
    #pragma unroll
    for (int k = 0; k < ROWS_PER_THREAD * VEC; ++k) a[k] = real(0);
    return;
  }
  if (triu_tile_above(c)) {
    tile_load(A, a, c);
    return;
  }
  // The diagonal crosses the tile (one or two tiles of a row of tiles): a 16-byte piece
  // wholly below it is not read, the others go through load_values' guards (fewer
  // branches than tile_load's paths: in float64 those made ptxas spill).
  const int col = c.col0 + c.tx * VEC;
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    if (row < c.rows && col + VEC - 1 >= row) {
      load_values(A + (long long)row * c.cols, col, c.cols, c.vec_ok, a + k * VEC);
      #pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (col + j < row) a[k * VEC + j] = real(0);
    } else {
      #pragma unroll
      for (int j = 0; j < VEC; ++j) a[k * VEC + j] = real(0);
    }
  }
}

// x's two pieces a tile of a square matrix reads (mapping `tri_x`): x[col0 ..
// col0+TILE_COLS) at word 0, x[row0 .. row0+TILE_ROWS) at word TILE_COLS; 0 past the end.
// One element for both, so that a kernel may read x along the columns (A x) and along
// the rows (A^T x) at once.
__device__ __forceinline__ void tri_x_load(const real* __restrict__ x, real* s, const fusec_tile& c) {
  for (int t = c.ty * BLOCK_X + c.tx; t < TILE_COLS + TILE_ROWS; t += BLOCK) {
    const int i = t < TILE_COLS ? c.col0 + t : c.row0 + (t - TILE_COLS);
    const int n = t < TILE_COLS ? c.cols : c.rows;
    s[t] = i < n ? x[i] : real(0);
  }
}

// y_partial[k] += sum_v A[k][v] x[v], x from `tri_x`: this thread's share of triu(A) x.
// (x's values one at a time, each into every row's sum: fewer live registers than
// gemv_compute's order, which made ptxas spill in float64 with 8 rows per thread.)
__device__ __forceinline__ void trmv_x_compute(const real* a, const real* s, real* y, const fusec_tile& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) {
    const real x = s[c.tx * VEC + v];
    #pragma unroll
    for (int k = 0; k < ROWS_PER_THREAD; ++k) y[k] += a[k * VEC + v] * x;
  }
}

// y_partial[v] += sum_k A[k][v] x[k] over the rows k above column v's diagonal
// (row < column): this thread's share of striu(A)^T x, the diagonal left out.
__device__ __forceinline__ void strict_gemtv_compute(const real* a, const real* x, real* y, const fusec_tile& c) {
  if (c.row0 + TILE_ROWS <= c.col0) {  // the whole tile strictly above the diagonal
    gemtv_compute(a, x, y, c);
    return;
  }
  const int col = c.col0 + c.tx * VEC;
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    #pragma unroll
    for (int v = 0; v < VEC; ++v)
      if (row < col + v) y[v] += a[k * VEC + v] * x[k];
  }
}

// As strict_gemtv_compute, x from `tri_x` (its rows piece), read where it is used (a copy
// of it in registers made ptxas spill in float64 with 8 rows per thread).
__device__ __forceinline__ void strict_gemtv_x_compute(const real* a, const real* s, real* y, const fusec_tile& c) {
  if (c.row0 + TILE_ROWS <= c.col0) {  // the whole tile strictly above the diagonal
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
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    const real x = s[TILE_COLS + c.ty + k * BLOCK_Y];
    #pragma unroll
    for (int v = 0; v < VEC; ++v)
      if (row < col + v) y[v] += a[k * VEC + v] * x;
  }
}
