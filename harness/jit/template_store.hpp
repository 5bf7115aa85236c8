// harness/jit/template_store.hpp: kernel template text, from the copy embedded at build time or, when a
// researcher points at a folder of edited templates, from that folder (edit a kernel, rerun, no rebuild).
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace flashtune::jit {

/// One template file as NVRTC sees it: `#include "name"` finds `text`.
struct TemplateFile {
  std::string name;  ///< "attn_fwd.cuh", "ft/mask.cuh"
  std::string text;
};

/// File names of every template embedded in this binary, sorted.
std::vector<std::string> embedded_template_names();

/// The text of template `file` ("attn_fwd.cuh"): `override_dir`/file when that exists, else the embedded
/// copy. Throws core::UserError naming the file and the known ones when neither has it, core::Error when
/// the override file cannot be read.
std::string load_template(const std::string& file, const std::optional<std::filesystem::path>& override_dir);

/// Every template, for NVRTC's header table: the embedded ones, each replaced by `override_dir`'s copy
/// when present, plus the *.cuh files only `override_dir` has. Sorted by name.
std::vector<TemplateFile> template_headers(const std::optional<std::filesystem::path>& override_dir);

/// Names in `#include "x"` / `#include <x>` lines of `text` (all of them, whatever #if they sit in).
std::vector<std::string> included_names(const std::string& text);

/// The templates reachable from `roots` through #include, each once, in the order of a depth-first walk that takes
/// the last include first (the order every source hash is made in: keep it), looked up in `headers` (as
/// template_headers() gives them); names it lacks (toolkit headers) are skipped. The one include walker: the
/// compiler's header table and the runner's source hash both use it.
std::vector<TemplateFile> include_closure(const std::vector<std::string>& roots, const std::vector<TemplateFile>& headers);

/// Writes every embedded template into `dir` under its name (the device library into dir/ft/), each text passed
/// through `edit(name, text)` when given: the start of an override folder (a researcher's copy to edit, a test's
/// planted bug). Throws core::Error naming the file it cannot write.
void write_templates(const std::filesystem::path& dir,
                     const std::function<std::string(const std::string& name, std::string text)>& edit = nullptr);

}  // namespace flashtune::jit
