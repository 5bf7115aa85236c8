// harness/experiment/experiment.hpp: an experiment file (YAML) loaded into checked values. Every
// mistake a researcher can make in the file is found here, before any work, and reported as one line
// "FILE:LINE:COL: key 'path.to.key': message". The only folder that includes yaml-cpp.
//
// File format (keys are snake_case; unknown keys are errors at every level):
//
//   name: quickstart                 # required, [a-z0-9_-]+ (names the run in the database)
//   description: "..."               # optional, free text
//   arch: sm_90a                     # target for --compile-only without a GPU: sm_80 sm_86 sm_89 sm_90
//                                    #   sm_90a (default sm_90a)
//   measure:                         # optional; every key optional, defaults shown
//     mode: cold                     #   cold: flush L2 before each sample; hot: do not
//     warmup: 3                      #   launches before the first sample (>= 0)
//     warmup_s: 0                    #   [s] kernel time the warm-up lasts at least (>= 0; 0: launches only)
//     min_samples: 10                #   >= 1
//     max_samples: 500               #   >= min_samples
//     noise_target: 0.01             #   stop once stdev/mean < this (> 0)
//     min_time_s: 0.02               #   [s] kernel time before the noise test applies (>= 0)
//     max_time_s: 1.0                #   [s] wall time per trial (> 0, >= min_time_s)
//   limits:                          # optional; what a file may expand to, checked before expanding
//     max_problems: 100000           #   problems of all studies together (after list expansion, >= 1)
//     max_configs: 1000000           #   configs of one study's space (the product of its lists, >= 1)
//   validate:                        # optional
//     enabled: true
//     seed: 0                        #   0: a fresh seed per trial (recorded)
//     atol: 1e-6                     #   >= 0; absent: the family's default
//   studies:                         # required, one or more; one per kernel family (stage)
//     - family: weighted_row_sum     #   required, a built-in family (flashtune list-families)
//       stage: forward               #   optional; must equal the family's stage
//       problems:                    #   required list of maps: the family's dims, and dtype
//         - {rows: [1024, 16384], cols: 4096, dtype: [f32, bf16]}
//                                    #   a list value expands as a cartesian product (here 4
//                                    #   problems, last key fastest); true/false count as 1/0;
//                                    #   dtype defaults to the family's first; duplicates dropped;
//                                    #   required dims are sizes (>= 1); optional dims take any
//                                    #   integer the family's check_problem accepts (sink_bias < 0)
//       space:                       #   optional map tunable -> value or list of values (> 0);
//         block_threads: [128, 256]  #   tunables not named take the family's default values
//         vec: 4                     #   a scalar fixes the tunable
//       constraints:                 #   optional list of expressions (tuner/constraint.hpp syntax,
//         - "block_threads * vec <= 4 * cols"  # variables: tunables, problem dims, dtype_bytes),
//                                    #   added to the family's own; a config must satisfy all
//       strategy: {name: exhaustive, budget_trials: 200, budget_seconds: 0, seed: 1}
//                                    #   optional; names: exhaustive, random, annealing, genetic,
//                                    #   bayes; budgets 0 = none; each learning strategy takes its
//                                    #   own settings (tuner::strategy_options, README), e.g.
//                                    #   {name: bayes, initial: 3, xi: 0.01}; for every strategy:
//                                    #   early_exit: 0 (k > 1: stop a measurement > k x the best),
//                                    #   finalists: 3, finalist_rounds: 5, tie_band: 0.01
//       measure: {max_samples: 100}  #   optional; overrides the top-level measure key by key
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "harness/kernels/family.hpp"
#include "tuner/constraint.hpp"
#include "tuner/space.hpp"

namespace flashtune::experiment {

// One kernel family (stage) tuned over a list of problems.
struct Study {
  std::string family, stage;
  const kernels::KernelFamily* kernel = nullptr;  ///< owned by the catalog the file was loaded with
  std::vector<core::Problem> problems;            ///< expanded, checked, without duplicates, file order
  tuner::SearchSpace space;                       ///< every tunable of the family, in the family's order
  std::vector<std::string> constraints;           ///< the family's, then the study's
  core::StrategySettings strategy;
  core::MeasureSettings measure;                  ///< the experiment's, with this study's overrides
  int line = 0;                                   ///< 1-based line of the study in the file
};

// How far a file may expand (the `limits:` key). A list value multiplies problems (or configs), and YAML
// aliases let a short file name a product of 1e10; past these the loader refuses the file with the line
// and the count, before expanding anything.
struct Limits {
  std::int64_t max_problems = 100000;  ///< problems of every study together
  std::int64_t max_configs = 1000000;  ///< configs of one study's space (before constraints)
};

struct Experiment {
  std::string name, description, arch;
  Limits limits;
  std::string path;       ///< as given to the loader (for messages)
  std::string text_hash;  ///< core::hash_hex of the file text
  core::MeasureSettings measure;
  core::ValidateSettings validate;
  std::vector<Study> studies;
};

// The kernel families a file may name. Tests inject fakes; the CLI uses builtin_catalog().
struct FamilyCatalog {
  std::vector<const kernels::KernelFamily*> families;
  const kernels::KernelFamily* find(const std::string& name) const;  ///< nullptr when unknown
  std::vector<std::string> names() const;                            ///< in catalog order
};

/// kernels::all_families(). Defined only when ft_kernels is part of the build (link it to use this).
FamilyCatalog builtin_catalog();

/// Parses and checks an experiment. `display_path` names the file in messages. Throws core::UserError
/// with one line "FILE:LINE:COL: key 'k': message" for the first mistake found.
Experiment parse_experiment(const std::string& yaml_text, const std::string& display_path,
                            const FamilyCatalog& catalog = builtin_catalog());
/// Reads `path` and parses it; an unreadable file is a core::UserError too.
Experiment load_experiment(const std::filesystem::path& path, const FamilyCatalog& catalog = builtin_catalog());

/// The study's constraints, ready to evaluate.
tuner::ConstraintSet constraint_set(const Study& study);
/// The configs of the study's space that satisfy its constraints on `problem`, in enumeration order.
std::vector<core::Config> candidates(const Study& study, const core::Problem& problem);

}  // namespace flashtune::experiment
