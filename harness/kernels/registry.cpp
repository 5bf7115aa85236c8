// harness/kernels/registry.cpp: the list of built-in kernel families and lookup by name.
#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {

const std::vector<std::unique_ptr<KernelFamily>>& all_families() {
  static const std::vector<std::unique_ptr<KernelFamily>> families = [] {
    std::vector<std::unique_ptr<KernelFamily>> v;
    v.push_back(make_weighted_row_sum_family());
    v.push_back(make_softmax_family());
    v.push_back(make_attn_fwd_family());
    v.push_back(make_attn_naive_family());
    v.push_back(make_softmax_matmul_family());
    v.push_back(make_attn_bwd_preprocess_family());
    v.push_back(make_attn_bwd_dkdv_family());
    v.push_back(make_attn_bwd_dq_family());
    v.push_back(make_attn_bwd_fused_family());
    v.push_back(make_attn_bwd_dsink_family());
    return v;
  }();
  return families;
}

void KernelFamily::launch(const LaunchEnv&, const core::Config&, const core::Problem&) const {
  throw core::Error("kernel family '" + name() + "' does not launch itself (launches_itself() is false)");
}

void KernelFamily::prepare(const LaunchEnv&, const core::Config&, const core::Problem&) const {}

const KernelFamily* find_family(const std::string& name) {
  for (const auto& f : all_families())
    if (f->name() == name) return f.get();
  return nullptr;
}

}  // namespace flashtune::kernels
