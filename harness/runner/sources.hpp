// harness/runner/sources.hpp: the kernel source a config compiles from: its template's text and source hash
// (what tells kernel sources apart when resuming), read once per file, and the NVRTC request built from it.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/core/types.hpp"
#include "harness/jit/compiler.hpp"
#include "harness/kernels/family.hpp"

namespace flashtune::runner {

class TemplateSources {
 public:
  struct Source {
    std::string file;  ///< template file name ("weighted_row_sum.cuh")
    std::string text;  ///< its text (embedded, or the override folder's)
    std::string hash;  ///< template_source_hash(file, templates)
  };
  /// templates: the override folder (`run --templates`); nullopt: the embedded templates only.
  explicit TemplateSources(std::optional<std::filesystem::path> templates);

  /// The source `config` of `problem` compiles from (KernelFamily::template_file_for); read on first use.
  const Source& of(const kernels::KernelFamily& family, const core::Config& config, const core::Problem& problem);
  /// The NVRTC request of `config` on `problem` for `arch`: the family's specialization of that source.
  jit::CompileRequest request(const kernels::KernelFamily& family, const core::Config& config,
                              const core::Problem& problem, const std::string& arch);

 private:
  std::optional<std::filesystem::path> m_templates;
  std::vector<jit::TemplateFile> m_headers;  // what the sources may include
  std::map<std::string, Source> m_sources;   // by file name
};

}  // namespace flashtune::runner
