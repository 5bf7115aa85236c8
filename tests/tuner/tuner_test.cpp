// tests/tuner/tuner_test.cpp: search-space enumeration, constraints and strategies, on the CPU, with
// synthetic cost surfaces whose optimum is known.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "tuner/constraint.hpp"
#include "tuner/space.hpp"
#include "tuner/strategy.hpp"

namespace ft = flashtune;
using ft::core::Config;
using ft::core::Problem;
using ft::tuner::ConstraintError;
using ft::tuner::ConstraintSet;
using ft::tuner::SearchSpace;

namespace {

SearchSpace small_space() {
  return SearchSpace{{{"block", {64, 128, 256}}, {"vec", {1, 2}}, {"unroll", {1, 4}}}};
}

Config cfg(std::int64_t block, std::int64_t vec) { return Config{{{"block", block}, {"vec", vec}}}; }

Problem row_problem(std::int64_t rows, std::int64_t cols, ft::core::DType dt = ft::core::DType::f32) {
  Problem p;
  p.dims = {{"rows", rows}, {"cols", cols}};
  p.dtype = dt;
  return p;
}

ft::core::TrialResult ok_result(double median_ms) {
  ft::core::TrialResult r;
  r.status = ft::core::TrialStatus::ok;
  r.timing = ft::core::Timing{};
  r.timing->median_ms = median_ms;
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
TEST(SearchSpace, SizeIsTheProductOfValueCounts) {
  EXPECT_EQ(small_space().size(), 12);
  EXPECT_EQ(SearchSpace{}.size(), 1);
  EXPECT_EQ((SearchSpace{{{"a", {1, 2}}, {"b", {}}}}.size()), 0);
}

TEST(SearchSpace, EnumeratesInOdometerOrderLastDimensionFastest) {
  const auto all = ft::tuner::enumerate(small_space());
  ASSERT_EQ(all.size(), 12u);
  EXPECT_EQ(all[0].key(), "block=64,unroll=1,vec=1");
  EXPECT_EQ(all[1].key(), "block=64,unroll=4,vec=1");
  EXPECT_EQ(all[2].key(), "block=64,unroll=1,vec=2");
  EXPECT_EQ(all[3].key(), "block=64,unroll=4,vec=2");
  EXPECT_EQ(all[4].key(), "block=128,unroll=1,vec=1");
  EXPECT_EQ(all[11].key(), "block=256,unroll=4,vec=2");
  std::set<std::string> keys;
  for (const auto& c : all) keys.insert(c.key());
  EXPECT_EQ(keys.size(), 12u);
}

TEST(SearchSpace, PredicateFiltersAndKeepsOrder) {
  const auto kept = ft::tuner::enumerate(small_space(), [](const Config& c) { return c.at("block") * c.at("vec") >= 256; });
  ASSERT_EQ(kept.size(), 6u);  // (128, 2) and (256, 1..2), each with both unroll values
  EXPECT_EQ(kept[0].key(), "block=128,unroll=1,vec=2");
  EXPECT_EQ(kept[1].key(), "block=128,unroll=4,vec=2");
  EXPECT_EQ(kept[2].key(), "block=256,unroll=1,vec=1");
  EXPECT_EQ(kept.back().key(), "block=256,unroll=4,vec=2");
}

TEST(SearchSpace, EmptyDimensionYieldsNoConfigsAndNoDimensionsYieldsOne) {
  EXPECT_TRUE(ft::tuner::enumerate(SearchSpace{{{"a", {1}}, {"b", {}}}}).empty());
  const auto one = ft::tuner::enumerate(SearchSpace{});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one[0].values.empty());
}

TEST(SearchSpace, DuplicateDimensionThrows) {
  EXPECT_THROW(ft::tuner::enumerate(SearchSpace{{{"a", {1}}, {"a", {2}}}}), ft::core::Error);
}

// ---------------------------------------------------------------------------------------------
TEST(ConstraintSet, AllowsConfigThatSatisfiesEveryConstraint) {
  ConstraintSet cs({"block * vec <= cols", "block >= 32 && block <= 1024"}, {"block", "vec", "rows", "cols", "dtype_bytes"});
  EXPECT_FALSE(cs.violated(cfg(256, 4), row_problem(8, 4096)).has_value());
  EXPECT_TRUE(cs.allows(cfg(256, 4), row_problem(8, 4096)));
}

TEST(ConstraintSet, ReturnsTheFirstViolatedExpression) {
  ConstraintSet cs({"block >= 32", "block * vec <= cols", "vec <= 2"}, {"block", "vec", "rows", "cols"});
  EXPECT_EQ(cs.violated(cfg(256, 4), row_problem(8, 512)).value(), "block * vec <= cols");
  EXPECT_EQ(cs.violated(cfg(128, 4), row_problem(8, 512)).value(), "vec <= 2");
  EXPECT_EQ(cs.violated(cfg(16, 1), row_problem(8, 512)).value(), "block >= 32");
}

TEST(ConstraintSet, ParseErrorCarriesExpressionAndPosition) {
  try {
    ConstraintSet cs({"block > 0", "block +* 2"}, {"block"});
    FAIL() << "expected ConstraintError";
  } catch (const ConstraintError& e) {
    EXPECT_EQ(e.expression(), "block +* 2");
    EXPECT_EQ(e.position(), 7);
    EXPECT_NE(std::string(e.what()).find("block +* 2"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find("*"), std::string::npos) << e.message();
  }
  EXPECT_THROW(ConstraintSet({"block *"}, {"block"}), ConstraintError);
  EXPECT_THROW(ConstraintSet({"(block"}, {"block"}), ConstraintError);
}

TEST(ConstraintSet, UnknownVariableIsNamedWithTheKnownOnes) {
  try {
    ConstraintSet cs({"block * warps <= 1024"}, {"block", "vec"});
    FAIL() << "expected ConstraintError";
  } catch (const ConstraintError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown variable 'warps'"), std::string::npos) << what;
    EXPECT_NE(what.find("block, vec"), std::string::npos) << what;
    EXPECT_EQ(e.position(), 8);
  }
  // A ConstraintError is a user error, so the CLI reports it as one line.
  EXPECT_THROW(ConstraintSet({"nope > 1"}, {"block"}), ft::core::UserError);
}

TEST(ConstraintSet, PercentAndModComputeRemainders) {
  ConstraintSet pct({"cols % (block * vec) == 0"}, {"block", "vec", "cols"});
  EXPECT_TRUE(pct.allows(cfg(256, 4), row_problem(1, 4096)));
  EXPECT_EQ(pct.violated(cfg(256, 4), row_problem(1, 4097)).value(), "cols % (block * vec) == 0");
  ConstraintSet fn({"mod(cols, block) == 0"}, {"block", "cols"});
  EXPECT_TRUE(fn.allows(cfg(128, 1), row_problem(1, 384)));
  EXPECT_FALSE(fn.allows(cfg(256, 1), row_problem(1, 384)));
  // % binds like * and /: 2 + 7 % 4 * 2 = 2 + (3 * 2) = 8.
  ConstraintSet prec({"2 + 7 % 4 * 2 == 8"}, {});
  EXPECT_TRUE(prec.allows(Config{}, Problem{}));
}

TEST(ConstraintSet, HelperFunctionsBehave) {
  const std::vector<std::string> vars{"block", "vec", "cols"};
  auto holds = [&](const std::string& expr, std::int64_t block, std::int64_t cols) {
    return ConstraintSet({expr}, vars).allows(cfg(block, 1), row_problem(1, cols));
  };
  EXPECT_TRUE(holds("is_pow2(block)", 256, 1));
  EXPECT_FALSE(holds("is_pow2(block)", 96, 1));
  EXPECT_TRUE(holds("cdiv(cols, block) == 3", 100, 201));
  EXPECT_TRUE(holds("idiv(cols, block) == 2", 100, 299));
  EXPECT_TRUE(holds("divides(block, cols)", 64, 4096));
  EXPECT_FALSE(holds("divides(block, cols)", 96, 4096));
  EXPECT_TRUE(holds("!(block == 3) && min(block, cols) == 64 && max(block, cols, 7) == 100", 64, 100));
  EXPECT_FALSE(holds("block != 64 || cols < 0", 64, 100));
}

// Issue 23: a constraint that divides by zero was accepted (x / 0 = inf > 1) or pruned everything
// (x / 0 < 1, x % 0 == 0 is NaN) without a word. Now it is an error naming the constraint and the config.
TEST(ConstraintSet, DivisionByZeroIsAnErrorNamingConstraintAndConfig) {
  const std::vector<std::string> vars{"block", "vec", "cols"};
  auto error_of = [&](const std::string& expr, std::int64_t block, std::int64_t vec) -> std::string {
    try {
      ConstraintSet({expr}, vars).violated(cfg(block, vec), row_problem(1, 100));
    } catch (const ft::tuner::ConstraintEvalError& e) {
      EXPECT_EQ(e.expression(), expr);
      return e.what();
    }
    return "";
  };
  for (const std::string expr : {"block / 0 > 1", "block / 0 < 1", "block % 0 == 0", "mod(block, 0) == 0",
                                 "idiv(block, 0) > 1", "cdiv(block, 0) > 1", "block / (vec - 1) > 1"}) {
    const std::string msg = error_of(expr, 64, 1);
    EXPECT_NE(msg.find("constraint '" + expr + "' divides by zero"), std::string::npos) << expr << ": " << msg;
    EXPECT_NE(msg.find("block=64,vec=1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cols=100,rows=1"), std::string::npos) << msg;
  }
  EXPECT_NE(error_of("cols / 0 - cols / 0", 64, 1).find("divides by zero"), std::string::npos);  // was: NaN, violated
  EXPECT_NE(error_of("0 / (vec - 1) == 0", 64, 1).find("has no value"), std::string::npos);  // 0 / 0
  // The same constraint is fine where its divisor is not zero, and an earlier constraint may guard it.
  EXPECT_TRUE(ConstraintSet({"block / (vec - 1) > 1"}, vars).allows(cfg(64, 2), row_problem(1, 100)));
  const ConstraintSet guarded({"vec > 1", "block / (vec - 1) > 1"}, vars);
  EXPECT_EQ(guarded.violated(cfg(64, 1), row_problem(1, 100)).value(), "vec > 1");
  EXPECT_TRUE(ConstraintSet({"vec > 1 ? block / (vec - 1) > 1 : 1"}, vars).allows(cfg(64, 1), row_problem(1, 100)));
  EXPECT_THROW(ConstraintSet({"block / 0 > 1"}, vars).violated(cfg(64, 1), row_problem(1, 100)), ft::core::UserError);
}

TEST(ConstraintSet, DtypeBytesFollowsTheProblemDtype) {
  ConstraintSet cs({"block * vec * dtype_bytes <= 2048"}, {"block", "vec", "cols", "dtype_bytes"});
  EXPECT_FALSE(cs.allows(cfg(256, 4), row_problem(1, 64, ft::core::DType::f32)));  // 4096 bytes
  EXPECT_TRUE(cs.allows(cfg(256, 4), row_problem(1, 64, ft::core::DType::bf16)));  // 2048 bytes
  EXPECT_TRUE(cs.allows(cfg(256, 4), row_problem(1, 64, ft::core::DType::f16)));
}

TEST(ConstraintSet, MissingValueAtEvaluationThrows) {
  ConstraintSet cs({"block <= heads"}, {"block", "heads"});
  EXPECT_THROW(cs.violated(cfg(64, 1), row_problem(1, 1)), ft::core::Error);
}

TEST(ConstraintSet, CopiesEvaluateIndependently) {
  ConstraintSet a({"block <= cols"}, {"block", "cols"});
  ConstraintSet b = a;
  ConstraintSet c(std::move(a));
  EXPECT_TRUE(b.allows(cfg(64, 1), row_problem(1, 64)));
  EXPECT_FALSE(b.allows(cfg(128, 1), row_problem(1, 64)));
  EXPECT_FALSE(c.allows(cfg(128, 1), row_problem(1, 64)));
  EXPECT_EQ(b.expressions(), c.expressions());
}

// ---------------------------------------------------------------------------------------------
TEST(Exhaustive, VisitsEveryCandidateOnceInOrder) {
  const auto all = ft::tuner::enumerate(small_space());
  ft::tuner::Exhaustive ex(all);
  std::vector<Config> seen;
  while (auto c = ex.propose()) {
    seen.push_back(*c);
    ex.observe(*c, ok_result(1.0));
  }
  EXPECT_EQ(seen, all);
  EXPECT_FALSE(ex.propose().has_value());
}

TEST(Exhaustive, StopsAtTheTrialBudget) {
  ft::core::StrategySettings s;
  s.budget_trials = 5;
  auto st = ft::tuner::make_strategy(s, ft::tuner::enumerate(small_space()));
  int n = 0;
  while (auto c = st->propose()) {
    st->observe(*c, ok_result(1.0));
    ++n;
  }
  EXPECT_EQ(n, 5);
}

TEST(RandomSearch, IsASeededPermutationWithoutRepeats) {
  const auto all = ft::tuner::enumerate(small_space());
  auto draw = [&](std::uint64_t seed, std::int64_t budget) {
    ft::core::StrategySettings s{"random", budget, 0, seed};
    auto st = ft::tuner::make_strategy(s, all);
    std::vector<std::string> keys;
    while (auto c = st->propose()) keys.push_back(c->key());
    return keys;
  };
  const auto a = draw(7, 0), b = draw(7, 0), c = draw(8, 0);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_EQ(a.size(), all.size());
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), all.size());
  const auto part = draw(7, 4);
  EXPECT_EQ(part, std::vector<std::string>(a.begin(), a.begin() + 4));
}

TEST(Strategy, UnknownNameThrowsUserErrorListingKnownOnes) {
  ft::core::StrategySettings s;
  s.name = "nope";
  try {
    ft::tuner::make_strategy(s, {});
    FAIL() << "expected UserError";
  } catch (const ft::core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("exhaustive"), std::string::npos);
  }
  s.name = "exhaustive";
  s.budget_trials = -1;
  EXPECT_THROW(ft::tuner::make_strategy(s, {}), ft::core::UserError);
}

// A synthetic cost surface with its optimum at block=256, vec=4 (among valid configs), failures and
// constraint-pruned configs around it: exhaustive + Incumbent must find exactly that config.
TEST(Incumbent, ExhaustiveFindsTheKnownOptimumOfASyntheticSurface) {
  SearchSpace space{{{"block", {32, 64, 128, 256, 512, 1024}}, {"vec", {1, 2, 4, 8}}}};
  ConstraintSet cs({"block * vec <= cols"}, {"block", "vec", "cols"});
  const Problem p = row_problem(1024, 2048);
  auto candidates = ft::tuner::enumerate(space, [&](const Config& c) { return cs.allows(c, p); });
  ASSERT_LT(candidates.size(), 24u);  // pruning removed (512,8), (1024,4), (1024,8)
  auto cost = [](const Config& c) {
    const double lb = std::log2(double(c.at("block"))) - 8, lv = std::log2(double(c.at("vec"))) - 2;
    return 1.0 + 0.3 * lb * lb + 0.2 * lv * lv;  // minimum 1.0 at (256, 4)
  };
  auto st = ft::tuner::make_strategy(ft::core::StrategySettings{}, candidates);
  ft::tuner::Incumbent inc;
  EXPECT_FALSE(inc.hopeless(1e9));
  int trials = 0;
  while (auto c = st->propose()) {
    ++trials;
    ft::core::TrialResult r = ok_result(cost(*c));
    if (c->at("block") == 32) r = ft::core::TrialResult{ft::core::TrialStatus::launch_failed, "synthetic", {}, {}, {}, 0, 0};
    if (c->at("block") == 1024 && c->at("vec") == 1) {  // an abandoned trial faster than everything: ignored
      r = ok_result(0.1);
      r.timing->stopped_early = true;
    }
    inc.offer(*c, r);
    st->observe(*c, r);
  }
  EXPECT_EQ(trials, static_cast<int>(candidates.size()));
  ASSERT_TRUE(inc.has_value());
  EXPECT_EQ(inc.config()->key(), "block=256,vec=4");
  EXPECT_DOUBLE_EQ(inc.median_ms().value(), 1.0);
  EXPECT_TRUE(inc.hopeless(1.2, 0.1));
  EXPECT_FALSE(inc.hopeless(1.05, 0.1));
}

TEST(Incumbent, KeepsTheEarlierOfEqualResults) {
  ft::tuner::Incumbent inc;
  EXPECT_TRUE(inc.offer(cfg(1, 1), ok_result(2.0)));
  EXPECT_FALSE(inc.offer(cfg(2, 1), ok_result(2.0)));
  EXPECT_TRUE(inc.offer(cfg(3, 1), ok_result(1.5)));
  EXPECT_FALSE(inc.offer(cfg(4, 1), ft::core::TrialResult{ft::core::TrialStatus::compiled, "", {}, {}, {}, 0, 0}));
  EXPECT_EQ(inc.config()->key(), "block=3,vec=1");
}

// What the runner asks of a strategy before its trials: whether it learns, whether it will propose every candidate
// (so that their compiles can be queued ahead).
TEST(StrategyTraits, LearnersAndWhoProposesEveryCandidate) {
  auto settings = [](const char* name, std::int64_t budget) {
    ft::core::StrategySettings s;
    s.name = name;
    s.budget_trials = budget;
    return s;
  };
  EXPECT_TRUE(ft::tuner::proposes_all(settings("exhaustive", 3), 10));  // a budget only stops it early
  EXPECT_TRUE(ft::tuner::proposes_all(settings("random", 0), 10));
  EXPECT_TRUE(ft::tuner::proposes_all(settings("random", 10), 10));
  EXPECT_FALSE(ft::tuner::proposes_all(settings("random", 9), 10));
  for (const auto& name : ft::tuner::learning_strategy_names()) {
    EXPECT_TRUE(ft::tuner::learns(settings(name.c_str(), 0))) << name;
    EXPECT_FALSE(ft::tuner::proposes_all(settings(name.c_str(), 0), 10)) << name;
  }
  EXPECT_FALSE(ft::tuner::learns(settings("exhaustive", 0)));
  EXPECT_FALSE(ft::tuner::learns(settings("random", 0)));
}
