// tests/tuner/warm_start_test.cpp (label cpu): tuner/warm_start: the problem distance, the order history
// predicts (nearest surfaces weigh most, the target's own surface is not history, failures count against a
// config), and the warm-started strategies (seeds first, never a config twice, budgets count the seeds).
#include <gtest/gtest.h>

#include <set>

#include "tuner/warm_start.hpp"

using namespace flashtune;

namespace {

core::Config cfg(std::int64_t x) { return core::Config{{{"x", x}}}; }

core::TrialResult ok(double ms) {
  core::TrialResult r;
  r.status = core::TrialStatus::ok;
  r.timing = core::Timing{};
  r.timing->median_ms = ms;
  return r;
}

core::TrialResult fail() {
  core::TrialResult r;
  r.status = core::TrialStatus::incorrect;
  return r;
}

// A surface over x = 0..9 whose fastest config is `best` (time 1 + |x - best|), recorded for seq = `seq`.
tuner::HistorySurface surface(std::int64_t seq, std::int64_t best, const std::string& dtype = "bf16") {
  tuner::HistorySurface h;
  h.name = "seq=" + std::to_string(seq) + "," + dtype;
  h.dims = {{"seq", seq}, {"causal", 0}};
  h.dtype = dtype;
  for (std::int64_t x = 0; x < 10; ++x) h.results[cfg(x).key()] = ok(1.0 + double(std::abs(x - best)));
  return h;
}

std::vector<core::Config> space() {
  std::vector<core::Config> v;
  for (std::int64_t x = 0; x < 10; ++x) v.push_back(cfg(x));
  return v;
}

}  // namespace

TEST(WarmStart, ProblemDistanceCountsOctavesSwitchesAndDtype) {
  const std::map<std::string, std::int64_t> a{{"seq", 2048}, {"causal", 0}, {"heads", 16}};
  EXPECT_EQ(tuner::problem_distance(a, "bf16", a, "bf16"), 0.0);
  auto b = a;
  b["seq"] = 8192;
  EXPECT_DOUBLE_EQ(tuner::problem_distance(a, "bf16", b, "bf16"), 2.0);
  b["causal"] = 1;
  EXPECT_DOUBLE_EQ(tuner::problem_distance(a, "bf16", b, "bf16"), 3.0);
  EXPECT_DOUBLE_EQ(tuner::problem_distance(a, "bf16", b, "f16"), 7.0);
  auto c = a;
  c.erase("heads");
  EXPECT_DOUBLE_EQ(tuner::problem_distance(a, "bf16", c, "bf16"), 1.0);
}

TEST(WarmStart, TheNearestSurfacesWinnerComesFirst) {
  // Target seq 4096: seq 2048 (best 7) is one octave away, seq 65536 (best 2) four.
  const std::vector<tuner::HistorySurface> history{surface(65536, 2), surface(2048, 7), surface(4096, 0)};
  const auto w = tuner::warm_start(space(), {{"seq", 4096}, {"causal", 0}}, "bf16", history);
  ASSERT_TRUE(w.informed());
  ASSERT_EQ(w.order.size(), 10u);
  EXPECT_EQ(w.order.front().key(), cfg(7).key());
  // The target's own surface (distance 0) is not history; the others are listed nearest first.
  ASSERT_EQ(w.sources.size(), 2u);
  EXPECT_EQ(w.sources[0].name, "seq=2048,bf16");
  EXPECT_EQ(w.sources[0].best, cfg(7).key());
  EXPECT_DOUBLE_EQ(w.sources[0].distance, 1.0);
  EXPECT_DOUBLE_EQ(w.sources[1].distance, 4.0);
  std::set<std::string> keys;
  for (const auto& c : w.order) keys.insert(c.key());
  EXPECT_EQ(keys.size(), 10u);  // every candidate once
}

TEST(WarmStart, AFailureCountsAgainstAConfigAndUnknownConfigsComeLast) {
  auto h = surface(2048, 7);
  h.results[cfg(7).key()] = fail();      // the neighbour's fastest failed here: 3 x its optimum
  h.results.erase(cfg(9).key());         // never measured
  const auto w = tuner::warm_start(space(), {{"seq", 4096}, {"causal", 0}}, "bf16", {h});
  ASSERT_TRUE(w.informed());
  EXPECT_NE(w.order.front().key(), cfg(7).key());
  EXPECT_TRUE(w.order.front().key() == cfg(6).key() || w.order.front().key() == cfg(8).key());
  EXPECT_EQ(w.order.back().key(), cfg(9).key());
}

TEST(WarmStart, NoUsableHistoryLeavesTheOrderAndTheStrategyAlone) {
  auto empty = surface(2048, 3);
  for (auto& [k, r] : empty.results) r = fail();
  const auto w = tuner::warm_start(space(), {{"seq", 4096}, {"causal", 0}}, "bf16", {empty});
  EXPECT_FALSE(w.informed());
  ASSERT_EQ(w.order.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(w.order[i].key(), cfg(std::int64_t(i)).key());
  core::StrategySettings s;
  s.name = "random", s.seed = 5;
  auto cold = tuner::make_strategy(s, space());
  auto warm = tuner::make_warm_strategy(s, space(), w);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(cold->propose()->key(), warm->propose()->key());
}

// A problem whose every config was refused (can_run) has no candidates: with history beside it, the warm start
// is still a cold one (the runner read order.front() of an informed start and crashed: gpu_attn_eager_test).
TEST(WarmStart, NoCandidatesIsNotInformed) {
  const auto w = tuner::warm_start({}, {{"seq", 4096}, {"causal", 0}}, "bf16", {surface(2048, 3)});
  EXPECT_FALSE(w.informed());
  EXPECT_TRUE(w.order.empty());
  EXPECT_TRUE(tuner::warm_start(space(), {{"seq", 4096}, {"causal", 0}}, "bf16", {surface(2048, 3)}).informed());
}

TEST(WarmStart, LearnersProposeTheSeedsFirstNeverTwiceAndWithinTheBudget) {
  const auto w = tuner::warm_start(space(), {{"seq", 4096}, {"causal", 0}}, "bf16", {surface(2048, 7)});
  for (const std::string name : {"random", "annealing", "genetic", "bayes"}) {
    SCOPED_TRACE(name);
    core::StrategySettings s;
    s.name = name, s.seed = 11, s.budget_trials = 8;
    auto strategy = tuner::make_warm_strategy(s, space(), w, 3);
    std::vector<std::string> proposed;
    while (auto c = strategy->propose()) {
      proposed.push_back(c->key());
      strategy->observe(*c, ok(1.0 + double(std::abs(c->at("x") - 6))));
    }
    ASSERT_EQ(proposed.size(), 8u);  // the budget counts the seeds
    EXPECT_EQ(proposed[0], w.order[0].key());
    EXPECT_EQ(proposed[1], w.order[1].key());
    EXPECT_EQ(proposed[2], w.order[2].key());
    EXPECT_EQ(std::set<std::string>(proposed.begin(), proposed.end()).size(), proposed.size());
  }
}

TEST(WarmStart, ExhaustiveRunsTheWholeSpaceInTheWarmOrder) {
  const auto w = tuner::warm_start(space(), {{"seq", 4096}, {"causal", 0}}, "bf16", {surface(2048, 2)});
  core::StrategySettings s;
  s.name = "exhaustive";
  auto strategy = tuner::make_warm_strategy(s, space(), w);
  for (const auto& c : w.order) EXPECT_EQ(strategy->propose()->key(), c.key());
  EXPECT_FALSE(strategy->propose().has_value());
  s.budget_trials = 2;  // a budget keeps the most promising
  auto two = tuner::make_warm_strategy(s, space(), w);
  EXPECT_EQ(two->propose()->key(), cfg(2).key());
  EXPECT_TRUE(two->propose().has_value());
  EXPECT_FALSE(two->propose().has_value());
}

TEST(WarmStart, AModelStartOrdersByCostAndNamesTheModel) {
  const auto candidates = space();
  std::vector<std::optional<double>> costs(candidates.size());
  for (std::size_t i = 0; i < costs.size(); ++i)
    if (i != 4) costs[i] = std::abs(double(i) - 6.5);  // 6 and 7 tie; 4 has no cost
  const auto w = tuner::model_start(candidates, costs, "toy model");
  ASSERT_TRUE(w.informed());
  EXPECT_EQ(w.model, "toy model");
  EXPECT_TRUE(w.sources.empty());
  ASSERT_EQ(w.order.size(), candidates.size());
  EXPECT_EQ(w.order[0], cfg(6));  // ties keep the given order
  EXPECT_EQ(w.order[1], cfg(7));
  EXPECT_EQ(w.order.back(), cfg(4));  // no cost: last

  EXPECT_FALSE(tuner::model_start(candidates, std::vector<std::optional<double>>(candidates.size()), "m").informed());
  EXPECT_FALSE(tuner::model_start(candidates, {1.0}, "m").informed());
}

// Past the seeds a learner keeps the model as its prior (GridStrategy::set_prior): where the genetic algorithm
// would draw its first population at random it takes the model's next best, so with a population of the whole
// space it proposes the model's order; a history warm start gives no prior.
TEST(WarmStart, AModelStartIsTheLearnersPriorAfterTheSeeds) {
  const auto candidates = space();
  std::vector<std::optional<double>> costs(candidates.size());
  for (std::size_t i = 0; i < costs.size(); ++i)
    if (i != 4) costs[i] = (double(i) - 6.3) * (double(i) - 6.3);  // no ties: 6 7 5 8 9 3 2 1 0, then 4
  const auto w = tuner::model_start(candidates, costs, "toy model");
  ASSERT_EQ(w.model_costs.size(), 9u);
  EXPECT_EQ(w.model_costs.at(cfg(6).key()), *costs[6]);
  EXPECT_EQ(w.model_costs.count(cfg(4).key()), 0u);
  EXPECT_TRUE(tuner::warm_start(space(), {{"seq", 4096}, {"causal", 0}}, "bf16", {surface(2048, 7)}).model_costs.empty());
  for (std::uint64_t seed : {1, 2, 3}) {
    core::StrategySettings s;
    s.name = "genetic", s.seed = seed;
    auto strategy = tuner::make_warm_strategy(s, candidates, w, 3);
    for (const auto& c : w.order) {
      const auto p = strategy->propose();
      ASSERT_TRUE(p.has_value());
      EXPECT_EQ(p->key(), c.key()) << "seed " << seed;
      strategy->observe(*p, ok(1.0 + double(std::abs(p->at("x") - 2))));
    }
  }
}
