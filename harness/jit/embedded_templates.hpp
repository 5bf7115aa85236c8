// harness/jit/embedded_templates.hpp: the table of kernel_templates/*.cuh files compiled into the binary.
// Defined by a .cpp that cmake/embed_templates.cmake generates at build time; read via template_store.hpp.
#pragma once

#include <cstddef>

namespace flashtune::jit::detail {

struct EmbeddedTemplate {
  const char* name;           ///< file name, "weighted_row_sum.cuh"
  const unsigned char* data;  ///< the file's bytes, followed by a NUL
  std::size_t size;           ///< [bytes] without the NUL
};

extern const EmbeddedTemplate kEmbeddedTemplates[];  ///< sorted by name
extern const std::size_t kEmbeddedTemplateCount;

}  // namespace flashtune::jit::detail
