// The wgmma kernels' staged C layout (tj_nvptx_wgmma_c_col, issue 13):
// rows of c_stride = tile_n + 8 floats whose 16-byte chunks are swizzled.
// For every tile width and epilogue vector width the emitters use, this
// replays the addresses each warp touches (the accumulator fragment's
// 8-byte writes in emit_nvptx_wgmma.c's stage_c, the epilogue's 16-byte
// reads in emit_nvptx_gemm.c's emit_epilogue_rows) and counts shared-memory
// wavefronts: the most distinct 4-byte words any of the 32 banks serves in
// one warp-wide access. ncu's "ideal" is 32 x bytes / 128; the unswizzled
// rows took twice that on the reads (ncu: ~1M bank conflicts a GEMM).

#include "jit/emit_nvptx.h"
#include "tests/unit/test.h"

enum { kWarp = 32, kBanks = 32 };

// Wavefronts of one warp access: thread t touches |words| consecutive
// 4-byte words from word addr[t].
static int wavefronts(const int64_t* addr, int words) {
  int most = 0;
  for (int bank = 0; bank < kBanks; ++bank) {
    int64_t seen[kWarp * 4];
    int n = 0;
    for (int t = 0; t < kWarp; ++t) {
      for (int e = 0; e < words; ++e) {
        int64_t w = addr[t] + e;
        if (w % kBanks != bank) continue;
        bool dup = false;
        for (int i = 0; i < n; ++i) dup |= seen[i] == w;
        if (!dup) seen[n++] = w;
      }
    }
    if (n > most) most = n;
  }
  return most;
}

// Word address of staged column |col| of row |row|.
static int64_t word(int32_t tile_n, bool swizzled, int64_t row, int64_t col) {
  return row * (tile_n + 8) + (swizzled ? tj_nvptx_wgmma_c_col(col) : col);
}

// The most wavefronts any warp's read of |rows| staged rows takes in the
// epilogue: item it (row it / per_row, columns from (it % per_row) lanes,
// per_row = tile_n / lanes) goes to consumer thread it % threads, so a
// warp takes 32 consecutive items at a time, whatever |threads|; one load
// a 16-byte chunk of the thread's |lanes| columns.
static int epilogue_reads(int32_t tile_n, int32_t lanes, int32_t rows,
                          bool swizzled) {
  int32_t per_row = tile_n / lanes, most = 0;
  for (int32_t base = 0; base < rows * per_row; base += kWarp) {
    for (int32_t h = 0; h < lanes / 4; ++h) {
      int64_t addr[kWarp];
      for (int t = 0; t < kWarp; ++t) {
        int32_t it = base + t;
        addr[t] = word(tile_n, swizzled, it / per_row,
                       (int64_t)(it % per_row) * lanes + 4 * h);
      }
      int w = wavefronts(addr, 4);
      if (w > most) most = w;
    }
  }
  return most;
}

// The most wavefronts a warp's accumulator store takes: lane l of warp q
// writes register pair i (an 8-byte vector) at row 16 q + l / 4 + 8 ((i /
// 2) % 2), column 8 (i / 4) + 2 (l % 4).
static int fragment_writes(int32_t tile_n, bool swizzled) {
  int most = 0;
  for (int32_t q = 0; q < 4; ++q) {
    for (int32_t i = 0; i < tile_n / 2; i += 2) {
      int64_t addr[kWarp];
      for (int l = 0; l < kWarp; ++l)
        addr[l] = word(tile_n, swizzled, 16 * q + l / 4 + 8 * ((i / 2) % 2),
                       8 * (i / 4) + 2 * (l % 4));
      int w = wavefronts(addr, 2);
      if (w > most) most = w;
    }
  }
  return most;
}

TEST(permutes_each_row) {
  for (int32_t tile_n = 64; tile_n <= 256; tile_n *= 2) {
    bool hit[256] = {0};
    int mapped = 0;
    for (int64_t c = 0; c < tile_n; ++c) {
      int64_t p = tj_nvptx_wgmma_c_col(c);
      // A 16-byte chunk stays whole and in its aligned group of 8 columns.
      CHECK(p / 8 == c / 8 && p % 4 == c % 4);
      if (p >= 0 && p < tile_n && !hit[p]) {
        hit[p] = true;
        ++mapped;
      }
    }
    CHECK_EQ_INT(tile_n, mapped);
  }
}

TEST(epilogue_reads_are_conflict_free) {
  // bf16/f16 outputs (8 columns a thread, two 16-byte loads) and f32
  // (4), over a 16-row group and a whole 128-row tile.
  for (int32_t tile_n = 64; tile_n <= 256; tile_n *= 2) {
    for (int32_t lanes = 4; lanes <= 8; lanes *= 2) {
      CHECK_EQ_INT(4, epilogue_reads(tile_n, lanes, 16, true));
      CHECK_EQ_INT(4, epilogue_reads(tile_n, lanes, 128, true));
    }
    // What the swizzle removes: 8-column reads of plain rows take twice.
    CHECK_EQ_INT(8, epilogue_reads(tile_n, 8, 128, false));
  }
}

TEST(fragment_writes_stay_conflict_free) {
  for (int32_t tile_n = 64; tile_n <= 256; tile_n *= 2) {
    CHECK_EQ_INT(2, fragment_writes(tile_n, true));
    CHECK_EQ_INT(2, fragment_writes(tile_n, false));
  }
}

int main(void) {
  RUN_TEST(permutes_each_row);
  RUN_TEST(epilogue_reads_are_conflict_free);
  RUN_TEST(fragment_writes_stay_conflict_free);
  TEST_MAIN_END();
}
