#include "benchmarks/markdown_section.h"

#include "heterps/base/file.h"

namespace heterps::benchmarks {

absl::Status ReplaceSection(const std::string& path, const std::string& name,
                            const std::string& section) {
  const std::string begin = "<!-- " + name + ":begin -->", end = "<!-- " + name + ":end -->";
  std::string text;
  if (auto old = base::ReadTextFile(path); old.ok()) text = *old;
  const std::string block = begin + "\n" + section + end;
  const size_t a = text.find(begin), b = text.find(end);
  if (a != std::string::npos && b != std::string::npos && b > a) {
    text.replace(a, b + end.size() - a, block);
  } else {
    text += "\n" + block + "\n";
  }
  return base::WriteFileAtomically(path, text);
}

}  // namespace heterps::benchmarks
