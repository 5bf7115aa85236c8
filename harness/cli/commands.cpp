// harness/cli/commands.cpp: subcommands of the flashtune CLI, parsed with Boost.Program_options.
// Only this file turns errors into exit codes and messages.
#include "harness/cli/commands.hpp"

#include <unistd.h>

#include <algorithm>

#include <cstring>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "harness/cli/export.hpp"
#include "harness/cli/grade.hpp"
#include "harness/cli/peers.hpp"
#include "harness/cli/report.hpp"
#include "harness/cli/results.hpp"
#include "harness/cli/row_tables.hpp"
#include "harness/cli/run_printer.hpp"
#include "harness/cli/table.hpp"
#include "harness/core/types.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/kernels/family.hpp"
#include "harness/kernels/operation.hpp"
#include "harness/runner/runner.hpp"
#include "harness/runner/supervisor.hpp"

namespace po = boost::program_options;

namespace flashtune::cli {
namespace {

constexpr const char* kDefaultDb = "db/flashtune.sqlite";

const char* kUsage = R"(flashtune: research harness and autotuner for Flash Attention kernels

usage: flashtune <command> [options]      (flashtune <command> --help for each)

commands:
  run EXPERIMENT.yaml   tune and measure the experiment's kernels, record every trial
  devices               list the GPUs the driver sees (and why none, if none)
  kernels [FAMILY]      list kernel families (operations), their tunables, constraints and variants
  query WHAT            runs | trials RUN | best | compare A B | convergence RUN | config | problem | backward |
                        peers | sql
  export                best configs per problem and GPU (JSON, CSV, C++ header); the course's CSVs
  report RUN|EXP --out DIR   PNG plots (gnuplot) and an HTML page of a run or an experiment
  grade                 the GStar grader's report (pass/fail per test case, benchmark vs naive) from the db
  db merge A B ... -o C merge databases (shards, machines) without duplicating runs or trials
  peers EXPERIMENT.yaml measure PyTorch SDPA, FlexAttention, FlashAttention-4 on its attention problems (Python)
  replay                replay strategies offline against a recorded exhaustive run (or a synthetic one)
)";

std::vector<int> parse_devices(const std::string& text) {
  const std::string bad = "--devices '" + text + "': expected GPU ordinals separated by commas, e.g. 0,1";
  std::vector<int> out;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int d = -1;
    try {
      d = std::stoi(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || d < 0) throw core::UserError(bad);
    if (std::find(out.begin(), out.end(), d) != out.end())
      throw core::UserError("--devices '" + text + "': GPU " + std::to_string(d) + " named twice");
    out.push_back(d);
  }
  if (out.empty()) throw core::UserError(bad);
  return out;
}

std::string joined_command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

// Parses a subcommand's options; prints help (with examples) and returns false when --help was given.
bool parse(const std::vector<std::string>& args, po::options_description& opts,
           const po::positional_options_description& pos, po::variables_map& vm, const std::string& usage,
           const std::string& examples) {
  opts.add_options()("help,h", "show this help");
  po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: " << usage << "\n\n" << opts << "\nexamples:\n" << examples;
    return false;
  }
  po::notify(vm);
  return true;
}

int cmd_run(const std::vector<std::string>& args, const std::string& command_line) {
  po::options_description opts("run options");
  std::string experiment_path, db, arch, templates, cache, shard, devices;
  int device = 0, compile_threads = 0;
  opts.add_options()
      ("experiment", po::value(&experiment_path)->required(), "experiment YAML file")
      ("db", po::value(&db)->default_value(kDefaultDb), "SQLite database (created if missing)")
      ("device", po::value(&device)->default_value(0), "GPU ordinal")
      ("devices", po::value(&devices),
       "GPU ordinals, e.g. 0,1: one worker process per GPU, each taking a shard of the work (see --shard) "
       "into the same database; GPUs of different models are refused")
      ("allow-mixed-gpus", "with --devices: run on GPUs of different models anyway")
      ("compile-only", "check, enumerate and compile every config without launching (automatic without a GPU)")
      ("arch", po::value(&arch), "compile-only target (sm_80, sm_86, sm_89, sm_90, sm_90a); default: the experiment's")
      ("templates", po::value(&templates), "folder whose .cuh files override the embedded kernel templates")
      ("cache", po::value(&cache), "CUBIN cache folder (default $FLASHTUNE_CACHE_DIR or ~/.cache/flashtune)")
      ("no-cache", "compile every config afresh")
      ("compile-threads", po::value(&compile_threads)->default_value(0),
       "threads that compile an exhaustive search's configs ahead of the GPU (0: all cores but one; -1: none, "
       "each config compiled when its turn comes)")
      ("shard", po::value(&shard),
       "I/N: run only shard I (from 0) of N of the work. Units: each (problem, config) for the exhaustive and "
       "random strategies (the shards together run exactly the configs of one unsharded run), each (study, "
       "problem) for the learning ones (annealing, genetic, bayes). Absent: from the environment of Open MPI "
       "(OMPI_COMM_WORLD_RANK/SIZE), PMI (PMI_RANK/SIZE), a Slurm array (SLURM_ARRAY_TASK_ID with "
       "SLURM_ARRAY_TASK_COUNT or _MIN/_MAX) or Slurm tasks (SLURM_PROCID/SLURM_NTASKS); 0/1 turns it off. "
       "Join the shards' databases with flashtune db merge")
      ("no-warm-start", "start every search cold: by default a search begins from the configs that won on the "
                        "nearest problems of the same family, stage and GPU measured in the database (recorded in "
                        "its warm_starts table)")
      ("no-prior", "without history, start a learning search from its own random or spread-out proposals instead "
                   "of the analytic cost model's order, and without the model as its prior (bayes's mean; "
                   "harness/kernels/cost_model.hpp; recorded in warm_starts)")
      ("verbose,v", "also print each trial's registers, spills and compile time")
      ("quiet,q", "no progress lines: only the summary at the end");
  po::positional_options_description pos;
  pos.add("experiment", 1);
  po::variables_map vm;
  if (!parse(args, opts, pos, vm, "flashtune run EXPERIMENT.yaml [options]",
             "  flashtune run experiments/quickstart.yaml\n"
             "  flashtune run experiments/rows_16k_4k.yaml --db results.sqlite --device 1\n"
             "  flashtune run experiments/quickstart.yaml --compile-only --arch sm_80\n"
             "  flashtune run experiments/quickstart.yaml --templates my_kernels/   # edited kernels, no rebuild\n"
             "  flashtune run experiments/quickstart.yaml --shard 1/4 --db shard1.sqlite   # the second of 4 shares\n"
             "  mpirun -n 4 sh -c 'exec flashtune run experiments/quickstart.yaml --db shard$OMPI_COMM_WORLD_RANK.sqlite'\n"
             "  flashtune run experiments/quickstart.yaml --devices 0,1,2,3   # one worker per GPU\n"))
    return 0;

  const auto exp = experiment::load_experiment(experiment_path);
  if (!devices.empty()) {
    if (!vm["device"].defaulted()) throw core::UserError("give --device or --devices, not both");
    if (!arch.empty()) core::DeviceLimits::for_arch(arch);  // reject a bad arch before starting workers
    const auto outer = vm.count("shard") ? runner::parse_shard(shard) : runner::shard_from_environment(&std::getenv);
    return runner::run_on_devices(parse_devices(devices), outer, vm.count("allow-mixed-gpus") > 0, vm.count("compile-only") > 0);
  }
  runner::RunOptions ro;
  ro.db_path = db;
  ro.device = device;
  ro.compile_only = vm.count("compile-only") > 0;
  ro.arch = arch;
  if (!templates.empty()) {
    if (!std::filesystem::is_directory(templates)) throw core::UserError("--templates " + templates + ": not a folder");
    ro.templates = templates;
  }
  if (compile_threads < -1) throw core::UserError("--compile-threads must be -1, 0 or a number of threads");
  ro.prefetch_threads = compile_threads;
  if (!vm.count("no-cache")) ro.cache_dir = cache.empty() ? jit::default_cache_dir() : std::filesystem::path(cache);
  ro.shard = vm.count("shard") ? runner::parse_shard(shard) : runner::shard_from_environment(&std::getenv);
  ro.command_line = command_line;
  if (ro.shard.sharded() && ro.shard.source != "--shard")
    ro.command_line += "  # shard " + ro.shard.text() + " from " + ro.shard.source;
  ro.verbose = vm.count("verbose") > 0;
  ro.warm_start = vm.count("no-warm-start") == 0;
  ro.cost_prior = vm.count("no-prior") == 0;
  if (!arch.empty()) core::DeviceLimits::for_arch(arch);  // reject a bad arch before any work

  ConsolePrinter printer(exp.name, db, ro.shard, vm.count("quiet") > 0);
  ro.printer = &printer;
  const auto s = runner::run_supervised(exp, ro);  // restarts the process after a crash or hang
  return s.interrupted ? 130 : 0;
}

int cmd_devices(const std::vector<std::string>& args) {
  po::options_description opts("devices options");
  po::variables_map vm;
  if (!parse(args, opts, {}, vm, "flashtune devices", "  flashtune devices\n")) return 0;
  std::string why;
  if (!cuda::driver_available(&why)) {
    std::cout << "no GPU found: " << why << "\n(run and tests still work in compile-only mode)\n";
    return 0;
  }
  const int n = cuda::device_count();
  if (n == 0) {
    std::cout << "no GPU found: the NVIDIA driver reports no CUDA device\n";
    return 0;
  }
  Table t{{"ordinal", "name", "arch", "SMs", "memory_GiB", "L2_MiB", "smem_optin_KiB", "uuid", "driver"}, {}};
  for (int i = 0; i < n; ++i) {
    const auto d = cuda::query_device(i);
    t.rows.push_back({std::to_string(i), d.name, d.arch, std::to_string(d.num_sms),
                      std::to_string(d.total_mem_bytes >> 30), std::to_string(d.l2_bytes >> 20),
                      std::to_string(d.limits.max_shared_per_block_optin >> 10), d.uuid,
                      std::to_string(d.driver_version / 1000) + "." + std::to_string(d.driver_version % 1000 / 10)});
  }
  print_table(std::cout, t, Format::table);
  std::cout << "NVRTC " << jit::Compiler::nvrtc_version() << '\n';
  return 0;
}

int cmd_kernels(const std::vector<std::string>& args) {
  po::options_description opts("kernels options");
  std::string name;
  opts.add_options()("family", po::value(&name), "show one family in detail");
  po::positional_options_description pos;
  pos.add("family", 1);
  po::variables_map vm;
  if (!parse(args, opts, pos, vm, "flashtune kernels [FAMILY]", "  flashtune kernels\n  flashtune kernels softmax\n"))
    return 0;
  if (!name.empty() && !kernels::find_family(name)) {
    std::string known;
    for (const auto& f : kernels::all_families()) known += (known.empty() ? "" : ", ") + f->name();
    throw core::UserError("unknown kernel family '" + name + "' (known: " + known + ")");
  }
  for (const auto& f : kernels::all_families()) {
    if (!name.empty() && f->name() != name) continue;
    std::cout << f->name() << " [" << f->stage() << "]  " << f->description() << "\n  template: " << f->template_file()
              << "\n  problem dims:";
    for (const auto& d : f->problem_dims()) std::cout << ' ' << d;
    if (const auto opt = f->optional_problem_dims(); !opt.empty()) {
      std::cout << "\n  optional dims:\n";
      for (const auto& o : opt) std::cout << "    " << o.name << " (default " << o.fallback << ")  " << o.doc << '\n';
      std::cout << "  dtypes:";
    } else {
      std::cout << "\n  dtypes:";
    }
    for (auto d : f->dtypes()) std::cout << ' ' << core::to_string(d);
    std::cout << "\n  tunables:\n";
    for (const auto& t : f->tunables()) {
      std::cout << "    " << t.name << " in {";
      for (std::size_t i = 0; i < t.values.size(); ++i) std::cout << (i ? ", " : "") << t.values[i];
      std::cout << "}  " << t.doc << '\n';
    }
    std::cout << "  constraints:\n";
    for (const auto& c : f->constraints()) std::cout << "    " << c << '\n';
    if (const auto* op = dynamic_cast<const kernels::OperationBase*>(f.get())) {
      std::cout << "  variants:\n";
      for (const auto* v : op->variant_infos()) {
        std::cout << "    " << v->name << " (" << v->template_file << ";";
        for (auto d : v->dtypes) std::cout << ' ' << core::to_string(d);
        std::cout << ")" << (v->selector_doc.empty() ? "" : "  " + v->selector_doc) << '\n';
      }
    }
    std::cout << '\n';
  }
  return 0;
}

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
             "the fastest of attn_bwd_preprocess + attn_bwd_dkdv + attn_bwd_dq, attn_bwd_preprocess + attn_bwd_fused\n"
             "and attn_bwd_dq_delta + attn_bwd_dkdv (and attn_bwd_dsink with learned sinks), the attn_fwd winner\n"
             "beside it, forward + backward, and TFLOP/s (backward FLOPs = 2.5 x forward).\n"
             "peers: per problem, GPU, pass and peer, the peer's latest measurement (flashtune peers) beside\n"
             "flashtune's best there (fwd: the attn_fwd winner; bwd: the backward's stage sum as in 'backward');\n"
             "speedup = peer_ms / flashtune_ms (> 1: flashtune is faster).\n"
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
    print_table(std::cout, convergence(trials, strategies_of_run(trials)), f);
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
                            "attn_bwd_fused in place of dkdv + dq, or attn_bwd_dq_delta in place of preprocess + dq; and "
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

}  // namespace

int run_cli(int argc, char** argv) {
  const std::string command_line = joined_command_line(argc, argv);
  runner::remember_arguments(argv);
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      std::cout << kUsage;
      return 0;
    }
    if (cmd == "run") return cmd_run(args, command_line);
    if (cmd == "devices") return cmd_devices(args);
    if (cmd == "kernels") return cmd_kernels(args);
    if (cmd == "query") return cmd_query(args);
    if (cmd == "export") return cmd_export(args);
    if (cmd == "grade") return cmd_grade(args);
    if (cmd == "report") return cmd_report(args);
    if (cmd == "replay") return cmd_replay(args);
    if (cmd == "peers") return cmd_peers(args, command_line);
    if (cmd == "db") return cmd_db(args);
    std::cerr << "flashtune: unknown command '" << cmd << "'\n\n" << kUsage;
    return 2;
  } catch (const po::error& e) {
    std::cerr << "flashtune " << cmd << ": " << e.what() << " (see flashtune " << cmd << " --help)\n";
    return 2;
  } catch (const core::UserError& e) {
    std::cerr << "flashtune " << cmd << ": " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "flashtune " << cmd << ": error: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace flashtune::cli
