// harness/kernels/attn_eager.hpp: the intermediate tensors of the attn_eager baseline (eager PyTorch's
// naive attention replayed op for op) and where they lie in its workspace; the family itself is
// make_attn_eager_family() (builtin.hpp). Exposed so that tests can check the memory model.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/kernels/attention.hpp"

namespace flashtune::kernels::eager {

/// PyTorch's caching allocator rounds every block up to a multiple of 512 bytes (kMinBlockSize), and its
/// peak (torch.cuda.max_memory_allocated) counts the rounded sizes.
inline constexpr std::int64_t kAllocGranule = 512;  ///< [bytes]

/// The cuBLAS workspace PyTorch takes from its allocator for a (handle, stream) at the first GEMM and keeps:
/// CUBLAS_WORKSPACE_CONFIG's default ":4096:2:16:8" = 2 x 4096 KiB + 8 x 16 KiB (recent PyTorch picks
/// 4096 KiB x 8 on sm_90; the seeds' table matches this size, see attn_eager.cpp).
inline constexpr std::int64_t kCublasWorkspaceBytes = 2 * 4096 * 1024 + 8 * 16 * 1024;  ///< [bytes]

/// The tensors eager PyTorch holds, in the order it makes them, with the steps they live in (see
/// attn_eager.cpp for the code they replay). Index constants below name them; a tensor the problem does
/// not need has 0 bytes.
enum Tensor : int {
  kCublas = 0,     ///< cuBLAS workspace
  kKRep,           ///< K.repeat_interleave over a GQA group (batch, heads_q, seq_k, head_dim)
  kVRep,           ///< V likewise
  kQk,             ///< Q @ K^T (dtype)
  kS,              ///< (Q @ K^T) * scale (dtype), masked in place
  kMask,           ///< the bool mask (seq_q x seq_k)
  kNotMask,        ///< ~mask, masked_fill_'s argument
  kSCat,           ///< learned sinks: cat([S, sinks]) (f32: the sinks are f32, cat promotes)
  kSoftmaxIn,      ///< bf16: softmax(S, dtype=float32) converts S to f32 first
  kP32,            ///< softmax's f32 output
  kP,              ///< P32.to(dtype) (the f32 output itself when dtype is f32)
  kS32,            ///< logsumexp's S.to(float32) (none when S is already f32)
  kMaxes,          ///< logsumexp's row maxima (batch, heads_q, seq_q, 1) f32
  kDiff,           ///< logsumexp's (S32 - maxes), exp_ in place
  kNumTensors
};

/// Every tensor of kNumTensors, in Tensor order (sizes in bytes before rounding).
std::vector<attn::LiveTensor> tensors(const core::Problem& p);

/// plan_workspace(tensors(p), kAllocGranule): the workspace is `bytes` long, each tensor at its offset.
attn::WorkspacePlan plan(const core::Problem& p);

}  // namespace flashtune::kernels::eager
