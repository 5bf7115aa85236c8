// harness/kernels/attn_bwd_stage.hpp: what the attention backward operations share (attn_bwd_rows.cpp: preprocess,
// dsink; attn_bwd_dkdv.cpp; attn_bwd_dq.cpp: dq, dq_delta; attn_bwd_fused.cpp): the problem and its LSE inputs,
// the parameter struct, the gradient stages' buffers, arguments, reference and tolerance, and the checks their
// variants' kernels share (mma.sync tiles, min_blocks, the wgmma loop).
//
// Inputs that come from earlier stages are drawn at random, in ranges a real backward sees:
//   LSE in [L, L + 0.5], L = log(seq_k) (Q, K in [-1, 1] give |S| ~ 1/3, so rows of P sum to about 1), and
//       for the dsink stage L = max(log(seq_k), sink_bias + 1) with learned sinks (exp(s_h - LSE) <= 1, as
//       LSE >= s_h holds for a real forward);
//   O, dO in [-1, 1]; D in [-1, 1].
// They need not be consistent with Q, K, V (the formulas hold for any O and LSE); the reference gets an O
// whose rowsum(dO * O) is exactly the D input. The end-to-end test (tests/attention/attn_bwd_gpu_test.cpp)
// feeds the real forward's O and LSE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/kernels/attention.hpp"
#include "harness/kernels/attn_bwd.hpp"
#include "reference/attention_bwd.hpp"

namespace flashtune::kernels::attn_bwd {

using attn::BwdConfig;
using attn::Shape;
using BwdParams = FtAttnBwdParams<void>;
using GradVariant = Variant<Shape, BwdConfig>;

/// One pointer member of FtAttnBwdParams and the buffer it takes.
struct Binding {
  std::size_t member;  ///< offsetof(BwdParams, ...)
  int buffer;
};

/// The backward's parameter struct of problem s (every stage's scalars; sink_split and item_split 1, reduce and convert 0), as one
/// kernel argument with `bindings` bound to the stage's buffers.
ParamsArg bwd_params(const Shape& s, const std::vector<Binding>& bindings);

/// LSE as a real forward leaves it: about log(seq_k) for qk_range 1 (|S| ~ 1/3), at least s_h + 1 with learned
/// sinks when `with_sink` (the dsink stage; in dkdv and dq a sink only lowers P, which would leave nothing to check).
std::pair<double, double> lse_range(const Shape& s, bool with_sink);

/// D = rowsum(dO * O) of every row, in double or (RefPrecision::same) summed in fp32 as the kernels do.
std::vector<double> delta_of(const Shape& s, const std::vector<double>& o, const std::vector<double>& dout,
                             RefPrecision precision);

/// "kernel<T, head_dim, block_m, block_n, num_warps, num_stages, causal, window, min_blocks>": a gradient stage's
/// mma.sync kernel (fp16 / bf16).
std::string mma_sync_name(const std::string& kernel, const BwdConfig& c, const Shape& s);

/// Why a gradient stage's mma.sync kernel (fp16 / bf16) cannot run: `own` (`owned` names it: block_n for dkdv,
/// block_m for dq) rows of 16-row MMA tiles per warp, tile sizes, the architecture, `smem` [bytes] and `regs`
/// (registers per thread, estimated: past about 224 the kernels spill); nullopt when it can.
std::optional<std::string> mma_sync_problem(const BwdConfig& c, const core::DeviceLimits& d, std::int64_t own,
                                            const char* owned, std::int64_t smem, std::int64_t regs);

/// min_blocks of the mma.sync kernels (fp16 / bf16): blocks per SM the kernel is compiled to fit, with its
/// default search values.
TunableSpec min_blocks_tunable();
/// Why config c's min_blocks cannot run (nullopt if it can); `smem` [bytes] of a block, `acc` accumulator registers
/// per thread, below which the cap would spill (ptxas needs ~40 more; the spill check prunes what is left).
std::optional<std::string> min_blocks_problem(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d,
                                              std::int64_t smem, std::int64_t acc);

/// "kernel<T, head_dim, block_m, warpgroups, num_stages, causal, window>": a wgmma backward kernel (dkdv's mma 90,
/// fused).
std::string wgmma_name(const std::string& kernel, const BwdConfig& c, const Shape& s);
/// What keeps a config from the wgmma backward loop (attn_bwd_sm90.cuh: attn_bwd_dkdv's mma 90 and attn_bwd_fused)
/// on device d, given its shared memory [bytes] and register estimate; nullopt when it can run. rows80: block_m 80
/// is a shape of the kernel too (mma 91's dQ^T pieces; its caller checks the rest).
std::optional<std::string> wgmma_problem(const BwdConfig& c, const Shape& s, const core::DeviceLimits& d,
                                         std::int64_t smem, std::int64_t regs, bool rows80 = false);

/// [FLOP] `per_dim` * head_dim per visible (query, key) pair per query head.
double visible_pair_flops(const Shape& s, double per_dim);

/// A stage that launches itself twice (dkdv's reduction of split sink tiles, fused's dQ conversion): enqueues its
/// kernel on env.stream with `args` and env.shape.
void launch_pass(const LaunchEnv& env, const std::vector<KernelArg>& args);
/// Then the same kernel with the int member at `flag` (offsetof(BwdParams, ...)) of args' params set to 1, on
/// `grid` with env.shape's block and no dynamic shared memory; `programmatic`: launched to start beside the first
/// (cuda::launch_programmatic), the kernel waiting for what it reads itself.
void launch_second_pass(const LaunchEnv& env, std::vector<KernelArg>& args, std::size_t flag, const unsigned (&grid)[3],
                        bool programmatic = false);

/// A gradient stage's launch: grid (`grid_x`, `grid_y`, batch), 32 num_warps threads, `smem` [bytes].
LaunchShape grad_launch(std::int64_t grid_x, std::int64_t grid_y, const BwdConfig& c, const Shape& s, std::int64_t smem);

/// What every backward operation shares: the attention problem of the forward with head dims 16..128 and qk_range
/// 1 (LSE is drawn for it), byte counts from the buffers (workspaces excluded).
template <typename Tunables>
class BwdOperation : public attn::AttentionOperation<Tunables> {
 public:
  using attn::AttentionOperation<Tunables>::AttentionOperation;
  std::optional<std::string> check_problem(const core::Problem& p) const override {
    if (auto why = attn::AttentionOperation<Tunables>::check_problem(p)) return why;
    if (Shape(p).qk_range != 1)
      return this->name() + " draws LSE for qk_range 1 only (large logits are tested end to end, with the real forward's LSE)";
    return std::nullopt;
  }
  double bytes_moved(const core::Problem& p) const override {
    double total = 0;
    for (const auto& b : this->buffers(p))
      if (b.role != BufferRole::workspace) total += double(b.elements) * double(core::dtype_size(b.dtype));
    return total;
  }

 protected:
  std::vector<std::int64_t> head_dims() const override { return {16, 32, 64, 128}; }
};

/// A gradient stage (dkdv, dq, dq_delta, fused): Q, K, V, dO, LSE, D in; gradients out in the problem dtype.
class GradStage : public BwdOperation<BwdConfig> {
 public:
  using BwdOperation::BwdOperation;
  std::string template_file() const override { return "attn_bwd.cuh"; }
  std::vector<BufferSpec> buffers(const core::Problem& p) const override;
  /// The parameter struct of bwd_params() over bindings(), as the config's variant extends it (mma 91: tensor maps).
  std::vector<KernelArg> arguments(const core::Config& c, const core::Problem& p) const override;
  /// Element-wise tolerance on top of twice the naive fp32 error (attn_bwd_stage.cpp says why).
  double default_atol(const core::Problem& p) const override;
  /// The naive double (or fp32) backward, given an O whose rowsum(dO * O) is the D input; sampled rows when large.
  void reference(const core::Problem& p, const std::vector<HostTensor>& in, std::vector<HostTensor>& out,
                 RefPrecision precision) const override;

 protected:
  /// block_m, block_n, num_warps, num_stages with their default search values.
  std::vector<TunableSpec> shared_tunables() const override;
  /// The naive double (or fp32) backward of the rows this stage checks (rows_to_check), into its outputs()
  /// (take()), from in's Q, K, V, dO and LSE and the O given, or (nullptr) an O whose rowsum(dO * O) is in's
  /// D. TF32: the same-precision reference multiplies the operands the tensor cores see, rounded to tf32.
  void naive_gradients(const Shape& s, const std::vector<HostTensor>& in, RefPrecision precision,
                       const std::vector<double>* o_given, std::vector<HostTensor>& out) const;
  /// Q, K, V, dO, LSE and D: the inputs of dkdv, dq and fused.
  static std::vector<Binding> grad_inputs();

  virtual void add_workspace(const Shape&, std::vector<BufferSpec>&) const {}
  virtual std::vector<std::pair<std::string, std::int64_t>> outputs(const Shape& s) const = 0;
  /// The pointer members of FtAttnBwdParams this stage's kernel reads or writes, and their buffers.
  virtual std::vector<Binding> bindings(const BwdConfig& c, const Shape& s) const = 0;
  virtual void rows_to_check(const Shape& s, std::vector<std::int64_t>& q_rows, std::vector<std::int64_t>& k_rows) const = 0;
  virtual void take(reference::AttnGrads& g, std::vector<HostTensor>& out, const std::vector<std::int64_t>& q_rows,
                    const std::vector<std::int64_t>& k_rows, const Shape& s) const = 0;
};

/// The query rows a gradient stage's reference computes: reference_rows(), or every row when it says all.
std::vector<std::int64_t> query_rows_to_check(const Shape& s);
/// The key rows (a key row costs batch * heads_q * seq_q * head_dim, as a query row with the sequences swapped).
std::vector<std::int64_t> key_rows_to_check(const Shape& s);
/// Moves g's dQ into `dq`, its `q_rows` checked (all of them: every element).
void take_dq(reference::AttnGrads& g, HostTensor& dq, const std::vector<std::int64_t>& q_rows, const Shape& s);
/// Moves g's dK and dV into `dk` and `dv`, their `k_rows` checked.
void take_dkdv(reference::AttnGrads& g, HostTensor& dk, HostTensor& dv, const std::vector<std::int64_t>& k_rows,
               const Shape& s);

}  // namespace flashtune::kernels::attn_bwd
