// tests/runner/runner_test_support.hpp: helpers shared by the runner tests (temporary folders, quiet run
// options, GPU presence, trial counts, planted bugs).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "db/store.hpp"
#include "harness/experiment/experiment.hpp"
#include "harness/cuda/device.hpp"
#include "harness/cuda/driver.hpp"
#include "harness/jit/template_store.hpp"
#include "harness/kernels/family.hpp"
#include "harness/runner/runner.hpp"

namespace flashtune::testing {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("ft_runner_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { std::error_code ec; fs::remove_all(path, ec); }
  static int& counter() { static int n = 0; return n; }
};

inline runner::RunOptions quiet_options(const fs::path& db, bool compile_only) {
  runner::RunOptions o;
  o.db_path = db;
  o.compile_only = compile_only;
  o.print = [](const std::string&) {};
  return o;
}

/// Writes every embedded template into `dir`, with the first `from` in `file` replaced by `to`: a planted
/// bug for a run with RunOptions::templates = dir. false when `from` is not in `file` (the anchor moved).
inline bool plant_bug(const fs::path& dir, const std::string& file, const std::string& from, const std::string& to) {
  bool found = false;
  jit::write_templates(dir, [&](const std::string& name, std::string text) {
    if (name == file) {
      const auto at = text.find(from);
      found = at != std::string::npos;
      if (found) text.replace(at, from.size(), to);
    }
    return text;
  });
  return found;
}

inline bool have_gpu() {
  std::string why;
  return cuda::driver_available(&why) && cuda::device_count() > 0;
}

/// The NVRTC target of GPU 0 ("sm_90a" on Hopper); call only when have_gpu().
inline std::string gpu_arch() { return cuda::query_device(0).arch; }

inline std::int64_t count(const db::Store& s, const std::string& where) {
  const auto q = s.sql("SELECT count(*) FROM trials WHERE " + where);
  return std::stoll(q.rows.at(0).at(0));
}

// A variants matrix's database: at least min_ok trials ok, every other trial a failure (each status but ok
// counted, then the first 20 such trials, wrong results before refusals), no ok trial past its tolerance.
inline void expect_all_pass(const fs::path& db, std::int64_t min_ok) {
  db::Store store(db);
  EXPECT_GE(count(store, "status = 'ok'"), min_ok);
  const auto statuses = store.sql("SELECT status, COUNT(*) FROM trials WHERE status <> 'ok' GROUP BY status");
  for (const auto& row : statuses.rows) ADD_FAILURE() << row[1] << " trials " << row[0];
  const auto bad = store.sql(
      "SELECT p.key, c.key, t.status, t.reason FROM trials t JOIN problems p ON p.id = t.problem_id "
      "JOIN configs c ON c.id = t.config_id WHERE t.status <> 'ok' ORDER BY t.status = 'invalid_config', t.id LIMIT 20");
  for (const auto& row : bad.rows) ADD_FAILURE() << row[0] << " | " << row[1] << ": " << row[2] << ": " << row[3];
  EXPECT_EQ(count(store, "status = 'ok' AND (max_abs_err > tolerance OR nan_count > 0)"), 0);
}

// What the runner allocates for a problem: every buffer (with_workspaces false: inputs and outputs only), in
// whole 32-bit words.
inline std::int64_t expected_device_bytes(const kernels::KernelFamily& f, const core::Problem& p,
                                          bool with_workspaces = true) {
  std::int64_t n = 0;
  for (const auto& b : f.buffers(p))
    if (with_workspaces || b.role != kernels::BufferRole::workspace)
      n += (b.elements * std::int64_t(core::dtype_size(b.dtype)) + 3) / 4 * 4;
  return n;
}

// $FLASHTUNE_CACHE_DIR when set (tools/gpu_run.sh: a cache filled ahead), else a fresh folder.
inline fs::path cache_dir(const TempDir& dir) {
  const char* env = std::getenv("FLASHTUNE_CACHE_DIR");
  return env && *env ? fs::path(env) : dir.path / "cache";
}

/// A planted bug is caught: every template written to a temporary folder with `from` replaced by `to` in `file`
/// (the anchor must still be there), the experiment `yaml` run on them: `ok` trials pass, `incorrect` are caught.
inline void expect_planted_bug_caught(const std::string& file, const std::string& from, const std::string& to,
                                      const std::string& yaml, std::int64_t ok, std::int64_t incorrect) {
  TempDir dir;
  const fs::path tdir = dir.path / "templates";
  ASSERT_TRUE(plant_bug(tdir, file, from, to)) << "the planted bug's anchor moved in " << file;
  const auto exp = experiment::parse_experiment(yaml, file + "_planted.yaml");
  auto opts = quiet_options(dir.path / "p.sqlite", false);
  opts.templates = tdir;
  runner::run_experiment(exp, opts);
  db::Store store(opts.db_path);
  EXPECT_EQ(count(store, "status = 'ok'"), ok);
  EXPECT_EQ(count(store, "status = 'incorrect'"), incorrect);
}

}  // namespace flashtune::testing
