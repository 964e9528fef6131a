"""The direct block-scaled kernel's units of work on the host (kernels/sm90_fp8_block_direct_walk.h): over random
groups (empty, odd, oversized, past m_total, running backwards; contiguous and masked) and every tile shape and
cluster, each CTA of a persistent grid walking its units as the kernel does, every row a group owns is written once
per column tile, by that group, and no other row is (dense problems: every tile once)."""

import shutil
import subprocess

import pytest

from cutlass_ext.toolchain import kernels_dir

_PROGRAM = r"""
#include <cstdio>
#include <random>
#include <vector>
#include "sm90_fp8_block_direct_walk.h"
using namespace cutlass_ext::fp8_block_direct;

// The rows each group owns (what the kernel must write), from the same row reading as the kernel's.
static std::vector<int> owners(const cutlass_ext_fp8_grouped_args& a) {
  std::vector<int> owner(a.m_total, -1);
  for (int g = 0; g < a.groups; ++g) {
    const int64_t before = a.offsets && g > 0 ? a.offsets[g - 1] : 0, end = a.offsets ? a.offsets[g] : 0;
    const auto span = cutlass_ext::fp8_block::group_rows(a, g, before, end, a.counts ? a.counts[g] : 0);
    for (int64_t r = span.start; r < span.start + span.rows; ++r) owner[r] = g;  // a later group's overlap wins
  }
  return owner;
}

template <int BM, int BN, int C>
static bool check_grouped(const cutlass_ext_fp8_grouped_args& a, int clusters) {
  const int column_tiles = int((a.n + BN - 1) / BN);
  std::vector<int> writes(a.m_total * column_tiles, 0);
  std::vector<int> owner = owners(a);
  bool overlapping = false;  // offsets running backwards make groups share rows: then only coverage is checked
  for (int r = 0; r < a.m_total; ++r) {
    int count = 0;
    for (int g = 0; g < a.groups; ++g) {
      const int64_t before = a.offsets && g > 0 ? a.offsets[g - 1] : 0, end = a.offsets ? a.offsets[g] : 0;
      const auto span = cutlass_ext::fp8_block::group_rows(a, g, before, end, a.counts ? a.counts[g] : 0);
      count += r >= span.start && r < span.start + span.rows;
    }
    overlapping |= count > 1;
  }
  for (int cluster = 0; cluster < clusters; ++cluster) {
    for (int rank = 0; rank < C; ++rank) {
      GroupWalk<BM, BN, C> walk(a);
      for (int unit = cluster; walk.find(unit); unit += clusters) {
        const TileAt t = walk.tile(unit, rank);
        if (t.n0 >= a.n) continue;  // a cluster's tile past n stores nothing
        if (t.n0 % BN || t.m0 < 0) return false;
        for (int r = t.m0; r < t.m0 + BM && r < t.row_end; ++r) {  // the rows the kernel stores
          if (r >= a.m_total) return false;
          if (!overlapping && owner[r] != t.group) return false;
          ++writes[r * column_tiles + t.n0 / BN];
        }
      }
    }
  }
  for (int r = 0; r < a.m_total; ++r)
    for (int c = 0; c < column_tiles; ++c) {
      const int w = writes[r * column_tiles + c];
      if (owner[r] >= 0 ? (overlapping ? w < 1 : w != 1) : w != 0) return false;
    }
  return true;
}

template <int BM, int BN, int C>
static bool check_dense(int64_t m, int64_t n, int clusters) {
  const int tiles_m = int((m + BM - 1) / BM), tiles_n = int((n + BN - 1) / BN);
  const int units = tiles_m * int((n + BN * C - 1) / (BN * C));
  std::vector<int> writes(tiles_m * tiles_n, 0);
  for (int cluster = 0; cluster < clusters; ++cluster)
    for (int rank = 0; rank < C; ++rank)
      for (int unit = cluster; unit < units; unit += clusters) {
        const TileAt t = dense_tile<BM, BN, C>(unit, rank, m, n);
        if (t.n0 >= n) continue;
        if (t.m0 % BM || t.m0 >= m || t.row_end != m) return false;
        ++writes[(t.m0 / BM) * tiles_n + t.n0 / BN];
      }
  for (int w : writes)
    if (w != 1) return false;
  return true;
}

template <int BM, int BN, int C>
static int run(std::mt19937& random) {
  for (int trial = 0; trial < 200; ++trial) {
    const int groups = 1 + random() % 9, n = 8 * (1 + random() % 48);
    const int clusters = 1 + random() % 9;
    std::vector<int> offsets(groups), counts(groups);
    cutlass_ext_fp8_grouped_args a{};
    a.groups = groups, a.n = n, a.k = 128;
    if (trial % 2) {  // contiguous: sizes 0-300, some ends past m_total, a few running backwards
      int end = 0;
      for (int g = 0; g < groups; ++g) offsets[g] = end += int(random() % 301) - (random() % 10 == 0 ? 150 : 0);
      a.m_total = offsets[groups - 1] > 0 ? offsets[groups - 1] - int(random() % 40) : 1;
      if (a.m_total < 1) a.m_total = 1;
      a.offsets = offsets.data();
    } else {  // masked: counts past the capacity or negative
      a.capacity = 1 + random() % 200;
      for (int g = 0; g < groups; ++g) counts[g] = int(random() % 260) - 20;
      a.m_total = groups * a.capacity;
      a.counts = counts.data();
    }
    if (!check_grouped<BM, BN, C>(a, clusters)) {
      std::printf("grouped %dx%d c%d trial %d\n", BM, BN, C, trial);
      return 1;
    }
    if (!check_dense<BM, BN, C>(1 + random() % 700, n, clusters)) {
      std::printf("dense %dx%d c%d trial %d\n", BM, BN, C, trial);
      return 1;
    }
  }
  return 0;
}

int main() {
  std::mt19937 random(7);
  int failed = run<64, 16, 1>(random) + run<64, 32, 2>(random) + run<64, 128, 1>(random) + run<128, 64, 2>(random) +
               run<128, 128, 1>(random) + run<128, 128, 2>(random) + run<128, 16, 2>(random);
  std::printf(failed ? "failed\n" : "ok\n");
  return failed;
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_every_owned_row_is_written_once_by_its_group(tmp_path):
    source = tmp_path / "walk.cpp"
    source.write_text(_PROGRAM)
    binary = tmp_path / "walk"
    subprocess.run(["g++", "-std=c++17", "-O1", f"-I{kernels_dir()}", str(source), "-o", str(binary)], check=True)
    result = subprocess.run([str(binary)], capture_output=True, text=True)
    assert result.stdout.endswith("ok\n"), result.stdout
