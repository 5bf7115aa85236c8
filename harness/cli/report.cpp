// harness/cli/report.cpp: the report: each plot's data file and gnuplot script written (report_plots.cpp makes
// them), gnuplot run on each, and index.html embedding the PNGs with tables (trials by status, peers, best configs).
#include "harness/cli/report.hpp"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "harness/cli/report_plots.hpp"
#include "harness/cli/table.hpp"
#include "harness/core/types.hpp"

namespace flashtune::cli {

namespace fs = std::filesystem;

using detail::convergence_plot;
using detail::landscape_plots;
using detail::perf_plots;
using detail::Plot;
using detail::problem_chart;
using detail::roofline_plot;

namespace {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string sh_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  if (!(f << text)) throw core::UserError("cannot write " + p.string());
}

const char* kTerminal = "set terminal pngcairo size 900,560 noenhanced font 'sans,10'\n";

std::string html_table(const Table& t) {
  std::ostringstream h;
  h << "<table>\n<tr>";
  for (const auto& c : t.columns) h << "<th>" << html_escape(c) << "</th>";
  h << "</tr>\n";
  for (const auto& r : t.rows) {
    h << "<tr>";
    for (const auto& v : r) h << "<td>" << html_escape(v) << "</td>";
    h << "</tr>\n";
  }
  return h.str() + "</table>\n";
}

}  // namespace

std::vector<std::string> write_report(const std::vector<TrialRow>& trials,
                                      const std::map<std::string, std::string>& strategy_of, const ReportOptions& o) {
  if (trials.empty()) throw core::UserError("report: no trials to report on");
  const auto best = best_per_problem(trials);
  fs::create_directories(o.out_dir);
  std::vector<Plot> plots;
  for (auto& p : perf_plots(best)) plots.push_back(std::move(p));
  std::string landscape_of;
  for (auto& p : landscape_plots(trials, &landscape_of)) plots.push_back(std::move(p));
  Table peer_t;
  if (auto p = problem_chart(trials, o.peers, &peer_t)) plots.push_back(std::move(*p));
  if (auto p = convergence_plot(trials, strategy_of)) plots.push_back(std::move(*p));
  if (auto p = roofline_plot(best)) plots.push_back(std::move(*p));
  if (plots.empty())
    throw core::UserError("report: nothing to plot (no measured trials: compile-only runs have no timings)");

  std::vector<std::string> pngs;
  for (std::size_t i = 0; i < plots.size(); ++i) {
    const auto& p = plots[i];
    if (o.progress) std::cerr << "[" << i + 1 << "/" << plots.size() << "] plotting " << p.name << ".png\n";
    write_text(o.out_dir / (p.name + ".dat"), p.data);
    write_text(o.out_dir / (p.name + ".gp"), std::string(kTerminal) + "set output '" + p.name + ".png'\n" + p.script);
    const std::string cmd = "cd " + sh_quote(o.out_dir.string()) + " && " + sh_quote(o.gnuplot) + " " + sh_quote(p.name + ".gp") +
                            " > " + sh_quote(p.name + ".log") + " 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream log(o.out_dir / (p.name + ".log"));
      std::string first;
      std::getline(log, first);
      throw core::Error("gnuplot failed on " + (o.out_dir / (p.name + ".gp")).string() + ": " + first);
    }
    fs::remove(o.out_dir / (p.name + ".log"));
    pngs.push_back(p.name + ".png");
  }

  // Tables on the page: best config per problem, and every trial that did not pass (status and reason).
  Table best_t{{"family", "stage", "problem", "gpu", "config", "median_ms", "TFLOP/s", "GB/s", "max_abs_err", "run", "trial"}, {}};
  for (const auto& b : best)
    best_t.rows.push_back({b.family, b.stage, b.problem, b.gpu, b.config, num(b.median_ms), num(b.tflops, 4), num(b.gbps, 4),
                           num(b.max_abs_err, 3), std::to_string(b.run_id), std::to_string(b.trial_id)});
  std::map<std::string, int> by_status;
  for (const auto& t : trials) ++by_status[t.status];
  Table status_t{{"status", "trials"}, {}};
  for (const auto& [s, n] : by_status) status_t.rows.push_back({s, std::to_string(n)});
  std::ostringstream csv;
  print_table(csv, best_t, Format::csv);
  write_text(o.out_dir / "best.csv", csv.str());

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>flashtune report: "
    << html_escape(o.title) << "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
       "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px}"
       "figure{margin:1em 0}img{max-width:100%}</style>\n</head>\n<body>\n<h1>flashtune report: "
    << html_escape(o.title) << "</h1>\n<p>" << trials.size() << " trials, " << best.size()
    << " problems with a measured best config. Generated by <code>flashtune report</code>; each plot's data and "
       "gnuplot script sit beside it.</p>\n<h2>Trials by status</h2>\n"
    << html_table(status_t);
  for (const auto& p : plots) {
    h << "<h2>" << html_escape(p.name) << "</h2>\n<figure><img src=\"" << p.name << ".png\" alt=\"" << html_escape(p.title)
      << "\"><figcaption>" << html_escape(p.title);
    if (p.name.rfind("landscape", 0) == 0) h << " (" << html_escape(landscape_of) << ")";
    h << " &mdash; <a href=\"" << p.name << ".dat\">data</a>, <a href=\"" << p.name << ".gp\">gnuplot script</a>"
      << "</figcaption></figure>\n";
  }
  if (!peer_t.rows.empty())
    h << "<h2>Peers</h2>\n<p>Other libraries measured on these problems by <code>flashtune peers</code> (same timing "
         "method and pass rule); speedup = peer_ms / flashtune_ms (&gt; 1: flashtune is faster).</p>\n"
      << html_table(peer_t);
  h << "<h2>Best config per problem</h2>\n<p><a href=\"best.csv\">best.csv</a></p>\n" << html_table(best_t)
    << "</body>\n</html>\n";
  write_text(o.out_dir / "index.html", h.str());
  if (o.progress) std::cerr << "wrote " << (o.out_dir / "index.html").string() << " with " << pngs.size() << " plots\n";
  return pngs;
}

}  // namespace flashtune::cli
