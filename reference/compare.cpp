// reference/compare.cpp: error metrics and the pass rule.
#include "reference/compare.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace flashtune::reference {

core::Validation compare(const std::vector<double>& out, const std::vector<double>& ref64,
                         const std::vector<double>& naive_same, double atol,
                         const std::vector<std::uint8_t>& checked) {
  if (out.size() != ref64.size() || naive_same.size() != ref64.size())
    throw core::Error("compare: sizes differ (out " + std::to_string(out.size()) + ", ref64 " +
                      std::to_string(ref64.size()) + ", naive " + std::to_string(naive_same.size()) + ")");
  if (!checked.empty() && checked.size() != ref64.size())
    throw core::Error("compare: mask of " + std::to_string(checked.size()) + " for " + std::to_string(ref64.size()) +
                      " elements");
  if (!(atol >= 0)) throw core::Error("compare: atol must be >= 0");
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // A NaN difference (a NaN reference) must fail, never compare false and pass.
  auto diff = [&](double a, double r) {
    if (a == r) return 0.0;  // also equal infinities (an attention row with no visible key: LSE = -inf)
    const double e = std::fabs(a - r);
    return std::isnan(e) ? kInf : e;
  };
  core::Validation v;
  v.checked = true;
  for (std::size_t i = 0; i < ref64.size(); ++i) {
    const bool check = checked.empty() || checked[i];
    if (check) v.naive_err = std::max(v.naive_err, diff(naive_same[i], ref64[i]));
    if (std::isnan(out[i]) || (std::isinf(out[i]) && (check ? out[i] != ref64[i] : out[i] > 0))) {
      ++v.nan_count;
      continue;
    }
    if (!check) continue;
    const double e = diff(out[i], ref64[i]);
    v.max_abs_err = std::max(v.max_abs_err, e);
    v.max_rel_err = std::max(v.max_rel_err, e / std::max(std::fabs(ref64[i]), kRelFloor));
  }
  v.tolerance = 2 * v.naive_err + atol;
  v.passed = v.nan_count == 0 && std::isfinite(v.tolerance) && v.max_abs_err <= v.tolerance;
  return v;
}

double storage_atol(core::DType dtype, const std::vector<double>& ref64, double atol) {
  if (dtype == core::DType::f32) return atol;
  double big = 0;
  for (const double x : ref64) big = std::isfinite(x) ? std::max(big, std::abs(x)) : big;
  if (big == 0) return atol;
  return std::max(atol, std::ldexp(1.0, std::ilogb(big) - (dtype == core::DType::bf16 ? 7 : 10)));
}

}  // namespace flashtune::reference
