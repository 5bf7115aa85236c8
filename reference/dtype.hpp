// reference/dtype.hpp: host-side conversions between double and the kernel dtypes (fp32, fp16, bf16),
// and the deterministic random fill used for kernel inputs. The GPU reads exactly the bytes pack() makes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::reference {

/// `v` rounded to nearest (ties to even) in dtype `d`, widened back to double. Correctly rounded from
/// double (no double rounding through fp32). Overflow gives +-inf, NaN stays NaN.
double round_to(core::DType d, double v);
/// v as float rounded to TF32 (10 explicit mantissa bits, round to nearest, ties away from zero: PTX
/// cvt.rna.tf32.f32), what the tensor cores' fp32 mode multiplies. Inf and NaN pass through.
double round_tf32(double v);
/// round_to() applied to every element, in place.
void round_all(core::DType d, std::vector<double>& values);

/// Bytes as the GPU reads them: fp32, IEEE fp16 or bf16, little-endian; values are rounded with
/// round_to(). Size: values.size() * dtype_size(d) [bytes].
std::vector<unsigned char> pack(core::DType d, const std::vector<double>& values);
/// Inverse of pack(): `n` elements of dtype `d` read from `bytes` (n * dtype_size(d) bytes).
std::vector<double> unpack(core::DType d, const void* bytes, std::size_t n);

/// `n` values uniform in [lo, hi), deterministic for a seed (std::mt19937_64, 53-bit mantissas), the
/// same on every platform. Never exactly 0 (a zero is redrawn). Throws core::Error when lo >= hi.
std::vector<double> uniform(std::size_t n, double lo, double hi, std::uint64_t seed);

}  // namespace flashtune::reference
