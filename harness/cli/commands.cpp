// harness/cli/commands.cpp: the flashtune CLI's entry (run_cli: the one place errors become exit codes and messages)
// and the commands that run kernels: run, devices, kernels. The results commands are result_commands.cpp's, peers
// peers.cpp's, replay replay.cpp's.
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
#include "harness/cli/options.hpp"
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
