// harness/cli/replay.cpp: `flashtune replay`, strategies proved offline. The recorded trials of an
// exhaustive run (or a synthetic surface) answer every proposal of a strategy, many seeds over; the
// table says how many evaluations each needed to come within 1 / 3 / 5 % of the optimum and its score
// P against random search at a budget (tuner/replay.hpp). No GPU, no compiler: seconds on a laptop.
#include <boost/program_options.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "db/store.hpp"
#include "harness/kernels/cost_model.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/results.hpp"
#include "harness/cli/table.hpp"
#include "tuner/replay.hpp"
#include "tuner/strategy.hpp"
#include "tuner/synthetic.hpp"

namespace po = boost::program_options;

namespace flashtune::cli {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// The recorded surfaces: one per (family, stage, problem, device, kernel source), each config's latest
// trial, of the trials of run `run_id` (0: every run) that are not compile-only and whose experiment, family and
// problem key are the ones given ("": any).
std::vector<tuner::Surface> load_surfaces(const std::string& db_path, std::int64_t run_id, const std::string& experiment,
                                          const std::string& family, const std::string& problem, const std::string& what) {
  if (!std::filesystem::exists(db_path)) throw core::UserError("database " + db_path + " does not exist");
  db::Store store(db_path, db::Store::Access::read_only);
  using Key = std::tuple<std::string, std::string, std::string, std::string, std::string>;
  std::map<Key, std::map<std::string, std::pair<core::Config, core::TrialResult>>> groups;  // config key -> latest result
  std::map<Key, core::Problem> shapes;
  std::map<Key, std::set<std::string>> runs;
  std::vector<Key> order;
  for (const auto& t : store.trials(run_id, family)) {
    if (t.status == "compiled" || (!experiment.empty() && t.experiment != experiment) ||
        (!problem.empty() && t.problem != problem))
      continue;
    const Key k{t.family, t.stage, t.problem, t.device_key, t.source_hash};
    if (!groups.count(k)) order.push_back(k);
    core::TrialResult r;
    const auto status = core::parse_trial_status(t.status);
    if (!status) throw core::Error("replay: trial with unknown status '" + t.status + "'");
    r.status = *status;
    if (t.median_ms) {
      r.timing = core::Timing{};
      r.timing->median_ms = *t.median_ms;
      r.timing->stopped_early = t.stopped_early;
    }
    groups[k][t.config] = {t.tunables, r};
    shapes[k] = t.shape;
    runs[k].insert(std::to_string(t.run_id));
  }
  std::vector<tuner::Surface> out;
  for (const auto& k : order) {
    tuner::Surface s;
    std::string run_list;
    for (const auto& r : runs[k]) run_list += (run_list.empty() ? "" : ",") + r;
    s.name = std::get<0>(k) + "/" + std::get<1>(k) + " " + std::get<2>(k) + " on " + std::get<3>(k) + " (run " + run_list + ")";
    s.family = std::get<0>(k), s.stage = std::get<1>(k), s.problem = std::get<2>(k), s.device_key = std::get<3>(k);
    s.dims = shapes[k].dims, s.dtype = core::to_string(shapes[k].dtype);
    // The runner proposes only configs that can run on the device (can_run): the others are not trials a
    // search spends, so the surface is the runnable space.
    for (const auto& [key, typed] : groups[k]) {
      const auto& [config, result] = typed;
      if (result.status == core::TrialStatus::invalid_config) continue;
      s.configs.push_back(config);
      s.results.push_back(result);
    }
    if (s.valid() == 0) {
      std::cerr << "skipped " << s.name << ": no trial with a time (compile-only?)\n";
      continue;
    }
    out.push_back(std::move(s));
  }
  if (out.empty()) throw core::UserError("no measured trials found for " + what + " in " + db_path);
  return out;
}

}  // namespace

int cmd_replay(const std::vector<std::string>& args) {
  po::options_description opts("replay options");
  std::string db, experiment, problem, family, synthetic, strategies, format;
  std::vector<std::string> sets;
  std::int64_t run = 0, budget_trials = 0, max_evals = 0;
  int seeds = 20;
  std::uint64_t seed = 1, noise_seed = 1;
  double budget = 0.2;
  opts.add_options()
      ("db", po::value(&db)->default_value("db/flashtune.sqlite"), "SQLite database with the recorded run")
      ("run", po::value(&run), "replay the trials of this run id (flashtune query runs)")
      ("experiment", po::value(&experiment), "replay the trials of every run of this experiment (latest per config)")
      ("family", po::value(&family), "only this kernel family")
      ("problem", po::value(&problem), "only this problem key (as in query trials: \"batch=1,...,dtype=f16\")")
      ("synthetic", po::value(&synthetic), "replay synthetic attention surfaces instead of a database: NAME,... or all")
      ("noise-seed", po::value(&noise_seed)->default_value(1), "noise of the synthetic surfaces")
      ("strategy", po::value(&strategies)->default_value("random,annealing,genetic,bayes"),
       "strategies to replay, comma separated, or all")
      ("set", po::value(&sets)->composing(), "a strategy setting, KEY=VALUE or STRATEGY.KEY=VALUE (repeatable)")
      ("seeds", po::value(&seeds)->default_value(20), "searches per strategy, seeds SEED, SEED+1, ...")
      ("seed", po::value(&seed)->default_value(1), "first seed")
      ("budget", po::value(&budget)->default_value(0.2), "budget for P and the bar, as a fraction of the space")
      ("budget-trials", po::value(&budget_trials), "budget as a number of trials (overrides --budget)")
      ("max-evals", po::value(&max_evals), "evaluations per search at most (default: the whole space)")
      ("warm-start", "start every search from the other replayed surfaces of the same family, stage and GPU "
                     "(leave-one-out: never the surface's own problem), as `flashtune run` does from its database")
      ("no-prior", "replay cold searches from the learners' own first proposals: by default a surface without history "
                   "(no --warm-start) is searched from the analytic cost model's order and with the model as the "
                   "learners' prior (harness/kernels/cost_model.hpp, the default sm_90a device table), as `flashtune "
                   "run` does without history")
      ("bar", "judge the bar per surface: the best learning strategy reaches within 3 % of the optimum in "
              "<= 20 % of the runnable trials (10 % with --warm-start; at least one trial) (mean of >= 20 seeds) and "
              "beats random search at a budget of that size (P > 0); exit status 1 if any surface fails")
      ("format", po::value(&format)->default_value("table"), "table | csv | json")
      ("help,h", "show this help");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: flashtune replay (--run ID | --experiment NAME | --synthetic NAMES) [options]\n\n"
              << opts << "\nexamples:\n"
              << "  flashtune replay --db gpu.sqlite --family attn_fwd --bar        # every recorded attn_fwd surface\n"
              << "  flashtune replay --run 3 --strategy bayes,random --seeds 50 --format csv\n"
              << "  flashtune replay --experiment attn_fwd_exhaustive --problem \"batch=4,...,dtype=f16\"\n"
              << "  flashtune replay --synthetic all --bar\n"
              << "  flashtune replay --db tests/data/tuner_surfaces.sqlite --warm-start --bar   # each with the others as history\n"
              << "  flashtune replay --synthetic attn_fwd_d128 --strategy bayes --set initial=3 --set bayes.xi=0.05\n"
              << "\nsynthetic surfaces: ";
    for (const auto& n : tuner::synthetic_surface_names()) std::cout << n << ' ';
    std::cout << "\nstrategy settings:\n";
    for (const auto& n : tuner::strategy_names())
      for (const auto& o : tuner::strategy_options(n))
        std::cout << "  " << n << "." << o.name << " (default " << o.fallback << "): " << o.doc << '\n';
    return 0;
  }
  po::notify(vm);
  const Format f = parse_format(format);

  // Strategies and their settings, all checked before any work.
  std::vector<std::string> names = strategies == "all" ? tuner::strategy_names() : split(strategies, ',');
  if (names.empty()) throw core::UserError("--strategy: no strategy named");
  std::vector<core::StrategySettings> settings;
  for (const auto& n : names) {
    tuner::strategy_options(n);  // unknown names fail here, listing the known ones
    core::StrategySettings s;
    s.name = n, s.seed = seed;
    settings.push_back(s);
  }
  for (const auto& item : sets) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw core::UserError("--set " + item + ": expected KEY=VALUE");
    std::string key = item.substr(0, eq), only;
    if (const auto dot = key.find('.'); dot != std::string::npos) only = key.substr(0, dot), key = key.substr(dot + 1);
    double value = 0;
    try {
      std::size_t used = 0;
      value = std::stod(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw core::UserError("--set " + item + ": '" + item.substr(eq + 1) + "' is not a number");
    }
    bool used = false;
    for (auto& s : settings) {
      if (!only.empty() && s.name != only) continue;
      const auto opts_of = tuner::strategy_options(s.name);
      const bool has = std::any_of(opts_of.begin(), opts_of.end(), [&](const auto& o) { return o.name == key; });
      if (!has && only.empty()) continue;
      if (auto why = tuner::check_strategy_option(s.name, key, value)) throw core::UserError("--set " + item + ": " + *why);
      s.options[key] = value;
      used = true;
    }
    if (!used) throw core::UserError("--set " + item + ": no replayed strategy has a setting '" + key + "'");
  }
  if (seeds < 1) throw core::UserError("--seeds must be >= 1, got " + std::to_string(seeds));
  if (!(budget > 0 && budget <= 1)) throw core::UserError("--budget must be in (0, 1], got " + fixed(budget, 3));
  const bool warm = vm.count("warm-start") > 0;
  if (warm && !synthetic.empty()) throw core::UserError("--warm-start needs recorded surfaces (a database), not --synthetic");
  const double bar_fraction = warm ? 0.1 : 0.2;
  const bool prior = vm.count("no-prior") == 0;
  const core::DeviceLimits limits;  // the surfaces record the GPU's name, not its limits: the sm_90a table
  if (warm && vm["budget"].defaulted()) budget = bar_fraction;

  std::vector<tuner::Surface> surfaces;
  const int sources = int(vm.count("run")) + int(!experiment.empty()) + int(!synthetic.empty());
  if (sources > 1) throw core::UserError("give one of --run, --experiment and --synthetic");
  if (!synthetic.empty()) {
    for (const auto& n : synthetic == "all" ? tuner::synthetic_surface_names() : split(synthetic, ','))
      surfaces.push_back(tuner::synthetic_surface(n, noise_seed));
  } else {
    std::string what = "all runs";
    if (vm.count("run") && run <= 0) throw core::UserError("replay --run needs a run id (flashtune query runs lists them)");
    if (vm.count("run")) what = "run " + std::to_string(run);
    if (!experiment.empty()) what = "experiment " + experiment;
    if (!family.empty()) what += ", family " + family;
    if (!problem.empty()) what += ", problem " + problem;
    // With --warm-start every surface of the run or experiment is history; --family and --problem pick targets.
    surfaces = load_surfaces(db, vm.count("run") ? run : 0, experiment, warm ? "" : family, warm ? "" : problem, what);
  }
  std::vector<tuner::Surface> history = warm ? surfaces : std::vector<tuner::Surface>{};
  std::erase_if(surfaces, [&](const tuner::Surface& s) {
    return (!family.empty() && s.family != family) || (!problem.empty() && s.problem != problem);
  });
  if (surfaces.empty()) throw core::UserError("no measured trials found for this family / problem in " + db);

  Table t{{"surface", "strategy", "seeds", "configs", "valid", "budget", "optimum_ms", "random_ms", "found_ms",
           "gap_pct", "P", "P_sd", "evals_1pct", "evals_3pct", "evals_5pct", "evals_3pct_of_space",
           "within_3pct_at_budget"},
          {}};
  std::vector<std::string> verdicts;
  bool all_pass = true;
  for (const auto& surface : surfaces) {
    std::vector<tuner::ReplayReport> reports;
    std::optional<tuner::WarmStart> warm_start;
    if (warm) {
      std::vector<tuner::HistorySurface> h;
      for (const auto& other : history) {
        if (other.family != surface.family || other.stage != surface.stage || other.device_key != surface.device_key ||
            other.problem == surface.problem)
          continue;
        tuner::HistorySurface hs{other.problem, other.dims, other.dtype, {}};
        for (std::size_t i = 0; i < other.configs.size(); ++i) hs.results[other.configs[i].key()] = other.results[i];
        h.push_back(std::move(hs));
      }
      warm_start = tuner::warm_start(surface.configs, surface.dims, surface.dtype, h);
      if (!warm_start->informed()) std::cerr << "no history for " << surface.name << ": replayed cold\n";
    }
    // Without history, the analytic cost model orders the first proposals (synthetic surfaces have no problem).
    if (prior && !(warm_start && warm_start->informed()) && !surface.family.empty()) {
      core::Problem p;
      p.dims = surface.dims;
      p.dtype = core::parse_dtype(surface.dtype).value_or(core::DType::f32);
      std::vector<std::optional<double>> costs;
      for (const auto& c : surface.configs) costs.push_back(kernels::estimate_cost(surface.family, c, p, limits));
      warm_start = tuner::model_start(surface.configs, costs, kernels::kCostModelName);
      if (warm_start->informed())
        std::cerr << "cold start from the " << warm_start->model << " for " << surface.name << ": first "
                  << warm_start->order.front().key() << '\n';
    }
    for (const auto& s : settings) {
      tuner::ReplayOptions o;
      if (warm_start && warm_start->informed()) o.warm = warm_start;
      o.strategy = s;
      o.seeds = seeds;
      // At most the fraction: 20 % of 84 configs is 16 trials, not 17.
      o.budget = budget_trials > 0 ? budget_trials
                                   : std::max<std::int64_t>(1, std::int64_t(std::floor(budget * double(surface.configs.size()) + 1e-9)));
      o.max_evals = max_evals;
      const auto r = tuner::replay(surface, o);
      t.rows.push_back({r.surface, r.strategy, std::to_string(r.seeds), std::to_string(r.space), std::to_string(r.valid),
                        std::to_string(r.budget), fixed(r.optimum_ms, 5), fixed(r.random_baseline_ms, 5),
                        fixed(r.found_mean_ms, 5), fixed(100 * r.gap_mean, 2), fixed(r.score, 3), fixed(r.score_stdev, 3),
                        fixed(r.evals_mean[0], 1), fixed(r.evals_mean[1], 1), fixed(r.evals_mean[2], 1),
                        fixed(100 * r.evals_mean[1] / double(r.space), 1) + "%", fixed(100 * r.reached_by_budget[1], 0) + "%"});
      reports.push_back(r);
    }
    if (vm.count("bar")) {
      const auto v = tuner::judge_bar(reports, 0.03, bar_fraction);
      verdicts.push_back(v.line);
      all_pass = all_pass && v.pass;
    }
  }
  print_table(std::cout, t, f);
  // Verdicts go to stderr in csv/json so the data on stdout stays machine-readable.
  for (const auto& line : verdicts) (f == Format::table ? std::cout : std::cerr) << line << '\n';
  return all_pass ? 0 : 1;
}

}  // namespace flashtune::cli
