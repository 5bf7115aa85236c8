// harness/kernels/builtin.hpp: factories of the families built into flashtune (registry.cpp lists them).
#pragma once

#include <memory>

#include "harness/kernels/family.hpp"

namespace flashtune::kernels {

std::unique_ptr<KernelFamily> make_weighted_row_sum_family();  ///< weighted_row_sum.cpp
std::unique_ptr<KernelFamily> make_softmax_family();           ///< softmax.cpp
std::unique_ptr<KernelFamily> make_attn_fwd_family();          ///< attn_fwd.cpp (variants: attn_fwd_sm90.cpp, attn_fwd_f32.cpp)
std::unique_ptr<KernelFamily> make_attn_naive_family();        ///< attn_naive.cpp
std::unique_ptr<KernelFamily> make_attn_eager_family();        ///< attn_eager.cpp
std::unique_ptr<KernelFamily> make_softmax_matmul_family();    ///< softmax_matmul.cpp
std::unique_ptr<KernelFamily> make_attn_bwd_preprocess_family();  ///< attn_bwd_rows.cpp
std::unique_ptr<KernelFamily> make_attn_bwd_dkdv_family();        ///< attn_bwd_dkdv.cpp
std::unique_ptr<KernelFamily> make_attn_bwd_dq_family();          ///< attn_bwd_dq.cpp
std::unique_ptr<KernelFamily> make_attn_bwd_dq_delta_family();    ///< attn_bwd_dq.cpp
std::unique_ptr<KernelFamily> make_attn_bwd_fused_family();       ///< attn_bwd_fused.cpp
std::unique_ptr<KernelFamily> make_attn_bwd_fused_delta_family(); ///< attn_bwd_fused.cpp
std::unique_ptr<KernelFamily> make_attn_bwd_dsink_family();       ///< attn_bwd_rows.cpp

}  // namespace flashtune::kernels
