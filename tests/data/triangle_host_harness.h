// What tests/data/triangle_host.cpp and triangle_lower_host.cpp share: the CUDA words the
// library's routines use, made plain C++ for the host (one thread at a time), and the loads
// of the matrix, each recorded per element (fusec_load16, fusec_load1 and load_values, as in
// fusec/emit/support.cuh and prelude.cuh). Included after REAL, TILE_ROWS and BLOCK_Y are defined.

#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <random>
#include <vector>

#define __device__
#define __forceinline__ inline
#define __restrict__
#define BARRIER()

typedef REAL real;
#define VEC (16 / (int)sizeof(real))
#define BLOCK_X 32
#define TILE_COLS (BLOCK_X * VEC)
#define BLOCK (BLOCK_X * BLOCK_Y)
#define STREAM_MATRIX false

struct alignas(16) fusec_vec { real v[VEC]; };

struct fusec_tile {
  int tx, ty;
  int row0, col0;
  int rows, cols;
  bool aligned;
  bool vec_ok;
  bool full;
};

// Every global load of the matrix goes through these (fusec_load16, fusec_load1 and
// load_values, as in fusec/emit/support.cuh and prelude.cuh), recorded per element.
static const real* g_matrix = nullptr;
static long long g_size = 0;
static std::vector<int> g_reads;

static void note(const real* p, int count) {
  if (p >= g_matrix && p < g_matrix + g_size)
    for (int i = 0; i < count; ++i) g_reads[p - g_matrix + i] += 1;
}

template <bool EVICT_FIRST>
fusec_vec fusec_load16(const real* p) {
  note(p, VEC);
  fusec_vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <bool EVICT_FIRST>
real fusec_load1(const real* p) {
  note(p, 1);
  return *p;
}

inline void load_values(const real* x, long long i, long long n, bool vec_ok, real* out) {
  for (int k = 0; k < VEC; ++k) {
    if (i + k < n) note(x + i + k, 1);
    out[k] = i + k < n ? x[i + k] : real(0);
  }
  (void)vec_ok;
}

inline void store_values(real* x, long long i, long long n, bool vec_ok, const real* in) {
  for (int k = 0; k < VEC; ++k)
    if (i + k < n) x[i + k] = in[k];
  (void)vec_ok;
}

template <int K>
real warp_sum_scatter(real* v, int) { return v[0]; }  // for tile.cuh's rows_partial_store, not run here

