// harness/kernels/cost_model.hpp: an analytic prior for a cold search (issue 23). Without measured neighbours a
// search knows nothing of a space, so it begins from what the kernels' documented structure says a config costs:
// the grid's blocks scheduled over the SMs (blocks per SM from threads, shared memory and the register estimates
// can_run uses, or min_blocks), each block's tiles (causal blocks see fewer), and per tile the tensor-core, special-
// function and load times, overlapped as the pipeline and the resident blocks allow. Only the order matters: the
// estimate is in clocks of one idealized SM, not a prediction of milliseconds. Derived from first principles and the
// templates' headers, not fitted to recorded winners; docs/NOTES.md "A cost model for the cold start" has the
// evidence (the constants were chosen on the head_dim 128 surfaces, head_dim 64 held out).
#pragma once

#include <optional>
#include <string>

#include "harness/core/types.hpp"

namespace flashtune::kernels {

/// The name the warm_starts table and the run's log give the model ("cost model v1").
inline constexpr const char* kCostModelName = "analytic cost model v1";

/// [clocks] the modelled time of config `c` of family `family` (attn_fwd mma 80 / 90, attn_bwd_dkdv mma 80 / 90,
/// attn_bwd_dq) on problem `p` on device `d`; nullopt for a family, variant or problem it does not model (fp32,
/// windows, sinks, the TMA kernels, item or sink splits). Lower is faster; comparable within one problem only.
std::optional<double> estimate_cost(const std::string& family, const core::Config& c, const core::Problem& p,
                                    const core::DeviceLimits& d);

}  // namespace flashtune::kernels
