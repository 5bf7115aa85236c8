// harness/kernels/attn_fwd_f32.cpp: the fp32 kernels of attn_fwd are not written yet; every config says so.
#include "harness/kernels/attn_fwd_f32.hpp"

namespace flashtune::kernels::attn_f32 {

std::optional<std::string> can_run(const core::Config&, const core::Problem&, const core::DeviceLimits&) {
  return "the fp32 attention kernels are not built yet (attn_fwd_f32.cuh)";
}
std::string name_expression(const core::Config&, const core::Problem&) { return "attn_fwd_f32_kernel"; }
unsigned dynamic_smem_bytes(const core::Config&, const core::Problem&) { return 0; }

}  // namespace flashtune::kernels::attn_f32
