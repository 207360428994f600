// The store of a result of one stored triangle (triangle_store.fusec): a square matrix its
// function declares `stored B triu`, held in mapping `triu_tile` (triangle.cuh). Only the
// values on and above the diagonal are written, n(n+1)/2 of them: a tile wholly below the
// diagonal writes nothing, a tile the diagonal crosses writes its values with column >= row.
// The rest of B keeps whatever its array held.
__device__ __forceinline__ void triu_tile_store(const real* b, real* __restrict__ B, const fusec_tile& c) {
  if (triu_tile_below(c)) return;
  if (triu_tile_above(c)) {
    tile_store(b, B, c);
    return;
  }
  // The diagonal crosses the tile: a 16-byte piece wholly on or above it goes whole (through
  // store_values' guards at the matrix's end), a piece the diagonal crosses value by value,
  // a piece wholly below it not at all.
  const int col = c.col0 + c.tx * VEC;
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    if (row >= c.rows || col + VEC - 1 < row) continue;
    real* p = B + (long long)row * c.cols;
    if (col >= row) {
      store_values(p, col, c.cols, c.vec_ok, b + k * VEC);
    } else {
      #pragma unroll
      for (int j = 0; j < VEC; ++j)
        if (col + j >= row && col + j < c.cols) p[col + j] = b[k * VEC + j];
    }
  }
}
