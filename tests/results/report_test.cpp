// tests/results/report_test.cpp: flashtune report on the fixture database: the PNGs are real PNGs, the
// page embeds every one, and headless Chromium (Debian's chromium-headless-shell) loads the page with
// every image decoded and every link resolving.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "tests/results/results_fixture.hpp"

using namespace ft_results_test;

namespace {

struct ReportTest : ::testing::Test {
  static inline Temp* tmp = nullptr;
  static inline std::string out_text;
  static inline int status = -1;
  static fs::path out() { return tmp->dir / "report"; }
  static void SetUpTestSuite() {
    tmp = new Temp("report");
    const std::string db = (tmp->dir / "r.sqlite").string();
    FixtureDb fx(db);
    const auto r = run_cli("report " + std::to_string(fx.run1) + " --out " + out().string() + " --db " + db);
    status = r.status;
    out_text = r.out;
  }
  static void TearDownTestSuite() { delete tmp; }
};

const std::vector<std::string> kPngs = {"perf_vs_d2.png", "perf_vs_seq_q.png", "landscape_w4.png", "landscape_w8.png",
                                        "per_problem.png", "convergence.png", "roofline.png"};

}  // namespace

TEST_F(ReportTest, WritesValidPngsAndAPageThatEmbedsThem) {
  ASSERT_EQ(status, 0) << out_text;
  EXPECT_NE(out_text.find("[1/7] plotting perf_vs_d2.png"), std::string::npos) << "progress on the terminal: " << out_text;
  const std::string png_magic("\x89PNG\r\n\x1a\n", 8);
  for (const auto& name : kPngs) {
    const std::string bytes = read_file(out() / name);
    ASSERT_GT(bytes.size(), 1000u) << name;
    EXPECT_EQ(bytes.substr(0, 8), png_magic) << name;
    EXPECT_EQ(bytes.substr(12, 4), "IHDR") << name;
    const auto be32 = [&](std::size_t at) {
      return (unsigned(static_cast<unsigned char>(bytes[at])) << 24) | (unsigned(static_cast<unsigned char>(bytes[at + 1])) << 16) |
             (unsigned(static_cast<unsigned char>(bytes[at + 2])) << 8) | unsigned(static_cast<unsigned char>(bytes[at + 3]));
    };
    EXPECT_EQ(be32(16), 900u) << name << " width";
    EXPECT_EQ(be32(20), 560u) << name << " height";
    EXPECT_EQ(bytes.substr(bytes.size() - 8, 4), "IEND") << name << " is complete";
  }
  const std::string html = read_file(out() / "index.html");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("</html>"), std::string::npos);
  for (const auto& name : kPngs) EXPECT_NE(html.find("<img src=\"" + name + "\""), std::string::npos) << name;
  // the best config of L = 4096 causal is on the page, and the landscape names its problem
  EXPECT_NE(html.find("block_m=128,block_n=64,num_stages=2,num_warps=4"), std::string::npos);
  EXPECT_NE(html.find("attn_fwd on batch=1"), std::string::npos);
  // every local link and image on the page exists
  const std::regex ref("(?:src|href)=\"([^\"#:]+)\"");
  int refs = 0;
  for (std::sregex_iterator it(html.begin(), html.end(), ref), end; it != end; ++it, ++refs)
    EXPECT_TRUE(fs::exists(out() / (*it)[1].str())) << (*it)[1].str();
  EXPECT_GE(refs, 16);
}

TEST_F(ReportTest, HeadlessChromiumLoadsEveryImageAndLink) {
  ASSERT_EQ(status, 0) << out_text;
  const char* browser = "/usr/bin/chromium-headless-shell";
  ASSERT_TRUE(fs::exists(browser)) << "install chromium-headless-shell (tools/install_deps.sh)";
  // A checker page beside the report: loads it in a frame, then lists every image that did not decode
  // and every link that does not load (file:// access allowed by the flag below).
  std::ofstream(out() / "check.html") << R"(<!DOCTYPE html><html><body><iframe id="f" src="index.html"></iframe>
<pre id="r">pending</pre><script>
document.getElementById('f').onload = function () {
  var d = this.contentDocument, bad = [], n = 0, m = 0;
  for (var img of d.images) { ++n; if (!img.complete || img.naturalWidth === 0) bad.push('image ' + img.getAttribute('src')); }
  for (var a of d.querySelectorAll('a[href]')) {
    ++m;
    var x = new XMLHttpRequest();
    try { x.open('GET', a.href, false); x.send(); if (!x.responseText.length) bad.push('empty link ' + a.getAttribute('href')); }
    catch (e) { bad.push('broken link ' + a.getAttribute('href')); }
  }
  document.getElementById('r').textContent = 'images=' + n + ' links=' + m + ' bad=[' + bad.join(', ') + ']';
};
</script></body></html>)";
  const std::string cmd = std::string(browser) +
                          " --headless --no-sandbox --disable-gpu --allow-file-access-from-files --virtual-time-budget=10000"
                          " --dump-dom file://" + (out() / "check.html").string() + " 2>/dev/null";
  const std::string dom = ft_test::run_command(cmd).out;
  const std::string want = "images=" + std::to_string(kPngs.size()) + " links=";
  ASSERT_NE(dom.find(want), std::string::npos) << dom;
  EXPECT_NE(dom.find("bad=[]"), std::string::npos) << dom;
}

TEST(Report, RefusesUnknownRunsAndCompileOnlyData) {
  Temp tmp("report_bad");
  const std::string db = (tmp.dir / "r.sqlite").string();
  FixtureDb fx(db);
  const auto r = run_cli("report 42 --out " + (tmp.dir / "o").string() + " --db " + db);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("run 42 has no trials"), std::string::npos) << r.out;
  const auto n = run_cli("report nope --out " + (tmp.dir / "o").string() + " --db " + db);
  EXPECT_EQ(n.status, 2);
  EXPECT_NE(n.out.find("neither a run id nor"), std::string::npos) << n.out;
  const auto by_name = run_cli("report results_fixture -q --out " + (tmp.dir / "e").string() + " --db " + db);
  EXPECT_EQ(by_name.status, 0) << by_name.out;
  EXPECT_TRUE(fs::exists(tmp.dir / "e" / "index.html"));
  // a compile-only run has no timings: nothing to plot, said in one line
  const fs::path yaml = tmp.dir / "tiny.yaml";
  std::ofstream(yaml) << "name: tiny\nstudies:\n  - family: weighted_row_sum\n    problems: [{rows: 64, cols: 64}]\n"
                         "    space: {block_threads: [128], rows_per_block: [1], vec: [4]}\n";
  const std::string cdb = (tmp.dir / "c.sqlite").string();
  ASSERT_EQ(run_cli("run " + yaml.string() + " --compile-only --arch sm_80 --db " + cdb + " --cache " + (tmp.dir / "cache").string()).status, 0);
  const auto c = run_cli("report 1 --out " + (tmp.dir / "c").string() + " --db " + cdb);
  EXPECT_EQ(c.status, 2);
  EXPECT_NE(c.out.find("nothing to plot"), std::string::npos) << c.out;
}

TEST(Report, NewSubcommandsHaveHelpWithExamples) {
  for (const char* sub : {"report", "grade", "export", "query"}) {
    const auto h = run_cli(std::string(sub) + " --help");
    EXPECT_EQ(h.status, 0) << sub;
    EXPECT_NE(h.out.find("examples:"), std::string::npos) << sub;
  }
  EXPECT_NE(run_cli("--help").out.find("report RUN|EXP --out DIR"), std::string::npos);
}
