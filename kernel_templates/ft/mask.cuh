// kernel_templates/ft/mask.cuh: the attention mask (DESIGN.md "Attention conventions"), written once for every
// kernel: which (query, key) pairs are visible, which key tiles a block of query rows must visit (tiles with
// no visible pair are never loaded), which of those need the element-wise mask (only boundary tiles), and
// the inverse, which query rows can see a key tile (the backward's dK / dV blocks).
#pragma once

#include "ft/types.cuh"

// The mask of one problem: key j is visible to query i when
//   (!kCausal || j <= i + offset) && (!kWindow || j > i + offset - window || j < sink_tokens),
// offset = seq_k - seq_q (causal masks align bottom-right).
template <bool kCausal, bool kWindow>
struct FtAttnMask {
  int seq_q, seq_k, offset, window, sink_tokens;

  __device__ __forceinline__ FtAttnMask(int sq, int sk, int w, int sinks)
      : seq_q(sq), seq_k(sk), offset(sk - sq), window(w), sink_tokens(sinks) {}

  __device__ __forceinline__ bool visible(int i, int j) const {
    if (j >= seq_k) return false;
    if (kCausal && j > i + offset) return false;
    if (kWindow && j <= i + offset - window && j >= sink_tokens) return false;
    return true;
  }
};

// body(FtBool<true>{}) when `masked`, else body(FtBool<false>{}): a tile's element-wise work in two copies, the
// mask only in the boundary tiles' (the body reads `constexpr bool kMasked = decltype(masked)::value`). The
// kernels of fdfe6c7 got these two copies from LLVM's loop unswitching on `need_mask`, which NVVM does only for
// a condition it knows is uniform; read from a parameter struct, seq_k and the other scalars count as
// divergent and the copies went: 10-30% slower (docs/NOTES.md, session 17). Written out, they no longer depend
// on that analysis.
template <typename Body>
__device__ __forceinline__ void ft_if_masked(bool masked, Body&& body) {
  if (masked)
    body(FtBool<true>{});
  else
    body(FtBool<false>{});
}

// The rows of a block that packs query heads of one GQA group (the wgmma forwards' pack_heads): block row lr is query
// m0 + lr % kRowsPerHead of head h0 + lr / kRowsPerHead (lr >= 0: unsigned shifts and masks).
template <int kRowsPerHead>
struct FtPackedRows {
  int m0, h0;
  __device__ __forceinline__ int query(int lr) const { return m0 + int(unsigned(lr) % kRowsPerHead); }
  __device__ __forceinline__ int head(int lr) const { return h0 + int(unsigned(lr) / kRowsPerHead); }
};

// The key tiles that query rows [m0, m1) can see, in visiting order: first the tiles holding sink tokens
// (window only), then the band from the first tile the window reaches to the last the causal edge
// reaches. Tile t of count() starts at key tile(t) * block_n.
template <bool kCausal, bool kWindow>
struct FtAttnTiles {
  int n_sink_tiles, band_first, band_end;

  __device__ __forceinline__ FtAttnTiles(const FtAttnMask<kCausal, kWindow>& m, int m0, int m1, int block_n) {
    int n_end = m.seq_k;  // one past the last key any row can see
    if (kCausal) n_end = min(n_end, m1 - 1 + m.offset + 1);
    if (n_end < 0) n_end = 0;
    int band_start = 0;
    n_sink_tiles = 0;
    if (kWindow) {
      band_start = max(0, m0 + m.offset - m.window + 1);
      const int sink_end = min(m.sink_tokens, n_end);
      n_sink_tiles = sink_end > 0 ? (sink_end + block_n - 1) / block_n : 0;
    }
    band_end = (n_end + block_n - 1) / block_n;
    band_first = max(band_start / block_n, n_sink_tiles);
    if (band_first > band_end) band_first = band_end;
  }
  __device__ __forceinline__ int count() const { return n_sink_tiles + (band_end - band_first); }
  __device__ __forceinline__ int tile(int t) const { return t < n_sink_tiles ? t : band_first + (t - n_sink_tiles); }
};

// True when some (row in [m0, m1), key in [n0, n0 + block_n)) pair is not visible, so the tile needs
// the element-wise mask; interior tiles skip it.
template <bool kCausal, bool kWindow>
__device__ __forceinline__ bool ft_attn_tile_needs_mask(const FtAttnMask<kCausal, kWindow>& m, int m0, int m1, int n0,
                                                        int block_n) {
  if (n0 + block_n > m.seq_k) return true;
  if (kCausal && n0 + block_n - 1 > m0 + m.offset) return true;
  if (kWindow && n0 + block_n > m.sink_tokens && n0 <= (m1 - 1) + m.offset - m.window) return true;
  return false;
}

// False when no (row in [m0, m1), key in [n0, n0 + block_n)) pair is visible (a warp's rows of a tile the
// block visits: the warp skips it, its state would not change). True may be conservative; the element mask
// then removes every pair.
template <bool kCausal, bool kWindow>
__device__ __forceinline__ bool ft_attn_tile_has_work(const FtAttnMask<kCausal, kWindow>& m, int m0, int m1, int n0,
                                                      int block_n) {
  if (m1 <= m0) return false;
  if (kCausal && n0 > (m1 - 1) + m.offset) return false;
  if (kWindow && n0 + block_n - 1 <= m0 + m.offset - m.window && n0 >= m.sink_tokens) return false;
  return true;
}

// The query rows [lo, hi) that can see some key of [n0, n1) (n1 <= seq_k): the inverse of FtAttnTiles.
// Causal: i >= n0 - offset. Window: i < n1 - 1 - offset + window, unless the keys hold a sink token.
template <bool kCausal, bool kWindow>
struct FtAttnQueryRange {
  int lo, hi;
  __device__ __forceinline__ FtAttnQueryRange(const FtAttnMask<kCausal, kWindow>& m, int n0, int n1) {
    lo = 0, hi = m.seq_q;
    if (kCausal) lo = max(0, n0 - m.offset);
    if (kWindow && n0 >= m.sink_tokens) hi = min(hi, max(0, n1 - 1 - m.offset + m.window));
    if (n1 <= n0) hi = 0;
    if (lo > hi) lo = hi;
  }
};
