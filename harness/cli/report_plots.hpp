// harness/cli/report_plots.hpp: private to harness/cli. The plots of `flashtune report`, each as gnuplot data and
// script (report_plots.cpp); report.cpp runs gnuplot on them and writes the page.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/cli/report.hpp"
#include "harness/cli/table.hpp"

namespace flashtune::cli::detail {

struct Plot {
  std::string name;   // file stem: name.png, name.gp, name.dat
  std::string title;  // caption on the page
  std::string script; // gnuplot commands after the terminal/output lines
  std::string data;   // name.dat
};

/// TFLOP/s (or GB/s) of the best configs (`best`: best_per_problem) against the x dim, one plot per x dim (seq_q for
/// attention, d2 for softmax_matmul, ...), with the GPU's peaks. An x dim with a single value gives no plot.
std::vector<Plot> perf_plots(const std::vector<TrialRow>& best);
/// block_m x block_n heat maps, one per num_warps, of the problem with the most measured configs; `*which` is set
/// to "family on problem". Empty when no measured trial has both tunables.
std::vector<Plot> landscape_plots(const std::vector<TrialRow>& trials, std::string* which);
/// TFLOP/s per attention problem and pass, flashtune's best beside each peer's; `*peer_table` gets the peers table
/// (peers_table) of the peer rows on these problems. nullopt when `trials` hold no attention problem.
std::optional<Plot> problem_chart(const std::vector<TrialRow>& trials, const std::vector<db::PeerRow>& peers, Table* peer_table);
/// Best-so-far median against trial index, up to 8 curves; nullopt when nothing was measured.
std::optional<Plot> convergence_plot(const std::vector<TrialRow>& trials, const std::map<std::string, std::string>& strategy_of);
/// Arithmetic intensity against TFLOP/s of the best configs, under each GPU's roof; nullopt without both rates.
std::optional<Plot> roofline_plot(const std::vector<TrialRow>& best);

}  // namespace flashtune::cli::detail
