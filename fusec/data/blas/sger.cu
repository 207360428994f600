/*@fusec
function   sger(A: matrix[m, n], u: vector[m], v: vector[n]) -> B: matrix[m, n]
summary    B = A + u v^T (rank-1 update, out of place)
hof        nested map
element    A tile(TILE_ROWS, TILE_COLS)
element    u subvector(TILE_ROWS)
element    v subvector(TILE_COLS)
element    B tile(TILE_ROWS, TILE_COLS)
threads    BLOCK_X x BLOCK_Y
reference  A + outer(u, v)

load       A tile_load as tile
load       u rows_load as rows
load       v cols_load as cols
compute    ger_compute(A:tile, u:rows, v:cols) -> B:tile
store      B tile_store as tile

implementation band band
load       A band_load as band
load       u band_rows_load as band_rows
load       v band_cols_load as band_cols
compute    band_ger_compute(A:band, u:band_rows, v:band_cols) -> B:band
store      B band_store as band
@*/

__device__ __forceinline__ void ger_compute(const real* a, const real* u, const real* v, real* b,
                                            const fusec_tile& c) {
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    #pragma unroll
    for (int j = 0; j < VEC; ++j) b[k * VEC + j] = a[k * VEC + j] + u[k] * v[j];
  }
}
