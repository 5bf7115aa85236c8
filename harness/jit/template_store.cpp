// harness/jit/template_store.cpp: lookup in the embedded table and in the override folder.
#include "harness/jit/template_store.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "harness/core/types.hpp"
#include "harness/jit/embedded_templates.hpp"

namespace flashtune::jit {

namespace {

const detail::EmbeddedTemplate* find_embedded(const std::string& file) {
  for (std::size_t i = 0; i < detail::kEmbeddedTemplateCount; ++i)
    if (file == detail::kEmbeddedTemplates[i].name) return &detail::kEmbeddedTemplates[i];
  return nullptr;
}

std::string embedded_text(const detail::EmbeddedTemplate& t) {
  return std::string(reinterpret_cast<const char*>(t.data), t.size);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw core::Error("cannot read kernel template " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw core::Error("error reading kernel template " + path.string());
  return text.str();
}

bool is_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

}  // namespace

std::vector<std::string> embedded_template_names() {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < detail::kEmbeddedTemplateCount; ++i) names.emplace_back(detail::kEmbeddedTemplates[i].name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string load_template(const std::string& file, const std::optional<std::filesystem::path>& override_dir) {
  if (override_dir && is_file(*override_dir / file)) return read_file(*override_dir / file);
  if (const detail::EmbeddedTemplate* t = find_embedded(file)) return embedded_text(*t);

  std::string known;
  for (const std::string& n : embedded_template_names()) known += (known.empty() ? "" : ", ") + n;
  std::string msg = "unknown kernel template '" + file + "' (embedded: " + (known.empty() ? "none" : known) + ")";
  if (override_dir) msg += "; not in the override folder " + override_dir->string() + " either";
  throw core::UserError(msg);
}

std::vector<TemplateFile> template_headers(const std::optional<std::filesystem::path>& override_dir) {
  std::map<std::string, std::string> files;
  for (std::size_t i = 0; i < detail::kEmbeddedTemplateCount; ++i)
    files[detail::kEmbeddedTemplates[i].name] = embedded_text(detail::kEmbeddedTemplates[i]);
  if (override_dir) {
    std::error_code ec;
    // Its *.cuh files and those of its ft/ folder (the device library), named as `#include` names them.
    for (const std::string sub : {"", "ft"}) {
      const std::filesystem::path dir = sub.empty() ? *override_dir : *override_dir / sub;
      for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        if (entry.path().extension() == ".cuh" && is_file(entry.path()))
          files[(sub.empty() ? "" : sub + "/") + entry.path().filename().string()] = read_file(entry.path());
      }
      ec.clear();
    }
  }
  std::vector<TemplateFile> out;
  for (auto& [name, text] : files) out.push_back({name, std::move(text)});
  return out;
}

void write_templates(const std::filesystem::path& dir,
                     const std::function<std::string(const std::string& name, std::string text)>& edit) {
  for (std::size_t i = 0; i < detail::kEmbeddedTemplateCount; ++i) {
    const std::string name = detail::kEmbeddedTemplates[i].name;
    std::string text = embedded_text(detail::kEmbeddedTemplates[i]);
    if (edit) text = edit(name, std::move(text));
    const std::filesystem::path path = dir / name;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) throw core::Error("cannot write kernel template " + path.string());
  }
}

}  // namespace flashtune::jit
