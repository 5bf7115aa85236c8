// harness/kernels/registry.cpp: the list of built-in kernel families and lookup by name; the defaults of
// KernelFamily's optional hooks and the packing of kernel arguments for cuLaunchKernel (tensor maps encoded there).
#include <cstring>
#include <type_traits>
#include <variant>

#include "harness/cuda/tensor_map.hpp"
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
    v.push_back(make_attn_bwd_fused_delta_family());
    v.push_back(make_attn_bwd_dsink_family());
    return v;
  }();
  return families;
}

void KernelFamily::launch(const LaunchEnv&, const core::Config&, const core::Problem&) const {
  throw core::Error("kernel family '" + name() + "' does not launch itself (launches_itself() is false)");
}

void KernelFamily::prepare(const LaunchEnv&, const core::Config&, const core::Problem&) const {}

PackedArgs pack_kernel_args(const std::vector<KernelArg>& args, const std::vector<std::uint64_t>& buffers) {
  auto address = [&](int index) {
    if (index < 0 || std::size_t(index) >= buffers.size())
      throw core::Error("kernel argument names buffer " + std::to_string(index) + " of " + std::to_string(buffers.size()));
    return buffers[std::size_t(index)];
  };
  PackedArgs out;
  out.values.reserve(args.size());  // each block's address is taken below: no reallocation after
  for (const auto& arg : args) {
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, BufferArg>) {
            out.values.push_back({address(v.index)});
          } else if constexpr (std::is_same_v<V, ParamsArg>) {
            std::vector<std::uint64_t> block((v.bytes.size() + 7) / 8, 0);
            std::memcpy(block.data(), v.bytes.data(), v.bytes.size());
            for (const auto& ptr : v.pointers) {
              if (ptr.offset + sizeof(std::uint64_t) > v.bytes.size())
                throw core::Error("parameter struct pointer at byte " + std::to_string(ptr.offset) + " of " +
                                  std::to_string(v.bytes.size()));
              const std::uint64_t a = address(ptr.buffer);
              std::memcpy(reinterpret_cast<unsigned char*>(block.data()) + ptr.offset, &a, sizeof a);
            }
            for (const auto& m : v.maps) {
              if (m.offset % 64 != 0 || m.offset + sizeof(CUtensorMap) > v.bytes.size())
                throw core::Error("parameter struct tensor map at byte " + std::to_string(m.offset) + " of " +
                                  std::to_string(v.bytes.size()) + " (128 bytes, 64-byte aligned)");
              if (m.dtype == core::DType::f32) throw core::Error("tensor map over an fp32 buffer: 16-bit tensors only");
              cuda::TensorMapSpec spec;
              spec.base = address(m.buffer);
              spec.dtype = m.dtype == core::DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
              spec.dims = m.dims, spec.strides = m.strides, spec.box = m.box;
              const CUtensorMap encoded = cuda::encode_tensor_map(spec);
              std::memcpy(reinterpret_cast<unsigned char*>(block.data()) + m.offset, &encoded, sizeof encoded);
            }
            out.values.push_back(std::move(block));
          } else {
            static_assert(sizeof(V) <= sizeof(std::uint64_t));
            std::uint64_t slot = 0;
            std::memcpy(&slot, &v, sizeof v);
            out.values.push_back({slot});
          }
        },
        arg);
    out.pointers.push_back(out.values.back().data());
  }
  return out;
}

const KernelFamily* find_family(const std::string& name) {
  for (const auto& f : all_families())
    if (f->name() == name) return f.get();
  return nullptr;
}

}  // namespace flashtune::kernels
