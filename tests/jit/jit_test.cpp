// tests/jit/jit_test.cpp: NVRTC compiles for named archs without a GPU, compile errors are values, the
// CUBIN cache hits and misses as it should, ptxas reports parse, templates load (embedded or overridden).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <chrono>

#include <nlohmann/json.hpp>

#include "harness/core/types.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/jit/template_store.hpp"

namespace fs = std::filesystem;
using namespace flashtune;

namespace {

const char* kScaleSource = R"(
template <typename T, int kBlock>
__global__ void scale_kernel(T* out, const T* in, T factor, int n) {
  __shared__ T tile[kBlock];
  const int i = blockIdx.x * kBlock + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : T(0);
  __syncthreads();
  if (i < n) out[i] = tile[(threadIdx.x + 1) % kBlock] * factor;
}
)";

jit::CompileRequest scale_request(const std::string& arch) {
  jit::CompileRequest req;
  req.source = kScaleSource;
  req.source_name = "scale.cu";
  req.name_expression = "scale_kernel<float, 128>";
  req.arch = arch;
  return req;
}

// A fresh folder under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    m_path = fs::temp_directory_path() /
             ("ft_jit_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(m_path);
    fs::create_directories(m_path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  const fs::path& path() const { return m_path; }

 private:
  fs::path m_path;
};

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

class JitCompileArch : public testing::TestWithParam<std::string> {};

TEST_P(JitCompileArch, CompilesTemplatedKernelToCubinWithResources) {
  const jit::Compiler compiler(std::nullopt);
  const auto out = compiler.compile(scale_request(GetParam()));
  ASSERT_TRUE(out.record.ok) << out.record.log;
  EXPECT_FALSE(out.record.cache_hit);
  ASSERT_GE(out.cubin.size(), 4u);
  EXPECT_EQ(std::string(out.cubin.data(), 4), "\x7f" "ELF");
  EXPECT_EQ(out.record.cubin_bytes, out.cubin.size());
  EXPECT_EQ(out.record.arch, GetParam());
  EXPECT_EQ(out.record.lowered_name.rfind("_Z", 0), 0u) << out.record.lowered_name;
  EXPECT_NE(out.record.lowered_name.find("scale_kernel"), std::string::npos);
  EXPECT_NE(out.record.options.find("--gpu-architecture=" + GetParam()), std::string::npos);
  EXPECT_NE(out.record.log.find("Used"), std::string::npos) << "no ptxas report in the log:\n" << out.record.log;
  EXPECT_GE(out.record.resources.registers, 1);
  EXPECT_EQ(out.record.resources.shared_static_bytes, 128 * 4);
  EXPECT_EQ(out.record.resources.spill_store_bytes, 0);
  EXPECT_EQ(out.record.resources.stack_frame_bytes, 0);
  EXPECT_GT(out.record.compile_ms, 0);
  EXPECT_EQ(out.record.cache_key.size(), 16u);
}

INSTANTIATE_TEST_SUITE_P(Archs, JitCompileArch, testing::Values("sm_80", "sm_90a"),
                         [](const auto& info) { return info.param; });

TEST(JitCompiler, SyntaxErrorIsAFailedRecordWithTheLog) {
  const jit::Compiler compiler(std::nullopt);
  jit::CompileRequest req = scale_request("sm_90a");
  req.source += "\n__global__ void broken(int* p) { int x = ; p[0] = x; }\n";
  jit::CompileOutput out;
  ASSERT_NO_THROW(out = compiler.compile(req));
  EXPECT_FALSE(out.record.ok);
  EXPECT_TRUE(out.cubin.empty());
  EXPECT_EQ(out.record.cubin_bytes, 0u);
  EXPECT_NE(out.record.log.find("error"), std::string::npos) << out.record.log;
  EXPECT_NE(out.record.log.find("scale.cu"), std::string::npos) << out.record.log;
}

TEST(JitCompiler, UnknownNameExpressionIsAFailedRecord) {
  const jit::Compiler compiler(std::nullopt);
  jit::CompileRequest req = scale_request("sm_90a");
  req.name_expression = "no_such_kernel<float, 128>";
  jit::CompileOutput out;
  ASSERT_NO_THROW(out = compiler.compile(req));
  EXPECT_FALSE(out.record.ok);
  EXPECT_FALSE(out.record.log.empty());
}

TEST(JitCompiler, InvalidOptionIsAFailedRecord) {
  const jit::Compiler compiler(std::nullopt);
  jit::CompileRequest req = scale_request("sm_90a");
  req.extra_options = {"--no-such-nvrtc-option"};
  jit::CompileOutput out;
  ASSERT_NO_THROW(out = compiler.compile(req));
  EXPECT_FALSE(out.record.ok);
  EXPECT_NE(out.record.log.find("--no-such-nvrtc-option"), std::string::npos) << out.record.log;
}

TEST(JitCompiler, DefinesReachTheSource) {
  const jit::Compiler compiler(std::nullopt);
  jit::CompileRequest req = scale_request("sm_90a");
  req.source = "#ifndef FT_MUST_BE_SET\n#error FT_MUST_BE_SET missing\n#endif\n" + req.source;
  EXPECT_FALSE(compiler.compile(req).record.ok);
  req.defines = {"FT_MUST_BE_SET=1"};
  const auto out = compiler.compile(req);
  EXPECT_TRUE(out.record.ok) << out.record.log;
  EXPECT_NE(out.record.options.find("-DFT_MUST_BE_SET=1"), std::string::npos);
}

// Without a cache on disk a compiler still compiles each specialization once per run (in memory).
TEST(JitCompiler, WithoutACacheDirASecondCompileComesFromMemory) {
  const jit::Compiler compiler;
  jit::CompileRequest req = scale_request("sm_90a");
  const auto first = compiler.compile(req);
  ASSERT_TRUE(first.record.ok) << first.record.log;
  EXPECT_FALSE(first.record.cache_hit);
  const auto second = compiler.compile(req);
  EXPECT_TRUE(second.record.cache_hit);
  EXPECT_EQ(second.record.compile_ms, 0);
  EXPECT_EQ(second.cubin, first.cubin);
  req.defines = {"FT_UNUSED_KNOB=3"};
  EXPECT_FALSE(compiler.compile(req).record.cache_hit);
  EXPECT_FALSE(jit::Compiler().compile(scale_request("sm_90a")).record.cache_hit);  // a new compiler starts empty
}

TEST(JitCompiler, SecondCompileIsACacheHitAndAChangedDefineIsAMiss) {
  TempDir dir;
  const jit::Compiler compiler(dir.path() / "cache");
  jit::CompileRequest req = scale_request("sm_90a");
  req.defines = {"FT_UNUSED_KNOB=1"};

  const auto first = compiler.compile(req);
  ASSERT_TRUE(first.record.ok) << first.record.log;
  EXPECT_FALSE(first.record.cache_hit);
  EXPECT_TRUE(fs::exists(dir.path() / "cache" / (first.record.cache_key + ".cubin")));
  EXPECT_TRUE(fs::exists(dir.path() / "cache" / (first.record.cache_key + ".json")));

  const auto second = compiler.compile(req);
  ASSERT_TRUE(second.record.ok);
  EXPECT_TRUE(second.record.cache_hit);
  EXPECT_EQ(second.record.compile_ms, 0);
  EXPECT_EQ(second.cubin, first.cubin);
  EXPECT_EQ(second.record.lowered_name, first.record.lowered_name);
  EXPECT_EQ(second.record.cache_key, first.record.cache_key);
  EXPECT_EQ(second.record.log, first.record.log);
  EXPECT_EQ(second.record.resources.registers, first.record.resources.registers);
  EXPECT_EQ(second.record.resources.shared_static_bytes, first.record.resources.shared_static_bytes);

  req.defines = {"FT_UNUSED_KNOB=2"};
  const auto third = compiler.compile(req);
  ASSERT_TRUE(third.record.ok);
  EXPECT_FALSE(third.record.cache_hit);
  EXPECT_NE(third.record.cache_key, first.record.cache_key);

  req.arch = "sm_80";  // same text, another target: another entry
  EXPECT_NE(jit::Compiler::cache_key(req), third.record.cache_key);

  // Only whole entries are ever visible: no temporary files remain.
  for (const auto& entry : fs::directory_iterator(dir.path() / "cache"))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
}

TEST(JitCompiler, CompileFailuresAreCachedToo) {
  TempDir dir;
  const jit::Compiler compiler(dir.path());
  jit::CompileRequest req = scale_request("sm_90a");
  req.source += "\nthis is not C++;\n";
  const auto first = compiler.compile(req);
  ASSERT_FALSE(first.record.ok);
  const auto second = compiler.compile(req);
  EXPECT_FALSE(second.record.ok);
  EXPECT_TRUE(second.record.cache_hit);
  EXPECT_EQ(second.record.log, first.record.log);
}

TEST(JitCompiler, DamagedCacheEntryIsRecompiled) {
  TempDir dir;
  const jit::Compiler compiler(dir.path());
  const jit::CompileRequest req = scale_request("sm_90a");
  const auto first = compiler.compile(req);
  ASSERT_TRUE(first.record.ok);
  write_text(dir.path() / (first.record.cache_key + ".cubin"), "short");
  const auto second = compiler.compile(req);
  EXPECT_TRUE(second.record.ok);
  EXPECT_FALSE(second.record.cache_hit);
  EXPECT_EQ(second.cubin, first.cubin);
}

TEST(JitCompiler, DamagedMetadataLeavesNoStaleFieldsInTheRecompiledRecord) {
  // An entry whose resources are unreadable after a readable lowered_name: the fresh compile must not keep the
  // entry's name (with no name expression NVRTC never sets it, and the ptxas report is looked up by it).
  TempDir dir;
  const jit::Compiler compiler(dir.path());
  jit::CompileRequest req;
  req.source = "extern \"C\" __global__ void plain(float* p) { p[threadIdx.x] *= 2.0f; }\n";
  req.source_name = "plain.cu";
  req.arch = "sm_90a";
  const auto first = compiler.compile(req);
  ASSERT_TRUE(first.record.ok) << first.record.log;
  const fs::path meta = dir.path() / (first.record.cache_key + ".json");
  auto j = nlohmann::json::parse(read_text(meta));
  j["lowered_name"] = "stale_name";
  j["resources"] = "not an object";
  write_text(meta, j.dump());
  const auto second = compiler.compile(req);
  ASSERT_TRUE(second.record.ok);
  EXPECT_FALSE(second.record.cache_hit);
  EXPECT_EQ(second.record.lowered_name, first.record.lowered_name);
  EXPECT_EQ(second.record.resources.registers, first.record.resources.registers);
}

TEST(JitCompiler, RequestHeadersAreIncludableAndPartOfTheKey) {
  jit::CompileRequest req;
  req.source = "#include \"ft_test_helper.cuh\"\n"
               "template <int kN> __global__ void fill(float* p) { p[threadIdx.x] = twice(float(kN)); }\n";
  req.source_name = "fill.cu";
  req.name_expression = "fill<3>";
  req.headers = {{"ft_test_helper.cuh", "#pragma once\n__device__ inline float twice(float x) { return 2 * x; }\n"},
                 {"ft_unrelated.cuh", "this header is never included;\n"}};
  const jit::Compiler compiler(std::nullopt);
  const auto out = compiler.compile(req);
  ASSERT_TRUE(out.record.ok) << out.record.log;

  const std::string key = jit::Compiler::cache_key(req);
  req.headers[1].text = "changed, still never included;\n";
  EXPECT_EQ(jit::Compiler::cache_key(req), key) << "a header the source cannot reach changed the key";
  req.headers[0].text += "// an edit\n";
  EXPECT_NE(jit::Compiler::cache_key(req), key) << "an included header's edit must change the key";
}

TEST(JitCompiler, ReportsNvrtcVersion) {
  const std::string v = jit::Compiler::nvrtc_version();
  ASSERT_NE(v.find('.'), std::string::npos);
  EXPECT_GE(std::stoi(v), 11);
}

TEST(PtxasReport, ParsesTheNamedKernelOfAMultiKernelLog) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function '_Z1kIfLi128EEvPT_i' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z1kIfLi128EEvPT_i\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 9 registers, used 1 barriers, 512 bytes smem\n"
      "ptxas info    : Compile time = 3.864 ms\n"
      "ptxas info    : Compiling entry function '_Z5otherPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for _Z5otherPf\n"
      "ptxas         .     264 bytes stack frame, 48 bytes spill stores, 40 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 0 barriers, 16 bytes cmem[3]\n"
      "ptxas info    : Compile time = 8.909 ms\n";
  const auto k = jit::parse_ptxas_report(log, "_Z1kIfLi128EEvPT_i");
  EXPECT_EQ(k.registers, 9);
  EXPECT_EQ(k.shared_static_bytes, 512);
  EXPECT_EQ(k.stack_frame_bytes, 0);
  EXPECT_EQ(k.spill_store_bytes, 0);
  EXPECT_EQ(k.spill_load_bytes, 0);
  EXPECT_EQ(k.constant_bytes, 0);

  const auto o = jit::parse_ptxas_report(log, "_Z5otherPf");
  EXPECT_EQ(o.registers, 255);
  EXPECT_EQ(o.shared_static_bytes, 0);
  EXPECT_EQ(o.stack_frame_bytes, 264);
  EXPECT_EQ(o.spill_store_bytes, 48);
  EXPECT_EQ(o.spill_load_bytes, 40);
  EXPECT_EQ(o.constant_bytes, 16);

  const auto missing = jit::parse_ptxas_report(log, "_Z7absentv");
  EXPECT_EQ(missing.registers, -1);
  EXPECT_EQ(missing.spill_store_bytes, -1);
  EXPECT_EQ(jit::parse_ptxas_report(log, "").registers, -1) << "two kernels and no name: ambiguous";
}

TEST(PtxasReport, ParsesOlderFormatWithConstantBanks) {
  const std::string log =
      "ptxas info    : 0 bytes gmem, 24 bytes cmem[3]\n"
      "ptxas info    : Function properties for _Z6helperv\n"
      "    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_80'\n"
      "ptxas info    : Function properties for _Z3fooPf\n"
      "    16 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Used 32 registers, 1024 bytes smem, 360 bytes cmem[0], 24 bytes cmem[2]\n";
  const auto r = jit::parse_ptxas_report(log, "");  // the only kernel
  EXPECT_EQ(r.registers, 32);
  EXPECT_EQ(r.shared_static_bytes, 1024);
  EXPECT_EQ(r.constant_bytes, 24);
  EXPECT_EQ(r.stack_frame_bytes, 16);
  EXPECT_EQ(r.spill_store_bytes, 4);
  EXPECT_EQ(r.spill_load_bytes, 8);
}

// The one include walker: depth first, last include first, each template once, toolkit headers skipped; the
// order is the one source hashes are made in.
TEST(TemplateStore, IncludeClosureWalksDepthFirstLastIncludeFirstEachOnce) {
  const std::vector<jit::TemplateFile> headers{
      {"a.cuh", "#include \"b.cuh\"\n  #  include <cuda_fp16.h>\n#include \"ft/c.cuh\"\n"},
      {"b.cuh", "#pragma once\n#include \"ft/c.cuh\"\n#include \"d.cuh\"\n"},
      {"ft/c.cuh", "// c\n"},
      {"d.cuh", "#include \"a.cuh\"\n"},  // a cycle
      {"unused.cuh", ""},
  };
  EXPECT_EQ(jit::included_names(headers[0].text), (std::vector<std::string>{"b.cuh", "cuda_fp16.h", "ft/c.cuh"}));
  std::vector<std::string> order;
  for (const auto& t : jit::include_closure({"a.cuh"}, headers)) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"a.cuh", "ft/c.cuh", "b.cuh", "d.cuh"}));
  EXPECT_TRUE(jit::include_closure({"missing.cuh"}, headers).empty());
}

TEST(TemplateStore, UnknownTemplateIsAUserErrorNamingIt) {
  try {
    jit::load_template("no_such_template.cuh", std::nullopt);
    FAIL() << "expected UserError";
  } catch (const core::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_template.cuh"), std::string::npos) << e.what();
  }
}

TEST(TemplateStore, OverrideFolderWinsOverEmbeddedCopy) {
  TempDir dir;
  const auto names = jit::embedded_template_names();
  const std::string name = names.empty() ? "ft_override_only.cuh" : names.front();
  const std::string edited = "// edited by a researcher\n__global__ void edited() {}\n";
  write_text(dir.path() / name, edited);
  EXPECT_EQ(jit::load_template(name, dir.path()), edited);
  if (!names.empty()) {
    EXPECT_NE(jit::load_template(name, std::nullopt), edited);
    EXPECT_EQ(jit::load_template(name, dir.path() / "absent_folder"), jit::load_template(name, std::nullopt));
  } else {
    EXPECT_THROW(jit::load_template(name, std::nullopt), core::UserError);
  }
  const auto headers = jit::template_headers(dir.path());
  bool found = false;
  for (const auto& h : headers)
    if (h.name == name) found = h.text == edited;
  EXPECT_TRUE(found) << "template_headers must carry the override's text";
}

TEST(TemplateStore, EveryTemplateFileIsEmbedded) {
  const fs::path dir = fs::path(FT_SOURCE_DIR) / "kernel_templates";
  std::set<std::string> on_disk;
  if (fs::is_directory(dir))  // the templates and the device library (ft/), named as #include names them
    for (const auto& entry : fs::recursive_directory_iterator(dir))
      if (entry.path().extension() == ".cuh") on_disk.insert(fs::relative(entry.path(), dir).generic_string());
  const auto names = jit::embedded_template_names();
  const std::set<std::string> embedded(names.begin(), names.end());
  EXPECT_EQ(embedded, on_disk) << "rebuild after adding or removing a template";
  for (const std::string& n : on_disk) {
    std::ifstream in(dir / n, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(jit::load_template(n, std::nullopt), text) << n;
  }
}

// Parallel NVRTC ahead of the GPU: what prefetch() queued is compiled on background threads, and a later
// compile() of it gives the same result without compiling it a second time.
TEST(JitCompiler, PrefetchedRequestsCompileOnceAndGiveTheSameResult) {
  for (const bool with_disk_cache : {false, true}) {
    TempDir dir;
    const jit::Compiler compiler = with_disk_cache ? jit::Compiler(dir.path()) : jit::Compiler();
    std::vector<jit::CompileRequest> reqs;
    for (int knob = 0; knob < 6; ++knob) {
      reqs.push_back(scale_request("sm_90a"));
      reqs.back().defines = {"FT_UNUSED_KNOB=" + std::to_string(knob)};
    }
    reqs[5].source += "\nthis is not C++;\n";  // a failure is a result, delivered like any other
    compiler.prefetch(reqs, 2);
    compiler.prefetch(reqs, 2);  // queued twice: compiled once
    EXPECT_LE(compiler.prefetch_pending(), reqs.size());
    // Asked in reverse order: the last ones are still queued (compiled here) or in flight (waited for).
    std::vector<jit::CompileOutput> outs(reqs.size());
    for (std::size_t i = reqs.size(); i-- > 0;) outs[i] = compiler.compile(reqs[i]);
    EXPECT_EQ(compiler.prefetch_pending(), 0u);
    std::set<std::string> keys;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE("request " + std::to_string(i) + (with_disk_cache ? ", disk cache" : ", memory"));
      EXPECT_EQ(outs[i].record.ok, i != 5) << outs[i].record.log;
      EXPECT_EQ(outs[i].record.cache_key, jit::Compiler::cache_key(reqs[i]));
      keys.insert(outs[i].record.cache_key);
      if (i == 5) continue;
      const auto fresh = jit::Compiler().compile(reqs[i]);  // an independent compile of the same request
      EXPECT_EQ(outs[i].cubin, fresh.cubin);
      EXPECT_EQ(outs[i].record.resources.registers, fresh.record.resources.registers);
      const auto again = compiler.compile(reqs[i]);  // now a hit, from memory or disk
      EXPECT_TRUE(again.record.cache_hit);
      EXPECT_EQ(again.cubin, outs[i].cubin);
    }
    EXPECT_EQ(keys.size(), reqs.size());
  }
}

// A prefetched compile's NVRTC time reaches its first taker (and so the database), whether the prefetch
// had finished before compile() asked or not; later takers get a hit (cache_hit, 0 ms).
TEST(JitCompiler, ThePrefetchedCompileTimeGoesToTheFirstTaker) {
  for (const bool with_disk_cache : {false, true}) {
    SCOPED_TRACE(with_disk_cache ? "disk cache" : "memory");
    TempDir dir;
    const jit::Compiler compiler = with_disk_cache ? jit::Compiler(dir.path()) : jit::Compiler();
    std::vector<jit::CompileRequest> reqs;
    for (int knob = 0; knob < 3; ++knob) {
      reqs.push_back(scale_request("sm_90a"));
      reqs.back().defines = {"FT_UNUSED_KNOB=" + std::to_string(100 + knob)};
    }
    compiler.prefetch(reqs, 3);
    const auto first = compiler.compile(reqs[0]);  // most likely waits for the thread compiling it
    while (compiler.prefetch_pending() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // the others finish before they are asked for
    for (const auto& r : reqs) {
      const auto out = r.defines == reqs[0].defines ? first : compiler.compile(r);
      EXPECT_TRUE(out.record.ok) << out.record.log;
      EXPECT_FALSE(out.record.cache_hit);
      EXPECT_GT(out.record.compile_ms, 0.0);
      const auto again = compiler.compile(r);
      EXPECT_TRUE(again.record.cache_hit);
      EXPECT_EQ(again.record.compile_ms, 0.0);
      EXPECT_EQ(again.cubin, out.cubin);
    }
  }
}

// A compiler that goes away with work still queued stops its threads without compiling the rest.
TEST(JitCompiler, DestroyingACompilerWithQueuedPrefetchesJoinsItsThreads) {
  std::vector<jit::CompileRequest> reqs;
  for (int knob = 0; knob < 20; ++knob) {
    reqs.push_back(scale_request("sm_80"));
    reqs.back().defines = {"FT_UNUSED_KNOB=" + std::to_string(knob)};
  }
  {
    const jit::Compiler compiler;
    compiler.prefetch(reqs, 1);
    EXPECT_GT(compiler.prefetch_pending(), 0u);
  }
  SUCCEED();  // reaching here without a hang or a crash is the assertion (ctest's timeout catches a hang)
}
