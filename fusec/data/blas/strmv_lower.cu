/*@fusec
function   strmv_lower(A: matrix[m, n], x: vector[n]) -> y: vector[m]
summary    y = tril(A) x: the lower triangle of a square A (its diagonal too) times x (BLAS strmv, uplo 'L'); A's upper triangle is not read
hof        nested reduce(+) over n
square     A
stored     A tril
element    A tile(TILE_ROWS, TILE_COLS)
element    x subvector(TILE_COLS)
element    y subvector(TILE_ROWS)
threads    BLOCK_X x BLOCK_Y
reference  tril(A) @ x

implementation registers   # x in registers, as sgemv's
load       A tril_tile_load as tril_tile
load       x cols_load as cols
compute    gemv_compute(A:tril_tile, x:cols) -> y:rows_partial
store      y rows_partial_store as rows_partial

implementation shared_x    # x in shared memory, both of its pieces: shares the kernel with strmtv_strict_lower(A, x)
load       A tril_tile_load as tril_tile
load       x tri_x_load as tri_x
compute    trmv_x_compute(A:tril_tile, x:tri_x_all) -> y:rows_partial
store      y rows_partial_store as rows_partial
@*/
