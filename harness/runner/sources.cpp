// harness/runner/sources.cpp: template text, source hash and compile requests (sources.hpp), and
// template_source_hash (runner.hpp).
#include "harness/runner/sources.hpp"

#include <algorithm>

#include "harness/jit/template_store.hpp"
#include "harness/runner/runner.hpp"

namespace flashtune::runner {

TemplateSources::TemplateSources(std::optional<std::filesystem::path> templates)
    : m_templates(std::move(templates)), m_headers(jit::template_headers(m_templates)) {}

const TemplateSources::Source& TemplateSources::of(const kernels::KernelFamily& family, const core::Config& config,
                                                   const core::Problem& problem) {
  const std::string file = family.template_file_for(config, problem);
  auto it = m_sources.find(file);
  if (it == m_sources.end())
    it = m_sources.emplace(file, Source{file, jit::load_template(file, m_templates), template_source_hash(file, m_templates)}).first;
  return it->second;
}

jit::CompileRequest TemplateSources::request(const kernels::KernelFamily& family, const core::Config& config,
                                             const core::Problem& problem, const std::string& arch) {
  const auto spec = family.specialize(config, problem);
  const Source& source = of(family, config, problem);
  jit::CompileRequest req;
  req.source = source.text;
  req.source_name = source.file;
  req.name_expression = spec.name_expression;
  req.defines = spec.defines;
  req.arch = arch;
  req.headers = m_headers;
  return req;
}

std::string template_source_hash(const std::string& file, const std::optional<std::filesystem::path>& templates) {
  // The file and, transitively, every template it includes: editing a shared header changes the hash.
  auto headers = jit::template_headers(templates);
  if (std::none_of(headers.begin(), headers.end(), [&](const jit::TemplateFile& t) { return t.name == file; }))
    headers.push_back({file, jit::load_template(file, templates)});  // not in the table; unknown: the error names it
  std::string all;
  for (const auto& t : jit::include_closure({file}, headers)) all += t.name + '\n' + t.text + '\n';
  return core::hash_hex(all);
}

}  // namespace flashtune::runner
