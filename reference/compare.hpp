// reference/compare.hpp: the pass rule every kernel check shares (DESIGN.md): the kernel's error against
// the double-precision oracle must be at most twice the naive same-precision algorithm's, plus atol.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::reference {

/// Compares a kernel output `out` with the oracle `ref64`, given the naive same-precision result.
///   max_abs_err = max |out - ref64| over finite outputs
///   max_rel_err = max |out - ref64| / max(|ref64|, kRelFloor): elementwise; the floor keeps outputs
///                 whose reference is ~0 (tiny softmax probabilities) from dominating
///   naive_err   = max |naive_same - ref64|
///   tolerance   = 2 * naive_err + atol
///   nan_count   = NaN or Inf elements of `out` (an unwritten, NaN-poisoned output counts); an infinity
///                 equal to the reference's is exact (LSE = -inf of a row with no visible key), and so is
///                 -inf in an element the mask leaves unchecked
///   passed      = nan_count == 0 && max_abs_err <= tolerance, and tolerance is finite (a NaN or Inf
///                 in ref64 or naive_same is a broken reference and never passes)
/// Throws core::Error when the three vectors differ in size or atol < 0.
/// `checked` (empty: every element) restricts the error metrics to elements whose entry is nonzero, for
/// references that compute a sample; the NaN count still covers every element of `out`.
core::Validation compare(const std::vector<double>& out, const std::vector<double>& ref64,
                         const std::vector<double>& naive_same, double atol,
                         const std::vector<std::uint8_t>& checked = {});

inline constexpr double kRelFloor = 1e-6;  ///< denominator floor of max_rel_err

/// The atol an output stored as `dtype` is checked with: `atol`, raised for 16-bit outputs to one unit in the last
/// place at the largest finite |ref64| (2^(ilogb - 7) for bf16, - 10 for fp16). The kernel and the same-precision
/// naive result each round to nearest from slightly different fp32 values, so near a rounding midpoint they land
/// one ulp apart; for attention O (|O| <= 1) this is the family's own atol. fp32 outputs keep `atol`.
double storage_atol(core::DType dtype, const std::vector<double>& ref64, double atol);

}  // namespace flashtune::reference
