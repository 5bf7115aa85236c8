// harness/kernels/problem_views.cpp: the typed problem views and the checks of the raw problems they are built
// from; the only code in harness/kernels that looks a problem dimension up by name.
#include "harness/kernels/problem_views.hpp"

#include <algorithm>
#include <climits>

namespace flashtune::kernels {

namespace attn {

Shape::Shape(const core::Problem& p) {
  batch = p.at("batch");
  heads_q = p.at("heads_q");
  heads_kv = p.at("heads_kv");
  seq_q = p.at("seq_q");
  seq_k = p.at("seq_k");
  head_dim = p.at("head_dim");
  causal = p.get("causal", 0) != 0;
  window = p.get("window", 0);
  sink_tokens = p.get("sink_tokens", 0);
  learned_sinks = p.get("learned_sinks", 0) != 0;
  dtype = p.dtype;
  tf32 = p.get("tf32", 0) != 0;
  qk_range = p.get("qk_range", 1);
  sink_bias = p.get("sink_bias", 0);
}

Shape Shape::transposed() const {
  Shape t = *this;
  t.seq_q = seq_k, t.seq_k = seq_q;
  return t;
}

std::optional<std::string> check_problem(const core::Problem& p, const std::vector<std::int64_t>& head_dims) {
  for (const char* d : {"batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim"}) {
    if (!p.dims.count(d)) return std::string("missing dimension '") + d + "'";
    if (p.at(d) < 1) return std::string(d) + " must be >= 1";
  }
  const Shape s(p);
  if (s.heads_q % s.heads_kv != 0)
    return "heads_q (" + std::to_string(s.heads_q) + ") must be a multiple of heads_kv (" + std::to_string(s.heads_kv) + ")";
  if (std::find(head_dims.begin(), head_dims.end(), s.head_dim) == head_dims.end()) {
    std::string list;
    for (auto d : head_dims) list += (list.empty() ? "" : ", ") + std::to_string(d);
    return "head_dim " + std::to_string(s.head_dim) + " not supported (supported: " + list + ")";
  }
  for (const char* d : {"causal", "learned_sinks", "tf32"})  // the view reads any nonzero as on: check the raw value
    if (p.get(d, 0) != 0 && p.get(d, 0) != 1) return std::string(d) + " must be 0 or 1";
  if (s.window < 0) return "window must be >= 0";  // sink_bias may be anything: negative learned sinks too
  if (s.sink_tokens < 0) return "sink_tokens must be >= 0";
  if (s.qk_range < 1) return "qk_range must be >= 1";
  if (s.tf32 && s.dtype != core::DType::f32) return "tf32 applies to dtype f32 only";
  if (s.sink_tokens > 0 && s.window == 0) return "sink_tokens needs a window (without one every key is visible anyway)";
  // Problems must fit 32-bit element offsets per (batch, head) slice and 31-bit grid dims.
  if (double(s.seq_q) * double(s.head_dim) >= 2147483647.0 || double(s.seq_k) * double(s.head_dim) >= 2147483647.0)
    return "seq * head_dim must be < 2^31";
  return std::nullopt;
}

void complete_problem(core::Problem& p) {
  if (p.get("heads_kv", -1) < 0 && p.dims.count("heads_q")) p.dims["heads_kv"] = p.dims["heads_q"];
  if (p.get("seq_k", -1) < 0 && p.dims.count("seq_q")) p.dims["seq_k"] = p.dims["seq_q"];
}

}  // namespace attn

namespace row {

Shape::Shape(const core::Problem& p) : rows(p.at("rows")), cols(p.at("cols")), dtype(p.dtype) {}

std::optional<std::string> check_problem(const core::Problem& p) {
  for (const char* dim : {"rows", "cols"}) {
    if (!p.dims.count(dim)) return std::string("missing dimension '") + dim + "'";
    if (p.at(dim) < 1) return std::string(dim) + " must be >= 1, got " + std::to_string(p.at(dim));
  }
  const Shape s(p);
  if (s.rows > (std::int64_t(1) << 62) / s.cols) return "rows * cols overflows";
  return std::nullopt;
}

}  // namespace row

namespace smm {

Shape::Shape(const core::Problem& p)
    : batch(p.at("batch")), d1(p.at("d1")), d2(p.at("d2")), d3(p.at("d3")), x_range(p.get("x_range", 8)), dtype(p.dtype) {}

std::optional<std::string> check_dims(const core::Problem& p) {
  for (const char* d : {"batch", "d1", "d2", "d3"}) {
    if (!p.dims.count(d)) return std::string("missing dimension '") + d + "'";
    if (p.at(d) < 1) return std::string(d) + " must be >= 1";
    if (p.at(d) > INT_MAX) return std::string(d) + " must be < 2^31";
  }
  return std::nullopt;
}

}  // namespace smm

}  // namespace flashtune::kernels
