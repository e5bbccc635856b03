// The rule "no device-to-host copy in production code outside the exit and checkpoint I/O", checked
// on the sources: every file under gpu/, models/, rl/, actors/, apps/ and python/ (the bindings)
// except gpu/exit.* and gpu/checkpoint_io.* is read, comments and string literals are blanked, and
// any raw device-to-host copy or device-wide wait left in the code fails the test with its
// file:line. Flagged:
// cudaMemcpyDeviceToHost and cudaMemcpyDefault (the kind of any cudaMemcpy*, whichever line of a
// call it sits on), cudaMemcpyFromSymbol*, cudaMemcpy*FromArray*, cuMemcpyDtoH*, cudaDeviceSynchronize
// and cuCtxSynchronize. gpu/transfer_audit.* is exempt too: it is the CUPTI instrument the GPU tests
// count copies with, and it must wait for every device before it counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// `text` with comments and string / character literals replaced by spaces, newlines kept, so that
// line numbers stay and nothing inside a comment or a message can match.
std::string code_only(const std::string& text) {
  std::string out = text;
  enum class State { code, line_comment, block_comment, string, character } state = State::code;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i], next = i + 1 < text.size() ? text[i + 1] : '\0';
    auto blank = [&](std::size_t k) {
      if (out[k] != '\n') out[k] = ' ';
    };
    switch (state) {
      case State::code:
        if (c == '/' && next == '/') {
          state = State::line_comment;
          blank(i);
        } else if (c == '/' && next == '*') {
          state = State::block_comment;
          blank(i);
          blank(++i);
        } else if (c == '"') {
          state = State::string;
          blank(i);
        } else if (c == '\'') {
          state = State::character;
          blank(i);
        }
        break;
      case State::line_comment:
        if (c == '\n') state = State::code;
        blank(i);
        break;
      case State::block_comment:
        if (c == '*' && next == '/') {
          blank(i);
          blank(++i);
          state = State::code;
        } else {
          blank(i);
        }
        break;
      case State::string:
      case State::character:
        if (c == '\\' && next != '\0') {
          blank(i);
          blank(++i);
        } else {
          if ((state == State::string && c == '"') || (state == State::character && c == '\'') || c == '\n')
            state = State::code;
          blank(i);
        }
        break;
    }
  }
  return out;
}

const std::regex& forbidden() {
  static const std::regex re(
      R"(\b(cudaMemcpyDeviceToHost|cudaMemcpyDefault|cudaMemcpyFromSymbol\w*|cudaMemcpy\w*FromArray\w*|)"
      R"(cuMemcpyDtoH\w*|cudaDeviceSynchronize|cuCtxSynchronize)\b)");
  return re;
}

struct Finding {
  int line;
  std::string token;
};

// Every forbidden token in the code of `text`, with its 1-based line.
std::vector<Finding> raw_readbacks(const std::string& text) {
  const std::string code = code_only(text);
  std::vector<Finding> found;
  for (auto it = std::sregex_iterator(code.begin(), code.end(), forbidden()); it != std::sregex_iterator(); ++it) {
    const auto at = static_cast<std::size_t>(it->position());
    const int line =
        1 + static_cast<int>(std::count(code.begin(), code.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    found.push_back({line, it->str()});
  }
  return found;
}

bool exempt(const fs::path& relative) {
  const std::string p = relative.generic_string();
  for (const char* prefix : {"gpu/exit.", "gpu/checkpoint_io.", "gpu/transfer_audit."})
    if (p.rfind(prefix, 0) == 0) return true;
  return false;
}

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".cpp" || e == ".cu" || e == ".hpp" || e == ".cuh" || e == ".h" || e == ".cc";
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(NoRawReadback, ScannerFindsEveryForbiddenCall) {
  const std::string text =
      "void f() {\n"
      "  cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);\n"
      "  cudaMemcpyAsync(h, d, n,\n"
      "                  cudaMemcpyDefault, s);\n"
      "  cudaMemcpyFromSymbol(&h, sym, 4);\n"
      "  cudaMemcpy2DFromArrayAsync(h, 1, a, 0, 0, 1, 1, cudaMemcpyDeviceToDevice, s);\n"
      "  cuMemcpyDtoH_v2(h, d, n); cuMemcpyDtoHAsync(h, d, n, s);\n"
      "  cudaDeviceSynchronize(); cuCtxSynchronize();\n"
      "}\n";
  const auto found = raw_readbacks(text);
  std::vector<int> lines;
  for (const Finding& f : found) lines.push_back(f.line);
  EXPECT_EQ(lines, (std::vector<int>{2, 4, 5, 6, 7, 7, 8, 8}));
}

TEST(NoRawReadback, ScannerIgnoresCommentsStringsAndOtherCopies) {
  const std::string text =
      "// cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);\n"
      "/* cudaDeviceSynchronize();\n"
      "   cudaMemcpyDefault */ int x = 0;\n"
      "const char* m = \"no cudaDeviceSynchronize here \\\" cudaMemcpyDefault\";\n"
      "char q = '\"'; cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s);\n"
      "cudaMemcpyAsync(a, b, n, cudaMemcpyDeviceToDevice, s); cudaStreamSynchronize(s);\n"
      "int cudaMemcpyDeviceToHostCount = 0;  // a longer name is not the kind\n";
  const auto found = raw_readbacks(text);
  EXPECT_TRUE(found.empty()) << found.size() << " findings, first on line " << (found.empty() ? 0 : found[0].line)
                             << ": " << (found.empty() ? "" : found[0].token);
}

// The tree itself: nothing outside the door and the exit.
TEST(NoRawReadback, ProductionSourcesCopyToTheHostOnlyThroughTheDoor) {
  const fs::path root = FOXHUNT_SOURCE_DIR;
  if (!fs::is_directory(root / "gpu"))
    GTEST_SKIP() << "the source tree is not at " << root << " (FOXHUNT_SOURCE_DIR; a packaged test binary)";
  std::vector<std::string> violations;
  int scanned = 0;
  bool door_seen = false;
  for (const char* folder : {"gpu", "models", "rl", "actors", "apps", "python"}) {
    const fs::path dir = root / folder;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      const fs::path rel = fs::relative(entry.path(), root);
      const std::string text = read(entry.path());
      if (exempt(rel)) {
        // The door holds the copy, so the scanner would flag it there: proof that it can see one.
        if (rel.generic_string() == "gpu/checkpoint_io.cpp") door_seen = !raw_readbacks(text).empty();
        continue;
      }
      ++scanned;
      for (const Finding& f : raw_readbacks(text))
        violations.push_back(rel.generic_string() + ":" + std::to_string(f.line) + ": " + f.token);
    }
  }
  EXPECT_GE(scanned, 100) << "fewer source files than expected under " << root;
  EXPECT_TRUE(door_seen) << "gpu/checkpoint_io.cpp should hold the one cudaMemcpyDeviceToHost of checkpoint I/O";
  std::string list;
  for (const std::string& v : violations) list += "\n  " + v;
  EXPECT_TRUE(violations.empty()) << "raw device-to-host copies or device-wide waits outside gpu/exit.* and "
                                     "gpu/checkpoint_io.* (route checkpoint reads through gpu::checkpoint_read):"
                                  << list;
}

}  // namespace
