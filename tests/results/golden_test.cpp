// tests/results/golden_test.cpp: the results commands' outputs byte for byte against files checked in under
// tests/data/golden_outputs/: every `query` but sql, every `export` format, `grade` and `report` (its .dat, .gp and
// index.html), on the fixture database (results_fixture.hpp, with its peers) and on tests/data/tuner_surfaces.sqlite
// (a database recorded on an H100). Refactors of db/ and harness/cli must leave them unchanged.
// FT_UPDATE_GOLDEN=1 rewrites the files instead (only when an output is meant to change: say why in the commit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <vector>

#include "tests/results/results_fixture.hpp"

using namespace ft_results_test;

namespace {

// One command on one database: `args` runs in a folder holding the database as db.sqlite; `files`: what it writes
// there that is compared too (a folder: its .dat, .gp and .html files).
struct Case {
  std::string db;    ///< "fixture" | "tuner_surfaces"
  std::string name;  ///< the golden file: tests/data/golden_outputs/<db>/<name>.txt
  std::string args;
  std::vector<std::string> files = {};
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.db << "/" << c.name; }

const fs::path kGoldenDir = fs::path(FT_SOURCE_DIR) / "tests" / "data" / "golden_outputs";

// The fixture's key of attn_fwd at L = 1024, not causal.
const std::string kFixtureProblem = attn_problem(1024, 0).key();
const std::string kSurfacesProblem =
    "batch=2,causal=1,head_dim=128,heads_kv=16,heads_q=16,learned_sinks=0,qk_range=1,seq_k=8192,seq_q=8192,sink_bias=0,"
    "sink_tokens=0,tf32=0,window=0,dtype=bf16";

std::vector<Case> cases() {
  std::vector<Case> out;
  // The commands every database gets, with the run ids and keys that select a small part of it.
  // long_formats: the formats of the long outputs (trials, compare, convergence of a run).
  auto common = [&](const std::string& db, const std::string& run_a, const std::string& run_b, const std::string& family,
                    const std::string& config, const std::string& problem, const std::vector<std::string>& long_formats) {
    for (const std::string f : {"table", "csv", "json"}) {
      out.push_back({db, "query_runs_" + f, "query runs --format " + f});
      out.push_back({db, "query_best_" + f, "query best --format " + f});
      out.push_back({db, "query_peers_" + f, "query peers --format " + f});
    }
    for (const std::string& f : long_formats) {
      out.push_back({db, "query_trials_" + run_a + "_" + f, "query trials " + run_a + " --format " + f});
      out.push_back({db, "query_compare_" + run_a + "_" + run_b + "_" + f,
                     "query compare " + run_a + " " + run_b + " --format " + f});
      out.push_back({db, "query_convergence_" + run_a + "_" + f, "query convergence " + run_a + " --format " + f});
    }
    out.push_back({db, "query_best_family", "query best --family " + family});
    out.push_back({db, "query_config", "query config " + family + " " + config});
    out.push_back({db, "query_config_csv", "query config " + family + " " + config + " --format csv"});
    out.push_back({db, "query_problem", "query problem " + family + " " + problem});
    out.push_back({db, "query_problem_json", "query problem " + family + " " + problem + " --format json"});
    out.push_back({db, "query_backward", "query backward"});
    out.push_back({db, "query_backward_csv", "query backward --format csv"});
    out.push_back({db, "export_json", "export --format json"});
    out.push_back({db, "export_json_family", "export --format json --family " + family});
    out.push_back({db, "export_csv", "export --format csv"});
    out.push_back({db, "export_header", "export --format header --out best.hpp", {"best.hpp"}});
    out.push_back({db, "export_course_softmax_matmul", "export --format course-softmax-matmul --out sm.csv", {"sm.csv"}});
    out.push_back({db, "export_course_attention", "export --format course-attention --out attn.csv", {"attn.csv"}});
    out.push_back({db, "grade", "grade"});
    out.push_back({db, "grade_run_" + run_a, "grade --run " + run_a});
    out.push_back({db, "report_run_" + run_a, "report " + run_a + " --out report_run -q", {"report_run"}});
  };
  common("fixture", "1", "2", "attn_fwd", "block_m=128,block_n=64,num_stages=2,num_warps=4", kFixtureProblem,
         {"table", "csv", "json"});
  out.push_back({"fixture", "query_trials_2", "query trials 2"});
  out.push_back({"fixture", "query_best_softmax_matmul", "query best --family softmax_matmul --format csv"});
  out.push_back({"fixture", "report_experiment", "report results_fixture --out report_exp -q", {"report_exp"}});
  common("tuner_surfaces", "3", "4", "attn_bwd_dq", "block_m=64,block_n=64,min_blocks=1,num_stages=2,num_warps=4,pack_heads=1", kSurfacesProblem,
         {"table"});  // each under ~50 KB
  out.push_back({"tuner_surfaces", "export_csv_attn_fwd", "export --format csv --family attn_fwd"});
  return out;
}

// A database per kind, built once: the fixture (with its peers) and a copy of the recorded one.
struct Databases {
  Temp tmp{"golden"};
  Databases() {
    fs::create_directories(tmp.dir / "fixture");
    const fs::path fixture = tmp.dir / "fixture" / "db.sqlite";
    FixtureDb fx(fixture);
    add_fixture_peers(fixture);
    fs::create_directories(tmp.dir / "tuner_surfaces");
    fs::copy_file(fs::path(FT_SOURCE_DIR) / "tests" / "data" / "tuner_surfaces.sqlite",
                  tmp.dir / "tuner_surfaces" / "db.sqlite");
  }
};

Databases& databases() {
  static Databases d;
  return d;
}

// The fixture's runs start now: its timestamps become one fixed time of the same width (columns stay aligned).
std::string normalize(const std::string& db, const std::string& text) {
  if (db != "fixture") return text;
  static const std::regex kTime(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  return std::regex_replace(text, kTime, "2000-01-01T00:00:00.000Z");
}

// The command's standard output, standard error, exit status and written files, as one text.
std::string run_case(const Case& c) {
  const fs::path dir = databases().tmp.dir / c.db;
  const fs::path err = dir / "stderr.txt";
  for (const auto& f : c.files) fs::remove_all(dir / f);
  const auto r = ft_test::run_command("cd '" + dir.string() + "' && " + ft_test::flashtune_binary() + " " + c.args +
                                      " --db db.sqlite 2>'" + err.string() + "'");
  std::string text = "$ flashtune " + c.args + " --db db.sqlite\n" + r.out + "--- stderr\n" + read_file(err) +
                     "--- exit " + std::to_string(r.status) + "\n";
  for (const auto& f : c.files) {
    std::vector<fs::path> paths;
    if (fs::is_directory(dir / f)) {
      for (const auto& e : fs::directory_iterator(dir / f))
        if (const auto ext = e.path().extension(); ext == ".dat" || ext == ".gp" || ext == ".html") paths.push_back(e.path());
      std::sort(paths.begin(), paths.end());
    } else {
      paths.push_back(dir / f);
    }
    for (const auto& p : paths)
      text += "--- file " + fs::relative(p, dir).string() + "\n" + (fs::exists(p) ? read_file(p) : "(missing)\n");
  }
  return normalize(c.db, text);
}

class GoldenOutput : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(GoldenOutput, MatchesTheCheckedInFile) {
  const Case& c = GetParam();
  const std::string got = run_case(c);
  const fs::path golden = kGoldenDir / c.db / (c.name + ".txt");
  if (const char* u = std::getenv("FT_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    fs::create_directories(golden.parent_path());
    std::ofstream(golden, std::ios::binary) << got;
    GTEST_SKIP() << "wrote " << golden;
  }
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing (FT_UPDATE_GOLDEN=1 writes it)";
  const std::string want = read_file(golden);
  if (got == want) return;
  // The first line that differs, then the whole output for the log.
  std::istringstream g(got), w(want);
  std::string gl, wl;
  int line = 1;
  while (std::getline(g, gl) && std::getline(w, wl) && gl == wl) ++line;
  ADD_FAILURE() << golden << " differs at line " << line << ":\n  want: " << wl << "\n  got:  " << gl << "\nwhole output:\n"
                << got;
}

INSTANTIATE_TEST_SUITE_P(Results, GoldenOutput, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.db + "_" + i.param.name; });
