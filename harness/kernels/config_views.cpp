// harness/kernels/config_views.cpp: the typed config views; the only code in harness/kernels that looks a
// tunable up by name, and the one place that says what a config recorded before a tunable existed means.
#include "harness/kernels/config_views.hpp"

namespace flashtune::kernels {

namespace attn {

Tiles::Tiles(const core::Config& c)
    : block_m(c.at("block_m")), block_n(c.at("block_n")), num_warps(c.at("num_warps")), num_stages(c.at("num_stages")) {}

FwdConfig::FwdConfig(const core::Config& c)
    : Tiles(c),
      mma(c.get("mma", 80)),
      mma_pipe(c.get("mma_pipe", 1)),
      min_blocks(c.get("min_blocks", 1)),
      epilogue(c.get("epilogue", 1)),
      pack_heads(c.get("pack_heads", 1)),
      mma_sched(c.get("mma_sched", 1)),
      exp_poly(c.get("exp_poly", 1)),
      rescale(c.get("rescale", 1)),
      persistent(c.get("persistent", 1)) {}

BwdConfig::BwdConfig(const core::Config& c)
    : Tiles(c),
      mma(c.get("mma", 80)),
      sink_split(c.get("sink_split", 1)),
      item_split(c.get("item_split", 1)),
      min_blocks(c.get("min_blocks", 1)),
      pack_heads(c.get("pack_heads", 1)),
      dq_order(c.get("dq_order", 1)),
      unit_group(c.get("unit_group", 1)),
      tail(c.get("tail", 1)),
      timeline(c.get("timeline", 1)),
      epilogue(c.get("epilogue", 1)) {}

PreprocessConfig::PreprocessConfig(const core::Config& c) : block_m(c.at("block_m")), num_warps(c.at("num_warps")) {}

DsinkConfig::DsinkConfig(const core::Config& c) : num_warps(c.at("num_warps")) {}

BaselineConfig::BaselineConfig(const core::Config& c) : block_threads(c.at("block_threads")) {}

}  // namespace attn

namespace row {

RowConfig::RowConfig(const core::Config& c)
    : block_threads(c.at("block_threads")), rows_per_block(c.at("rows_per_block")), vec(c.at("vec")) {}

}  // namespace row

namespace smm {

SmmConfig::SmmConfig(const core::Config& c)
    : block_m(c.at("block_m")), block_n(c.at("block_n")), block_k(c.at("block_k")), num_warps(c.at("num_warps")) {}

}  // namespace smm

}  // namespace flashtune::kernels
