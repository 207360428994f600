/*@fusec
function   strmv(A: matrix[m, n], x: vector[n]) -> y: vector[m]
summary    y = triu(A) x: the upper triangle of a square A (its diagonal too) times x; A's lower triangle is not read
hof        nested reduce(+) over n
square     A
stored     A triu
element    A tile(TILE_ROWS, TILE_COLS)
element    x subvector(TILE_COLS)
element    y subvector(TILE_ROWS)
threads    BLOCK_X x BLOCK_Y
reference  triu(A) @ x

implementation registers   # x in registers, as sgemv's
load       A triu_tile_load as triu_tile
load       x cols_load as cols
compute    gemv_compute(A:triu_tile, x:cols) -> y:rows_partial
store      y rows_partial_store as rows_partial

implementation shared_x    # x in shared memory, both of its pieces: shares the kernel with strmtv_strict(A, x)
load       A triu_tile_load as triu_tile
load       x tri_x_load as tri_x
compute    trmv_x_compute(A:triu_tile, x:tri_x_all) -> y:rows_partial
store      y rows_partial_store as rows_partial
@*/
