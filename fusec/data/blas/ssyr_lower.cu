/*@fusec
function   ssyr_lower(alpha: scalar, A: matrix[m, n], x: vector[n]) -> B: matrix[m, n]
summary    B = tril(A + alpha x x^T): BLAS ssyr on the lower triangle (uplo 'L') of a square A, out of place; A's upper triangle is not read, B's is not written (stored B tril): it keeps what the array held
hof        nested map
square     A
stored     A tril
stored     B tril
element    A tile(TILE_ROWS, TILE_COLS)
element    x subvector(TILE_COLS)
element    B tile(TILE_ROWS, TILE_COLS)
threads    BLOCK_X x BLOCK_Y
reference  tril(A + alpha * outer(x, x))

load       A tril_tile_load as tril_tile
load       x tri_x_load as tri_x
compute    syr_lower_compute(alpha, A:tril_tile, x:tri_x_all) -> B:tril_tile
store      B tril_tile_store as tril_tile
@*/

// b = a + alpha x_row x_col on and below the diagonal, 0 above it (mapping `tril_tile`, as a
// later call of the kernel reads it; tril_tile_store writes none of the zeros);
// x's two pieces from `tri_x` (columns at word 0, rows at word TILE_COLS).
__device__ __forceinline__ void syr_lower_compute(real alpha, const real* a, const real* s, real* b,
                                                  const fusec_tile& c) {
  const int col = c.col0 + c.tx * VEC;
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    const real xr = alpha * s[TILE_COLS + c.ty + k * BLOCK_Y];
    #pragma unroll
    for (int v = 0; v < VEC; ++v)
      b[k * VEC + v] = row >= col + v ? a[k * VEC + v] + xr * s[c.tx * VEC + v] : real(0);
  }
}
