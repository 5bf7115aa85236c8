// tests/tuner/learners_test.cpp: the grid, the seeded random draws, the Gaussian process and every
// strategy behind make_strategy on synthetic cost surfaces whose optimum is known: no config proposed
// twice, budgets respected, failures penalized and never proposed again, seeds reproduce a search, and
// the learning strategies find the optimum with a fraction of the space.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "tuner/gp.hpp"
#include "tuner/grid.hpp"
#include "tuner/learners.hpp"
#include "tuner/replay.hpp"
#include "tuner/space.hpp"
#include "tuner/strategy.hpp"

namespace ft = flashtune;
using ft::core::Config;
using ft::core::StrategySettings;
using ft::core::TrialResult;
using ft::core::TrialStatus;

namespace {

TrialResult ok_result(double ms) {
  TrialResult r;
  r.status = TrialStatus::ok;
  r.timing = ft::core::Timing{};
  r.timing->median_ms = ms;
  return r;
}

TrialResult failed_result(TrialStatus s = TrialStatus::launch_failed) {
  TrialResult r;
  r.status = s;
  r.reason = "synthetic failure";
  return r;
}

// 8 x 8 x 4 powers of two, pruned by "a * b <= 4096" (a constraint leaves holes in the grid).
std::vector<Config> bowl_space() {
  ft::tuner::SearchSpace s{{{"a", {1, 2, 4, 8, 16, 32, 64, 128}}, {"b", {1, 2, 4, 8, 16, 32, 64, 128}}, {"c", {1, 2, 4, 8}}}};
  return ft::tuner::enumerate(s, [](const Config& c) { return c.at("a") * c.at("b") <= 4096; });
}

// A bowl in log2 coordinates with its minimum 1.0 at a=16, b=32, c=4, a second, shallower basin at
// a=128, b=2 (1.25 at its bottom), and a failing corner (a >= 64 and b >= 16: "does not fit").
TrialResult bowl(const Config& c) {
  const double a = std::log2(double(c.at("a"))), b = std::log2(double(c.at("b"))), k = std::log2(double(c.at("c")));
  if (a >= 6 && b >= 4) return failed_result(TrialStatus::resource_exceeded);
  const double main = 1.0 + 0.08 * (a - 4) * (a - 4) + 0.05 * (b - 5) * (b - 5) + 0.1 * (k - 2) * (k - 2) +
                      0.02 * (k - 2) + 0.03 * (a - 4) * (b - 5);
  const double second = 1.25 + 0.1 * (a - 7) * (a - 7) + 0.1 * (b - 1) * (b - 1) + 0.1 * (k - 2) * (k - 2);
  return ok_result(std::min(main, second));
}
constexpr const char* kBowlOptimum = "a=16,b=32,c=4";

struct Search {
  std::vector<std::string> keys;  // proposals in order
  double best = INFINITY;
  std::string best_key;
};

Search run(const StrategySettings& s, const std::vector<Config>& space,
           const std::function<TrialResult(const Config&)>& cost) {
  auto st = ft::tuner::make_strategy(s, space);
  Search out;
  while (auto c = st->propose()) {
    out.keys.push_back(c->key());
    const TrialResult r = cost(*c);
    if (r.status == TrialStatus::ok && r.timing->median_ms < out.best) out.best = r.timing->median_ms, out.best_key = c->key();
    st->observe(*c, r);
  }
  return out;
}

StrategySettings settings(const std::string& name, std::int64_t budget = 0, std::uint64_t seed = 1) {
  StrategySettings s;
  s.name = name, s.budget_trials = budget, s.seed = seed;
  return s;
}

class EveryStrategy : public ::testing::TestWithParam<std::string> {};
class LearningStrategy : public ::testing::TestWithParam<std::string> {};

}  // namespace

// ---------------------------------------------------------------------------------------------
TEST(Grid, PlacesConfigsOnSortedValueIndices) {
  const std::vector<Config> cs{Config{{{"x", 64}, {"y", 3}}}, Config{{{"x", 16}, {"y", 1}}}, Config{{{"x", 256}, {"y", 3}}}};
  const ft::tuner::Grid g(cs);
  ASSERT_EQ(g.size(), 3u);
  ASSERT_EQ(g.dims(), 2u);
  EXPECT_EQ(g.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(g.levels(0), (std::vector<std::int64_t>{16, 64, 256}));
  EXPECT_EQ(g.coords(0), (std::vector<int>{1, 1}));
  EXPECT_EQ(g.coords(2), (std::vector<int>{2, 1}));
  EXPECT_DOUBLE_EQ(g.feature(0, 0), 0.5);
  EXPECT_DOUBLE_EQ(g.feature(1, 1), 0.0);
  EXPECT_EQ(g.find(Config{{{"x", 256}, {"y", 3}}}), std::optional<std::size_t>(2));
  EXPECT_FALSE(g.find(Config{{{"x", 16}, {"y", 3}}}).has_value());
  EXPECT_EQ(g.find(std::vector<int>{0, 0}), std::optional<std::size_t>(1));
  EXPECT_FALSE(g.find(std::vector<int>{0, 1}).has_value());  // a hole: not a candidate
  EXPECT_EQ(g.distance(1, {2, 1}), 3);
}

TEST(Grid, RejectsConfigsWithDifferentTunablesOrDuplicates) {
  EXPECT_THROW(ft::tuner::Grid({Config{{{"x", 1}}}, Config{{{"y", 1}}}}), ft::core::Error);
  EXPECT_THROW(ft::tuner::Grid({Config{{{"x", 1}}}, Config{{{"x", 1}, {"y", 2}}}}), ft::core::Error);
  EXPECT_THROW(ft::tuner::Grid({Config{{{"x", 1}}}, Config{{{"x", 1}}}}), ft::core::Error);
  EXPECT_EQ(ft::tuner::Grid({}).size(), 0u);
}

TEST(Rng, IsSeededAndInRange) {
  ft::tuner::Rng a(5), b(5), c(6);
  std::vector<std::size_t> da, db, dc;
  std::set<std::size_t> seen;
  for (int i = 0; i < 200; ++i) {
    da.push_back(a.index(7)), db.push_back(b.index(7)), dc.push_back(c.index(7));
    ASSERT_LT(da.back(), 7u);
    seen.insert(da.back());
    const double u = a.uniform();
    EXPECT_EQ(u, b.uniform());
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
  EXPECT_EQ(seen.size(), 7u);
}

// ---------------------------------------------------------------------------------------------
TEST(GaussianProcess, InterpolatesTrainingPointsAndIsUncertainAwayFromThem) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (double t : {0.0, 0.2, 0.4, 0.6, 1.0}) x.push_back({t}), y.push_back(std::sin(6 * t) + 3);
  ft::tuner::GaussianProcess gp;
  gp.fit(x, y, true);
  for (std::size_t i = 0; i < x.size(); ++i) {
    double mu = 0, sd = 0;
    gp.predict(x[i], mu, sd);
    EXPECT_NEAR(mu, y[i], 0.05) << "at " << x[i][0];
    EXPECT_LT(sd, 0.1);
  }
  double mu_gap = 0, sd_gap = 0, mu_at = 0, sd_at = 0;
  gp.predict({0.8}, mu_gap, sd_gap);  // between 0.6 and 1.0: the widest gap
  gp.predict({0.6}, mu_at, sd_at);
  EXPECT_GT(sd_gap, 3 * sd_at);
  EXPECT_TRUE(std::isfinite(gp.log_marginal_likelihood()));
  EXPECT_THROW(gp.fit({}, {}, false), ft::core::Error);
  EXPECT_THROW(gp.fit({{0.0}, {0.0, 1.0}}, {1, 2}, false), ft::core::Error);
}

TEST(GaussianProcess, ExpectedImprovementMatchesItsClosedForm) {
  EXPECT_NEAR(ft::tuner::expected_improvement(0, 1, 0, 0), 0.3989422804, 1e-9);  // sigma * pdf(0)
  EXPECT_NEAR(ft::tuner::expected_improvement(1, 1e-15, 3, 0), 2.0, 1e-12);     // certain: the gain
  EXPECT_DOUBLE_EQ(ft::tuner::expected_improvement(5, 0, 3, 0), 0.0);
  // Lower mean or higher spread means more expected improvement.
  EXPECT_GT(ft::tuner::expected_improvement(0, 1, 0, 0), ft::tuner::expected_improvement(0.5, 1, 0, 0));
  EXPECT_GT(ft::tuner::expected_improvement(0.5, 2, 0, 0), ft::tuner::expected_improvement(0.5, 1, 0, 0));
  EXPECT_GT(ft::tuner::expected_improvement(0, 1, 0, 0), ft::tuner::expected_improvement(0, 1, 0, 0.5));
}

// ---------------------------------------------------------------------------------------------
TEST(StrategyOptions, EachLearningStrategyDeclaresCheckedSettings) {
  EXPECT_TRUE(ft::tuner::strategy_options("exhaustive").empty());
  EXPECT_TRUE(ft::tuner::strategy_options("random").empty());
  for (const auto& name : ft::tuner::learning_strategy_names()) {
    const auto opts = ft::tuner::strategy_options(name);
    ASSERT_FALSE(opts.empty()) << name;
    for (const auto& o : opts) {
      EXPECT_FALSE(ft::tuner::check_strategy_option(name, o.name, o.fallback).has_value()) << name << "." << o.name;
      EXPECT_TRUE(ft::tuner::check_strategy_option(name, o.name, o.max + 1).has_value()) << name << "." << o.name;
      EXPECT_FALSE(o.doc.empty());
    }
  }
  EXPECT_THROW(ft::tuner::strategy_options("nope"), ft::core::UserError);
  const auto range = ft::tuner::check_strategy_option("annealing", "cooling", 0);
  ASSERT_TRUE(range.has_value());
  EXPECT_NE(range->find("(0, 1]"), std::string::npos) << *range;
  const auto whole = ft::tuner::check_strategy_option("genetic", "population", 7.5);
  ASSERT_TRUE(whole.has_value());
  EXPECT_NE(whole->find("whole number"), std::string::npos) << *whole;
  const auto unknown = ft::tuner::check_strategy_option("bayes", "temperature", 1);
  ASSERT_TRUE(unknown.has_value());
  EXPECT_NE(unknown->find("initial"), std::string::npos) << *unknown;  // lists the known settings
  EXPECT_TRUE(ft::tuner::check_strategy_option("random", "seed2", 1).has_value());
}

TEST(StrategyOptions, MakeStrategyRejectsBadSettingsAndUsesGivenOnes) {
  StrategySettings s = settings("genetic");
  s.options["mutation"] = 2;
  EXPECT_THROW(ft::tuner::make_strategy(s, bowl_space()), ft::core::UserError);
  s.options = {{"temperature", 0.1}};
  EXPECT_THROW(ft::tuner::make_strategy(s, bowl_space()), ft::core::UserError);
  // Settings change the search: a population of the whole space is pure random search.
  StrategySettings a = settings("genetic", 30, 3), b = a;
  b.options["population"] = 1000;
  EXPECT_NE(run(a, bowl_space(), bowl).keys, run(b, bowl_space(), bowl).keys);
  StrategySettings r = settings("random", 30, 3);
  EXPECT_EQ(run(b, bowl_space(), bowl).keys.size(), run(r, bowl_space(), bowl).keys.size());
}

// ---------------------------------------------------------------------------------------------
TEST_P(EveryStrategy, ProposesEveryCandidateExactlyOnceThenStops) {
  const auto space = bowl_space();
  const Search s = run(settings(GetParam()), space, bowl);
  EXPECT_EQ(s.keys.size(), space.size());
  EXPECT_EQ(std::set<std::string>(s.keys.begin(), s.keys.end()).size(), space.size()) << "a config was proposed twice";
  EXPECT_EQ(s.best_key, kBowlOptimum);
}

TEST_P(EveryStrategy, RespectsTheTrialBudget) {
  for (std::int64_t budget : {1, 7, 40}) {
    const Search s = run(settings(GetParam(), budget), bowl_space(), bowl);
    EXPECT_EQ(std::int64_t(s.keys.size()), budget);
  }
  EXPECT_THROW(ft::tuner::make_strategy(settings(GetParam(), -1), bowl_space()), ft::core::UserError);
}

TEST_P(EveryStrategy, SameSeedSameSearch) {
  const auto a = run(settings(GetParam(), 60, 11), bowl_space(), bowl);
  const auto b = run(settings(GetParam(), 60, 11), bowl_space(), bowl);
  EXPECT_EQ(a.keys, b.keys);
  if (GetParam() != "exhaustive") {
    const auto c = run(settings(GetParam(), 60, 12), bowl_space(), bowl);
    EXPECT_NE(a.keys, c.keys);
  }
}

// Every result a failure (or, compile-only, without a time): the strategy still proposes each
// config once and stops, whatever its model would make of it.
TEST_P(EveryStrategy, KeepsProposingDistinctConfigsWhenNothingIsMeasured) {
  const auto space = bowl_space();
  for (TrialStatus st : {TrialStatus::compile_failed, TrialStatus::compiled, TrialStatus::crashed}) {
    const Search s = run(settings(GetParam()), space, [&](const Config&) { return failed_result(st); });
    EXPECT_EQ(s.keys.size(), space.size()) << to_string(st);
    EXPECT_EQ(std::set<std::string>(s.keys.begin(), s.keys.end()).size(), space.size()) << to_string(st);
  }
}

// Parallel workers ask before they tell: proposals in flight are not proposed again.
TEST_P(EveryStrategy, ProposalsInFlightAreNotRepeated) {
  const auto space = bowl_space();
  auto st = ft::tuner::make_strategy(settings(GetParam()), space);
  std::set<std::string> seen;
  std::vector<Config> in_flight;
  while (true) {
    while (in_flight.size() < 4)
      if (auto c = st->propose()) {
        EXPECT_TRUE(seen.insert(c->key()).second) << c->key();
        in_flight.push_back(*c);
      } else {
        break;
      }
    if (in_flight.empty()) break;
    st->observe(in_flight.front(), bowl(in_flight.front()));
    in_flight.erase(in_flight.begin());
  }
  EXPECT_EQ(seen.size(), space.size());
}

INSTANTIATE_TEST_SUITE_P(Tuner, EveryStrategy, ::testing::ValuesIn(ft::tuner::strategy_names()),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------------------------------------
// The learning strategies against the bowl with a quarter of its 220 configs, over 20 seeds: within
// 2 % of the optimum on average, the optimum itself in most searches, and better than the exact
// expectation of random search with the same budget.
TEST_P(LearningStrategy, FindsTheKnownOptimumWithAQuarterOfTheSpace) {
  const auto space = bowl_space();
  ft::tuner::Surface surface;
  surface.name = "bowl";
  surface.configs = space;
  for (const auto& c : space) surface.results.push_back(bowl(c));
  const std::int64_t budget = std::int64_t(space.size()) / 4;
  double found = 0;
  int exact = 0;
  const int seeds = 20;
  for (int seed = 1; seed <= seeds; ++seed) {
    const Search s = run(settings(GetParam(), budget, std::uint64_t(seed)), space, bowl);
    found += s.best / seeds;
    exact += s.best_key == kBowlOptimum;
  }
  const double random_expected = ft::tuner::expected_best_of_random(surface.credited_ms(), budget);
  EXPECT_LT(found, 1.02) << GetParam();
  EXPECT_GE(exact, seeds / 2) << GetParam();
  EXPECT_LT(found, random_expected - 0.5 * (random_expected - 1.0)) << GetParam() << ": not clearly better than random";
}

// Failures are penalized: a search where half the space fails (c = 1 and c = 4)
// proposes each failed config at most once and still finds the best of the rest.
TEST_P(LearningStrategy, NeverReturnsToFailedConfigsAndFindsTheBestValidOne) {
  const auto space = bowl_space();
  auto cost = [](const Config& c) {
    if (c.at("c") == 4 || c.at("c") == 1) return failed_result(TrialStatus::compile_failed);
    return bowl(c);
  };
  std::map<std::string, int> asked;
  auto st = ft::tuner::make_strategy(settings(GetParam(), std::int64_t(space.size()) / 2, 5), space);
  double best = INFINITY;
  std::string best_key;
  while (auto c = st->propose()) {
    EXPECT_EQ(++asked[c->key()], 1) << c->key();
    const TrialResult r = cost(*c);
    if (r.status == TrialStatus::ok && r.timing->median_ms < best) best = r.timing->median_ms, best_key = c->key();
    st->observe(*c, r);
  }
  EXPECT_EQ(best_key, "a=16,b=32,c=2");  // the optimum among valid configs (c = 4 fails)
}

TEST_P(LearningStrategy, ObservedButNotProposedConfigsAreNeverProposed) {
  const auto space = bowl_space();
  auto st = ft::tuner::make_strategy(settings(GetParam()), space);
  // Results known beforehand (a resumed run): the optimum and its neighbours, and a config that is
  // not in the space at all (ignored).
  st->observe(Config{{{"a", 16}, {"b", 32}, {"c", 4}}}, bowl(Config{{{"a", 16}, {"b", 32}, {"c", 4}}}));
  st->observe(Config{{{"a", 16}, {"b", 32}, {"c", 2}}}, failed_result());
  st->observe(Config{{{"a", 3}, {"b", 32}, {"c", 2}}}, ok_result(0.1));
  std::set<std::string> seen;
  while (auto c = st->propose()) {
    EXPECT_NE(c->key(), kBowlOptimum);
    EXPECT_NE(c->key(), "a=16,b=32,c=2");
    EXPECT_TRUE(seen.insert(c->key()).second);
  }
  EXPECT_EQ(seen.size(), space.size() - 2);
}

INSTANTIATE_TEST_SUITE_P(Tuner, LearningStrategy, ::testing::ValuesIn(ft::tuner::learning_strategy_names()),
                         [](const auto& info) { return info.param; });

// A prior as bayes's mean (GridStrategy::set_prior): on a rippled 12 x 12 surface whose log time the prior
// predicts up to a scale (2) and a little noise, bayes fits the scale after its spread-out design and proposes
// the optimum at once; without the prior it needs many more proposals. A prior that orders the space backwards
// fits a scale of 0, a constant mean: bayes searches as without a prior.
TEST(BayesianOptimization, APriorMeanFindsTheOptimumAndABackwardOneIsIgnored) {
  std::vector<Config> space;
  std::map<std::string, double> log_time, prior, backward;
  for (std::int64_t a = 0; a < 12; ++a)
    for (std::int64_t b = 0; b < 12; ++b) {
      space.push_back(Config{{{"a", a}, {"b", b}}});
      const std::string key = space.back().key();
      log_time[key] = 0.01 * double((a - 9) * (a - 9) + (b - 2) * (b - 2)) +
                      0.15 * std::cos(1.7 * double(a)) * std::cos(1.3 * double(b));
      const double noise = 0.02 * double((3 * a + 5 * b) % 7);  // what the prior gets wrong
      prior[key] = std::exp(2 * log_time[key] + noise);
      backward[key] = std::exp(-2 * log_time[key] + noise);
    }
  const auto optimum = std::min_element(log_time.begin(), log_time.end(),
                                        [](const auto& x, const auto& y) { return x.second < y.second; })->first;
  // Proposals until the optimum (the whole search's proposals with `keys`).
  auto search = [&](std::uint64_t seed, const std::map<std::string, double>* p, std::vector<std::string>* keys) {
    ft::tuner::BayesianOptimization bo(space, 0, seed, {});
    if (p) bo.set_prior(*p);
    int n = 0;
    while (auto c = bo.propose()) {
      ++n;
      if (keys) keys->push_back(c->key());
      if (c->key() == optimum && !keys) return n;
      bo.observe(*c, ok_result(std::exp(log_time.at(c->key()))));
      if (keys && keys->size() == 30) break;
    }
    return n;
  };
  double with = 0, without = 0;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    const int w = search(seed, &prior, nullptr), wo = search(seed, nullptr, nullptr);
    EXPECT_LE(w, 5) << "seed " << seed;
    with += w, without += wo;
    std::vector<std::string> plain, back;
    search(seed, nullptr, &plain);
    search(seed, &backward, &back);
    EXPECT_EQ(back, plain) << "seed " << seed;
  }
  EXPECT_GT(without, 3 * with) << "with the prior " << with / 5 << " proposals, without " << without / 5;

  ft::tuner::BayesianOptimization bo(space, 0, 1, {});
  EXPECT_THROW(bo.set_prior({{space[0].key(), 0.0}}), ft::core::Error);
  EXPECT_THROW(bo.set_prior({{space[0].key(), std::nan("")}}), ft::core::Error);
}

TEST(Classify, ReadsTimesFailuresAndResultsWithoutTimes) {
  double ms = 0;
  EXPECT_EQ(ft::tuner::classify(ok_result(2.5), ms), ft::tuner::Outcome::measured);
  EXPECT_DOUBLE_EQ(ms, 2.5);
  TrialResult early = ok_result(9);
  early.timing->stopped_early = true;  // a lower bound on its time: still a time
  EXPECT_EQ(ft::tuner::classify(early, ms), ft::tuner::Outcome::measured);
  TrialResult resumed;
  resumed.status = TrialStatus::ok;  // a resumed trial: status only
  EXPECT_EQ(ft::tuner::classify(resumed, ms), ft::tuner::Outcome::unknown);
  EXPECT_EQ(ft::tuner::classify(failed_result(TrialStatus::compiled), ms), ft::tuner::Outcome::unknown);
  for (TrialStatus s : {TrialStatus::invalid_config, TrialStatus::compile_failed, TrialStatus::resource_exceeded,
                        TrialStatus::launch_failed, TrialStatus::incorrect, TrialStatus::timeout, TrialStatus::crashed})
    EXPECT_EQ(ft::tuner::classify(failed_result(s), ms), ft::tuner::Outcome::failed) << to_string(s);
}
