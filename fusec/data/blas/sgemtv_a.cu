/*@fusec
function   sgemtv_a(alpha: scalar, A: matrix[m, n], x: vector[m]) -> y: vector[n]
summary    y = alpha A^T x
hof        nested reduce(+) over m
element    A tile(TILE_ROWS, TILE_COLS)
element    x subvector(TILE_ROWS)
element    y subvector(TILE_COLS)
threads    BLOCK_X x BLOCK_Y
reference  alpha * (A.T @ x)
finish     scale_finish(acc, alpha)

load       A tile_load as tile
load       x rows_load as rows
compute    gemtv_compute(A:tile, x:rows) -> y:cols_partial
store      y cols_partial_store as cols_partial scratch BLOCK_Y*TILE_COLS sync

implementation band band  # whole rows per block: column sums in registers, added with atomics
load       A band_load as band
load       x band_rows_load as band_rows
compute    band_gemtv_compute(A:band, x:band_rows) -> y:band_cols_partial
store      y band_cols_partial_store as band_cols_partial
@*/
