// harness/runner/printer.hpp: where a run's words go (nvbench's printer_base idea): progress lines while it
// runs and the summary at its end, through one interface, so the console (cli/run_printer.hpp), a quiet mode
// and tests share one path. A printer only formats and writes; it decides nothing about the run.
#pragma once

#include <functional>
#include <string>

namespace flashtune::runner {

struct RunSummary;

class Printer {
 public:
  virtual ~Printer() = default;
  /// One progress line, without its newline: a problem begins, a trial's outcome, a note (warm start,
  /// finalists, a sticky error, a hang).
  virtual void progress(const std::string& line) = 0;
  /// The end of a run whose process goes on (not called for a run a sticky CUDA error ended: the process
  /// restarts and resumes). Default: nothing.
  virtual void summary(const RunSummary&) {}
};

/// `v` in fixed-point notation with `digits` decimals ("3.14"), as every progress line writes numbers.
std::string fixed(double v, int digits);

/// Progress lines to `print` (each one call), or to stderr with a newline when `print` is empty; no summary.
/// What RunOptions::print gives when RunOptions::printer is not set.
class LinePrinter : public Printer {
 public:
  explicit LinePrinter(std::function<void(const std::string&)> print = {}) : m_print(std::move(print)) {}
  void progress(const std::string& line) override;

 private:
  std::function<void(const std::string&)> m_print;
};

}  // namespace flashtune::runner
