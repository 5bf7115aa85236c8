// harness/cuda/tensor_map.hpp: TMA tensor maps (cuTensorMapEncodeTiled) for the Hopper kernels' bulk tensor
// copies. A map describes a global tensor and the box one copy moves; kernels take it by value as a
// `const __grid_constant__ FtTensorMap` (kernel_templates/ft/tma.cuh: the same 128 opaque bytes).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

namespace flashtune::cuda {

/// A tiled tensor map of a 16-bit tensor in global memory, innermost dimension first.
struct TensorMapSpec {
  CUdeviceptr base = 0;                 ///< 16-byte aligned
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  std::vector<std::uint64_t> dims;      ///< [elements] per dimension, innermost first (rank 1..5)
  std::vector<std::uint64_t> strides;   ///< [bytes] of dimensions 1..rank-1 (multiples of 16)
  std::vector<std::uint32_t> box;       ///< [elements] one copy moves per dimension (each <= 256)
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;  ///< 128B: the layout wgmma reads (FtSlabOffset)
};

/// The encoded map (out-of-bounds elements of a box read as zero). Throws CudaError naming the spec's rank,
/// dims and box when the driver refuses it, core::Error when the spec is malformed (sizes disagree).
CUtensorMap encode_tensor_map(const TensorMapSpec& spec);

}  // namespace flashtune::cuda
