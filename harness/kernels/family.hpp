// harness/kernels/family.hpp: the host-side descriptor of an operation (a kernel family: attention forward, a
// backward stage, softmax, ...), flashtune's extension point; the runner knows nothing of one beyond this interface.
// An operation owns the problem, buffers, arguments (attention: one params struct, attn_params.cuh), reference,
// counts and tolerance; its kernels are variants (operation.hpp: Operation, Variant), each with its own template,
// tunables, constraints, can_run, name expression and launch shape, picked by a selector tunable (attn_fwd's mma).
// A new variant = one template in kernel_templates/, one Variant, one add_variant() line in its operation; a new
// operation = an Operation registered in registry.cpp, one reference in reference/, one YAML in experiments/.
// README "Adding a kernel" walks through it with the commands that check it.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::kernels {

// One tunable and the values searched when an experiment does not name its own.
struct TunableSpec {
  std::string name;                  ///< "block_threads"
  std::vector<std::int64_t> values;  ///< default search values
  std::string doc;
};

// Grid, block and dynamic shared memory of one launch.
struct LaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned dynamic_smem_bytes = 0;  ///< [bytes]
  unsigned tail_parts = 1;          ///< the launch's last partial wave of blocks split into this many pieces each
                                    ///< (the kernel's own plan; attn_bwd_fused mma 91 with tail 2); 1 = none
  std::int64_t threads_per_block() const { return std::int64_t(block[0]) * block[1] * block[2]; }
};

enum class BufferRole { input, output, workspace };

// A device buffer the kernel reads or writes. Inputs are filled with fresh uniform random values in
// [lo, hi] (never zeros); outputs are poisoned with NaN before every checked launch; workspaces (scratch
// a multi-step baseline needs, e.g. a materialized score matrix; a scheduler's counters) are allocated, counted
// in the trial's device memory, zeroed once at the start of each trial (untimed) and never checked.
struct BufferSpec {
  std::string name;
  core::DType dtype = core::DType::f32;
  std::int64_t elements = 0;
  BufferRole role = BufferRole::input;
  double lo = -1.0, hi = 1.0;  ///< input value range
};

// Kernel arguments in order: a device buffer (by index into buffers()), a scalar, or a parameter struct.
struct BufferArg {
  int index;
};
// A parameter struct passed by value (`const __grid_constant__`, kernel_templates/attn_params.cuh): its
// bytes as the host filled them, and the pointer members that take a buffer's device address at launch.
struct ParamsArg {
  struct Pointer {
    std::size_t offset = 0;  ///< [bytes] of the pointer member in the struct
    int buffer = 0;          ///< index into buffers()
  };
  /// A TMA tensor map member (FtTensorMap, kernel_templates/ft/tensor_map.cuh: 128 bytes, 64-aligned) encoded at
  /// launch over a 16-bit buffer, with the 128-byte swizzle (harness/cuda/tensor_map.hpp).
  struct TensorMap {
    std::size_t offset = 0;               ///< [bytes] of the member in the struct
    int buffer = 0;                       ///< index into buffers(): the tensor's base
    core::DType dtype = core::DType::bf16;
    std::vector<std::uint64_t> dims;      ///< [elements] innermost first
    std::vector<std::uint64_t> strides;   ///< [bytes] of dimensions 1..rank-1
    std::vector<std::uint32_t> box;       ///< [elements] one copy moves per dimension
  };
  std::vector<unsigned char> bytes;
  std::vector<Pointer> pointers;
  std::vector<TensorMap> maps;

  /// The bytes of `params` (a plain struct of pointers and numbers), no pointer bound yet.
  template <typename P>
  static ParamsArg of(const P& params) {
    static_assert(std::is_trivially_copyable_v<P> && std::is_standard_layout_v<P>, "a plain parameter struct");
    ParamsArg a;
    a.bytes.resize(sizeof(P));
    std::memcpy(a.bytes.data(), &params, sizeof(P));
    return a;
  }
  /// The pointer member at `offset` (offsetof) takes buffer `index`'s device address.
  ParamsArg& bind(std::size_t offset, int index) {
    pointers.push_back({offset, index});
    return *this;
  }
  /// The struct grown to `size` bytes (a larger struct whose first member is the one these bytes are), zeros after.
  ParamsArg& grow(std::size_t size) {
    if (size < bytes.size()) throw std::out_of_range("ParamsArg::grow to fewer bytes");
    bytes.resize(size, 0);
    return *this;
  }
  /// The tensor map member at `offset` is encoded at launch as `map` says, over its buffer's device address.
  ParamsArg& map(TensorMap m) {
    maps.push_back(std::move(m));
    return *this;
  }
  /// Overwrites the member at `offset` (offsetof) with `value` (a number of the member's type).
  template <typename V>
  ParamsArg& set(std::size_t offset, V value) {
    static_assert(std::is_arithmetic_v<V>, "a number");
    if (offset + sizeof(V) > bytes.size()) throw std::out_of_range("ParamsArg::set past the struct");
    std::memcpy(bytes.data() + offset, &value, sizeof(V));
    return *this;
  }
};
using KernelArg = std::variant<BufferArg, std::int32_t, std::int64_t, float, ParamsArg>;

/// Kernel arguments as cuLaunchKernel takes them: `values` hold each argument's bytes (a BufferArg, or a
/// ParamsArg's bound pointer, becomes that buffer's device address), `pointers[i]` points at argument i.
struct PackedArgs {
  std::vector<std::vector<std::uint64_t>> values;  ///< one 8-byte-aligned block per argument
  std::vector<void*> pointers;
};
/// Packs `args` with `buffers` (device address per buffer, in buffers() order), encoding each ParamsArg's tensor
/// maps through the driver; throws core::Error when an argument names a buffer that is not there or a member
/// outside its struct (or a misaligned tensor map), cuda::CudaError when the driver refuses a tensor map.
PackedArgs pack_kernel_args(const std::vector<KernelArg>& args, const std::vector<std::uint64_t>& buffers);

// How a config becomes a compiled kernel: a C++ name expression instantiated through
// nvrtcAddNameExpression (e.g. "weighted_row_sum_kernel<float, 256, 4>") and extra -D defines.
// A family of several kernels names each one's template file here, so that a kernel's source hash covers only
// the templates it includes (an edit to one kernel does not stop the others' recorded results resuming).
struct Specialization {
  std::string name_expression;
  std::vector<std::string> defines;  ///< "FT_FOO=1" (passed as -DFT_FOO=1)
  std::string template_file;         ///< file in kernel_templates/ holding the kernel; empty: the family's template_file()
};

// Values on the host, widened to double. For inputs: exactly the values uploaded (already rounded to
// the buffer's dtype). For outputs: what the kernel wrote, or what a reference computed.
struct HostTensor {
  core::DType dtype = core::DType::f32;
  std::vector<double> values;
  /// Reference outputs only: empty when every element was computed, else 1 where it was. A reference
  /// too costly to compute whole (attention at seq 16k) fills a sample of rows; the kernel is compared
  /// on those, and every element of its output must still be finite (no unwritten NaN poison).
  std::vector<std::uint8_t> checked;
};

// A problem dimension that may be left out of the YAML; the experiment loader fills in the default, so a
// problem's key always names every dimension.
struct OptionalDim {
  std::string name;          ///< "causal"
  std::int64_t fallback = 0;  ///< value when the YAML leaves it out
  std::string doc;
};

// What a family that launches itself (several kernels, library calls) is handed by the runner: the
// stream, the compiled function of its template, the launch shape it asked for, and every buffer's
// device address in buffers() order. Opaque types keep this header free of CUDA.
struct LaunchEnv {
  void* stream = nullptr;    ///< CUstream
  void* function = nullptr;  ///< CUfunction of specialize()'s name expression
  LaunchShape shape;
  std::vector<std::uint64_t> buffers;  ///< CUdeviceptr per buffer
};

// Which reference to compute: the double-precision oracle, or the naive algorithm carried out in the
// kernel's own working precision (fp32 accumulation, outputs rounded to their dtype). The pass rule is
// max|out - ref64| <= 2 * max|naive_same - ref64| + atol, and no NaN.
enum class RefPrecision { f64, same };

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;

  virtual std::string name() const = 0;           ///< "weighted_row_sum"
  virtual std::string stage() const = 0;          ///< "forward"
  virtual std::string template_file() const = 0;  ///< file name in kernel_templates/ (the family's main one)
  /// The template config `c` of problem `p` compiles from: its Specialization's file, else template_file().
  std::string template_file_for(const core::Config& c, const core::Problem& p) const {
    Specialization s = specialize(c, p);
    return s.template_file.empty() ? template_file() : std::move(s.template_file);
  }
  virtual std::string description() const = 0;    ///< one line

  virtual std::vector<std::string> problem_dims() const = 0;  ///< required dimensions ("rows", "cols")
  virtual std::vector<OptionalDim> optional_problem_dims() const { return {}; }
  /// Called by the experiment loader after the optional dims got their defaults, before check_problem():
  /// a family may derive one dim from others here (attention: seq_k defaults to seq_q).
  virtual void complete_problem(core::Problem&) const {}
  virtual std::vector<core::DType> dtypes() const = 0;        ///< supported problem dtypes
  virtual std::vector<TunableSpec> tunables() const = 0;
  /// Always-on constraints between tunables and problem dims, as expressions (muparser syntax, names
  /// of tunables and problem dims as variables; nonzero = allowed).
  virtual std::vector<std::string> constraints() const = 0;
  /// Variables a constraint of this family may use: its tunables, its problem dims (required, then optional), then
  /// dtype_bytes (bytes per element of the problem's dtype).
  std::vector<std::string> constraint_variables() const {
    std::vector<std::string> vars;
    for (const auto& t : tunables()) vars.push_back(t.name);
    for (const auto& d : problem_dims()) vars.push_back(d);
    for (const auto& o : optional_problem_dims()) vars.push_back(o.name);
    vars.push_back("dtype_bytes");
    return vars;
  }

  /// nullopt when the problem is well formed for this family, else why not (a user error).
  virtual std::optional<std::string> check_problem(const core::Problem& p) const = 0;
  /// nullopt when the config can run on the device, else why not (recorded as invalid_config).
  virtual std::optional<std::string> can_run(const core::Config& c, const core::Problem& p,
                                             const core::DeviceLimits& d) const = 0;

  virtual Specialization specialize(const core::Config& c, const core::Problem& p) const = 0;
  virtual LaunchShape launch_shape(const core::Config& c, const core::Problem& p,
                                   const core::DeviceLimits& d) const = 0;
  virtual std::vector<BufferSpec> buffers(const core::Problem& p) const = 0;
  virtual std::vector<KernelArg> arguments(const core::Config& c, const core::Problem& p) const = 0;

  /// false (the default): the runner launches the compiled function once with arguments() and
  /// launch_shape(). true: the runner calls launch() instead, which must enqueue all its work on
  /// env.stream (and may throw cuda::CudaError); it is timed as a whole.
  virtual bool launches_itself() const { return false; }
  virtual void launch(const LaunchEnv& env, const core::Config& c, const core::Problem& p) const;
  /// Untimed work the runner enqueues on env.stream before every launch (the validation launch, each
  /// warm-up and each timed sample), e.g. zeroing an accumulator the kernel adds into with atomics. Only
  /// families that launch themselves get it; the default does nothing.
  virtual void prepare(const LaunchEnv& env, const core::Config& c, const core::Problem& p) const;

  virtual double bytes_moved(const core::Problem& p) const = 0;  ///< [bytes] each input read once, each output written once
  virtual double flops(const core::Problem& p) const = 0;        ///< [FLOP]

  /// Computes every output buffer (in buffers() order, outputs only) from the inputs (in buffers()
  /// order, inputs only). `outputs` arrives sized and typed; fill `values`.
  virtual void reference(const core::Problem& p, const std::vector<HostTensor>& inputs,
                         std::vector<HostTensor>& outputs, RefPrecision precision) const = 0;
  virtual double default_atol(const core::Problem& p) const = 0;
};


/// Every family built into flashtune, in a stable order.
const std::vector<std::unique_ptr<KernelFamily>>& all_families();
/// nullptr when there is no family of that name.
const KernelFamily* find_family(const std::string& name);

}  // namespace flashtune::kernels
