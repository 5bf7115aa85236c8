// reference/dtype.cpp: dtype rounding, packing and the random fill, through Eigen::half / Eigen::bfloat16.
#include "reference/dtype.hpp"

#include <Eigen/Core>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace flashtune::reference {
namespace {

// double -> float rounded to odd: truncate toward zero, then set the last bit when inexact. A value
// rounded to odd with >= 2 extra bits rounds to nearest-even in the narrower format exactly as the
// double would, so fp16/bf16 conversions through this float are correctly rounded.
float to_float_round_odd(double v) {
  if (std::isnan(v) || std::isinf(v)) return static_cast<float>(v);
  float f = static_cast<float>(v);
  if (std::isinf(f)) f = std::copysign(std::numeric_limits<float>::max(), static_cast<float>(v));
  if (static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u);
}

std::uint16_t half_bits(double v) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(to_float_round_odd(v)));
}
std::uint16_t bf16_bits(double v) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(to_float_round_odd(v)));
}
double from_half_bits(std::uint16_t b) {
  return static_cast<double>(static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(b)));
}
double from_bf16_bits(std::uint16_t b) {
  return static_cast<double>(static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(b)));
}

}  // namespace

double round_to(core::DType d, double v) {
  switch (d) {
    case core::DType::f32: return static_cast<double>(static_cast<float>(v));
    case core::DType::f16: return from_half_bits(half_bits(v));
    case core::DType::bf16: return from_bf16_bits(bf16_bits(v));
  }
  throw core::Error("round_to: unknown dtype");
}

void round_all(core::DType d, std::vector<double>& values) {
  for (double& v : values) v = round_to(d, v);
}

std::vector<unsigned char> pack(core::DType d, const std::vector<double>& values) {
  static_assert(std::endian::native == std::endian::little, "pack() writes the host's byte order");
  std::vector<unsigned char> out(values.size() * core::dtype_size(d));
  unsigned char* p = out.data();
  for (double v : values) {
    if (d == core::DType::f32) {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      p += 4;
    } else {
      const std::uint16_t b = d == core::DType::f16 ? half_bits(v) : bf16_bits(v);
      std::memcpy(p, &b, 2);
      p += 2;
    }
  }
  return out;
}

std::vector<double> unpack(core::DType d, const void* bytes, std::size_t n) {
  std::vector<double> out(n);
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (std::size_t i = 0; i < n; ++i) {
    if (d == core::DType::f32) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      out[i] = f;
    } else {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      out[i] = d == core::DType::f16 ? from_half_bits(b) : from_bf16_bits(b);
    }
  }
  return out;
}

std::vector<double> uniform(std::size_t n, double lo, double hi, std::uint64_t seed) {
  if (!(lo < hi)) throw core::Error("uniform: empty range [" + std::to_string(lo) + ", " + std::to_string(hi) + ")");
  std::mt19937_64 gen(seed);
  std::vector<double> out(n);
  for (double& v : out) {
    do {
      const double u = static_cast<double>(gen() >> 11) * 0x1.0p-53;  // [0, 1)
      v = lo + (hi - lo) * u;
    } while (v == 0.0 || v >= hi);
  }
  return out;
}

double round_tf32(double v) {
  float f = static_cast<float>(v);
  if (!std::isfinite(f)) return f;
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits = (bits + 0x1000u) & 0xFFFFE000u;  // add half of the 13 dropped bits' unit, then truncate: ties away
  std::memcpy(&f, &bits, sizeof bits);
  return f;
}

}  // namespace flashtune::reference
