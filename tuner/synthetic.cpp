// tuner/synthetic.cpp: the attention-forward performance model behind the synthetic surfaces. The
// constants are round public figures of an H100 SXM (132 SMs, 228 KiB shared memory per SM, 64 K
// registers per SM, ~990 TFLOP/s dense fp16, ~3.35 TB/s); the efficiency curves are plausible shapes,
// not fits. Nothing here claims to predict a real kernel's time.
#include "tuner/synthetic.hpp"

#include <algorithm>
#include <cmath>

#include "tuner/space.hpp"

namespace flashtune::tuner {

namespace {

constexpr double kSms = 132, kSmemPerSm = 228 * 1024, kSmemPerBlock = 227 * 1024, kRegsPerSm = 65536;
constexpr double kThreadsPerSm = 2048, kBlocksPerSm = 32;
constexpr double kPeakFlops = 989e12;  // [FLOP/s] dense fp16 tensor cores
constexpr double kBandwidth = 3.35e12; // [B/s]
constexpr double kLaunchS = 3e-6;      // [s]
constexpr double kNoise = 0.02;        // +- relative

core::TrialResult failed(core::TrialStatus s, std::string why) {
  core::TrialResult r;
  r.status = s;
  r.reason = std::move(why);
  return r;
}

core::TrialResult model(const core::Config& c, const AttentionShape& p, std::uint64_t noise_seed) {
  const double bm = double(c.at("block_m")), bn = double(c.at("block_n")), nw = double(c.at("num_warps"));
  const double stages = double(c.at("num_stages"));
  const double split = c.values.count("kv_split") ? double(c.at("kv_split")) : 1.0;
  const double d = double(p.head_dim), seq = double(p.seq);

  const double smem = (bm + 2 * stages * bn) * d * 2;
  if (smem > kSmemPerBlock) return failed(core::TrialStatus::resource_exceeded, "shared memory");
  const double rows = bm / nw;
  const double regs = rows * d / 32 + rows * bn / 32 + rows * d / 64 + 24;
  if (regs > 510) return failed(core::TrialStatus::invalid_config, "registers");
  const double spill = regs > 255 ? 1 + 1.5 * (regs - 255) / 255 : 1.0;
  const double regs_alloc = std::ceil(std::min(regs, 255.0) / 8) * 8;
  const double threads = 32 * nw;
  const double per_sm = std::min({std::floor(kSmemPerSm / (smem + 1024)), std::floor(kRegsPerSm / (regs_alloc * threads)),
                                  std::floor(kThreadsPerSm / threads), kBlocksPerSm});
  if (per_sm < 1) return failed(core::TrialStatus::resource_exceeded, "occupancy 0");

  const double work = p.causal ? 0.5 * (1 + bm / seq) : 1.0;  // causal: about half the K/V tiles per block
  const double blocks = double(p.batch * p.heads) * std::ceil(seq / bm) * split;
  const double flops_block = 4 * bm * (seq / split) * d * work;
  // MMA efficiency: larger warp tiles amortize fragment loads and softmax; each K/V tile costs a
  // rescale and a barrier, relatively more for narrow tiles and small heads.
  double eff = std::min(0.92, 0.45 + (rows >= 32 ? 0.2 : 0.0) + 0.1 * std::log2(bn / 16));
  eff /= 1 + 0.15 * (16 / bn) * (64 / d);
  const double warps = per_sm * nw;
  const double hide_stages = 1 - 0.45 * std::exp(-0.9 * (stages - 1));
  const double hide = 1 - (1 - hide_stages) / std::sqrt(per_sm);
  const double occupancy = std::pow(std::min(1.0, warps / 8), 0.35);
  const double sm_flops = kPeakFlops / kSms * eff * hide * occupancy / spill;
  const double block_s = flops_block / (sm_flops / per_sm);
  const double waves = std::ceil(blocks / (kSms * per_sm));
  const double compute_s = waves * block_s;
  // DRAM: K and V per head once per ~16 query blocks (L2 reuse), Q read and O written once.
  const double heads = double(p.batch * p.heads);
  const double bytes = heads * (seq * d * 2 * 2 * std::max(1.0, std::ceil(seq / bm) / 16) + 2 * seq * d * 2);
  const double memory_s = bytes / kBandwidth;
  const double combine_s = split > 1 ? heads * seq * d * 4 * split * 2 / kBandwidth + kLaunchS : 0.0;
  double seconds = std::max(compute_s, memory_s) + kLaunchS + combine_s;

  // FNV-1a barely moves its top bits on a change of the last characters: finish with splitmix64's mixer.
  std::uint64_t h = core::fnv1a64(c.key()) ^ (noise_seed * 0x9e3779b97f4a7c15ULL);
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  h ^= h >> 31;
  seconds *= 1 + kNoise * (2 * double(h >> 11) * 0x1.0p-53 - 1);
  core::TrialResult r;
  r.status = core::TrialStatus::ok;
  r.timing = core::Timing{};
  r.timing->median_ms = seconds * 1e3;
  r.timing->samples_ms = {r.timing->median_ms};
  return r;
}

}  // namespace

Surface attention_surface(const AttentionShape& shape, std::uint64_t noise_seed) {
  SearchSpace space;
  if (shape.wide)
    space.dims = {{"block_m", {16, 32, 64, 128, 256}}, {"block_n", {16, 32, 64, 128, 256}},
                  {"num_warps", {1, 2, 4, 8, 16}},     {"num_stages", {1, 2, 3, 4}},
                  {"kv_split", {1, 2, 4, 8}}};
  else
    space.dims = {{"block_m", {16, 32, 64, 128}}, {"block_n", {16, 32, 64, 128}},
                  {"num_warps", {1, 2, 4, 8}},    {"num_stages", {1, 2, 3}}};
  // attn_fwd's constraints: each warp owns one or two 16-row MMA tiles of the query block.
  Surface s;
  s.configs = enumerate(space, [](const core::Config& c) {
    const std::int64_t bm = c.at("block_m"), nw = c.at("num_warps");
    return bm % (16 * nw) == 0 && bm / (16 * nw) <= 2;
  });
  for (const auto& c : s.configs) s.results.push_back(model(c, shape, noise_seed));
  s.name = std::string("synthetic attn_fwd") + (shape.wide ? " wide" : "") + " batch=" + std::to_string(shape.batch) +
           ",heads=" + std::to_string(shape.heads) + ",seq=" + std::to_string(shape.seq) +
           ",head_dim=" + std::to_string(shape.head_dim) + (shape.causal ? ",causal" : "");
  return s;
}

std::vector<std::string> synthetic_surface_names() {
  return {"attn_fwd_d64", "attn_fwd_d128", "attn_fwd_d256", "attn_fwd_d128_causal", "attn_fwd_wide_d64", "attn_fwd_wide_d128"};
}

Surface synthetic_surface(const std::string& name, std::uint64_t noise_seed) {
  AttentionShape s;
  if (name == "attn_fwd_d64") s.head_dim = 64;
  else if (name == "attn_fwd_d128") s.head_dim = 128;
  else if (name == "attn_fwd_d256") s.head_dim = 256;
  else if (name == "attn_fwd_d128_causal") s.head_dim = 128, s.causal = true;
  else if (name == "attn_fwd_wide_d64") s.head_dim = 64, s.wide = true, s.batch = 1, s.heads = 8;
  else if (name == "attn_fwd_wide_d128") s.head_dim = 128, s.wide = true, s.batch = 1, s.heads = 8;
  else {
    std::string known;
    for (const auto& n : synthetic_surface_names()) known += (known.empty() ? "" : ", ") + n;
    throw core::UserError("unknown synthetic surface '" + name + "' (known: " + known + ")");
  }
  Surface out = attention_surface(s, noise_seed);
  out.name = name;
  return out;
}

}  // namespace flashtune::tuner
