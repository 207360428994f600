/*@fusec
function   strmtv_strict_lower(A: matrix[m, n], x: vector[m]) -> y: vector[n]
summary    y = tril(A, -1)^T x: the strict lower triangle of a square A, transposed, times x (ssymv_lower's other half)
hof        nested reduce(+) over m
square     A
stored     A tril
element    A tile(TILE_ROWS, TILE_COLS)
element    x subvector(TILE_ROWS)
element    y subvector(TILE_COLS)
threads    BLOCK_X x BLOCK_Y
reference  tril(A, -1).T @ x

implementation registers   # x in registers, as sgemtv's
load       A tril_tile_load as tril_tile
load       x rows_load as rows
compute    strict_lower_gemtv_compute(A:tril_tile, x:rows) -> y:cols_partial
store      y cols_partial_store as cols_partial scratch BLOCK_Y*TILE_COLS sync

implementation shared_x    # x in shared memory, both of its pieces: shares the kernel with strmv_lower(A, x)
load       A tril_tile_load as tril_tile
load       x tri_x_load as tri_x
compute    strict_lower_gemtv_x_compute(A:tril_tile, x:tri_x_all) -> y:cols_partial
store      y cols_partial_store as cols_partial scratch BLOCK_Y*TILE_COLS sync
@*/
