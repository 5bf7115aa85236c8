// harness/runner/printer.cpp: the line printer (printer.hpp).
#include "harness/runner/printer.hpp"

#include <iostream>
#include <sstream>

namespace flashtune::runner {

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

void LinePrinter::progress(const std::string& line) {
  if (m_print) m_print(line);
  else std::cerr << line << '\n';
}

}  // namespace flashtune::runner
