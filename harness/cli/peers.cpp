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

// A result entry's field, or a UserError naming the file, the entry and the field.
const nlohmann::json& field(const nlohmann::json& j, const char* name, const std::string& where) {
  if (!j.is_object() || !j.contains(name)) throw core::UserError(where + ": missing '" + name + "'");
  return j.at(name);
}

std::string text_field(const nlohmann::json& j, const char* name, const std::string& where) {
  const auto& v = field(j, name, where);
  if (!v.is_string()) throw core::UserError(where + ": '" + std::string(name) + "' is not a string");
  return v.get<std::string>();
}

double number(const nlohmann::json& j, const char* name, const std::string& where) {
  const auto& v = field(j, name, where);
  if (!v.is_number()) throw core::UserError(where + ": '" + std::string(name) + "' is not a number");
  return v.get<double>();
}

// A number the contract writes as null when it is not finite (a NaN error, an infinite tolerance): NaN then.
double number_or_nan(const nlohmann::json& j, const char* name, const std::string& where) {
  if (field(j, name, where).is_null()) return std::numeric_limits<double>::quiet_NaN();
  return number(j, name, where);
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

nlohmann::json peers_job(const std::vector<PeerProblem>& problems, const std::vector<std::string>& peers,
                         const core::MeasureSettings& m, std::uint64_t seed) {
  nlohmann::json j;
  j["version"] = 1;
  j["peers"] = peers;
  j["measure"] = {{"mode", m.cold ? "cold" : "hot"}, {"warmup", m.warmup},           {"warmup_s", m.warmup_s},
                  {"min_samples", m.min_samples},    {"max_samples", m.max_samples}, {"noise_target", m.noise_target},
                  {"min_time_s", m.min_time_s},      {"max_time_s", m.max_time_s}};
  j["seed"] = seed;
  j["problems"] = nlohmann::json::array();
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const auto& p = problems[i].problem;
    j["problems"].push_back({{"index", i},
                             {"key", p.key()},
                             {"dims", p.dims},
                             {"dtype", std::string(core::to_string(p.dtype))},
                             {"passes", problems[i].passes}});
  }
  return j;
}

double attention_tflops(core::Problem problem, const std::string& pass, double ms) {
  kernels::attn::complete_problem(problem);
  const double flops = kernels::attn::fwd_flops(kernels::attn::Shape(problem)) * (pass == "bwd" ? 2.5 : 1.0);
  return ms > 0 ? flops / (ms * 1e9) : 0;
}

PeerResults parse_peer_results(const nlohmann::json& result, const std::vector<PeerProblem>& problems,
                               const std::string& source) {
  PeerResults out;
  if (!result.is_object()) throw core::UserError(source + ": not a JSON object");
  if (const auto v = field(result, "version", source); !v.is_number_integer() || v.get<int>() != 1)
    throw core::UserError(source + ": version " + v.dump() + " (this flashtune reads version 1)");
  // Before it reaches the GPU the child writes {"version": 1, "results": []}: nothing measured, no GPU named.
  if (!result.contains("gpu") && result.contains("results") && result.at("results").is_array() &&
      result.at("results").empty())
    return out;
  const auto& gpu = field(result, "gpu", source);
  out.gpu_name = text_field(gpu, "name", source + ": gpu");
  if (gpu.contains("uuid") && gpu.at("uuid").is_string()) out.gpu_uuid = gpu.at("uuid").get<std::string>();
  if (result.contains("libraries") && result.at("libraries").is_object()) {
    for (const auto& [name, version] : result.at("libraries").items()) {
      if (version.is_null()) continue;
      const std::string v = version.is_string() ? version.get<std::string>() : version.dump();
      out.libraries += (out.libraries.empty() ? "" : ", ") + name + " " + v;
      if (name == "cuda") out.cuda_version = v;
    }
  }
  const auto& entries = field(result, "results", source);
  if (!entries.is_array()) throw core::UserError(source + ": 'results' is not an array");
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const auto& r = entries[e];
    const std::string where = source + ": results[" + std::to_string(e) + "]";
    const auto& idx = field(r, "index", where);
    if (!idx.is_number_integer() || idx.get<std::int64_t>() < 0 || idx.get<std::size_t>() >= problems.size())
      throw core::UserError(where + ": index " + idx.dump() + " names no problem of the job (" +
                            std::to_string(problems.size()) + " problems)");
    db::PeerRecord rec;
    rec.problem = problems[idx.get<std::size_t>()].problem;
    rec.peer = text_field(r, "peer", where);
    rec.pass = text_field(r, "pass", where);
    rec.status = text_field(r, "status", where);
    if (rec.pass != "fwd" && rec.pass != "bwd") throw core::UserError(where + ": pass '" + rec.pass + "' (fwd or bwd)");
    if (rec.status != "ok" && rec.status != "unsupported" && rec.status != "wrong_result" && rec.status != "error")
      throw core::UserError(where + ": status '" + rec.status + "' (ok, unsupported, wrong_result or error)");
    if (r.contains("library") && r.at("library").is_string()) rec.library = r.at("library").get<std::string>();
    if (r.contains("reason") && r.at("reason").is_string()) rec.reason = r.at("reason").get<std::string>();
    if (r.contains("seed") && r.at("seed").is_number_integer()) rec.seed = r.at("seed").get<std::uint64_t>();
    if (r.contains("device_bytes") && r.at("device_bytes").is_number_integer())
      rec.device_bytes = r.at("device_bytes").get<std::int64_t>();
    if (const auto it = r.find("timing"); it != r.end() && !it->is_null()) {
      const std::string w = where + ": timing";
      core::Timing t;
      const auto& samples = field(*it, "samples_ms", w);
      if (!samples.is_array() || samples.empty()) throw core::UserError(w + ": 'samples_ms' is not a non-empty array");
      for (const auto& s : samples) {
        if (!s.is_number()) throw core::UserError(w + ": a sample is not a number");
        t.samples_ms.push_back(s.get<double>());
      }
      t.median_ms = number(*it, "median_ms", w);
      t.iqr_ms = number(*it, "iqr_ms", w);
      t.min_ms = number(*it, "min_ms", w);
      t.max_ms = number(*it, "max_ms", w);
      t.mean_ms = number(*it, "mean_ms", w);
      t.rel_stdev = number_or_nan(*it, "rel_stdev", w);
      t.converged = it->value("converged", false);
      t.cold = it->value("cold", true);
      if (!(t.median_ms > 0)) throw core::UserError(w + ": median_ms " + std::to_string(t.median_ms) + " is not positive");
      rec.tflops = attention_tflops(rec.problem, rec.pass, t.median_ms);
      rec.timing = std::move(t);
    }
    if (const auto it = r.find("validation"); it != r.end() && !it->is_null()) {
      const std::string w = where + ": validation";
      core::Validation v;
      v.checked = true;
      v.max_abs_err = number_or_nan(*it, "max_abs_err", w);
      v.max_rel_err = it->contains("max_rel_err") ? number_or_nan(*it, "max_rel_err", w) : 0;
      v.naive_err = number_or_nan(*it, "naive_err", w);
      v.tolerance = number_or_nan(*it, "tolerance", w);
      v.nan_count = static_cast<std::int64_t>(number(*it, "nan_count", w));
      v.passed = v.nan_count == 0 && v.max_abs_err <= v.tolerance;  // false where either is NaN (null)
      if (it->contains("output") && it->at("output").is_string()) rec.checked_output = it->at("output").get<std::string>();
      rec.validation = v;
    }
    if (rec.status == "ok" && (!rec.timing || !rec.validation || !rec.validation->passed))
      throw core::UserError(where + ": status ok needs a timing and a validation that passes the rule");
    out.records.push_back(std::move(rec));
  }
  return out;
}

std::map<std::pair<std::string, std::string>, AttentionBest> attention_best(const std::vector<TrialRow>& trials) {
  std::map<std::pair<std::string, std::string>, AttentionBest> out;
  for (const auto& [key, stage] : stage_winners(trials)) {
    AttentionBest b;
    b.shape = stage.begin()->second.shape;  // every winner of the problem has it
    if (const auto it = stage.find("attn_fwd"); it != stage.end()) b.fwd_ms = it->second.median_ms;
    const auto sum = backward_sum(has_learned_sinks(b.shape), [&](const std::string& f) {
      const auto it = stage.find(f);
      return it == stage.end() ? nullptr : &it->second;
    });
    if (sum) b.bwd_ms = sum->ms;
    if (b.fwd_ms || b.bwd_ms) out[key] = b;
  }
  return out;
}


Table peers_table(const std::vector<TrialRow>& trials, const std::vector<db::PeerRow>& peers) {
  const auto best = attention_best(trials);
  Table out{{"problem", "gpu", "pass", "peer", "library", "status", "peer_ms", "flashtune_ms", "speedup", "peer_tflops",
             "flashtune_tflops", "max_abs_err", "tolerance", "reason"},
            {}};
  for (const auto& p : latest_peers(peers)) {
    std::optional<double> ours;
    if (const auto it = best.find({p.problem, p.gpu}); it != best.end())
      ours = p.pass == "fwd" ? it->second.fwd_ms : it->second.bwd_ms;
    std::optional<double> speedup, our_tflops;
    if (ours && p.measured()) speedup = *p.median_ms / *ours;
    if (ours) our_tflops = attention_tflops(p.shape, p.pass, *ours);
    out.rows.push_back({p.problem, p.gpu, p.pass, p.peer, p.library, p.status, num(p.median_ms, 5), num(ours, 5),
                        num(speedup, 3), num(p.tflops, 4), num(our_tflops, 4), num(p.max_abs_err, 3),
                        num(p.tolerance, 3), p.reason});
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
  if (results.empty()) {
    work = fs::temp_directory_path() / ("flashtune_peers_" + std::to_string(::getpid()));
    fs::create_directories(work);
    result_path = work / "result.json";
    {
      std::ofstream job(work / "job.json");
      job << peers_job(problems, peers, exp.measure, seed).dump(1) << '\n';
      if (!job) throw core::Error("cannot write " + (work / "job.json").string());
    }
    if (python.empty()) python = std::getenv("FLASHTUNE_PYTHON") ? std::getenv("FLASHTUNE_PYTHON") : "python3";
    const std::string python_dir = fs::exists(fs::path(FT_PYTHON_DIR) / "flashtune" / "peers.py") ? FT_PYTHON_DIR : "";
    std::cerr << "measuring " << problems.size() << " attention problem(s) of '" << exp.name << "' with " << python
              << " -m flashtune.peers (job " << (work / "job.json").string() << ")\n";
    child_status = run_child({python, "-m", "flashtune.peers", "--job", (work / "job.json").string(), "--out",
                              result_path.string()},
                             python_dir, timeout_s, &timed_out);
    if (!fs::exists(result_path))
      throw core::UserError("flashtune.peers (" + python + ") " +
                            (timed_out ? "ran past --timeout" : "exited with status " + std::to_string(child_status)) +
                            " before measuring anything; nothing recorded (its job: " + (work / "job.json").string() + ")");
  }
  nlohmann::json result;
  {
    std::ifstream in(result_path);
    if (!in) throw core::UserError(result_path.string() + ": cannot read");
    try {
      in >> result;
    } catch (const nlohmann::json::exception& e) {
      throw core::UserError(result_path.string() + ": not JSON (" + std::string(e.what()) + ")");
    }
  }
  auto parsed = parse_peer_results(result, problems, result_path.string());
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
