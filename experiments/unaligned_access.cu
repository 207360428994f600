// Row accesses where rows are not whole 16-byte pieces (experiments/unaligned_access.py):
// C = A + B and y = A x over rows x cols in fp32, tiles of 32 x 8 threads, R = 4 rows per
// thread and 128 columns per tile, ITERS tiles down the rows per block, as fusec's tile
// kernels lay them out. MODE 0: lane tx holds columns col0 + tx*4 + v (fusec's mapping),
// 1: columns col0 + v*32 + tx (a warp's access is 128 consecutive bytes), 2: float4
// (aligned rows only; tiles on the edges are skipped), 3 (madd): a branch per row and
// 4-value piece, then plain accesses (what load_values/store_values do now). GUARD: every
// access checks its row and column; without, tiles inside take no checks.
#define R 4
#define BY 8
#define TR (R * BY)
#define TC 128
// The block's place: its tile column (first column col0) and its run of tiles down the rows.
__device__ __forceinline__ int block_row(int cols) { return blockIdx.x / ((cols + TC - 1) / TC); }
__device__ __forceinline__ int block_col0(int cols) { return blockIdx.x % ((cols + TC - 1) / TC) * TC; }
template <int MODE, bool GUARD>  // MODE 0 strided, 1 coalesced, 2 vec
__device__ __forceinline__ int colof(int col0, int tx, int v) {
  return MODE == 1 ? col0 + v * 32 + tx : col0 + tx * 4 + v;
}
template <int MODE, bool GUARD>
__device__ void madd(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                     int rows, int cols, int iters) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int br = block_row(cols), col0 = block_col0(cols);
  for (int it = 0; it < iters; ++it) {
    const int row0 = (br * iters + it) * TR;
    if (row0 >= rows) return;
    const bool inside = row0 + TR <= rows && col0 + TC <= cols;
    float a[R * 4], b[R * 4];
    if (MODE == 2) {
      #pragma unroll
      for (int k = 0; k < R; ++k) {
        const long long o = (long long)(row0 + ty + k * BY) * cols + col0 + tx * 4;
        if (inside) {
          float4 p = *reinterpret_cast<const float4*>(A + o), q = *reinterpret_cast<const float4*>(B + o);
          a[k*4+0]=p.x; a[k*4+1]=p.y; a[k*4+2]=p.z; a[k*4+3]=p.w;
          b[k*4+0]=q.x; b[k*4+1]=q.y; b[k*4+2]=q.z; b[k*4+3]=q.w;
        } else {
          for (int v = 0; v < 4; ++v) { a[k*4+v] = 0; b[k*4+v] = 0; }
        }
      }
    } else if (!GUARD && inside) {
      #pragma unroll
      for (int k = 0; k < R; ++k)
        #pragma unroll
        for (int v = 0; v < 4; ++v) {
          const long long o = (long long)(row0 + ty + k * BY) * cols + colof<MODE, GUARD>(col0, tx, v);
          a[k*4+v] = A[o]; b[k*4+v] = B[o];
        }
    } else if (MODE == 3) {  // per row and piece: a branch, then 4 plain loads (or the guarded edge)
      #pragma unroll
      for (int k = 0; k < R; ++k) {
        const int row = row0 + ty + k * BY;
        const int col = col0 + tx * 4;
        const long long o = (long long)row * cols + col;
        if (row < rows && col + 4 <= cols) {
          #pragma unroll
          for (int v = 0; v < 4; ++v) { a[k*4+v] = A[o + v]; b[k*4+v] = B[o + v]; }
        } else {
          #pragma unroll
          for (int v = 0; v < 4; ++v) { const bool in = row < rows && col + v < cols; a[k*4+v] = in ? A[o+v] : 0.f; b[k*4+v] = in ? B[o+v] : 0.f; }
        }
      }
    } else {
      #pragma unroll
      for (int k = 0; k < R; ++k) {
        const int row = row0 + ty + k * BY;
        #pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int col = colof<MODE, GUARD>(col0, tx, v);
          const long long o = (long long)row * cols + col;
          const bool in = row < rows && col < cols;
          a[k*4+v] = in ? A[o] : 0.f; b[k*4+v] = in ? B[o] : 0.f;
        }
      }
    }
    #pragma unroll
    for (int k = 0; k < R; ++k) {
      const int row = row0 + ty + k * BY;
      if (MODE == 2) {
        if (inside) {
          const long long o = (long long)row * cols + col0 + tx * 4;
          *reinterpret_cast<float4*>(C + o) = make_float4(a[k*4]+b[k*4], a[k*4+1]+b[k*4+1], a[k*4+2]+b[k*4+2], a[k*4+3]+b[k*4+3]);
        }
      } else if (MODE == 3) {
        const int col = col0 + tx * 4;
        const long long o = (long long)row * cols + col;
        if (row < rows && col + 4 <= cols) {
          #pragma unroll
          for (int v = 0; v < 4; ++v) C[o + v] = a[k*4+v] + b[k*4+v];
        } else {
          #pragma unroll
          for (int v = 0; v < 4; ++v) if (row < rows && col + v < cols) C[o + v] = a[k*4+v] + b[k*4+v];
        }
      } else {
        #pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int col = colof<MODE, GUARD>(col0, tx, v);
          if ((!GUARD && inside) || (row < rows && col < cols)) C[(long long)row * cols + col] = a[k*4+v] + b[k*4+v];
        }
      }
    }
  }
}
template <int MODE, bool GUARD>
__device__ void gemv(const float* __restrict__ A, const float* __restrict__ x, float* __restrict__ y,
                     int rows, int cols, int iters) {
  // y[row] partial over this tile's columns, one atomicAdd per row per tile (y zeroed first)
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int br = block_row(cols), col0 = block_col0(cols);
  float xv[4];
  for (int v = 0; v < 4; ++v) { const int col = colof<MODE, GUARD>(col0, tx, v); xv[v] = col < cols ? x[col] : 0.f; }
  for (int it = 0; it < iters; ++it) {
    const int row0 = (br * iters + it) * TR;
    if (row0 >= rows) return;
    const bool inside = row0 + TR <= rows && col0 + TC <= cols;
    float a[R * 4];
    if (MODE == 2) {
      #pragma unroll
      for (int k = 0; k < R; ++k) {
        const long long o = (long long)(row0 + ty + k * BY) * cols + col0 + tx * 4;
        float4 p = inside ? __ldcs(reinterpret_cast<const float4*>(A + o)) : make_float4(0, 0, 0, 0);
        a[k*4+0]=p.x; a[k*4+1]=p.y; a[k*4+2]=p.z; a[k*4+3]=p.w;
      }
    } else if (!GUARD && inside) {
      #pragma unroll
      for (int k = 0; k < R; ++k)
        #pragma unroll
        for (int v = 0; v < 4; ++v)
          a[k*4+v] = __ldcs(A + (long long)(row0 + ty + k * BY) * cols + colof<MODE, GUARD>(col0, tx, v));
    } else {
      #pragma unroll
      for (int k = 0; k < R; ++k) {
        const int row = row0 + ty + k * BY;
        #pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int col = colof<MODE, GUARD>(col0, tx, v);
          a[k*4+v] = row < rows && col < cols ? A[(long long)row * cols + col] : 0.f;
        }
      }
    }
    #pragma unroll
    for (int k = 0; k < R; ++k) {
      float s = 0.f;
      for (int v = 0; v < 4; ++v) s += a[k*4+v] * xv[v];
      for (int o = 16; o; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
      const int row = row0 + ty + k * BY;
      if (tx == 0 && row < rows) atomicAdd(y + row, s);
    }
  }
}
#define K(name, fn, M, G) extern "C" __global__ void __launch_bounds__(256) name( \
  const float* A, const float* B, float* C, int rows, int cols, int iters) { fn<M, G>(A, B, C, rows, cols, iters); }
K(madd_strided_g, madd, 0, true) K(madd_strided_s, madd, 0, false)
K(madd_piece_g, madd, 3, true) K(madd_coal_g, madd, 1, true) K(madd_coal_s, madd, 1, false) K(madd_vec, madd, 2, false)
K(gemv_strided_g, gemv, 0, true) K(gemv_strided_s, gemv, 0, false)
K(gemv_coal_g, gemv, 1, true) K(gemv_coal_s, gemv, 1, false) K(gemv_vec, gemv, 2, false)
