// The triangle routines of fusec/data/blas (triangle.cuh, triangle_store.cuh, ssyr.cu, ssyr2.cu,
// with tile.cuh's), run on the host by tests/test_triangle.py: every thread of every tile of an
// n x n matrix in turn, as a block runs them, with every global load recorded. Checks the results
// against double sums, that no load touches a 16-byte piece wholly below the diagonal, and that
// ssyr's and ssyr2's store (triu_tile_store) writes nothing below it.
// Build: g++ -std=c++17 -DREAL=float|double -DTILE_ROWS=R -DBLOCK_Y=Y -I fusec/data/blas
// Run:   a.out N ALIGNED   (exit 0 and "ok" when right; the first problems on stdout otherwise)

#include "triangle_host_harness.h"
#include "tile.cuh"
#include "triangle.cuh"
#include "triangle_store.cuh"
#include "ssyr.cu"
#include "ssyr2.cu"

static int problems = 0;
static std::map<std::string, int> failed;  // check -> elements that failed it

static void expect(bool ok, const char* what, int i, int j, double got, double want) {
  if (ok) return;
  failed[what] += 1;
  if (problems++ < 10) std::printf("%s [%d, %d]: %.17g, want %.17g\n", what, i, j, got, want);
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const int n = std::atoi(argv[1]);
  const bool aligned = std::atoi(argv[2]) != 0;
  const double tol = sizeof(real) == 4 ? 1e-4 : 1e-12;
  std::mt19937 gen(n);
  std::uniform_real_distribution<double> uni(-0.5, 0.5);
  // A in a buffer one value past 16 bytes when not aligned, its lower triangle NaN
  std::vector<real> buffer((size_t)n * n + 8);
  real* A = buffer.data() + (aligned ? 0 : 1);
  std::vector<real> x(n), y(n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) A[(size_t)i * n + j] = j >= i ? real(uni(gen)) : real(NAN);
  for (int i = 0; i < n; ++i) x[i] = real(uni(gen)), y[i] = real(uni(gen));
  const real alpha = real(-0.7);
  g_matrix = A;
  g_size = (long long)n * n;
  g_reads.assign((size_t)n * n, 0);

  std::vector<double> ax(n, 0), ax_shared(n, 0), atx(n, 0), atx_shared(n, 0);
  std::vector<real> B((size_t)n * n, real(NAN)), B2((size_t)n * n, real(NAN));
  std::vector<real> sx(TILE_COLS + TILE_ROWS), sy(TILE_COLS + TILE_ROWS);
  for (int row0 = 0; row0 < n; row0 += TILE_ROWS) {
    for (int col0 = 0; col0 < n; col0 += TILE_COLS) {
      fusec_tile c;
      c.rows = c.cols = n;
      c.aligned = aligned;
      c.vec_ok = aligned && n % VEC == 0;
      c.row0 = row0;
      c.col0 = col0;
      c.full = c.vec_ok && row0 + TILE_ROWS <= n && col0 + TILE_COLS <= n;
      for (int t = 0; t < BLOCK; ++t) {  // x's and y's shared pieces: every thread writes, then a barrier
        c.tx = t % BLOCK_X;
        c.ty = t / BLOCK_X;
        tri_x_load(x.data(), sx.data(), c);
        tri_x_load(y.data(), sy.data(), c);
      }
      for (int t = 0; t < BLOCK; ++t) {
        c.tx = t % BLOCK_X;
        c.ty = t / BLOCK_X;
        real a[ROWS_PER_THREAD * VEC], b[ROWS_PER_THREAD * VEC], xc[VEC], xr[ROWS_PER_THREAD];
        triu_tile_load(A, a, c);
        cols_load(x.data(), xc, c);
        rows_load(x.data(), xr, c);
        real r1[ROWS_PER_THREAD] = {}, r2[ROWS_PER_THREAD] = {}, c1[VEC] = {}, c2[VEC] = {};
        gemv_compute(a, xc, r1, c);
        trmv_x_compute(a, sx.data(), r2, c);
        strict_gemtv_compute(a, xr, c1, c);
        strict_gemtv_x_compute(a, sx.data(), c2, c);
        for (int k = 0; k < ROWS_PER_THREAD; ++k) {
          const int row = row0 + c.ty + k * BLOCK_Y;
          if (row < n) ax[row] += r1[k], ax_shared[row] += r2[k];
        }
        for (int v = 0; v < VEC; ++v) {
          const int col = col0 + c.tx * VEC + v;
          if (col < n) atx[col] += c1[v], atx_shared[col] += c2[v];
        }
        syr_compute(alpha, a, sx.data(), b, c);
        triu_tile_store(b, B.data(), c);
        syr2_compute(alpha, a, sx.data(), sy.data(), b, c);
        triu_tile_store(b, B2.data(), c);
      }
    }
  }

  long long read = 0, upper_pieces = 0;
  for (int i = 0; i < n; ++i) {
    double want_ax = 0, want_atx = 0;
    for (int j = 0; j < n; ++j) {
      const size_t ij = (size_t)i * n + j;
      if (j >= i) want_ax += double(A[ij]) * x[j];
      if (j < i) want_atx += double(A[(size_t)j * n + i]) * x[j];
      const bool below = j < i;
      const bool piece_below = (j / VEC) * VEC + VEC - 1 < i;  // the 16-byte piece holding A[i][j]
      read += g_reads[ij];
      if (!piece_below) upper_pieces += 1;
      expect(!(piece_below && g_reads[ij]), "read below the diagonal", i, j, g_reads[ij], 0);
      expect(below || g_reads[ij] == 1, "upper element read other than once", i, j, g_reads[ij], 1);
      // B and B2 start NaN: below the diagonal the store writes nothing, so they stay NaN
      if (below) {
        expect(std::isnan(B[ij]), "ssyr wrote below the diagonal", i, j, B[ij], NAN);
        expect(std::isnan(B2[ij]), "ssyr2 wrote below the diagonal", i, j, B2[ij], NAN);
      } else {
        const double syr = A[ij] + double(alpha) * x[i] * x[j];
        const double syr2 = A[ij] + double(alpha) * (double(x[i]) * y[j] + double(y[i]) * x[j]);
        expect(std::fabs(B[ij] - syr) <= tol, "ssyr", i, j, B[ij], syr);
        expect(std::fabs(B2[ij] - syr2) <= tol, "ssyr2", i, j, B2[ij], syr2);
      }
    }
    expect(std::fabs(ax[i] - want_ax) <= tol * n, "strmv (registers)", i, 0, ax[i], want_ax);
    expect(std::fabs(ax_shared[i] - want_ax) <= tol * n, "strmv (shared_x)", i, 0, ax_shared[i], want_ax);
    expect(std::fabs(atx[i] - want_atx) <= tol * n, "strmtv_strict (registers)", i, 0, atx[i], want_atx);
    expect(std::fabs(atx_shared[i] - want_atx) <= tol * n, "strmtv_strict (shared_x)", i, 0, atx_shared[i],
           want_atx);
  }
  expect(read == upper_pieces, "values read, of the pieces on or above the diagonal", 0, 0, read, upper_pieces);
  for (const auto& [what, count] : failed) std::printf("failed: %s (%d)\n", what.c_str(), count);
  if (problems) return 1;
  std::printf("ok %lld of %lld values read\n", read, (long long)n * n);
  return 0;
}
