// reference/attention_detail.hpp: private helpers shared by the attention oracles (attention.cpp and
// attention_bwd.cpp): the mask as per-row key intervals, input checks, Eigen loads and a small host
// thread pool. Included only by reference/*.cpp; not part of the library's interface.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/core/types.hpp"
#include "reference/attention.hpp"

namespace flashtune::reference::detail {

template <typename Acc>
using RowMajor = Eigen::Matrix<Acc, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename Acc>
using RowVec = Eigen::Matrix<Acc, 1, Eigen::Dynamic>;
template <typename Acc>
using ColVec = Eigen::Matrix<Acc, Eigen::Dynamic, 1>;

inline constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// The keys visible to one query row, as intervals: j is visible iff j < hi && (j >= lo || j < sink),
// with 0 <= lo <= hi <= seq_k and 0 <= sink <= hi. Equivalent to attn_visible() for 0 <= j < seq_k.
struct RowRange {
  std::int64_t lo;
  std::int64_t hi;
  std::int64_t sink;
};

inline RowRange row_range(const AttnShape& s, std::int64_t i) {
  const std::int64_t diag = i + (s.seq_k - s.seq_q);
  const std::int64_t hi = std::clamp<std::int64_t>(s.causal ? diag + 1 : s.seq_k, 0, s.seq_k);
  const std::int64_t lo = std::clamp<std::int64_t>(s.window > 0 ? diag - s.window + 1 : 0, 0, hi);
  const std::int64_t sink = std::clamp<std::int64_t>(s.sink_tokens, 0, hi);
  return {lo, hi, sink};
}

inline bool range_visible(const RowRange& r, std::int64_t j) { return j < r.hi && (j >= r.lo || j < r.sink); }

// True when some key of [j0, j1) is visible to row r.
inline bool range_touches(const RowRange& r, std::int64_t j0, std::int64_t j1) {
  return std::max(j0, r.lo) < std::min(j1, r.hi) || j0 < std::min(j1, r.sink);
}

[[noreturn]] inline void fail(const std::string& what) { throw core::Error(what); }

inline void check_size(const char* fn, const char* name, std::size_t got, std::int64_t want) {
  if (got != static_cast<std::size_t>(want))
    fail(std::string(fn) + ": " + name + " has " + std::to_string(got) + " values, the shape needs " +
         std::to_string(want));
}

inline void check_inputs(const char* fn, const AttnShape& s, const std::vector<double>& q,
                         const std::vector<double>& k, const std::vector<double>& v,
                         const std::vector<double>& sinks) {
  if (s.batch < 1 || s.heads_q < 1 || s.heads_kv < 1 || s.seq_q < 1 || s.seq_k < 1 || s.head_dim < 1)
    fail(std::string(fn) + ": batch, heads_q, heads_kv, seq_q, seq_k and head_dim must all be >= 1");
  if (s.heads_q % s.heads_kv != 0)
    fail(std::string(fn) + ": heads_q " + std::to_string(s.heads_q) + " is not a multiple of heads_kv " +
         std::to_string(s.heads_kv));
  if (s.window < 0 || s.sink_tokens < 0) fail(std::string(fn) + ": window and sink_tokens must be >= 0");
  if (!(s.scale >= 0) || !std::isfinite(s.scale)) fail(std::string(fn) + ": scale must be finite and >= 0");
  check_size(fn, "q", q.size(), s.batch * s.heads_q * s.seq_q * s.head_dim);
  check_size(fn, "k", k.size(), s.batch * s.heads_kv * s.seq_k * s.head_dim);
  check_size(fn, "v", v.size(), s.batch * s.heads_kv * s.seq_k * s.head_dim);
  if (s.learned_sinks) check_size(fn, "sinks", sinks.size(), s.heads_q);
}

template <typename Acc>
Acc score_scale(const AttnShape& s) {
  return static_cast<Acc>(s.scale == 0 ? 1.0 / std::sqrt(static_cast<double>(s.head_dim)) : s.scale);
}

template <typename Acc>
RowMajor<Acc> load(const std::vector<double>& x, std::int64_t offset, std::int64_t rows, std::int64_t cols) {
  return Eigen::Map<const RowMajor<double>>(x.data() + offset, rows, cols).template cast<Acc>();
}

// Calls f(n) for n in [0, count) on the host's cores; each call must write only its own data. The first
// exception a call throws is rethrown after all threads have joined.
template <typename F>
void parallel_for(std::int64_t count, F&& f) {
  std::atomic<std::int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (std::int64_t n; (n = next++) < count;) {
      try {
        f(n);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  const std::int64_t threads_wanted =
      std::min<std::int64_t>(count, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (std::int64_t t = 1; t < threads_wanted; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

// Calls f(h, q_offset, kv_offset, lse_offset) for every (batch, query head h), heads in parallel; O
// shares Q's offsets.
template <typename F>
void for_each_head(const AttnShape& s, F&& f) {
  const std::int64_t group = s.heads_q / s.heads_kv;
  parallel_for(s.batch * s.heads_q, [&](std::int64_t bh) {
    const std::int64_t b = bh / s.heads_q, h = bh % s.heads_q, hkv = h / group;
    f(h, ((b * s.heads_q + h) * s.seq_q) * s.head_dim, ((b * s.heads_kv + hkv) * s.seq_k) * s.head_dim,
      (b * s.heads_q + h) * s.seq_q);
  });
}

// exp(x - shift) with masked (-inf) scores giving exactly 0: Eigen's vectorized exp clamps its
// argument and returns a tiny denormal for -inf, which would leak into rows whose keys are all masked.
template <typename Acc, typename Row>
RowVec<Acc> masked_exp(const Row& x, Acc shift) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  return (x.array() == neg_inf).select(Acc(0), (x.array() - shift).exp()).matrix();
}

}  // namespace flashtune::reference::detail
