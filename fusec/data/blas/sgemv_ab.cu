/*@fusec
function   sgemv_ab(alpha: scalar, A: matrix[m, n], x: vector[n], beta: scalar, y0: vector[m]) -> y: vector[m]
summary    y = alpha A x + beta y0 (BLAS gemv, out of place)
hof        nested reduce(+) over n
element    A tile(TILE_ROWS, TILE_COLS)
element    x subvector(TILE_COLS)
element    y0 subvector(TILE_ROWS)
element    y subvector(TILE_ROWS)
threads    BLOCK_X x BLOCK_Y
reference  alpha * (A @ x) + beta * y0
finish     axpby_finish(acc, alpha, beta, y0)

load       A tile_load as tile
load       x cols_load as cols
compute    gemv_compute(A:tile, x:cols) -> y:rows_partial
store      y rows_partial_store as rows_partial

implementation band band  # whole rows per block: the row sums are whole inside it
load       A band_load as band
load       x band_cols_load as band_cols
compute    band_gemv_compute(A:band, x:band_cols) -> y:band_rows scratch WARPS*BAND_ROWS sync
store      y band_rows_store as band_rows
@*/
