// Routines of the tile geometry. A block of BLOCK_X x BLOCK_Y threads (BLOCK_X = 32,
// one warp per row of threads) works on a TILE_ROWS x TILE_COLS tile; thread
// (tx, ty) holds rows ty + k*BLOCK_Y (k < TILE_ROWS/BLOCK_Y) and columns
// tx*VEC .. tx*VEC+VEC-1, slot k*VEC + v (mapping `tile`).

#define ROWS_PER_THREAD (TILE_ROWS / BLOCK_Y)

// Matrix loads go through fusec_load16<STREAM_MATRIX>: evict-first where the kernel
// stores no matrix (it reads each matrix once; its vectors and partials stay in L2).

// Every routine has a straight-line path for full tiles (c.full: inside and
// aligned, the same for the whole block), so all of a thread's loads leave at
// once; the guarded path handles the edges, and rows that do not start on a
// 16-byte boundary: a whole piece of such a row is VEC accesses behind one branch
// (tile_load's go through the kernel's policy, fusec_load1<STREAM_MATRIX>).

__device__ __forceinline__ void tile_load(const real* __restrict__ A, real* a, const fusec_tile& c) {
  const int col = c.col0 + c.tx * VEC;
  if (c.full) {
    const real* p = A + (long long)(c.row0 + c.ty) * c.cols + col;
    #pragma unroll
    for (int k = 0; k < ROWS_PER_THREAD; ++k) {
      const fusec_vec v = fusec_load16<STREAM_MATRIX>(p + (long long)k * BLOCK_Y * c.cols);
      #pragma unroll
      for (int j = 0; j < VEC; ++j) a[k * VEC + j] = v.v[j];
    }
    return;
  }
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    const real* p = A + (long long)row * c.cols;
    if (row < c.rows && !c.vec_ok && col + VEC <= c.cols) {  // a whole piece of a row off 16 bytes
      #pragma unroll
      for (int v = 0; v < VEC; ++v) a[k * VEC + v] = fusec_load1<STREAM_MATRIX>(p + col + v);
    } else if (row < c.rows) {
      load_values(p, col, c.cols, c.vec_ok, a + k * VEC);
    } else {
      #pragma unroll
      for (int v = 0; v < VEC; ++v) a[k * VEC + v] = real(0);
    }
  }
}

__device__ __forceinline__ void tile_store(const real* a, real* __restrict__ A, const fusec_tile& c) {
  const int col = c.col0 + c.tx * VEC;
  if (c.full) {
    real* p = A + (long long)(c.row0 + c.ty) * c.cols + col;
    #pragma unroll
    for (int k = 0; k < ROWS_PER_THREAD; ++k) {
      fusec_vec v;
      #pragma unroll
      for (int j = 0; j < VEC; ++j) v.v[j] = a[k * VEC + j];
      *reinterpret_cast<fusec_vec*>(p + (long long)k * BLOCK_Y * c.cols) = v;
    }
    return;
  }
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    if (row < c.rows) store_values(A + (long long)row * c.cols, col, c.cols, c.vec_ok, a + k * VEC);
  }
}

// A vector indexed by column: thread holds x[col0 + tx*VEC + v] (mapping `cols`).
__device__ __forceinline__ void cols_load(const real* __restrict__ x, real* e, const fusec_tile& c) {
  load_values(x, c.col0 + c.tx * VEC, c.cols, c.aligned, e);  // a vector needs only its base aligned
}

// A vector indexed by row: thread holds y[row0 + ty + k*BLOCK_Y] (mapping `rows`).
__device__ __forceinline__ void rows_load(const real* __restrict__ y, real* e, const fusec_tile& c) {
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    const int row = c.row0 + c.ty + k * BLOCK_Y;
    e[k] = c.full || row < c.rows ? y[row] : real(0);
  }
}

// Row sums held per thread over its own columns (mapping `rows_partial`): a warp
// holds whole rows, so a warp sum completes them; lane l ends up with row l/(32/K).
__device__ __forceinline__ void rows_partial_store(const real* e, real* __restrict__ y,
                                                   const fusec_tile& c) {
  real v[ROWS_PER_THREAD];
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) v[k] = e[k];
  const real s = warp_sum_scatter<ROWS_PER_THREAD>(v, c.tx);
  constexpr int LANES = 32 / ROWS_PER_THREAD;  // lanes that hold the same row's sum
  const int row = c.row0 + c.ty + (c.tx / LANES) * BLOCK_Y;
  if (c.tx % LANES == 0 && row < c.rows) y[row] = s;
}

// Column sums held per thread over its own rows (mapping `cols_partial`): the
// BLOCK_Y warps meet in shared memory. scratch: BLOCK_Y*TILE_COLS reals, laid out
// so that both the writes and the reads of a warp hit 32 different banks.
__device__ __forceinline__ void cols_partial_store(const real* e, real* __restrict__ y, real* scratch,
                                                   const fusec_tile& c) {
  #pragma unroll
  for (int v = 0; v < VEC; ++v) scratch[c.ty * TILE_COLS + v * BLOCK_X + c.tx] = e[v];
  BARRIER();
  for (int p = c.ty * BLOCK_X + c.tx; p < TILE_COLS; p += BLOCK) {
    real s = real(0);
    #pragma unroll
    for (int r = 0; r < BLOCK_Y; ++r) s += scratch[r * TILE_COLS + p];
    const int col = c.col0 + (p % BLOCK_X) * VEC + p / BLOCK_X;
    if (col < c.cols) y[col] = s;
  }
}

// y_partial[k] += sum_v A[k][v] x[v]: this thread's share of A x.
__device__ __forceinline__ void gemv_compute(const real* a, const real* x, real* y, const fusec_tile& c) {
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    real s = real(0);
    #pragma unroll
    for (int v = 0; v < VEC; ++v) s += a[k * VEC + v] * x[v];
    y[k] += s;
  }
}

// y_partial[v] += sum_k A[k][v] x[k]: this thread's share of A^T x.
__device__ __forceinline__ void gemtv_compute(const real* a, const real* x, real* y, const fusec_tile& c) {
  #pragma unroll
  for (int k = 0; k < ROWS_PER_THREAD; ++k) {
    #pragma unroll
    for (int v = 0; v < VEC; ++v) y[v] += a[k * VEC + v] * x[k];
  }
}
