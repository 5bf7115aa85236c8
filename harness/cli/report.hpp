// harness/cli/report.hpp: `flashtune report`: PNG plots drawn by gnuplot and one HTML page embedding them
// with the key tables, for one run or every run of one experiment.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "harness/cli/results.hpp"

namespace flashtune::cli {

// Published dense peaks of a GPU (NVIDIA data sheets, SXM parts): [TFLOP/s] and [GB/s].
struct GpuPeaks {
  double f16_tflops = 0, tf32_tflops = 0, f32_tflops = 0, dram_gbps = 0;
};
/// Peaks for a GPU name ("NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"); nullopt unknown.
std::optional<GpuPeaks> gpu_peaks(const std::string& gpu_name);

struct ReportOptions {
  std::filesystem::path out_dir;
  std::string title;      ///< "run 3 (attn_fwd_sweep)"
  std::string gnuplot;    ///< gnuplot executable (found on PATH by the caller)
  bool progress = true;   ///< "[2/6] landscape ..." lines on stderr
  std::vector<db::PeerRow> peers;  ///< peer measurements; those on the trials' attention problems are charted
};

/// Writes out_dir/index.html, out_dir/*.png (and the .dat/.gp files behind them, linked from the page)
/// for `trials`. Returns the PNG file names written. Throws core::UserError when there is nothing to
/// plot, core::Error when gnuplot fails (its message included).
std::vector<std::string> write_report(const std::vector<TrialRow>& trials,
                                      const std::map<std::string, std::string>& strategy_of, const ReportOptions& o);

}  // namespace flashtune::cli
