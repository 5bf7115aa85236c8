// harness/cli/run_printer.hpp: `flashtune run` on the console: progress lines on stderr, and at the end the
// run's counts, each problem's best config and, for a backward experiment, its end-to-end table on stdout.
#pragma once

#include <filesystem>
#include <string>

#include "harness/runner/printer.hpp"
#include "harness/runner/shard.hpp"

namespace flashtune::cli {

class ConsolePrinter : public runner::Printer {
 public:
  /// `experiment` and `db`: whose trials the backward table sums; `shard`: this process's share (named in the
  /// counts line when sharded). quiet: no progress lines, the summary only (`run --quiet`).
  ConsolePrinter(std::string experiment, std::filesystem::path db, runner::Shard shard, bool quiet)
      : m_experiment(std::move(experiment)), m_db(std::move(db)), m_shard(std::move(shard)), m_quiet(quiet) {}
  void progress(const std::string& line) override;
  void summary(const runner::RunSummary& s) override;

 private:
  std::string m_experiment;
  std::filesystem::path m_db;
  runner::Shard m_shard;
  bool m_quiet;
};

}  // namespace flashtune::cli
