// runtime/configs.hpp: the best configs of an export JSON (`flashtune export --format json`, schema 2) or of a database,
// and the export's lookup rule (cli/export.cpp kLookupRule): among the entries of one family and dtype, an equal
// problem wins, else the nearest by sum |s(a) - s(b)| over dims, s(x) = sign(x) log2(|x| + 1); entries of the
// caller's GPU before any other GPU's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "harness/core/types.hpp"

namespace flashtune::runtime {

/// One exported best config and the evidence it was chosen on.
struct Entry {
  std::string family, stage, gpu;
  core::Problem problem;  ///< dims and dtype as tuned
  core::Config config;
  double median_ms = 0;   ///< [ms] its median on `problem` and `gpu`
  std::size_t index = 0;  ///< position in the file (ties go to the earlier entry)
  bool builtin = false;   ///< one of the runtime's untuned fallbacks (add_builtin_fallbacks), not from the file
  /// Built-in fallbacks only: 0 = kernels for sm_90a (wgmma, TMA; can_run refuses them elsewhere) and the stages any
  /// GPU runs, 1 = the portable mma.sync kernels (sm_80 and newer); lower is tried first.
  int builtin_rank = 0;
  /// Built-in fallbacks only: "" or an expression over the problem's dims in the constraint language
  /// (tuner/constraint.hpp), e.g. "head_dim == 128 && window == 0": the entry is a candidate only where it holds.
  std::string when;
};

/// An entry ranked for a query problem.
struct Candidate {
  const Entry* entry = nullptr;
  double distance = 0;    ///< 0: the exact problem
  bool same_gpu = false;  ///< tuned on the GPU asked about (or no GPU was named)
};

class ConfigTable {
 public:
  /// Parses export JSON text; throws core::UserError naming `origin` and what is wrong.
  static ConfigTable parse(const std::string& json_text, const std::string& origin);
  /// Reads and parses `path`: an export JSON, or a flashtune database (SQLite), whose best configs are read as
  /// `flashtune export --format json` would write them. Throws core::UserError naming the file when it cannot be read
  /// or parsed (a database: also when it cannot be opened read-only or its schema is newer than this build's).
  static ConfigTable load(const std::filesystem::path& path);

  const std::vector<Entry>& entries() const { return m_entries; }
  /// Appends the runtime's untuned fallback configs: the last resort for a shape no tuned entry can run, ranked after
  /// every entry of the file. First the sm_90a ones (the TMA forward and the fused wgmma backward at the configs
  /// tuned for the dense bf16 shapes, head_dim 64 and 128, f16 / bf16), then the portable mma.sync ones (sm_80 and
  /// newer, head_dim 16-128 where can_run allows).
  void add_builtin_fallbacks();
  /// The entries of `family` with the problem's dtype, best first: the file's before the built-in fallbacks, those
  /// of `gpu` ("" = any GPU counts as the same) before the rest, each group by distance to `problem`, ties in file
  /// order; then the built-in fallbacks whose `when` holds for `problem`, by builtin_rank, ties in the order added.
  /// Empty: no such entry.
  std::vector<Candidate> rank(const std::string& family, const core::Problem& problem, const std::string& gpu) const;

  /// The rule's distance between two problems' dims (dtype apart).
  static double distance(const core::Problem& a, const core::Problem& b);

 private:
  std::vector<Entry> m_entries;
};

}  // namespace flashtune::runtime
