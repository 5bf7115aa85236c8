// kernel_templates/ft/tensor_map.cuh: a CUtensorMap as the kernels see it (ft/tma.cuh) and as the host lays it
// out in a parameter struct (attn_params.cuh): 128 opaque bytes, 64-byte aligned. Plain C++ for both sides; the
// host encodes it (harness/cuda/tensor_map.hpp) and the kernel takes it by value inside a __grid_constant__
// struct, so that its generic address is the parameter's (what cp.async.bulk.tensor reads).
#pragma once

struct alignas(64) FtTensorMap {
  unsigned long long opaque[16];
};
