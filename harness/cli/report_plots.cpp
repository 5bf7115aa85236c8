// harness/cli/report_plots.cpp: the report's plots as gnuplot data and scripts: performance vs sequence length
// against the naive baseline and the GPU's peaks, the block_m x block_n landscape per warp count, TFLOP/s per
// attention problem and pass beside the peers, convergence per strategy, a roofline.
#include "harness/cli/report_plots.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "harness/cli/peers.hpp"
#include "harness/core/types.hpp"

namespace flashtune::cli {

std::optional<GpuPeaks> gpu_peaks(const std::string& name) {
  // Dense (no sparsity) tensor-core and CUDA-core peaks and HBM bandwidth from NVIDIA's data sheets.
  if (name.find("H200") != std::string::npos) return GpuPeaks{989.4, 494.7, 66.9, 4800};
  if (name.find("H100") != std::string::npos && (name.find("HBM3") != std::string::npos || name.find("SXM") != std::string::npos))
    return GpuPeaks{989.4, 494.7, 66.9, 3350};
  if (name.find("A100") != std::string::npos && name.find("80GB") != std::string::npos) return GpuPeaks{312, 156, 19.5, 2039};
  return std::nullopt;
}

namespace {

bool is_flop_family(const std::string& f) { return f.rfind("attn_", 0) == 0 || f == "softmax_matmul"; }

// The dim a family's performance is plotted against.
std::string x_dim(const std::map<std::string, std::int64_t>& d) {
  for (const char* n : {"seq_q", "d2", "cols", "rows"})
    if (d.count(n)) return n;
  return d.empty() ? "" : d.begin()->first;
}

std::string gp_string(const std::string& s) {  // a gnuplot double-quoted string (the terminal is noenhanced)
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + '"';
}

// "fwd B4 H64/8\nL4096 D64\nbf16 causal w128 sinks": a problem and pass in three short lines (gnuplot reads the \n
// of a double-quoted data string), for a bar chart's axis.
std::string short_problem(const std::string& pass, const core::Problem& problem) {
  const auto& d = problem.dims;
  auto at = [&](const char* n, std::int64_t fb) { const auto it = d.find(n); return it == d.end() ? fb : it->second; };
  std::ostringstream s;
  const auto hq = at("heads_q", 1), hkv = at("heads_kv", hq), sq = at("seq_q", 0), sk = at("seq_k", sq);
  s << pass << " B" << at("batch", 1) << " H" << hq;
  if (hkv != hq) s << "/" << hkv;
  s << "\\nL" << sq;
  if (sk != sq) s << "x" << sk;
  s << " D" << at("head_dim", 0) << "\\n" << core::to_string(problem.dtype);
  if (at("causal", 0)) s << " causal";
  if (at("window", 0) > 0) s << " w" << at("window", 0);
  if (at("sink_tokens", 0) > 0) s << " sink" << at("sink_tokens", 0);
  if (at("learned_sinks", 0)) s << " sinks";
  return s.str();
}
}  // namespace

namespace detail {

// TFLOP/s (or GB/s) of the best config per problem against the x dim (one plot per x dim: seq_q for
// attention, d2 for softmax_matmul, ...), one series per rest-of-problem, with the GPU's peaks.
std::vector<Plot> perf_plots(const std::vector<TrialRow>& best) {
  struct Point {
    std::string family, dtype, gpu;
    std::map<std::string, std::int64_t> rest;
    std::int64_t x;
    double y;
  };
  std::map<std::string, std::vector<Point>> by_x;  // x dim -> points
  for (const auto& b : best) {
    const std::string dtype(core::to_string(b.shape.dtype));
    auto d = b.shape.dims;
    const std::string x = x_dim(d);
    const auto v = is_flop_family(b.family) ? b.tflops : b.gbps;
    if (x.empty() || !v || *v <= 0) continue;
    const std::int64_t xv = d[x];
    d.erase(x);
    if (x == "seq_q") d.erase("seq_k");
    by_x[x].push_back({b.family, dtype, b.gpu, d, xv, *v});
  }
  std::vector<Plot> out;
  for (auto& [xname, pts] : by_x) {
    // Every point at one x is no curve: problem_chart() shows such problems one bar group each.
    if (std::all_of(pts.begin(), pts.end(), [&](const Point& p) { return p.x == pts.front().x; })) continue;
    // Label a series by what differs between series: dims equal everywhere are said once in the caption.
    std::map<std::string, std::set<std::int64_t>> seen;
    for (const auto& p : pts)
      for (const auto& [k, v] : p.rest) seen[k].insert(v);
    std::set<std::string> gpus, families;
    bool flops = false;
    std::map<std::string, std::vector<std::pair<std::int64_t, double>>> series;
    std::string common;
    for (const auto& [k, vs] : seen)
      if (vs.size() == 1) common += (common.empty() ? "" : ", ") + k + "=" + std::to_string(*vs.begin());
    for (const auto& p : pts) {
      std::string label = p.family + " " + p.dtype;
      for (const auto& [k, v] : p.rest)
        if (seen[k].size() > 1) label += " " + k + "=" + std::to_string(v);
      series[label + (p.gpu.empty() ? "" : " @" + p.gpu)].push_back({p.x, p.y});
      gpus.insert(p.gpu);
      flops = flops || is_flop_family(p.family);
    }
    const std::string unit = flops ? "TFLOP/s" : "GB/s";
    Plot p{"perf_vs_" + xname, "", "", ""};
    p.title = unit + " of the best config per problem against " + xname + (common.empty() ? "" : " (" + common + ")") +
              "; attn_naive and attn_eager are the naive baselines; dashed and dotted lines: the GPU's published peaks";
    std::ostringstream data, plot;
    double top = 0;
    int idx = 0;
    plot << "set title " << gp_string(unit + " vs " + xname) << "\nset xlabel " << gp_string(xname) << "\nset ylabel "
         << gp_string(unit) << "\nset logscale x 2\nset logscale y 10\nset grid\nset key outside below\n";
    std::ostringstream lines;
    for (auto& [label, v] : series) {
      std::sort(v.begin(), v.end());
      data << "# " << label << '\n';
      for (const auto& [x, y] : v) data << x << ' ' << y << '\n', top = std::max(top, y);
      data << "\n\n";
      lines << (idx ? ", \\\n     " : "") << "'" << p.name << ".dat' index " << idx << " using 1:2 with linespoints title "
            << gp_string(label);
      ++idx;
    }
    for (const auto& g : gpus) {
      const auto peaks = gpu_peaks(g);
      if (!peaks) continue;
      auto peak = [&](double v, const char* dt, const std::string& what) {
        lines << ", \\\n     " << v << " with lines dt " << dt << " title " << gp_string(g + " " + what);
        top = std::max(top, v);
      };
      if (flops) {
        peak(peaks->f16_tflops, "2", "f16/bf16 tensor peak");
        peak(peaks->tf32_tflops, "3", "tf32 tensor peak");
        peak(peaks->f32_tflops, "4", "f32 peak");
      } else {
        peak(peaks->dram_gbps, "2", "HBM peak");
      }
    }
    plot << "set yrange [*:" << top * 2 << "]\nplot " << lines.str() << "\n";
    p.script = plot.str();
    p.data = data.str();
    out.push_back(std::move(p));
  }
  return out;
}

// Heat maps of block_m x block_n (best TFLOP/s or GB/s over the other tunables), one per num_warps, for
// the problem with the most measured configs among families that have both tunables.
std::vector<Plot> landscape_plots(const std::vector<TrialRow>& trials, std::string* which) {
  std::map<std::pair<std::string, std::string>, int> counts;  // (family, problem) -> measured configs
  for (const auto& t : trials) {
    if (!t.measured()) continue;
    const auto& c = t.tunables.values;
    if (c.count("block_m") && c.count("block_n")) ++counts[{t.family, t.problem}];
  }
  if (counts.empty()) return {};
  const auto top = std::max_element(counts.begin(), counts.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  *which = top.first + " on " + top.second;
  std::map<std::int64_t, std::map<std::pair<std::int64_t, std::int64_t>, double>> grid;  // warps -> (bm, bn) -> best
  std::set<std::int64_t> bms, bns;
  bool flops = is_flop_family(top.first);
  for (const auto& t : trials) {
    if (!t.measured() || t.family != top.first || t.problem != top.second) continue;
    const auto& c = t.tunables.values;
    const auto w = c.count("num_warps") ? c.at("num_warps") : 0;
    const auto v = flops ? t.tflops : t.gbps;
    if (!v) continue;
    auto& cell = grid[w][{c.at("block_m"), c.at("block_n")}];
    cell = std::max(cell, *v);
    bms.insert(c.at("block_m"));
    bns.insert(c.at("block_n"));
  }
  std::vector<Plot> out;
  const std::vector<std::int64_t> xm(bms.begin(), bms.end()), yn(bns.begin(), bns.end());
  for (const auto& [w, cells] : grid) {
    Plot p{"landscape_w" + std::to_string(w), "", "", ""};
    p.title = "tuning landscape, " + std::to_string(w) + " warps: best " + (flops ? "TFLOP/s" : "GB/s") +
              " per block_m x block_n over the other tunables (blank: not measured)";
    std::ostringstream data, s;
    for (std::size_t j = 0; j < yn.size(); ++j) {
      for (std::size_t i = 0; i < xm.size(); ++i) {
        const auto it = cells.find({xm[i], yn[j]});
        data << i << ' ' << j << ' ';
        if (it == cells.end()) data << "NaN";
        else data << it->second;
        data << '\n';
      }
      data << '\n';
    }
    s << "set title " << gp_string(top.first + ", num_warps = " + std::to_string(w)) << "\nset xlabel 'block_m'\n"
      << "set ylabel 'block_n'\nset cblabel " << gp_string(flops ? "TFLOP/s" : "GB/s") << "\nset xtics (";
    for (std::size_t i = 0; i < xm.size(); ++i) s << (i ? ", " : "") << '"' << xm[i] << "\" " << i;
    s << ")\nset ytics (";
    for (std::size_t j = 0; j < yn.size(); ++j) s << (j ? ", " : "") << '"' << yn[j] << "\" " << j;
    s << ")\nset xrange [-0.5:" << xm.size() - 0.5 << "]\nset yrange [-0.5:" << yn.size() - 0.5 << "]\n"
      << "set palette rgb 33,13,10\nplot '" << p.name << ".dat' using 1:2:3 with image notitle, \\\n     '" << p.name
      << ".dat' using 1:2:(strcol(3) eq 'NaN' ? '' : sprintf('%.3g', $3)) with labels notitle\n";  // unmeasured: blank
    p.script = s.str();
    p.data = data.str();
    out.push_back(std::move(p));
  }
  return out;
}

// One bar group per attention problem, GPU and pass (fwd; bwd = the stage sum): flashtune's best TFLOP/s beside each
// peer's (flashtune peers). Problems that share every x value (one seq) get a readable chart here.
std::optional<Plot> problem_chart(const std::vector<TrialRow>& trials, const std::vector<db::PeerRow>& peers, Table* peer_table) {
  const auto best = attention_best(trials);
  if (best.empty()) return std::nullopt;
  struct Group {
    std::string label;
    std::map<std::string, double> tflops;  // series -> TFLOP/s
  };
  std::vector<Group> groups;
  std::vector<std::string> series = {"flashtune"};
  std::map<std::tuple<std::string, std::string, std::string>, std::size_t> index;  // (problem, gpu, pass)
  std::set<std::string> gpus;
  for (const auto& [key, b] : best) gpus.insert(key.second);
  for (const auto& [key, b] : best)
    for (const char* pass : {"fwd", "bwd"}) {
      const auto ms = std::string(pass) == "fwd" ? b.fwd_ms : b.bwd_ms;
      if (!ms) continue;
      index[{key.first, key.second, pass}] = groups.size();
      groups.push_back({short_problem(pass, b.shape) + (gpus.size() > 1 ? " @" + key.second : ""),
                        {{"flashtune", attention_tflops(b.shape, pass, *ms)}}});
    }
  if (groups.empty()) return std::nullopt;  // backward stages measured, but no whole backward (AttentionBest::bwd_missing)
  std::vector<db::PeerRow> shown;
  for (const auto& p : latest_peers(peers)) {
    const auto it = index.find({p.problem, p.gpu, p.pass});
    if (it == index.end()) continue;
    shown.push_back(p);
    if (!p.measured() || !p.tflops) continue;
    if (std::find(series.begin(), series.end(), p.peer) == series.end()) series.push_back(p.peer);
    groups[it->second].tflops[p.peer] = *p.tflops;
  }
  std::stable_sort(series.begin() + 1, series.end(), [](const std::string& a, const std::string& b) {
    const auto& k = known_peers();
    return std::find(k.begin(), k.end(), a) < std::find(k.begin(), k.end(), b);
  });
  *peer_table = peers_table(trials, shown);
  Plot plot{"per_problem", "", "", ""};
  plot.title = "TFLOP/s per attention problem and pass: flashtune's best (fwd: the attn_fwd winner; bwd: the sum of the "
               "backward's stage winners)" + std::string(series.size() > 1 ? " beside each peer measured by flashtune peers" : "") +
               "; FLOPs of visible pairs (bwd 2.5x fwd); a missing bar: not measured or not supported";
  std::ostringstream data, s;
  data << "# label";
  for (const auto& name : series) data << ' ' << name;
  data << '\n';
  for (const auto& g : groups) {
    std::string label = g.label;  // written as is, so that its \n break the line (gp_string would escape them)
    std::replace(label.begin(), label.end(), '"', '\'');
    data << '"' << label << '"';
    for (const auto& name : series) {
      const auto it = g.tflops.find(name);
      if (it == g.tflops.end()) data << " ?";
      else data << ' ' << it->second;
    }
    data << '\n';
  }
  s << "set title 'TFLOP/s per problem and pass'\nset ylabel 'TFLOP/s'\nset style data histograms\n"
       "set style histogram clustered gap 1\nset style fill solid 0.8 border -1\nset boxwidth 0.9\nset grid ytics\n"
       "set datafile missing '?'\nset key outside top center horizontal\nset yrange [0:*]\nset bmargin 5\nplot ";
  for (std::size_t i = 0; i < series.size(); ++i)
    s << (i ? ", \\\n     " : "") << "'per_problem.dat' using " << i + 2 << (i ? "" : ":xtic(1)") << " title "
      << gp_string(series[i]);
  plot.script = s.str() + "\n";
  plot.data = data.str();
  return plot;
}

// Best-so-far median against trial index, one line per (family, problem), titled with the strategy.
std::optional<Plot> convergence_plot(const std::vector<TrialRow>& trials, const std::map<std::string, std::string>& strategy_of) {
  std::map<std::string, std::vector<std::pair<int, double>>> series;
  std::map<std::string, core::Problem> problem_of;  // label -> its problem
  std::vector<std::string> order;
  for (const auto& r : convergence(trials, strategy_of)) {
    if (!r.best_so_far_ms) continue;
    const std::string label = r.strategy + ": " + r.trial.family + " " + r.trial.problem;
    if (!series.count(label)) order.push_back(label), problem_of[label] = r.trial.shape;
    series[label].push_back({r.index, *r.best_so_far_ms});  // written with 6 significant digits, as the table shows it
  }
  if (series.empty()) return std::nullopt;
  // The curves with the most trials say the most about a strategy; more than 8 lines are unreadable.
  std::stable_sort(order.begin(), order.end(), [&](auto& a, auto& b) { return series[a].size() > series[b].size(); });
  if (order.size() > 8) order.resize(8);
  // Short legend titles: strategy, family, and only the problem dims that differ between the curves.
  std::map<std::string, std::map<std::string, std::string>> dims_of;  // label -> dim -> value
  std::map<std::string, std::set<std::string>> values;
  for (const auto& label : order) {
    for (const auto& [k, v] : problem_of[label].dims) dims_of[label][k] = std::to_string(v);
    dims_of[label]["dtype"] = core::to_string(problem_of[label].dtype);
    for (const auto& [k, v] : dims_of[label]) values[k].insert(v);
  }
  std::map<std::string, std::string> legend;
  for (const auto& label : order) {
    std::string t = label.substr(0, label.find(' ', label.find(": ") + 2));
    for (const auto& [k, v] : dims_of[label])
      if (values[k].size() > 1) t += " " + k + "=" + v;
    legend[label] = t;
  }
  Plot p{"convergence", "convergence: best-so-far median [ms] against trial index, per strategy and problem (up to 8 curves)", "", ""};
  std::ostringstream data, s;
  s << "set title 'convergence'\nset xlabel 'trial'\nset ylabel 'best so far [ms]'\nset logscale y 10\nset grid\n"
       "set key outside below\nplot ";
  for (std::size_t i = 0; i < order.size(); ++i) {
    data << "# " << order[i] << '\n';
    for (const auto& [x, y] : series[order[i]]) data << x << ' ' << y << '\n';
    data << "\n\n";
    s << (i ? ", \\\n     " : "") << "'convergence.dat' index " << i << " using 1:2 with steps title " << gp_string(legend[order[i]]);
  }
  p.script = s.str() + "\n";
  p.data = data.str();
  return p;
}

// Roofline: arithmetic intensity (FLOP / byte = 1000 TFLOP/s / GB/s) against TFLOP/s, best configs as
// points, the roof min(peak, intensity x bandwidth) for each GPU (bandwidth: measured copy, else data sheet).
std::optional<Plot> roofline_plot(const std::vector<TrialRow>& best) {
  std::map<std::string, std::vector<std::pair<double, double>>> pts;
  std::map<std::string, double> bandwidth;
  for (const auto& b : best) {
    if (!b.tflops || !b.gbps || *b.tflops <= 0 || *b.gbps <= 0) continue;
    pts[b.family + " @" + b.gpu].push_back({1000 * *b.tflops / *b.gbps, *b.tflops});
    const auto peaks = gpu_peaks(b.gpu);
    if (b.copy_gbps && *b.copy_gbps > 0) bandwidth[b.gpu] = *b.copy_gbps;
    else if (peaks) bandwidth.emplace(b.gpu, peaks->dram_gbps);
  }
  if (pts.empty()) return std::nullopt;
  Plot p{"roofline", "roofline: TFLOP/s against arithmetic intensity of the best configs; roofs: f16 tensor peak and "
                     "memory bandwidth (measured copy bandwidth when recorded, else the data sheet)", "", ""};
  std::ostringstream data, s;
  s << "set title 'roofline'\nset xlabel 'arithmetic intensity [FLOP/byte]'\nset ylabel 'TFLOP/s'\nset logscale xy 10\n"
       "set grid\nset key outside right top vertical\nset samples 400\n";
  // Ranges that show the points and the ridge point (peak / bandwidth) of every roof.
  double x_lo = 1e300, x_hi = 0, y_lo = 1e300, y_hi = 0;
  for (const auto& [label, v] : pts)
    for (const auto& [x, y] : v) x_lo = std::min(x_lo, x), x_hi = std::max(x_hi, x), y_lo = std::min(y_lo, y), y_hi = std::max(y_hi, y);
  for (const auto& [gpu, bw] : bandwidth)
    if (const auto peaks = gpu_peaks(gpu)) x_hi = std::max(x_hi, 1000 * peaks->f16_tflops / bw), y_hi = std::max(y_hi, peaks->f16_tflops);
  s << "set xrange [" << x_lo / 10 << ":" << x_hi * 10 << "]\nset yrange [" << y_lo / 10 << ":" << y_hi * 2 << "]\n";
  s << "plot ";
  int i = 0;
  for (const auto& [label, v] : pts) {
    data << "# " << label << '\n';
    for (const auto& [x, y] : v) data << x << ' ' << y << '\n';
    data << "\n\n";
    s << (i ? ", \\\n     " : "") << "'roofline.dat' index " << i << " using 1:2 with points pt 7 title " << gp_string(label);
    ++i;
  }
  for (const auto& [gpu, bw] : bandwidth) {
    const auto peaks = gpu_peaks(gpu);
    const double peak = peaks ? peaks->f16_tflops : 0;
    if (peak > 0)
      s << ", \\\n     (x * " << bw << " / 1000 < " << peak << " ? x * " << bw << " / 1000 : " << peak
        << ") with lines dt 2 title " << gp_string(gpu + " roof");
    else
      s << ", \\\n     x * " << bw << " / 1000 with lines dt 2 title " << gp_string(gpu + " bandwidth roof");
  }
  p.script = s.str() + "\n";
  p.data = data.str();
  return p;
}
}  // namespace detail

}  // namespace flashtune::cli
