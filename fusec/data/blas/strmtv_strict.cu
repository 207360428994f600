/*@fusec
function   strmtv_strict(A: matrix[m, n], x: vector[m]) -> y: vector[n]
summary    y = triu(A, 1)^T x: the strict upper triangle of a square A, transposed, times x (symv's other half)
hof        nested reduce(+) over m
square     A
stored     A triu
element    A tile(TILE_ROWS, TILE_COLS)
element    x subvector(TILE_ROWS)
element    y subvector(TILE_COLS)
threads    BLOCK_X x BLOCK_Y
reference  triu(A, 1).T @ x

implementation registers   # x in registers, as sgemtv's
load       A triu_tile_load as triu_tile
load       x rows_load as rows
compute    strict_gemtv_compute(A:triu_tile, x:rows) -> y:cols_partial
store      y cols_partial_store as cols_partial scratch BLOCK_Y*TILE_COLS sync

implementation shared_x    # x in shared memory, both of its pieces: shares the kernel with strmv(A, x)
load       A triu_tile_load as triu_tile
load       x tri_x_load as tri_x
compute    strict_gemtv_x_compute(A:triu_tile, x:tri_x_all) -> y:cols_partial
store      y cols_partial_store as cols_partial scratch BLOCK_Y*TILE_COLS sync
@*/
