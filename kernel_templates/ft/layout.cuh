// kernel_templates/ft/layout.cuh: where a 16-byte chunk of a tile row lives in shared memory, for the two
// layouts the kernels use. Both are functors offset(r, c) -> bytes from the tile's start, which the tile
// loaders (ft/copy.cuh) and the operand reads (ft/mma.cuh, the wgmma descriptors) agree on.
#pragma once

// The mma.sync kernels' tiles: kRows x kHeadDim 16-bit elements, rows of kHeadDim / 8 chunks of 16 bytes. Chunk
// c of row r is stored at chunk c ^ f(r), so that the 8 rows one ldmatrix phase reads (or a cp.async warp
// writes) fall in 8 different 16-byte bank groups for every head dim.
template <int kHeadDim>
struct FtSwizzle {
  enum : int { kChunks = kHeadDim / 8 };
  static __device__ __forceinline__ int chunk(int r, int c) {
    if (kChunks >= 8) return c ^ (r & 7);
    return c ^ ((r / (8 / kChunks)) & (kChunks - 1));
  }
  /// Byte offset of (row r, chunk c) in the tile.
  static __device__ __forceinline__ unsigned offset(int r, int c) {
    return unsigned((r * kChunks + chunk(r, c)) * 16);
  }
};
template <int kHeadDim>
struct FtSwizzleOffset {
  template <typename I>
  __device__ __forceinline__ unsigned operator()(I r, I c) const {
    return FtSwizzle<kHeadDim>::offset(int(r), int(c));
  }
};

// The wgmma kernels' tiles (the 128-byte swizzle wgmma reads, ft/wgmma.cuh): slab s = columns [64 s, 64 s + 64)
// at s * kRows * 128 bytes, 128-byte rows whose 16-byte chunks are XOR-swizzled by the row (c ^ (r % 8)).
template <int kRows>
struct FtSlabOffset {
  template <typename I>
  __device__ __forceinline__ unsigned operator()(I r, I c) const {
    return unsigned((c / 8) * kRows * 128 + r * 128 + (((c % 8) ^ (r % 8)) * 16));
  }
};
