// harness/runner/printer.cpp: the line printer (printer.hpp).
#include "harness/runner/printer.hpp"

#include <iostream>

namespace flashtune::runner {

void LinePrinter::progress(const std::string& line) {
  if (m_print) m_print(line);
  else std::cerr << line << '\n';
}

}  // namespace flashtune::runner
