// tests/attention/gpu_launcher.hpp: a GPU test's direct launches of one family's kernel on host tensors, outside
// the runner: every buffer of buffers() in order, inputs uploaded, outputs NaN-poisoned before each launch,
// workspaces NaN (or zero, as the runner leaves them) before the first, launched once or several times back to
// back, downloaded; and the attention problems and random inputs those tests launch on. Used by the attention GPU
// tests (determinism, end to end, back-to-back launches).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <optional>
#include <vector>

#include "harness/cuda/buffer.hpp"
#include "harness/cuda/context.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/module.hpp"
#include "harness/cuda/stream.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/family.hpp"
#include "reference/dtype.hpp"
#include "tests/kernels/kernel_test_support.hpp"

namespace flashtune::testing {

inline const kernels::KernelFamily& fam(const std::string& name) {
  const auto* f = kernels::find_family(name);
  if (!f) throw core::Error(name + " is not registered");
  return *f;
}

/// An attention problem: `dims` and the optional dims' defaults, completed as the experiment loader does.
inline core::Problem problem(std::map<std::string, std::int64_t> dims, core::DType d) {
  const auto& f = fam("attn_fwd");
  core::Problem p{std::move(dims), d};
  for (const auto& o : f.optional_problem_dims()) p.dims.try_emplace(o.name, o.fallback);
  f.complete_problem(p);
  return p;
}

/// Inputs for every buffer of `f` as the runner draws them; outputs and workspaces left empty.
inline std::vector<kernels::HostTensor> draw(const kernels::KernelFamily& f, const core::Problem& p, std::uint64_t seed) {
  std::vector<kernels::HostTensor> t;
  std::uint64_t stream = 0;
  for (const auto& b : f.buffers(p)) {
    t.push_back({b.dtype, {}, {}});
    if (b.role == kernels::BufferRole::input) {
      t.back().values = reference::uniform(std::size_t(b.elements), b.lo, b.hi, seed + 7919 * ++stream);
      reference::round_all(b.dtype, t.back().values);
    }
  }
  return t;
}

inline std::uint32_t nan_pattern(core::DType d) {
  return d == core::DType::f32 ? 0x7FC00000u : d == core::DType::f16 ? 0x7E007E00u : 0x7FC07FC0u;
}

class Launcher {
 public:
  /// How the workspaces start: NaN (a partial left unwritten shows) or zero (as the runner hands them over).
  enum class Workspaces { nan, zero };

  Launcher() : m_info(cuda::query_device(0)), m_ctx(0) {}

  /// One launch: `tensors[i].values` holds buffer i; outputs are resized and filled from the device.
  void run(const kernels::KernelFamily& f, const core::Config& c, const core::Problem& p,
           std::vector<kernels::HostTensor>& tensors) {
    std::vector<std::vector<kernels::HostTensor>> each;
    run_repeated(f, c, p, tensors, 1, Workspaces::nan, each);
    if (!each.empty()) tensors = each.front();
  }

  /// `launches` back-to-back launches on the same buffers (inputs uploaded once, outputs poisoned before each):
  /// `each[k]` is `tensors` with the outputs and workspaces (as raw 32-bit words, in values) after launch k.
  void run_repeated(const kernels::KernelFamily& f, const core::Config& c, const core::Problem& p,
                    const std::vector<kernels::HostTensor>& tensors, int launches, Workspaces ws,
                    std::vector<std::vector<kernels::HostTensor>>& each) {
    const auto specs = f.buffers(p);
    ASSERT_EQ(specs.size(), tensors.size()) << f.name();
    ASSERT_EQ(f.can_run(c, p, m_info.limits), std::nullopt) << f.name() << " " << c.key();
    const std::string file = f.template_file_for(c, p);
    const auto out =
        compile_kernel(jit::load_template(file, std::nullopt), file, f.specialize(c, p).name_expression, m_info.arch);
    ASSERT_TRUE(out.record.ok) << out.record.log;
    cuda::Module module(out.cubin);
    const CUfunction fn = module.function(out.record.lowered_name);
    cuda::Stream stream;
    std::vector<cuda::DeviceBuffer> bufs;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const std::size_t bytes = std::size_t(specs[i].elements) * core::dtype_size(specs[i].dtype);
      bufs.emplace_back((bytes + 3) / 4 * 4);
      if (specs[i].role == kernels::BufferRole::input) {
        ASSERT_EQ(tensors[i].values.size(), std::size_t(specs[i].elements)) << f.name() << " buffer " << specs[i].name;
        const auto packed = reference::pack(specs[i].dtype, tensors[i].values);
        bufs.back().upload(packed.data(), packed.size(), stream.get());
      } else if (specs[i].role == kernels::BufferRole::workspace && ws == Workspaces::zero) {
        bufs.back().fill_bytes(0, stream.get());
      } else {  // outputs and workspaces: NaN, so an element or partial left unwritten shows
        bufs.back().fill_u32(nan_pattern(specs[i].dtype), stream.get());
      }
    }
    const auto shape = f.launch_shape(c, p, m_info.limits);
    std::vector<std::uint64_t> addresses;
    for (const auto& b : bufs) addresses.push_back(std::uint64_t(b.ptr()));
    kernels::PackedArgs packed;
    if (!f.launches_itself()) packed = kernels::pack_kernel_args(f.arguments(c, p), addresses);
    each.clear();
    for (int k = 0; k < launches; ++k) {
      for (std::size_t i = 0; i < specs.size(); ++i)
        if (k > 0 && specs[i].role == kernels::BufferRole::output) bufs[i].fill_u32(nan_pattern(specs[i].dtype), stream.get());
      if (f.launches_itself()) {
        kernels::LaunchEnv env;
        env.stream = stream.get(), env.function = fn, env.shape = shape, env.buffers = addresses;
        f.prepare(env, c, p);  // attn_bwd_fused: zeroes its dQ accumulator (NaN until then)
        f.launch(env, c, p);
      } else {
        cuda::launch(fn, shape.grid, shape.block, shape.dynamic_smem_bytes, stream.get(), packed.pointers.data());
      }
      each.push_back(tensors);
      finish(specs, bufs, stream, each.back());
    }
  }

  const cuda::DeviceInfo& info() const { return m_info; }

 private:
  static void finish(const std::vector<kernels::BufferSpec>& specs, std::vector<cuda::DeviceBuffer>& bufs,
                     cuda::Stream& stream, std::vector<kernels::HostTensor>& tensors) {
    stream.synchronize();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].role == kernels::BufferRole::input) continue;
      const std::size_t n = std::size_t(specs[i].elements);
      std::vector<unsigned char> raw(n * core::dtype_size(specs[i].dtype));
      bufs[i].download(raw.data(), raw.size(), stream.get());
      if (specs[i].role == kernels::BufferRole::output) {
        tensors[i] = {specs[i].dtype, reference::unpack(specs[i].dtype, raw.data(), n), {}};
      } else {  // a workspace: its 32-bit words as they are
        std::vector<double> words(raw.size() / 4);
        for (std::size_t w = 0; w < words.size(); ++w) {
          std::uint32_t x;
          std::memcpy(&x, raw.data() + 4 * w, 4);
          words[w] = double(x);
        }
        tensors[i] = {specs[i].dtype, std::move(words), {}};
      }
    }
  }

  cuda::DeviceInfo m_info;
  cuda::Context m_ctx;
};

}  // namespace flashtune::testing
