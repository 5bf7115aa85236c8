// harness/cli/peers.cpp: `flashtune peers` (the job, the Python child, the result recorded as peer measurements) and
// the join of peers with flashtune's best that `query peers`, grade, report and the course CSV share.
#include "harness/cli/peers.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include <boost/program_options.hpp>

#include "harness/cli/options.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/kernels/attention.hpp"
#include "harness/kernels/problem_views.hpp"
#include "harness/runner/runner.hpp"

#ifndef FT_PYTHON_DIR
#define FT_PYTHON_DIR ""
#endif

namespace po = boost::program_options;

namespace flashtune::cli {

namespace {

// The pass of a family whose problems are attention problems; "" for the others.
std::string pass_of_family(const std::string& family) {
  if (family == "attn_fwd" || family == "attn_naive" || family == "attn_eager") return "fwd";
  if (family.rfind("attn_bwd_", 0) == 0) return "bwd";
  return "";
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Runs `argv` with PYTHONPATH led by `python_dir` (when not empty) and waits at most `timeout_s` seconds (0: no
// limit): past it the child gets SIGTERM, then SIGKILL 10 s later. Returns the exit status (128 + signal when killed);
// *timed_out tells whether the limit was hit.
int run_child(const std::vector<std::string>& args, const std::string& python_dir, double timeout_s, bool* timed_out) {
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0) env_text.emplace_back(*e);
  const char* old = std::getenv("PYTHONPATH");
  std::string path = python_dir;
  if (old && *old) path += (path.empty() ? "" : ":") + std::string(old);
  if (!path.empty()) env_text.push_back("PYTHONPATH=" + path);
  std::vector<char*> envp, argv;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_copy = args;
  for (auto& a : args_copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (const int rc = ::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()); rc != 0)
    throw core::UserError("cannot start '" + args[0] + "': " + std::strerror(rc) + " (--python names the interpreter)");
  const auto start = std::chrono::steady_clock::now();
  *timed_out = false;
  bool killed = false;
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) throw core::Error(std::string("waitpid: ") + std::strerror(errno));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s > 0 && s > timeout_s && !*timed_out) {
      *timed_out = true;
      ::kill(pid, SIGTERM);
    }
    if (*timed_out && !killed && s > timeout_s + 10) {
      killed = true;
      ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

// The JSON of a result file, or a UserError naming it.
nlohmann::json read_result(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw core::UserError(path.string() + ": cannot read");
  try {
    nlohmann::json result;
    in >> result;
    return result;
  } catch (const nlohmann::json::exception& e) {
    throw core::UserError(path.string() + ": not JSON (" + std::string(e.what()) + ")");
  }
}

}  // namespace


std::vector<PeerProblem> attention_problems(const experiment::Experiment& exp) {
  std::vector<PeerProblem> out;
  std::map<std::string, std::size_t> index;
  for (const auto& study : exp.studies) {
    const std::string pass = pass_of_family(study.family);
    if (pass.empty()) continue;
    for (const auto& p : study.problems) {
      const auto [it, added] = index.try_emplace(p.key(), out.size());
      if (added) out.push_back({p, {}});
      auto& passes = out[it->second].passes;
      if (std::find(passes.begin(), passes.end(), pass) == passes.end()) passes.push_back(pass);
    }
  }
  for (auto& p : out) std::sort(p.passes.begin(), p.passes.end(), std::greater<>());  // fwd before bwd
  return out;
}

std::map<std::pair<std::string, std::string>, AttentionBest> attention_best(const std::vector<TrialRow>& trials) {
  std::map<std::pair<std::string, std::string>, AttentionBest> out;
  for (const auto& [key, stage] : stage_winners(trials)) {
    AttentionBest b;
    b.shape = stage.begin()->second.shape;  // every winner of the problem has it
    if (const auto it = stage.find("attn_fwd"); it != stage.end())
      b.fwd_ms = it->second.median_ms, b.fwd_mhz = it->second.sm_clock_mhz;
    const auto winner = [&](const std::string& f) {
      const auto it = stage.find(f);
      return it == stage.end() ? nullptr : &it->second;
    };
    const auto sum = backward_sum(has_learned_sinks(b.shape), winner);
    if (sum) {
      b.bwd_ms = sum->ms;
      const TrialRow* longest = nullptr;
      for (const auto& f : sum->families)
        if (const TrialRow* t = winner(f); t && (!longest || t->median_ms > longest->median_ms)) longest = t;
      if (longest) b.bwd_mhz = longest->sm_clock_mhz;
    } else {
      std::string measured;
      for (const auto& [family, row] : stage)
        if (family.rfind("attn_bwd_", 0) == 0) measured += (measured.empty() ? "" : ", ") + family;
      if (!measured.empty())
        b.bwd_missing = "no flashtune backward: only " + measured + " measured, no whole way (flashtune query backward "
                        "lists them)";
    }
    if (b.fwd_ms || b.bwd_ms || !b.bwd_missing.empty()) out[key] = b;
  }
  return out;
}


Table peers_table(const std::vector<TrialRow>& trials, const std::vector<db::PeerRow>& peers) {
  const auto best = attention_best(trials);
  Table out{{"problem", "gpu", "pass", "peer", "library", "status", "peer_ms", "flashtune_ms", "speedup", "peer_tflops",
             "flashtune_tflops", "max_abs_err", "tolerance", "reason", "peer_mhz", "flashtune_mhz"},
            {}};
  for (const auto& p : latest_peers(peers)) {
    std::optional<double> ours, our_mhz;
    std::string reason = p.reason;
    if (const auto it = best.find({p.problem, p.gpu}); it != best.end()) {
      ours = p.pass == "fwd" ? it->second.fwd_ms : it->second.bwd_ms;
      our_mhz = p.pass == "fwd" ? it->second.fwd_mhz : it->second.bwd_mhz;
      if (p.pass == "bwd" && !ours && !it->second.bwd_missing.empty())
        reason += (reason.empty() ? "" : "; ") + it->second.bwd_missing;
    }
    std::optional<double> speedup, our_tflops;
    if (ours && p.measured()) speedup = *p.median_ms / *ours;
    if (ours) our_tflops = attention_tflops(p.shape, p.pass, *ours);
    out.rows.push_back({p.problem, p.gpu, p.pass, p.peer, p.library, p.status, num(p.median_ms, 5), num(ours, 5),
                        num(speedup, 3), num(p.tflops, 4), num(our_tflops, 4), num(p.max_abs_err, 3),
                        num(p.tolerance, 3), reason, num(p.sm_clock_mhz, 4), num(our_mhz, 4)});
  }
  return out;
}

int cmd_peers(const std::vector<std::string>& args, const std::string& command_line) {
  po::options_description opts("peers options");
  std::string experiment_path, db_path, peers_text, python, results;
  std::uint64_t seed = 0;
  double timeout_s = 0;
  opts.add_options()
      ("experiment", po::value(&experiment_path)->required(), "experiment YAML file: its attention problems are measured")
      ("db", po::value(&db_path)->default_value(kDefaultDb), "SQLite database (created if missing)")
      ("peers", po::value(&peers_text), "comma-separated subset of sdpa_flash,sdpa_cudnn,sdpa_efficient,flex,fa4 (default all)")
      ("python", po::value(&python), "Python interpreter with torch (default: $FLASHTUNE_PYTHON, else python3)")
      ("seed", po::value(&seed)->default_value(0), "input seed (0: a fresh one per problem, recorded)")
      ("timeout", po::value(&timeout_s)->default_value(0), "[s] stop the measurement after this long (0: no limit); what "
                                                          "was measured is recorded")
      ("results", po::value(&results), "record this result file (written by an earlier flashtune.peers) instead of "
                                       "measuring");
  po::positional_options_description pos;
  pos.add("experiment", 1);
  po::variables_map vm;
  if (!parse(args, opts, pos, vm, "flashtune peers EXPERIMENT.yaml [--db DB] [--peers LIST] [--python EXE] [--results FILE]",
             "  flashtune peers experiments/attention/gpt_oss_step.yaml --python /opt/torch/.venv/bin/python\n"
             "  flashtune query peers            # beside flashtune's best, per problem, pass and peer\n"
             "Measures PyTorch SDPA (flash, cuDNN, efficient), FlexAttention and FlashAttention-4 (when importable)\n"
             "on the experiment's attention problems (the passes its studies tune: fwd for attn_fwd, bwd for\n"
             "attn_bwd_*) with the experiment's measure settings (warm-up, L2 flush per sample, events, median),\n"
             "each validated first by the pass rule against a float64 reference, in a Python child\n"
             "(python -m flashtune.peers). Recorded as peer measurements of a new run: never exported as configs.\n"))
    return 0;
  std::vector<std::string> peers = split_list(peers_text);
  for (const auto& p : peers)
    if (std::find(known_peers().begin(), known_peers().end(), p) == known_peers().end())
      throw core::UserError("--peers: unknown peer '" + p + "' (sdpa_flash, sdpa_cudnn, sdpa_efficient, flex, fa4)");
  const auto exp = experiment::load_experiment(experiment_path);
  const auto problems = attention_problems(exp);
  if (problems.empty())
    throw core::UserError(experiment_path + ": no attention problems (no attn_fwd, attn_naive, attn_eager or attn_bwd_* study)");

  namespace fs = std::filesystem;
  fs::path work, result_path = results;
  int child_status = 0;
  bool timed_out = false;
  PeerResults parsed;
  if (results.empty()) {
    work = fs::temp_directory_path() / ("flashtune_peers_" + std::to_string(::getpid()));
    fs::create_directories(work);
    if (python.empty()) python = std::getenv("FLASHTUNE_PYTHON") ? std::getenv("FLASHTUNE_PYTHON") : "python3";
    const std::string python_dir = fs::exists(fs::path(FT_PYTHON_DIR) / "flashtune" / "peers.py") ? FT_PYTHON_DIR : "";
    // A child that dies during a measurement it named (in_flight; or exits 3 after a sticky CUDA error) leaves the
    // rest to a new child: that measurement is recorded as an error and skipped, with everything already measured.
    std::vector<PeerItem> skip;
    for (int attempt = 1;; ++attempt) {
      const fs::path job_path = work / "job.json";
      {
        std::ofstream job(job_path);
        job << peers_job(problems, peers, exp.measure, seed, skip).dump(1) << '\n';
        if (!job) throw core::Error("cannot write " + job_path.string());
      }
      result_path = work / ("result_" + std::to_string(attempt) + ".json");
      std::cerr << "measuring " << problems.size() << " attention problem(s) of '" << exp.name << "' with " << python
                << " -m flashtune.peers (job " << job_path.string() << ")\n";
      child_status = run_child({python, "-m", "flashtune.peers", "--job", job_path.string(), "--out",
                                result_path.string()},
                               python_dir, timeout_s, &timed_out);
      if (!fs::exists(result_path)) {
        if (parsed.records.empty())
          throw core::UserError("flashtune.peers (" + python + ") " +
                                (timed_out ? "ran past --timeout" : "exited with status " + std::to_string(child_status)) +
                                " before measuring anything; nothing recorded (its job: " + job_path.string() + ")");
        break;
      }
      auto got = parse_peer_results(read_result(result_path), problems, result_path.string());
      if (parsed.gpu_name.empty())  // the machine and libraries: as the first child that reached the GPU says
        parsed.gpu_name = got.gpu_name, parsed.gpu_uuid = got.gpu_uuid, parsed.cuda_version = got.cuda_version,
        parsed.libraries = got.libraries;
      std::size_t added = 0;
      for (std::size_t i = 0; i < got.records.size(); ++i) {
        if (std::find(skip.begin(), skip.end(), got.items[i]) != skip.end()) continue;  // a child repeating itself
        parsed.records.push_back(std::move(got.records[i]));
        parsed.items.push_back(got.items[i]);
        skip.push_back(got.items[i]);
        ++added;
      }
      if (child_status == 0 || timed_out || parsed.gpu_name.empty()) break;
      if (got.in_flight && std::find(skip.begin(), skip.end(), *got.in_flight) == skip.end()) {
        const auto& item = *got.in_flight;
        if (item.index < 0 || std::size_t(item.index) >= problems.size())
          throw core::UserError(result_path.string() + ": in_flight names problem " + std::to_string(item.index) +
                                ", not one of the job's");
        db::PeerRecord lost;
        lost.problem = problems[std::size_t(item.index)].problem;
        lost.peer = item.peer, lost.pass = item.pass, lost.status = "error";
        lost.reason = "the measuring process died during it (exit status " + std::to_string(child_status) + ")";
        parsed.records.push_back(std::move(lost));
        parsed.items.push_back(item);
        skip.push_back(item);
        std::cerr << "flashtune.peers exited with status " << child_status << " during " << item.peer << " " << item.pass
                  << " of problem " << item.index << ": recorded as an error; the rest in a new process\n";
      } else if (child_status == 3 && added > 0) {  // its last measurement recorded the sticky error
        std::cerr << "flashtune.peers found the CUDA context unusable (exit status 3): the rest in a new process\n";
      } else {
        break;  // died without naming what it was doing, or did nothing new: what it measured is kept, no retry
      }
    }
  } else {
    parsed = parse_peer_results(read_result(result_path), problems, result_path.string());
  }
  if (parsed.records.empty())
    throw core::UserError(result_path.string() + ": no measurement" +
                          (results.empty() ? " (flashtune.peers " +
                                                 (timed_out ? std::string("ran past --timeout")
                                                            : "exited with status " + std::to_string(child_status)) + ")"
                                           : std::string()) +
                          "; nothing recorded");

  db::Store store(db_path);
  db::RunInfo info;
  info.experiment_name = exp.name;
  info.experiment_path = experiment_path;
  info.experiment_hash = exp.text_hash;
  info.command_line = command_line;
  info.host = runner::host_name();
  info.gpu_name = parsed.gpu_name;
  info.gpu_uuid = parsed.gpu_uuid;
  info.cuda_version = parsed.cuda_version;
  info.project_commit = runner::project_commit();
  info.device_key = parsed.gpu_name;
  const std::int64_t run_id = store.begin_run(info);
  for (auto& rec : parsed.records) {
    rec.run_id = run_id;
    rec.experiment_name = exp.name;
    rec.device_key = parsed.gpu_name;
    store.record_peer_trial(rec);
  }
  const bool complete = child_status == 0 && !timed_out;
  store.finish_run(run_id, complete ? "finished" : "interrupted");
  std::cerr << "run " << run_id << ": " << parsed.records.size() << " peer measurement(s) on " << parsed.gpu_name << " ("
            << parsed.libraries << ") recorded in " << db_path << '\n';
  print_table(std::cout, peers_table(store.trials(), store.peer_trials(run_id)), Format::table);
  if (!complete) {
    std::cerr << "flashtune.peers " << (timed_out ? "ran past --timeout" : "exited with status " + std::to_string(child_status))
              << ": what it measured is recorded; its files stay in " << work.string() << '\n';
    return 1;
  }
  if (!work.empty()) {
    std::error_code ec;
    fs::remove_all(work, ec);
  }
  return 0;
}

}  // namespace flashtune::cli
