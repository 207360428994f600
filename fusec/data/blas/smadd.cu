/*@fusec
function   smadd(A: matrix[m, n], B: matrix[m, n]) -> C: matrix[m, n]
summary    C = A + B
hof        nested map
element    A tile(TILE_ROWS, TILE_COLS)
element    B tile(TILE_ROWS, TILE_COLS)
element    C tile(TILE_ROWS, TILE_COLS)
threads    BLOCK_X x BLOCK_Y
reference  A + B

load       A tile_load as tile
load       B tile_load as tile
compute    madd_compute(A:tile, B:tile) -> C:tile
store      C tile_store as tile

implementation band band
load       A band_load as band
load       B band_load as band
compute    band_madd_compute(A:band, B:band) -> C:band
store      C band_store as band
@*/

__device__ __forceinline__ void madd_compute(const real* a, const real* b, real* c_, const fusec_tile& c) {
  #pragma unroll
  for (int s = 0; s < ROWS_PER_THREAD * VEC; ++s) c_[s] = a[s] + b[s];
}
