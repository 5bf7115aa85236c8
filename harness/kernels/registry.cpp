// harness/kernels/registry.cpp: the list of built-in kernel families and lookup by name; the defaults of
// KernelFamily's optional hooks and the argument packing of families that launch themselves.
#include <cstring>
#include <type_traits>
#include <variant>

#include "harness/kernels/builtin.hpp"

namespace flashtune::kernels {

const std::vector<std::unique_ptr<KernelFamily>>& all_families() {
  static const std::vector<std::unique_ptr<KernelFamily>> families = [] {
    std::vector<std::unique_ptr<KernelFamily>> v;
    v.push_back(make_weighted_row_sum_family());
    v.push_back(make_softmax_family());
    v.push_back(make_attn_fwd_family());
    v.push_back(make_attn_naive_family());
    v.push_back(make_attn_eager_family());
    v.push_back(make_softmax_matmul_family());
    v.push_back(make_attn_bwd_preprocess_family());
    v.push_back(make_attn_bwd_dkdv_family());
    v.push_back(make_attn_bwd_dq_family());
    v.push_back(make_attn_bwd_dq_delta_family());
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

void pack_launch_args(const std::vector<KernelArg>& args, const LaunchEnv& env, std::vector<std::uint64_t>& slots,
                      std::vector<void*>& pointers) {
  slots.assign(args.size(), 0);
  pointers.clear();
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, BufferArg>) {
            slots[i] = env.buffers.at(std::size_t(v.index));
          } else {
            static_assert(sizeof(V) <= sizeof(std::uint64_t));
            std::memcpy(&slots[i], &v, sizeof v);
          }
        },
        args[i]);
    pointers.push_back(&slots[i]);
  }
}

const KernelFamily* find_family(const std::string& name) {
  for (const auto& f : all_families())
    if (f->name() == name) return f.get();
  return nullptr;
}

}  // namespace flashtune::kernels
