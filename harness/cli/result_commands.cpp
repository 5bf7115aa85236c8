// harness/cli/result_commands.cpp: the subcommands that read recorded results: query, export, grade, report and
// db merge. Each reads the database read-only (db merge writes only its output) and formats what the results layer
// (ft_results: results.cpp, export.cpp) and grade.cpp / report.cpp compute; errors go up to run_cli.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <boost/program_options.hpp>

#include "db/store.hpp"
#include "harness/cli/commands.hpp"
#include "harness/cli/export.hpp"
#include "harness/cli/grade.hpp"
#include "harness/cli/options.hpp"
#include "harness/cli/peers.hpp"
#include "harness/cli/report.hpp"
#include "harness/cli/results.hpp"
#include "harness/cli/row_tables.hpp"
#include "harness/cli/table.hpp"
#include "harness/core/types.hpp"
#include "harness/experiment/experiment.hpp"

namespace po = boost::program_options;

namespace flashtune::cli {

namespace {

Table to_table(const db::QueryResult& q) { return Table{q.columns, q.rows}; }

std::int64_t run_id_arg(const std::string& what, const std::string& arg) {
  if (arg.empty()) throw core::UserError("query " + what + " needs a run id (flashtune query runs lists them)");
  try {
    std::size_t used = 0;
    const std::int64_t id = std::stoll(arg, &used);
    if (used == arg.size() && id > 0) return id;
  } catch (const std::exception&) {
  }
  throw core::UserError("query " + what + ": '" + arg + "' is not a run id");
}

// The run's strategy per family, read from its experiment file when that file still loads; else none.
std::map<std::string, std::string> strategies_of_run(const std::vector<TrialRow>& trials) {
  std::map<std::string, std::string> out;
  if (trials.empty() || trials.front().experiment_path.empty()) return out;
  try {
    const auto exp = experiment::load_experiment(trials.front().experiment_path);
    for (const auto& s : exp.studies) out.emplace(s.family, s.strategy.name);
  } catch (const std::exception&) {
    // the file moved or changed beyond parsing: the rows say "unknown"
  }
  return out;
}

// Why `query best` found nothing: best ranks only trials with status ok measured to the end on a GPU,
// which a compile-only run (the quick start without a GPU) never records. One line naming the runs.
std::string why_no_best(const db::Store& store, const std::string& family) {
  const auto runs = store.runs();
  if (runs.empty()) return "no measured trials: the database holds no runs yet (flashtune run EXPERIMENT.yaml)";
  std::string line = "no measured trials" + (family.empty() ? std::string() : " of family " + family) + ": ";
  std::size_t shown = 0;
  bool compile_only = false;
  for (const auto& r : runs) {
    if (shown == 4) {
      line += "; ... (" + std::to_string(runs.size() - shown) + " more runs: flashtune query runs)";
      break;
    }
    const std::string id = std::to_string(r.id), trials = std::to_string(r.trials);
    line += (shown++ ? "; " : "") + std::string("run ") + id + " (" + r.experiment + ")";
    if (r.compile_only) {
      compile_only = true;
      line += " was compile-only (" + trials + " trials, " + std::to_string(r.ok) + " compiled, none timed)";
    } else {
      line += " has " + trials + " trials, none ok and measured to the end (flashtune query trials " + id + ")";
    }
  }
  if (compile_only)
    line += ". query best ranks only trials timed on a GPU: run the experiment on a machine with one "
            "(without --compile-only)";
  return line;
}

// The first executable `name` on PATH; "" when none.
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string d; std::getline(dirs, d, ':');) {
    const auto p = std::filesystem::path(d.empty() ? "." : d) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

}  // namespace

int cmd_query(const std::vector<std::string>& args) {
  po::options_description opts("query options");
  std::string what, db, format, family;
  std::vector<std::string> rest;
  opts.add_options()
      ("what", po::value(&what)->required(), "runs | trials | best | compare | convergence | config | problem | backward | peers | sql")
      ("arg", po::value(&rest)->multitoken(), "run id(s), FAMILY and a config or problem key, or a SELECT statement")
      ("db", po::value(&db)->default_value(kDefaultDb), "SQLite database")
      ("family", po::value(&family), "best: only this kernel family")
      ("format", po::value(&format)->default_value("table"), "table | csv | json");
  po::positional_options_description pos;
  pos.add("what", 1).add("arg", -1);
  po::variables_map vm;
  if (!parse(args, opts, pos, vm,
             "flashtune query runs | trials RUN | best | compare RUN_A RUN_B | convergence RUN |\n"
             "                      config FAMILY CONFIG_KEY | problem FAMILY PROBLEM_KEY | backward [EXPERIMENT] |\n"
             "                      peers [EXPERIMENT] |\n"
             "                      sql \"SELECT ...\" [options]",
             "  flashtune query runs\n  flashtune query trials 3 --format csv\n  flashtune query best --family softmax\n"
             "  flashtune query compare 3 5            # run 5 against run 3, config by config, within noise\n"
             "  flashtune query convergence 5 --format csv\n"
             "  flashtune query config attn_fwd block_m=64,block_n=64,num_stages=2,num_warps=4\n"
             "  flashtune query problem softmax cols=4096,rows=16384,dtype=f32\n"
             "  flashtune query backward gpt_oss_backward   # forward, backward stages, sum, TFLOP/s\n"
             "  flashtune query peers gpt_oss_step     # each peer's time beside flashtune's best (flashtune peers)\n"
             "  flashtune query sql \"SELECT status, count(*) FROM trials GROUP BY status\"\n"
             "backward: the end-to-end score of a tuned backward per problem and GPU: the sum of the winners of\n"
             "the fastest of attn_bwd_preprocess + attn_bwd_dkdv + attn_bwd_dq, attn_bwd_preprocess + attn_bwd_fused,\n"
             "attn_bwd_dq_delta + attn_bwd_dkdv and attn_bwd_fused_delta (and attn_bwd_dsink with learned sinks), the\n"
             "attn_fwd winner beside it, forward + backward, and TFLOP/s (backward FLOPs = 2.5 x forward).\n"
             "peers: per problem, GPU, pass and peer, the peer's latest measurement (flashtune peers) beside\n"
             "flashtune's best there (fwd: the attn_fwd winner; bwd: the backward's stage sum as in 'backward');\n"
             "speedup = peer_ms / flashtune_ms (> 1: flashtune is faster); a bwd row without flashtune_ms says in\n"
             "'reason' which backward stages were measured where no whole way was.\n"
             "compare: 'faster'/'slower' when |B - A| / A exceeds sqrt(noise_A^2 + noise_B^2), each noise the\n"
             "trial's relative standard deviation; else 'same'. The summary line goes to stdout after a table,\n"
             "to stderr with --format csv|json.\n"))
    return 0;
  const Format f = parse_format(format);
  const std::string arg = rest.empty() ? "" : rest.front();
  auto need = [&](std::size_t n, const std::string& what_args) {
    if (rest.size() != n) throw core::UserError("query " + what + " needs " + what_args);
  };
  if (!std::filesystem::exists(db)) throw core::UserError("database " + db + " does not exist (run an experiment first)");
  db::Store store(db, db::Store::Access::read_only);
  if (what == "runs") print_table(std::cout, runs_table(store.runs()), f);
  else if (what == "trials") {
    print_table(std::cout, trials_table(store.trials(run_id_arg(what, arg))), f);
  } else if (what == "best") {
    const auto best = store.best(family);
    print_table(std::cout, best_table(best), f);
    if (best.empty()) (f == Format::table ? std::cout : std::cerr) << why_no_best(store, family) << '\n';
  }
  else if (what == "compare") {
    need(2, "two run ids: RUN_A RUN_B");
    const auto a = run_id_arg(what, rest[0]), b = run_id_arg(what, rest[1]);
    const auto ta = store.trials(a), tb = store.trials(b);
    if (ta.empty()) throw core::UserError("query compare: run " + rest[0] + " has no trials");
    if (tb.empty()) throw core::UserError("query compare: run " + rest[1] + " has no trials");
    std::string summary;
    print_table(std::cout, compare_runs(ta, tb, &summary), f);
    (f == Format::table ? std::cout : std::cerr) << "A = run " << a << ", B = run " << b << ". " << summary << '\n';
  } else if (what == "convergence") {
    need(1, "a run id");
    const auto trials = store.trials(run_id_arg(what, arg));
    if (trials.empty()) throw core::UserError("query convergence: run " + arg + " has no trials");
    print_table(std::cout, convergence_table(convergence(trials, strategies_of_run(trials))), f);
  } else if (what == "config" || what == "problem") {
    need(2, std::string("FAMILY and a ") + (what == "config" ? "config key (block_m=64,num_warps=4)" : "problem key (rows=4096,cols=4096,dtype=f32)"));
    const auto trials = store.trials(0, rest[0]);
    if (trials.empty()) throw core::UserError("query " + what + ": no trials of family '" + rest[0] + "'");
    const Table t = what == "config" ? config_across_problems(trials, rest[0], rest[1]) : problem_configs(trials, rest[0], rest[1]);
    if (t.rows.empty()) throw core::UserError("query " + what + ": no trial of " + rest[0] + " matches '" + rest[1] + "'");
    print_table(std::cout, t, f);
  } else if (what == "backward") {
    if (rest.size() > 1) throw core::UserError("query backward takes at most one experiment name");
    auto trials = store.trials();
    if (!arg.empty())
      std::erase_if(trials, [&](const TrialRow& t) { return t.experiment != arg; });
    const Table t = backward_end_to_end(trials);
    if (t.rows.empty())
      throw core::UserError("query backward: no problem" + (arg.empty() ? "" : " of experiment '" + arg + "'") +
                            " has every backward stage measured (attn_bwd_preprocess, attn_bwd_dkdv and attn_bwd_dq, or "
                            "attn_bwd_fused in place of dkdv + dq, or attn_bwd_dq_delta in place of preprocess + dq, or "
                            "attn_bwd_fused_delta alone; and "
                            "attn_bwd_dsink with learned sinks)");
    print_table(std::cout, t, f);
  } else if (what == "peers") {
    if (rest.size() > 1) throw core::UserError("query peers takes at most one experiment name");
    auto peers = store.peer_trials();
    if (!arg.empty()) std::erase_if(peers, [&](const db::PeerRow& p) { return p.experiment != arg; });
    if (peers.empty())
      throw core::UserError("query peers: no peer measurements" + (arg.empty() ? "" : " of experiment '" + arg + "'") +
                            " (flashtune peers EXPERIMENT.yaml records them)");
    print_table(std::cout, peers_table(store.trials(), peers), f);
  } else if (what == "sql") {
    if (arg.empty()) throw core::UserError("query sql needs a SELECT statement");
    print_table(std::cout, to_table(store.sql(arg)), f);
  } else throw core::UserError("unknown query '" + what + "' (runs, trials, best, compare, convergence, config, problem, backward, peers, sql)");
  return 0;
}

int cmd_export(const std::vector<std::string>& args) {
  po::options_description opts("export options");
  std::string db, format, out, family;
  opts.add_options()
      ("format", po::value(&format)->default_value("json"),
       "json | csv | header | course-softmax-matmul | course-attention")
      ("out,o", po::value(&out), "output file (default: standard output; the course formats: the course's path)")
      ("db", po::value(&db)->default_value(kDefaultDb), "SQLite database")
      ("family", po::value(&family), "only this kernel family (json, csv, header)");
  po::variables_map vm;
  if (!parse(args, opts, {}, vm, "flashtune export --format json|csv|header|course-softmax-matmul|course-attention [--out FILE]",
             "  flashtune export --format json --out best.json\n  flashtune export --format csv --family softmax\n"
             "  flashtune export --format header --out flashtune_best_configs.hpp   # constexpr table + lookup()\n"
             "  flashtune export --format course-softmax-matmul   # -> outputs/softmax_matmul_benchmark.csv\n"
             "  flashtune export --format course-attention        # -> outputs/csv/attention_benchmark.csv\n"))
    return 0;
  const bool course = format == "course-softmax-matmul" || format == "course-attention";
  if (format != "json" && format != "csv" && format != "header" && !course)
    throw core::UserError("export --format must be json, csv, header, course-softmax-matmul or course-attention, not '" +
                          format + "'");
  if (!std::filesystem::exists(db)) throw core::UserError("database " + db + " does not exist (run an experiment first)");
  db::Store store(db, db::Store::Access::read_only);
  const auto trials = store.trials(0, course ? "" : family);
  const auto best = best_per_problem(trials);
  std::string text;
  if (format == "json") text = export_json(best);
  else if (format == "csv") text = export_csv(best);
  else if (format == "header") text = export_header(best, db);
  else if (format == "course-softmax-matmul") text = course_softmax_matmul_csv(trials);
  else text = course_attention_csv(trials, store.peer_trials());
  if (out.empty() && course)
    out = format == "course-attention" ? "outputs/csv/attention_benchmark.csv" : "outputs/softmax_matmul_benchmark.csv";
  if (out.empty()) std::cout << text;
  else {
    const std::filesystem::path path(out);
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    std::ofstream f(path);
    if (!(f << text)) throw core::UserError("cannot write " + out);
    if (course) std::cerr << "wrote " << out << '\n';
    else std::cerr << "wrote " << best.size() << " best configs to " << out << '\n';
  }
  return 0;
}

int cmd_grade(const std::vector<std::string>& args) {
  po::options_description opts("grade options");
  std::string db;
  std::int64_t run = 0;
  opts.add_options()
      ("db", po::value(&db)->default_value(kDefaultDb), "SQLite database")
      ("run", po::value(&run)->default_value(0), "only this run's trials (0: every run)");
  po::variables_map vm;
  if (!parse(args, opts, {}, vm, "flashtune grade [--db DB] [--run RUN]",
             "  flashtune run experiments/attention/gstar_forward.yaml && flashtune grade\n"
             "  flashtune grade --db results.sqlite --run 4\n"
             "Exit status 1 when a test case or gradient check failed, 0 otherwise (not-run cases do not fail).\n"))
    return 0;
  if (!std::filesystem::exists(db)) throw core::UserError("database " + db + " does not exist (run an experiment first)");
  db::Store store(db, db::Store::Access::read_only);
  int failed = 0;
  std::cout << gstar_report(store.trials(run), &failed, store.peer_trials());
  return failed > 0 ? 1 : 0;  // like a test runner: a failed case fails the command
}

int cmd_report(const std::vector<std::string>& args) {
  po::options_description opts("report options");
  std::string what, db, out;
  opts.add_options()
      ("what", po::value(&what)->required(), "a run id, or an experiment name (every run of it)")
      ("out,o", po::value(&out)->required(), "output folder (created): index.html, *.png, their data and scripts")
      ("db", po::value(&db)->default_value(kDefaultDb), "SQLite database")
      ("quiet,q", "no progress lines");
  po::positional_options_description pos;
  pos.add("what", 1);
  po::variables_map vm;
  if (!parse(args, opts, pos, vm, "flashtune report RUN|EXPERIMENT --out DIR [--db DB]",
             "  flashtune report 3 --out reports/run3 && xdg-open reports/run3/index.html\n"
             "  flashtune report gstar_benchmark --out reports/gstar   # every run of the experiment\n"))
    return 0;
  const std::string gnuplot = find_on_path("gnuplot");
  if (gnuplot.empty()) throw core::UserError("report needs gnuplot on PATH (Debian: apt-get install gnuplot-nox; tools/install_deps.sh)");
  if (!std::filesystem::exists(db)) throw core::UserError("database " + db + " does not exist (run an experiment first)");
  db::Store store(db, db::Store::Access::read_only);
  std::vector<TrialRow> trials;
  std::string title;
  std::size_t used = 0;
  long long id = 0;
  try { id = std::stoll(what, &used); } catch (const std::exception&) { used = 0; }
  if (used == what.size() && id > 0) {
    trials = store.trials(id);
    if (trials.empty()) throw core::UserError("report: run " + what + " has no trials (flashtune query runs lists them)");
    title = "run " + what + " (" + trials.front().experiment + ")";
  } else {
    for (auto& t : store.trials())
      if (t.experiment == what) trials.push_back(std::move(t));
    if (trials.empty()) throw core::UserError("report: '" + what + "' is neither a run id nor the name of an experiment with trials");
    title = "experiment " + what;
  }
  ReportOptions ro;
  ro.out_dir = out;
  ro.title = title;
  ro.gnuplot = gnuplot;
  ro.progress = vm.count("quiet") == 0;
  ro.peers = store.peer_trials();
  write_report(trials, strategies_of_run(trials), ro);
  return 0;
}

int cmd_db(const std::vector<std::string>& args) {
  po::options_description opts("db options");
  std::string what, out;
  std::vector<std::string> inputs;
  opts.add_options()
      ("what", po::value(&what)->required(), "merge")
      ("inputs", po::value(&inputs)->multitoken(), "databases to merge (read only, never written)")
      ("out,o", po::value(&out), "merge: the database to merge into (created if missing)");
  po::positional_options_description pos;
  pos.add("what", 1).add("inputs", -1);
  po::variables_map vm;
  if (!parse(args, opts, pos, vm, "flashtune db merge A.sqlite B.sqlite ... -o ALL.sqlite",
             "  flashtune db merge shard0.sqlite shard1.sqlite -o all.sqlite\n"
             "  flashtune db merge gpu_a/*.sqlite -o all.sqlite     # again later: adds only what is new\n"
             "\nWhat is merged, and the keys that say two rows are the same: runs (uid), problems and configs\n"
             "(family, key), compiles (cache key) and trials (the resume key: experiment, stage, family, problem,\n"
             "config, kernel source hash, device). A trial already in the output is not added again, so merging\n"
             "the same input twice changes nothing. The inputs are only read.\n"))
    return 0;
  if (what != "merge") throw core::UserError("unknown db command '" + what + "' (merge)");
  if (inputs.empty()) throw core::UserError("db merge needs at least one input database");
  if (out.empty()) throw core::UserError("db merge needs the output database: -o ALL.sqlite");
  // Every input is checked before the output is opened, so a refused merge leaves nothing behind (no
  // empty output file) and an existing output untouched; an output this merge created is removed again
  // if a merge into it fails (each input's merge is one transaction, so an existing one keeps its rows).
  for (const auto& in : inputs) db::Store::check_merge_source(in, out);
  std::error_code ec;
  const bool created = !std::filesystem::exists(out, ec);
  try {
    db::Store store(out);
    for (const auto& in : inputs) {
      const auto n = store.merge_from(in);
      std::cout << in << ": " << n.runs_added << " runs and " << n.trials_added << " trials added, "
                << n.compiles_added << " compiles, " << n.peer_trials_added << " peer measurements; " << n.runs_known << " runs and " << n.trials_known
                << " trials were there already\n";
    }
  } catch (...) {
    if (created)
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(out + suffix, ec);
    throw;
  }
  std::cout << "merged " << inputs.size() << " database(s) into " << out << '\n';
  return 0;
}

}  // namespace flashtune::cli
