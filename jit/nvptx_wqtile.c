// The tile layout of a quantized weight for the tensor-core weight-only
// GEMM (jit/nvptx.h states it; emit_nvptx_wqmma.c reads it). Plain C: the
// CUDA backend relays a constant's bytes with it when it uploads them.

#include <string.h>

#include "jit/nvptx.h"

#define kTileRows 16
#define kTileCols 64
#define kPadRows 128  // the kernel's longest chunk: its loads need no clamp

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

static int64_t block_bytes(int32_t bits) { return bits == 4 ? 512 : 1024; }

int64_t tj_nvptx_wq_tiled_bytes(int32_t bits, int64_t k, int64_t n) {
  int64_t kp = round_up(k, kPadRows), np = round_up(n, kTileCols);
  return kp / kTileRows * (np / kTileCols) * block_bytes(bits);
}

// Where element (kk, nn) lives: its byte, and its bit shift in that byte.
static int64_t locate(int32_t bits, int64_t k, int64_t kk, int64_t nn,
                      int32_t* shift) {
  int64_t steps = round_up(k, kPadRows) / kTileRows;
  int64_t ks = kk / kTileRows, nt = nn / kTileCols;
  int64_t kr = kk % kTileRows, nc = nn % kTileCols;
  int64_t g = nc / 8, j = nc % 8, t = kr / 4, r = kr % 4;
  int64_t lane = 4 * g + t;
  int64_t at = (nt * steps + ks) * block_bytes(bits);
  if (bits == 8) {
    *shift = 0;
    return at + 512 * (j / 4) + 16 * lane + 4 * (j % 4) + r;
  }
  // Nibble i of word w: pair p = 2 (j & 1) + r / 2 of the word's four,
  // the pair's upper row 4 nibbles up.
  int64_t w = j / 2, i = 2 * (j & 1) + r / 2 + 4 * (r & 1);
  *shift = (int32_t)(4 * (i & 1));
  return at + 16 * lane + 4 * w + i / 2;
}

// Block by block in the tiled bytes' order (a step of 16 rows of K outer,
// the column tiles inner), so that the stores are sequential and the
// loads walk 16 rows of the source together: a 4096 x 11008 int4 weight
// took 0.8 s element by element in the source's order (its stores a
// cache line apart every 64 columns). Each element goes where locate()
// puts it (lane 4 g + t holds columns 8 g .. +7 of rows 4 t .. +3).
void tj_nvptx_wq_tile(int32_t bits, int64_t k, int64_t n, const uint8_t* src,
                      uint8_t* dst) {
  memset(dst, 0, (size_t)tj_nvptx_wq_tiled_bytes(bits, k, n));
  int64_t row = bits == 4 ? (n + 1) / 2 : n;
  int64_t steps = round_up(k, kPadRows) / kTileRows;
  int64_t tiles = round_up(n, kTileCols) / kTileCols;
  int64_t bb = block_bytes(bits);
  for (int64_t ks = 0; ks < steps && ks * kTileRows < k; ++ks) {
    for (int64_t nt = 0; nt < tiles; ++nt) {
      uint8_t* blk = dst + (nt * steps + ks) * bb;
      for (int32_t lane = 0; lane < 32; ++lane) {
        int32_t g = lane / 4, t = lane % 4;
        for (int32_t r = 0; r < 4; ++r) {
          int64_t kk = ks * kTileRows + 4 * t + r;
          if (kk >= k) break;
          const uint8_t* srow = src + kk * row;
          for (int32_t j = 0; j < 8; ++j) {
            int64_t nn = nt * kTileCols + 8 * g + j;
            if (nn >= n) break;
            if (bits == 8) {
              blk[512 * (j / 4) + 16 * lane + 4 * (j % 4) + r] = srow[nn];
              continue;
            }
            uint8_t v = (uint8_t)(srow[nn / 2] >> 4 * (nn & 1)) & 15;
            int32_t w = j / 2, i = 2 * (j & 1) + r / 2 + 4 * (r & 1);
            blk[16 * lane + 4 * w + i / 2] |= (uint8_t)(v << 4 * (i & 1));
          }
        }
      }
    }
  }
}

uint8_t tj_nvptx_wq_tiled_at(int32_t bits, int64_t k, int64_t n,
                             const uint8_t* tiled, int64_t kk, int64_t nn) {
  (void)n;
  int32_t shift;
  int64_t at = locate(bits, k, kk, nn, &shift);
  return (uint8_t)(bits == 4 ? (tiled[at] >> shift) & 15 : tiled[at]);
}
