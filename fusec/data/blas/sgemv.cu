/*@fusec
function   sgemv(A: matrix[m, n], x: vector[n]) -> y: vector[m]
summary    y = A x
hof        nested reduce(+) over n
element    A tile(TILE_ROWS, TILE_COLS)
element    x subvector(TILE_COLS)
element    y subvector(TILE_ROWS)
threads    BLOCK_X x BLOCK_Y
reference  A @ x


implementation registers   # the tile in registers, rows summed across a warp
load       A tile_load as tile
load       x cols_load as cols
compute    gemv_compute(A:tile, x:cols) -> y:rows_partial
store      y rows_partial_store as rows_partial

implementation staged      # the tile staged in shared memory, one thread per row
load       A tile_smem_load as tile_smem
load       x cols_smem_load as cols_smem threads BLOCK_X x 1
compute    gemv_rows_compute(A:tile_smem_rows, x:cols_smem_all) -> y:rows_one threads TILE_ROWS x 1
store      y rows_one_store as rows_one threads TILE_ROWS x 1

implementation band band  # whole rows per block: the row sums are whole inside it
load       A band_load as band
load       x band_cols_load as band_cols
compute    band_gemv_compute(A:band, x:band_cols) -> y:band_rows scratch WARPS*BAND_ROWS sync
store      y band_rows_store as band_rows
@*/

// Writes the tile into shared memory, row pitch TILE_COLS+1 (mapping `tile_smem`).
__device__ __forceinline__ void tile_smem_load(const real* __restrict__ A, real* s, const fusec_tile& c) {
  real v[VEC];
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int r = c.ty + k * BLOCK_Y;
    if (c.row0 + r < c.rows) {
      load_values(A + (long long)(c.row0 + r) * c.cols, c.col0 + c.tx * VEC, c.cols, c.vec_ok, v);
    } else {
      #pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = real(0);
    }
    #pragma unroll
    for (int j = 0; j < VEC; ++j) s[r * (TILE_COLS + 1) + c.tx * VEC + j] = v[j];
  }
}

// The tile's piece of a vector indexed by column, into shared memory (one warp).
__device__ __forceinline__ void cols_smem_load(const real* __restrict__ x, real* s, const fusec_tile& c) {
  load_values(x, c.col0 + c.tx * VEC, c.cols, c.aligned, s + c.tx * VEC);  // a vector: its base decides
}

// Thread tx < TILE_ROWS adds row tx of the tile times x to its row value.
__device__ __forceinline__ void gemv_rows_compute(const real* a, const real* x, real* y, const fusec_tile& c) {
  real s = real(0);
  #pragma unroll 8
  for (int j = 0; j < TILE_COLS; ++j) s += a[c.tx * (TILE_COLS + 1) + j] * x[j];
  y[0] += s;
}

__device__ __forceinline__ void rows_one_store(const real* y, real* __restrict__ out, const fusec_tile& c) {
  const int row = c.row0 + c.tx;
  if (row < c.rows) out[row] = y[0];
}
