#include "gpu/check.hpp"

#include <cupti.h>

#include <sstream>

namespace foxhunt::gpu {

void throw_error(const char* library, const char* expr, const char* file, int line, const std::string& detail) {
  std::ostringstream msg;
  msg << library << " error: " << detail << " in `" << expr << "` at " << file << ':' << line;
  throw Error(msg.str());
}

void check(CUptiResult r, const char* expr, const char* file, int line) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  throw_error("CUPTI", expr, file, line, text ? text : "unknown CUPTI error");
}

void throw_invalid(const char* cond, const char* file, int line, const std::string& why) {
  std::ostringstream msg;
  msg << "invalid argument: " << why << " (failed `" << cond << "` at " << file << ':' << line << ')';
  throw std::invalid_argument(msg.str());
}

}  // namespace foxhunt::gpu
