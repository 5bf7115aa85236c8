// harness/cli/run_printer.cpp: `flashtune run` on the console (run_printer.hpp).
#include "harness/cli/run_printer.hpp"

#include <iostream>
#include <sstream>

#include "db/store.hpp"
#include "harness/cli/results.hpp"
#include "harness/cli/table.hpp"
#include "harness/runner/runner.hpp"

namespace flashtune::cli {

void ConsolePrinter::progress(const std::string& line) {
  if (!m_quiet) std::cerr << line << '\n';
}

void ConsolePrinter::summary(const runner::RunSummary& s) {
  std::cout << "\nrun " << s.run_id << " (" << m_experiment << ") on " << s.device_key << ": " << s.proposed << " configs";
  for (const auto& [status, n] : s.by_status) std::cout << ", " << n << " " << status;
  if (s.resumed) std::cout << ", " << s.resumed << " already recorded";
  if (s.claimed_elsewhere)
    std::cout << ", " << s.claimed_elsewhere << " left to another run of the same experiment on this database";
  if (m_shard.sharded())
    std::cout << "; shard " << m_shard.text() << " (" << m_shard.source << "), " << s.other_shards
              << " configs left to the other shards";
  if (s.pruned_by_constraints) std::cout << "; " << s.pruned_by_constraints << " pruned by constraints";
  if (s.cannot_run) {
    std::cout << "; " << s.cannot_run << " cannot run on the device, not proposed (";
    std::string sep;
    for (const auto& [kind, n] : s.cannot_run_by_reason) std::cout << sep << n << " x " << kind, sep = ", ";
    std::cout << ")";
  }
  std::cout << (s.interrupted ? " (interrupted)" : "") << '\n';
  if (!s.best.empty()) {
    Table t{{"family", "stage", "problem", "best config", "median_us", "GB/s", "of_copy", "TFLOP/s", "max_abs_err"}, {}};
    for (const auto& b : s.best) {
      auto num = [](double v, int prec) { std::ostringstream o; o.setf(std::ios::fixed); o.precision(prec); o << v; return o.str(); };
      t.rows.push_back({b.family, b.stage, b.problem, b.config, num(b.median_ms * 1000, 2), num(b.gbps, 0),
                        s.copy_gbps > 0 ? num(100 * b.gbps / s.copy_gbps, 1) + "%" : "", num(b.tflops, 2),
                        num(b.max_abs_err, 9)});
    }
    std::cout << '\n';
    print_table(std::cout, t, Format::table);
  }
  if (!s.best.empty()) {  // a backward experiment: its end-to-end score over what this experiment recorded here
    auto trials = db::Store(m_db, db::Store::Access::read_only).trials();
    std::erase_if(trials, [&](const TrialRow& t) { return t.experiment != m_experiment; });
    const Table e2e = backward_end_to_end(trials);
    if (!e2e.rows.empty()) {
      std::cout << "\nbackward end to end (sum of the tuned stages; also: flashtune query backward " << m_experiment << "):\n";
      print_table(std::cout, e2e, Format::table);
    }
  }
  if (s.copy_gbps > 0) std::cout << "copy bandwidth (device-to-device, read+write): " << static_cast<long>(s.copy_gbps) << " GB/s\n";
}

}  // namespace flashtune::cli
