// harness/cli/results.cpp: compare, convergence, config-across-problems and best-per-problem over the
// trials read by db::Store::trials(). Pure computation on TrialRow; no database calls.
#include "harness/cli/results.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "harness/core/types.hpp"
#include "harness/kernels/attn_bwd_ways.hpp"

namespace flashtune::cli {

namespace {

std::map<std::string, std::int64_t> parse_pairs(const std::string& key, std::string* dtype) {
  std::map<std::string, std::int64_t> out;
  std::istringstream in(key);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "dtype") {
      if (dtype) *dtype = v;
      continue;
    }
    try {
      out[k] = std::stoll(v);
    } catch (const std::exception&) {
      throw core::UserError("'" + key + "': value of '" + k + "' is not an integer");
    }
  }
  return out;
}

std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f%%", 100 * v);
  return buf;
}

}  // namespace

std::string num(std::optional<double> v, int digits) {
  if (!v) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, *v);
  return buf;
}

std::map<std::string, std::int64_t> parse_dims(const std::string& problem_key, std::string* dtype) {
  return parse_pairs(problem_key, dtype);
}
std::map<std::string, std::int64_t> parse_config(const std::string& config_key) {
  return parse_pairs(config_key, nullptr);
}

std::vector<TrialRow> best_per_problem(const std::vector<TrialRow>& trials) {
  std::map<std::tuple<std::string, std::string, std::string, std::string>, TrialRow> best;
  for (const auto& t : trials) {
    if (!t.measured()) continue;
    const auto key = std::make_tuple(t.family, t.stage, t.problem, t.gpu);
    auto it = best.find(key);
    if (it == best.end() || *t.median_ms < *it->second.median_ms) best[key] = t;
  }
  std::vector<TrialRow> out;
  for (auto& [k, t] : best) out.push_back(t);
  return out;
}

std::string compare_verdict(double a_ms, double a_noise, double b_ms, double b_noise) {
  const double diff = (b_ms - a_ms) / a_ms;
  const double band = std::sqrt(a_noise * a_noise + b_noise * b_noise);
  if (std::abs(diff) <= band) return "same";
  return diff < 0 ? "faster" : "slower";
}

Table compare_runs(const std::vector<TrialRow>& a, const std::vector<TrialRow>& b, std::string* summary) {
  using Key = std::tuple<std::string, std::string, std::string, std::string>;
  // The last measured trial of each key wins; a key never measured keeps its last trial (for its status).
  auto index = [](const std::vector<TrialRow>& trials) {
    std::map<Key, TrialRow> m;
    for (const auto& t : trials) {
      const Key k{t.family, t.stage, t.problem, t.config};
      auto it = m.find(k);
      if (it == m.end() || t.measured() || !it->second.measured()) m[k] = t;
    }
    return m;
  };
  const auto ia = index(a), ib = index(b);
  std::vector<Key> keys;
  for (const auto& [k, t] : ia) keys.push_back(k);
  for (const auto& [k, t] : ib)
    if (!ia.count(k)) keys.push_back(k);
  std::sort(keys.begin(), keys.end());

  // The SM clocks (v7 trials; empty before) and the cycle difference (median x clock) after the verdict: under a
  // power cap the clock moves with the variant, and cycles separate work saved from clock gained.
  Table out{{"family", "stage", "problem", "config", "a_median_ms", "a_noise", "b_median_ms", "b_noise", "diff",
             "verdict", "a_mhz", "b_mhz", "cycles_diff"},
            {}};
  std::map<std::string, int> counts;
  double log_sum = 0, log_clock = 0, log_cycles = 0;
  int n_both = 0, n_clocks = 0;
  for (const auto& k : keys) {
    const auto fa = ia.find(k), fb = ib.find(k);
    const TrialRow* ta = fa == ia.end() ? nullptr : &fa->second;
    const TrialRow* tb = fb == ib.end() ? nullptr : &fb->second;
    std::string verdict, diff, cycles;
    if (!ta) verdict = "only_b";
    else if (!tb) verdict = "only_a";
    else if (!ta->measured() || !tb->measured())
      verdict = "not_comparable (a: " + ta->status + ", b: " + tb->status + ")";
    else {
      verdict = compare_verdict(*ta->median_ms, ta->rel_noise(), *tb->median_ms, tb->rel_noise());
      diff = pct((*tb->median_ms - *ta->median_ms) / *ta->median_ms);
      log_sum += std::log(*tb->median_ms / *ta->median_ms);
      ++n_both;
      if (ta->sm_clock_mhz && tb->sm_clock_mhz && *ta->sm_clock_mhz > 0 && *tb->sm_clock_mhz > 0) {
        const double clock = *tb->sm_clock_mhz / *ta->sm_clock_mhz, time = *tb->median_ms / *ta->median_ms;
        cycles = pct(time * clock - 1);
        log_clock += std::log(clock);
        log_cycles += std::log(time * clock);
        ++n_clocks;
      }
    }
    ++counts[verdict.substr(0, verdict.find(' '))];
    auto noise = [](const TrialRow* t) { return t && t->measured() ? num(t->rel_noise(), 3) : std::string(); };
    auto mhz = [](const TrialRow* t) { return t && t->measured() && t->sm_clock_mhz ? num(*t->sm_clock_mhz, 5) : std::string(); };
    out.rows.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k),
                        ta && ta->measured() ? num(ta->median_ms, 6) : "", noise(ta),
                        tb && tb->measured() ? num(tb->median_ms, 6) : "", noise(tb), diff, verdict, mhz(ta), mhz(tb),
                        cycles});
  }
  if (summary) {
    std::ostringstream s;
    s << "B vs A: " << counts["faster"] << " faster, " << counts["slower"] << " slower, " << counts["same"]
      << " same within noise, " << counts["not_comparable"] << " not comparable, " << counts["only_a"] << " only in A, "
      << counts["only_b"] << " only in B";
    if (n_both > 0) s << "; geometric mean time ratio B/A " << num(std::exp(log_sum / n_both), 4) << " over " << n_both << " configs";
    if (n_clocks > 0)
      s << "; clock ratio " << num(std::exp(log_clock / n_clocks), 4) << ", cycle ratio " << num(std::exp(log_cycles / n_clocks), 4)
        << " over the " << n_clocks << " with SM clocks";
    *summary = s.str();
  }
  return out;
}

std::vector<ConvergenceRow> convergence(const std::vector<TrialRow>& trials,
                                        const std::map<std::string, std::string>& strategy_of) {
  using Key = std::tuple<std::string, std::string, std::string>;
  std::map<Key, std::pair<int, std::optional<double>>> state;  // trials seen, best so far
  std::vector<Key> order;
  std::map<Key, std::vector<ConvergenceRow>> rows;
  for (const auto& t : trials) {
    const Key k{t.family, t.stage, t.problem};
    if (!state.count(k)) order.push_back(k);
    auto& [n, best] = state[k];
    ++n;
    bool improved = false;
    if (t.measured() && (!best || *t.median_ms < *best)) {
      best = t.median_ms;
      improved = true;
    }
    const auto s = strategy_of.find(t.family);
    rows[k].push_back({t, s == strategy_of.end() ? "unknown" : s->second, n, best, improved});
  }
  std::vector<ConvergenceRow> out;
  for (const auto& k : order)
    for (auto& r : rows[k]) out.push_back(std::move(r));
  return out;
}

Table convergence_table(const std::vector<ConvergenceRow>& rows) {
  Table out{{"family", "stage", "problem", "strategy", "trial", "config", "status", "median_ms", "best_so_far_ms",
             "improved"},
            {}};
  for (const auto& r : rows) {
    const auto& t = r.trial;
    out.rows.push_back({t.family, t.stage, t.problem, r.strategy, std::to_string(r.index), t.config, t.status,
                        t.measured() ? num(t.median_ms, 6) : "", num(r.best_so_far_ms, 6), r.improved ? "yes" : ""});
  }
  return out;
}

Table config_across_problems(const std::vector<TrialRow>& trials, const std::string& family,
                             const std::string& config_key) {
  const auto wanted = parse_config(config_key);
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<std::optional<TrialRow>, std::optional<TrialRow>>> m;
  for (const auto& t : trials) {
    if (t.family != family || !t.measured()) continue;
    auto& [mine, best] = m[{t.stage, t.problem, t.gpu}];
    if (!best || *t.median_ms < *best->median_ms) best = t;
    if (t.tunables.values == wanted && (!mine || *t.median_ms < *mine->median_ms)) mine = t;
  }
  Table out{{"stage", "problem", "gpu", "median_ms", "tflops", "gbps", "best_median_ms", "best_config", "ratio_to_best"}, {}};
  for (const auto& [k, v] : m) {
    const auto& [mine, best] = v;
    if (!mine) continue;
    out.rows.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), num(mine->median_ms, 6), num(mine->tflops),
                        num(mine->gbps), num(best->median_ms, 6), best->config,
                        num(*mine->median_ms / *best->median_ms, 4)});
  }
  return out;
}

Table problem_configs(const std::vector<TrialRow>& trials, const std::string& family, const std::string& problem_key) {
  std::string want_dtype;
  const auto wanted = parse_dims(problem_key, &want_dtype);
  std::vector<TrialRow> rows;
  for (const auto& t : trials) {
    if (t.family != family) continue;
    if (t.shape.dims != wanted || (!want_dtype.empty() && core::to_string(t.shape.dtype) != want_dtype)) continue;
    rows.push_back(t);
  }
  // Measured first (fastest first), then the rest in trial order.
  std::stable_sort(rows.begin(), rows.end(), [](const TrialRow& x, const TrialRow& y) {
    if (x.measured() != y.measured()) return x.measured();
    return x.measured() && *x.median_ms < *y.median_ms;
  });
  Table out{{"rank", "stage", "gpu", "config", "status", "median_ms", "tflops", "gbps", "max_abs_err", "slowdown", "run_id",
             "trial_id", "reason"},
            {}};
  std::map<std::pair<std::string, std::string>, double> fastest;  // (stage, gpu) -> best median: slowdowns stay per GPU
  for (const auto& t : rows)
    if (t.measured() && !fastest.count({t.stage, t.gpu})) fastest[{t.stage, t.gpu}] = *t.median_ms;
  int rank = 0;
  for (const auto& t : rows) {
    const bool m = t.measured();
    out.rows.push_back({m ? std::to_string(++rank) : "", t.stage, t.gpu, t.config, t.status, m ? num(t.median_ms, 6) : "",
                        num(t.tflops), num(t.gbps), num(t.max_abs_err, 3),
                        m ? num(*t.median_ms / fastest.at({t.stage, t.gpu}), 4) : "", std::to_string(t.run_id),
                        std::to_string(t.trial_id), t.reason});
  }
  return out;
}

}  // namespace flashtune::cli

namespace flashtune::cli {

std::optional<BackwardSum> backward_sum(bool learned_sinks,
                                        const std::function<const TrialRow*(const std::string& family)>& winner) {
  auto measured = [&](const std::string& f) -> const TrialRow* {
    const TrialRow* t = winner(f);
    return t && t->median_ms ? t : nullptr;
  };
  const TrialRow* dsink = learned_sinks ? measured(kernels::attn_bwd::kDsinkStage) : nullptr;
  if (learned_sinks && !dsink) return std::nullopt;
  // The ways to get D, dK, dV and dQ; the fastest one whose stages were all measured is summed.
  std::optional<BackwardSum> best;
  for (const auto& way : kernels::attn_bwd::ways()) {
    BackwardSum sum;
    bool complete = true;
    for (const auto& f : way) {
      const TrialRow* t = measured(f);
      if (!t) {
        complete = false;
        break;
      }
      sum.ms += *t->median_ms;
      sum.peak_bytes = std::max(sum.peak_bytes, t->device_bytes);
      sum.families.push_back(f);
    }
    if (!complete) continue;
    if (dsink) {
      sum.ms += *dsink->median_ms;
      sum.peak_bytes = std::max(sum.peak_bytes, dsink->device_bytes);
      sum.families.push_back(kernels::attn_bwd::kDsinkStage);
    }
    sum.stages = sum.families.size();
    sum.fused = way.back() == kernels::attn_bwd::kFusedStage || way.back() == kernels::attn_bwd::kFusedDeltaStage;
    if (!best || sum.ms < best->ms) best = std::move(sum);
  }
  return best;
}

bool has_learned_sinks(const core::Problem& problem) { return problem.get("learned_sinks", 0) != 0; }

namespace {
// attn_fwd, then every stage of the backward's ways (kernels/attn_bwd_ways.hpp) in their declaration order, then
// dsink: a way declared there gets its stages' columns in `query backward` with no edit here.
const std::vector<std::string>& attention_stages() {
  static const std::vector<std::string> kStages = [] {
    std::vector<std::string> out = {"attn_fwd"};
    for (const auto& way : kernels::attn_bwd::ways())
      for (const auto& f : way)
        if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
    out.push_back(kernels::attn_bwd::kDsinkStage);
    return out;
  }();
  return kStages;
}

// A stage's column label: "preprocess", "dkdv", "dq_delta", ... ("fwd" for attn_fwd).
std::string stage_label(const std::string& f) {
  return f.rfind("attn_bwd_", 0) == 0 ? f.substr(9) : f.substr(f.rfind('_') + 1);
}
}  // namespace

std::map<std::pair<std::string, std::string>, std::map<std::string, TrialRow>> stage_winners(
    const std::vector<TrialRow>& trials) {
  std::map<std::pair<std::string, std::string>, std::map<std::string, TrialRow>> by_problem;  // (problem, gpu)
  const auto& stages = attention_stages();
  for (const auto& t : best_per_problem(trials))
    if (std::find(stages.begin(), stages.end(), t.family) != stages.end()) {
      auto& slot = by_problem[{t.problem, t.gpu}];
      if (!slot.count(t.family) || *t.median_ms < *slot.at(t.family).median_ms) slot.insert_or_assign(t.family, t);
    }
  return by_problem;
}

Table backward_end_to_end(const std::vector<TrialRow>& trials) {
  const auto& kStages = attention_stages();
  const auto by_problem = stage_winners(trials);
  Table out{{"problem", "gpu"}, {}};
  for (const auto& f : kStages) out.columns.push_back(stage_label(f) + "_ms");
  for (const char* c : {"bwd_ms", "fwd_bwd_ms", "fwd_tflops", "bwd_tflops", "fwd_bwd_tflops", "bwd_over_fwd", "configs", "runs"})
    out.columns.push_back(c);
  for (const auto& [key, stage] : by_problem) {
    const bool sinks = has_learned_sinks(stage.begin()->second.shape);  // every winner of the problem has it
    const auto sum = backward_sum(sinks, [&](const std::string& f) { return stage.count(f) ? &stage.at(f) : nullptr; });
    if (!sum) continue;
    const double bwd = sum->ms;
    std::string configs, runs;
    std::set<std::int64_t> run_ids;
    for (const auto& f : kStages) {
      if (!stage.count(f)) continue;
      if (f != "attn_fwd" && std::find(sum->families.begin(), sum->families.end(), f) == sum->families.end())
        continue;  // not summed
      const auto& t = stage.at(f);
      configs += (configs.empty() ? "" : "; ") + stage_label(f) + ": " + t.config;
      run_ids.insert(t.run_id);
    }
    for (const auto id : run_ids) runs += (runs.empty() ? "" : " ") + std::to_string(id);
    auto ms = [&](const char* f) { return stage.count(f) ? num(stage.at(f).median_ms, 5) : ""; };
    std::optional<double> fwd_ms, fwd_flops;
    if (stage.count("attn_fwd")) {
      const auto& f = stage.at("attn_fwd");
      fwd_ms = f.median_ms;
      if (f.tflops) fwd_flops = *f.tflops * *f.median_ms * 1e9;  // TFLOP/s x ms
    }
    auto tflops = [](std::optional<double> flops, std::optional<double> time_ms) -> std::optional<double> {
      if (!flops || !time_ms || *time_ms <= 0) return std::nullopt;
      return *flops / (*time_ms * 1e9);
    };
    const std::optional<double> both = fwd_ms ? std::optional<double>(*fwd_ms + bwd) : std::nullopt;
    std::vector<std::string> row = {key.first, key.second};
    for (const auto& f : kStages)  // dsink's time only where it is part of the sum (learned sinks)
      row.push_back(f == kernels::attn_bwd::kDsinkStage && !sinks ? "" : ms(f.c_str()));
    for (auto& cell : {num(bwd, 5), num(both, 5), num(tflops(fwd_flops, fwd_ms)),
                       num(tflops(fwd_flops ? std::optional<double>(2.5 * *fwd_flops) : std::nullopt, bwd)),
                       num(tflops(fwd_flops ? std::optional<double>(3.5 * *fwd_flops) : std::nullopt, both)),
                       fwd_ms ? num(bwd / *fwd_ms, 3) : std::string(), configs, runs})
      row.push_back(cell);
    out.rows.push_back(std::move(row));
  }
  return out;
}

const std::vector<std::string>& known_peers() {
  static const std::vector<std::string> peers = {"sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex", "fa4"};
  return peers;
}

std::vector<db::PeerRow> latest_peers(const std::vector<db::PeerRow>& peers) {
  const auto& known = known_peers();
  // (problem, gpu, fwd before bwd, known peers in their order and unknown ones after them, name)
  using Key = std::tuple<std::string, std::string, bool, std::size_t, std::string>;
  std::map<Key, db::PeerRow> latest;
  for (const auto& p : peers) {  // in id order: a later one replaces an earlier one
    const auto order = std::size_t(std::find(known.begin(), known.end(), p.peer) - known.begin());
    latest.insert_or_assign(Key{p.problem, p.gpu, p.pass != "fwd", order, p.peer}, p);
  }
  std::vector<db::PeerRow> out;
  for (auto& [k, p] : latest) out.push_back(std::move(p));
  return out;
}

}  // namespace flashtune::cli
