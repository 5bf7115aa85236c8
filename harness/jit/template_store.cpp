// harness/jit/template_store.cpp: lookup in the embedded table and in the override folder.
#include "harness/jit/template_store.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
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

std::vector<std::string> included_names(const std::string& text) {
  std::vector<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::size_t i = line.find_first_not_of(" \t");
    if (i == std::string::npos || line[i] != '#') continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string::npos || line.compare(i, 7, "include") != 0) continue;
    i = line.find_first_not_of(" \t", i + 7);
    if (i == std::string::npos || (line[i] != '"' && line[i] != '<')) continue;
    const char close = line[i] == '"' ? '"' : '>';
    const std::size_t end = line.find(close, i + 1);
    if (end != std::string::npos) names.push_back(line.substr(i + 1, end - i - 1));
  }
  return names;
}

std::vector<TemplateFile> include_closure(const std::vector<std::string>& roots, const std::vector<TemplateFile>& headers) {
  std::map<std::string, const std::string*> by_name;
  for (const TemplateFile& t : headers) by_name[t.name] = &t.text;
  std::vector<TemplateFile> out;
  std::set<std::string> seen;
  std::vector<std::string> todo(roots);
  while (!todo.empty()) {
    const std::string name = todo.back();
    todo.pop_back();
    const auto it = by_name.find(name);
    if (it == by_name.end() || !seen.insert(name).second) continue;
    out.push_back({name, *it->second});
    for (std::string& n : included_names(*it->second)) todo.push_back(std::move(n));
  }
  return out;
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
