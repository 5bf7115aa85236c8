// harness/experiment/sections.hpp: private to harness/experiment. The readers of an experiment file's sections, each
// checking its map whole (yaml_reader.hpp) and throwing core::UserError at the first mistake: settings.cpp (measure,
// limits, validate, strategy) and study.cpp (one study: its problems, space and constraints).
#pragma once

#include <cstdint>
#include <string>

#include "harness/experiment/experiment.hpp"
#include "harness/experiment/yaml_reader.hpp"

namespace flashtune::experiment::detail {

/// Reads a measure map over `m` (the defaults, or the experiment's settings for a study override).
core::MeasureSettings read_measure(const Ctx& ctx, const YAML::Node& node, const std::string& path,
                                   core::MeasureSettings m);
/// The `limits:` map; keys left out keep Limits' defaults.
Limits read_limits(const Ctx& ctx, const YAML::Node& node, const std::string& path);
/// The `validate:` map; keys left out keep core::ValidateSettings' defaults.
core::ValidateSettings read_validate(const Ctx& ctx, const YAML::Node& node, const std::string& path);
/// A `strategy:` map: a known name, budgets, finalist settings, and that strategy's own options
/// (tuner::strategy_options); an option of another strategy is refused as such.
core::StrategySettings read_strategy(const Ctx& ctx, const YAML::Node& node, const std::string& path);

/// One entry of `studies`: its family (from `catalog`), its problems expanded and checked against `limits`
/// (problems_so_far: the problems of the studies before it), its space, constraints, strategy, and measure
/// (`base_measure` with the study's overrides). A study in which no config satisfies the constraints for any
/// problem is refused.
Study read_study(const Ctx& ctx, const YAML::Node& node, const std::string& path, const FamilyCatalog& catalog,
                 const core::MeasureSettings& base_measure, const Limits& limits, std::int64_t problems_so_far);

}  // namespace flashtune::experiment::detail
