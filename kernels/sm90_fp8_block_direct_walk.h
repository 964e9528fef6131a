// Which tile each unit of work of the directly written block-scaled FP8 kernel computes (dense and grouped), apart
// from the kernel so that a host program can test it: every owned (row, tile column) written once, by its group.
#pragma once

#include "sm90_fp8_grouped_rows.h"

namespace cutlass_ext::fp8_block_direct {

struct TileCoord {
  int m, n;
};

// Tiles in bands `width` tiles wide along N, each band walked row by row down M: the CTAs running at once cover a
// compact block of the output, so each k-block of A and B they read is shared through L2 by several of them.
CUTLASS_EXT_HOST_DEVICE inline TileCoord tile_coord(int tile, int tiles_m, int tiles_n, int width) {
  const int band = tile / (width * tiles_m);
  const int n_first = band * width;
  const int band_width = width < tiles_n - n_first ? width : tiles_n - n_first;
  const int i = tile - band * width * tiles_m;
  return {i / band_width, n_first + i % band_width};
}

template <int BN>
constexpr int raster_width() {
  return 1024 / BN;  // a band 1024 columns wide
}

// Where a unit of work's tile is: A's, scale_a's and D's first row m0 (rows at or past row_end belong to another
// group, or lie past m: their scales read as 0 and they are not stored), D's first column n0 and the group whose
// B and weight scales it reads (0 when dense). A unit is `Cluster` neighbouring tiles along N; `rank` picks one.
struct TileAt {
  int m0, row_end, n0, group;
};

template <int BM, int BN, int Cluster>
CUTLASS_EXT_HOST_DEVICE inline TileAt dense_tile(int unit, int rank, int64_t m, int64_t n) {
  const int tiles_m = int((m + BM - 1) / BM), units_n = int((n + BN * Cluster - 1) / (BN * Cluster));
  const TileCoord at = tile_coord(unit, tiles_m, units_n, raster_width<BN>() / Cluster);
  return {at.m * BM, int(m), (at.n * Cluster + rank) * BN, 0};
}

// The grouped problem's units: per group its tiles over (its rows, n), the groups one after another. Their rows
// are read on the device: a walk moves forward through the groups as the units asked of it grow.
template <int BM, int BN, int Cluster>
struct GroupWalk {
  const cutlass_ext_fp8_grouped_args* p;
  int units_n;
  int g = 0, first = 0, start = 0, rows = 0, tiles_m = 0;  // the group the walk is at, and its first unit

  CUTLASS_EXT_HOST_DEVICE explicit GroupWalk(const cutlass_ext_fp8_grouped_args& args)
      : p(&args), units_n(int((args.n + BN * Cluster - 1) / (BN * Cluster))) {
    if (args.groups > 0) enter(0);
  }

  CUTLASS_EXT_HOST_DEVICE void enter(int group) {
    g = group;
    const int64_t before = p->offsets != nullptr && g > 0 ? p->offsets[g - 1] : 0;
    const int64_t end = p->offsets != nullptr ? p->offsets[g] : 0;
    const int64_t count = p->offsets == nullptr ? p->counts[g] : 0;
    const fp8_block::GroupRows span = fp8_block::group_rows(*p, g, before, end, count);
    start = int(span.start), rows = int(span.rows), tiles_m = (rows + BM - 1) / BM;
  }

  // Moves to the group of `unit` (units only grow); false past the last group's.
  CUTLASS_EXT_HOST_DEVICE bool find(int unit) {
    while (g < p->groups) {
      const int units = tiles_m * units_n;
      if (unit < first + units) return true;
      first += units;
      if (g + 1 < p->groups) {
        enter(g + 1);
      } else {
        ++g;
      }
    }
    return false;
  }

  // The tile of `unit`, found by find.
  CUTLASS_EXT_HOST_DEVICE TileAt tile(int unit, int rank) const {
    const TileCoord at = tile_coord(unit - first, tiles_m, units_n, raster_width<BN>() / Cluster);
    return {start + at.m * BM, start + rows, (at.n * Cluster + rank) * BN, g};
  }
};

}  // namespace cutlass_ext::fp8_block_direct
