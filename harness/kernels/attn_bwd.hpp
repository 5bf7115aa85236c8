// harness/kernels/attn_bwd.hpp: the buffers of the attention backward operations (attn_bwd_*.cpp), for tests
// and for callers that chain the stages: preprocess (O, dO -> D), dkdv (Q, K, V, dO, LSE, D -> dK, dV; a workspace),
// dq (Q, K, V, dO, LSE, D -> dQ), dq_delta (Q, K, V, dO, LSE, O -> dQ, D), fused (Q, K, V, dO, LSE, D -> dQ, dK, dV; a workspace),
// fused_delta (Q, K, V, dO, LSE, O -> dQ, dK, dV, D; a workspace) and dsink (sinks, LSE, D -> d sinks).
#pragma once

#include <cstdint>

namespace flashtune::core {
struct Config;
struct Problem;
}  // namespace flashtune::core

namespace flashtune::kernels::attn_bwd {

/// Buffer indices in buffers() order, per family.
enum PreprocessBuffer : int { kPreO = 0, kPreDout = 1, kPreDelta = 2 };
enum GradBuffer : int { kQ = 0, kK = 1, kV = 2, kDout = 3, kLse = 4, kDelta = 5, kGradOut = 6, kGradOut2 = 7 };
/// dkdv only: the fp32 partials of split sink tiles (BufferRole::workspace; empty without sink tokens + window).
enum DkdvBuffer : int { kWorkspace = 8 };
/// fused (dK, dV and dQ in one pass): outputs dq, dk, dv, then the fp32 dQ accumulator (BufferRole::workspace).
enum FusedBuffer : int { kFusedDq = 6, kFusedDk = 7, kFusedDv = 8, kFusedAcc = 9 };
/// fused_delta (fused with D computed inline): O in D's place, fused's outputs and workspace, then the output delta.
enum FusedDeltaBuffer : int { kFdO = 5, kFdDelta = 10 };
/// dq_delta (dQ with D computed inline): O in D's place, then the outputs dq and delta.
enum DqDeltaBuffer : int { kDqdO = 5, kDqdDq = 6, kDqdDelta = 7 };
enum DsinkBuffer : int { kSinkSinks = 0, kSinkLse = 1, kSinkDelta = 2, kSinkDsinks = 3 };

/// attn_bwd_fused mma 91 with `timeline: 2` (tail 1): where its records start in the workspace (kFusedAcc) [32-bit
/// words]: one record of FtBwdTimeline::slots() 64-bit words per launched block, in launch order (attn_params.cuh).
std::int64_t fused_timeline_words(const core::Config& config, const core::Problem& p);

}  // namespace flashtune::kernels::attn_bwd
