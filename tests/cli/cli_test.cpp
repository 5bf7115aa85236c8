// tests/cli/cli_test.cpp: the flashtune binary end to end in compile-only mode on a temporary database:
// exit codes, one-line errors naming file and line, run -> query -> export.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/command.hpp"

namespace fs = std::filesystem;

namespace {

using Result = ft_test::CommandResult;

Result flashtune(const std::string& args) { return ft_test::run_command(ft_test::flashtune_binary() + " " + args + " 2>&1"); }

struct Temp {
  fs::path dir = fs::temp_directory_path() / ("ft_cli_" + std::to_string(::getpid()));
  Temp() { fs::create_directories(dir); }
  ~Temp() { std::error_code ec; fs::remove_all(dir, ec); }
};

const std::string kSource = FT_SOURCE_DIR;

}  // namespace

TEST(Cli, HelpAndUnknownCommand) {
  EXPECT_EQ(flashtune("--help").status, 0);
  const auto r = flashtune("frobnicate");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("unknown command 'frobnicate'"), std::string::npos);
  for (const char* sub : {"run", "devices", "kernels", "query", "export"}) {
    const auto h = flashtune(std::string(sub) + " --help");
    EXPECT_EQ(h.status, 0) << sub;
    EXPECT_NE(h.out.find("examples:"), std::string::npos) << sub;
  }
}

TEST(Cli, DevicesSaysWhenThereIsNoGpu) {
  const auto r = flashtune("devices");
  EXPECT_EQ(r.status, 0);
  // Either a table of GPUs or a plain statement that none was found.
  EXPECT_TRUE(r.out.find("no GPU found") != std::string::npos || r.out.find("sm_") != std::string::npos) << r.out;
}

TEST(Cli, KernelsListsFamiliesAndRejectsUnknownOnes) {
  const auto r = flashtune("kernels");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("weighted_row_sum"), std::string::npos);
  EXPECT_NE(r.out.find("softmax"), std::string::npos);
  const auto fwd = flashtune("kernels attn_fwd");  // an operation lists its variants
  EXPECT_NE(fwd.out.find("    sm90_wgmma (attn_fwd_sm90.cuh; f16 bf16)  90 = warpgroup wgmma"), std::string::npos) << fwd.out;
  const auto bad = flashtune("kernels nope");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.out.find("unknown kernel family 'nope'"), std::string::npos);
}

TEST(Cli, BadExperimentFilesGetOneLineNamingFileAndLine) {
  Temp t;
  const auto missing = flashtune("run " + (t.dir / "missing.yaml").string() + " --db " + (t.dir / "x.sqlite").string());
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.out.find("missing.yaml"), std::string::npos);

  const fs::path bad = t.dir / "bad.yaml";
  std::ofstream(bad) << "name: bad\nstudies:\n  - family: weighted_row_sum\n    problems: [{rows: 4, cols: 4}]\n"
                        "    spaec: {vec: 1}\n";
  const auto r = flashtune("run " + bad.string() + " --db " + (t.dir / "x.sqlite").string());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("bad.yaml:5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("spaec"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(t.dir / "x.sqlite")) << "no work (not even a database) before the file is checked";
}

TEST(Cli, CompileOnlyRunThenQueryAndExport) {
  Temp t;
  const std::string db = (t.dir / "q.sqlite").string();
  const auto run = flashtune("run " + kSource + "/experiments/quickstart.yaml --compile-only --arch sm_80 --db " + db +
                             " --cache " + (t.dir / "cache").string());
  ASSERT_EQ(run.status, 0) << run.out;
  EXPECT_NE(run.out.find("compiled"), std::string::npos);

  const auto runs = flashtune("query runs --format csv --db " + db);
  ASSERT_EQ(runs.status, 0) << runs.out;
  EXPECT_EQ(runs.out.rfind("id,", 0), 0u) << runs.out;

  const auto trials = flashtune("query trials 1 --format json --db " + db);
  ASSERT_EQ(trials.status, 0) << trials.out;
  const auto j = nlohmann::json::parse(trials.out);
  ASSERT_TRUE(j.is_array());
  EXPECT_GT(j.size(), 0u);

  const auto counted = flashtune("query sql \"SELECT count(*) AS n FROM trials WHERE status = 'compiled'\" --format csv --db " + db);
  ASSERT_EQ(counted.status, 0) << counted.out;
  EXPECT_NE(counted.out.find("n\n"), std::string::npos);

  const auto write = flashtune("query sql \"DELETE FROM trials\" --db " + db);
  EXPECT_NE(write.status, 0);
  const auto still = flashtune("query sql \"SELECT count(*) FROM trials\" --format csv --db " + db);
  EXPECT_EQ(still.out.find("\n0\n"), std::string::npos) << "a refused write must not delete anything";

  const fs::path out = t.dir / "best.json";
  const auto exp = flashtune("export --format json --out " + out.string() + " --db " + db);
  ASSERT_EQ(exp.status, 0) << exp.out;
  std::ifstream in(out);
  const auto doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc.at("generator"), "flashtune");
  EXPECT_TRUE(doc.at("entries").is_array());

  const auto unknown = flashtune("query frob --db " + db);
  EXPECT_EQ(unknown.status, 2);
}

// ---------------------------------------------------------------------------------------------
// Issue 23: what a new user found on the CPU.

namespace {

// Two configs of one problem: a database in a second of compile-only work.
const char* kTiny = "name: tiny\nstudies:\n  - family: weighted_row_sum\n    problems:\n"
                    "      - {rows: 64, cols: 256, dtype: f32}\n"
                    "    space: {block_threads: [128, 256], rows_per_block: 1, vec: 4}\n";

std::string tiny_db(const Temp& t, const std::string& name) {
  const fs::path yaml = t.dir / "tiny.yaml";
  std::ofstream(yaml) << kTiny;
  const std::string db = (t.dir / name).string();
  const auto run = flashtune("run " + yaml.string() + " --compile-only --arch sm_80 --no-cache --db " + db);
  EXPECT_EQ(run.status, 0) << run.out;
  return db;
}

std::string bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(Cli, ExperimentThatExpandsToBillionsOfProblemsIsRefusedWithLineAndCount) {
  Temp t;
  const fs::path yaml = t.dir / "bomb.yaml";
  std::string v;
  for (int i = 1; i <= 30; ++i) v += (i > 1 ? ", " : "") + std::to_string(i);
  std::ofstream(yaml) << "name: bomb\nstudies:\n  - family: attn_fwd\n    problems:\n"
                         "      - {batch: &v [" << v << "], heads_q: *v, seq_q: *v, head_dim: 64, seq_k: *v, "
                         "window: *v, sink_tokens: *v, qk_range: *v, dtype: bf16}\n";
  const auto r = flashtune("run " + yaml.string() + " --compile-only --arch sm_80 --db " + (t.dir / "x.sqlite").string());
  EXPECT_EQ(r.status, 2) << r.out;  // was: "error: std::bad_alloc" after growing to the memory limit
  EXPECT_NE(r.out.find("bomb.yaml:5:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expands to 21870000000 problems, more than limits.max_problems = 100000"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(t.dir / "x.sqlite"));
}

TEST(Cli, QueryBestAfterACompileOnlyRunSaysWhyItIsEmpty) {
  Temp t;
  const std::string db = tiny_db(t, "q.sqlite");
  const auto best = flashtune("query best --db " + db);
  EXPECT_EQ(best.status, 0) << best.out;
  EXPECT_NE(best.out.find("(0 rows)"), std::string::npos) << best.out;
  EXPECT_NE(best.out.find("no measured trials: run 1 (tiny) was compile-only (2 trials, 2 compiled, none timed)"),
            std::string::npos)
      << best.out;
  const auto csv = ft_test::run_command(ft_test::flashtune_binary() + " query best --format csv --db " + db + " 2>/dev/null");
  EXPECT_EQ(csv.out.find("no measured trials"), std::string::npos) << "the note goes to stderr with csv: " << csv.out;
}

TEST(Cli, RefusedMergeLeavesNoOutputBehindAndAnExistingOneUntouched) {
  Temp t;
  const fs::path notes = t.dir / "notes.txt", newer = t.dir / "newer.sqlite", out = t.dir / "all.sqlite";
  std::ofstream(notes) << "not a database\n";
  const std::string good = tiny_db(t, "good.sqlite");
  fs::copy_file(good, newer);
  ASSERT_EQ(ft_test::run_command("sqlite3 " + newer.string() + " 'PRAGMA user_version = 99'").status, 0);
  for (const fs::path& bad : {notes, newer}) {
    const auto r = flashtune("db merge " + good + " " + bad.string() + " -o " + out.string());
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(bad.string() + ": "), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(out)) << "a refused merge left " << out << " behind";
  }
  ASSERT_EQ(flashtune("db merge " + good + " -o " + out.string()).status, 0);
  const std::string before = bytes_of(out);
  EXPECT_EQ(flashtune("db merge " + notes.string() + " -o " + out.string()).status, 2);
  EXPECT_EQ(bytes_of(out), before);
}

// A valid database on a read-only mount: query and export failed in "PRAGMA journal_mode = WAL", and
// db merge from it said "not an SQLite database". Mounted read-only in a private mount namespace.
TEST(Cli, DatabaseOnAReadOnlyMountCanBeQueriedExportedAndMerged) {
  Temp t;
  const fs::path ro = t.dir / "ro";
  fs::create_directories(ro);
  const std::string db = tiny_db(t, "ro/x.sqlite");
  const std::string mount = "mount --bind " + ro.string() + " " + ro.string() + " && mount -o remount,bind,ro " +
                            ro.string() + " && ";
  if (ft_test::run_command("unshare -rm sh -c '" + mount + "true' 2>&1").status != 0)
    GTEST_SKIP() << "no private mount namespace here (unshare -rm); nothing to mount read-only";
  const std::string b = ft_test::flashtune_binary();
  const auto r = ft_test::run_command(
      "unshare -rm sh -c '" + mount + "touch " + ro.string() + "/w 2>/dev/null && echo WRITABLE; " + b +
      " query runs --format csv --db " + db + " && " + b + " query best --db " + db + " && " + b +
      " export --format json --db " + db + " && " + b + " db merge " + db + " -o " + (t.dir / "all.sqlite").string() +
      "' 2>&1");
  EXPECT_EQ(r.out.find("WRITABLE"), std::string::npos) << "the mount was writable";
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("journal_mode"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"generator\": \"flashtune\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 runs and 2 trials added"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(db + "-wal"));
}
