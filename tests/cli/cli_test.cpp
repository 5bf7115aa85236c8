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
