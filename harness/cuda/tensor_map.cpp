// harness/cuda/tensor_map.cpp: cuTensorMapEncodeTiled through the run-time driver table.
#include "harness/cuda/tensor_map.hpp"

#include <string>

#include "harness/core/types.hpp"
#include "harness/cuda/check.hpp"
#include "harness/cuda/driver.hpp"

namespace flashtune::cuda {

CUtensorMap encode_tensor_map(const TensorMapSpec& spec) {
  const std::size_t rank = spec.dims.size();
  if (rank < 1 || rank > 5 || spec.strides.size() + 1 != rank || spec.box.size() != rank)
    throw core::Error("tensor map: rank " + std::to_string(rank) + " with " + std::to_string(spec.strides.size()) +
                      " strides and " + std::to_string(spec.box.size()) + " box sizes (rank 1..5, rank - 1 strides)");
  std::vector<cuuint32_t> element_strides(rank, 1);
  CUtensorMap map;
  const CUresult rc = driver().cuTensorMapEncodeTiled(
      &map, spec.dtype, cuuint32_t(rank), reinterpret_cast<void*>(spec.base),
      reinterpret_cast<const cuuint64_t*>(spec.dims.data()), reinterpret_cast<const cuuint64_t*>(spec.strides.data()),
      reinterpret_cast<const cuuint32_t*>(spec.box.data()), element_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE,
      spec.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) {
    auto list = [](const auto& v) {
      std::string t;
      for (const auto x : v) t += (t.empty() ? "" : " x ") + std::to_string(x);
      return t;
    };
    throw CudaError(rc, "cuTensorMapEncodeTiled (rank " + std::to_string(rank) + ", dims " + list(spec.dims) +
                            ", strides " + list(spec.strides) + " B, box " + list(spec.box) + ")",
                    __FILE__, __LINE__);
  }
  return map;
}

}  // namespace flashtune::cuda
