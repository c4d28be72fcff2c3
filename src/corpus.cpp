#include <stformer/io/corpus.hpp>

#include <fstream>
#include <iterator>
#include <stdexcept>

namespace stformer::inline STFORMER_ABI {

std::int32_t Vocabulary::add(std::string_view word) {
  if (auto it = ids_.find(word); it != ids_.end()) return it->second;
  auto id = std::int32_t(words_.size());
  words_.emplace_back(word);
  ids_.emplace(words_.back(), id);
  return id;
}

std::int32_t Vocabulary::find(std::string_view word) const {
  auto it = ids_.find(word);
  return it == ids_.end() ? -1 : it->second;
}

std::string Vocabulary::serialize() const {
  std::string text;
  for (const auto& w : words_) (text += w) += '\n';
  return text;
}

Vocabulary Vocabulary::deserialize(std::string_view text) {
  Vocabulary v;
  for (std::size_t line = 1; !text.empty(); ++line) {
    auto end = text.find('\n');
    std::string_view word = text.substr(0, end);
    const auto where = [&] { return "vocabulary: line " + std::to_string(line); };
    if (word.empty()) throw std::runtime_error(where() + " is empty (one word a line)");
    if (word.find_first_of(" \t\r\v\f") != std::string_view::npos)
      throw std::runtime_error(where() + ", '" + std::string(word.substr(0, 64)) + "', holds white space (one word a line)");
    if (const std::int32_t id = v.find(word); id >= 0)
      throw std::runtime_error(where() + ": the word '" + std::string(word.substr(0, 64)) + "' repeats line " + std::to_string(id + 1));
    v.add(word);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return v;
}

void tokenize(std::string_view text, Vocabulary& vocab, std::vector<std::int32_t>& ids) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  while (!text.empty()) {
    auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && space(line[i])) ++i;
      size_t j = i;
      while (j < line.size() && !space(line[j])) ++j;
      if (j > i) ids.push_back(vocab.add(line.substr(i, j - i)));
      i = j;
    }
    ids.push_back(vocab.add(Vocabulary::eos));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
}

Corpus Corpus::read(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw std::runtime_error("corpus folder " + dir.string() + " does not exist or is not a folder");
  Corpus c;
  for (auto [name, ids] : {std::pair{"train.txt", &c.train}, {"valid.txt", &c.valid}, {"test.txt", &c.test}}) {
    auto path = dir / name;
    // a folder, a device or a FIFO is not opened: a FIFO's open would wait, a device's read never end
    if (const auto st = std::filesystem::status(path, ec); std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
      throw std::runtime_error("corpus file " + path.string() + " is not a regular file (a folder, a device or a pipe)");
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("corpus file " + path.string() + " is missing or unreadable");
    std::string text{std::istreambuf_iterator<char>(f), {}};
    if (f.bad()) throw std::runtime_error("corpus file " + path.string() + ": read error");
    if (!text.empty() && text.back() == '\n') text.pop_back();  // the last line's end is not a new line
    tokenize(text, c.vocab, *ids);
    bool words = false;
    for (auto id : *ids) words = words || c.vocab.word(id) != Vocabulary::eos;
    if (!words) throw std::runtime_error("corpus file " + path.string() + " holds no words");
  }
  return c;
}

}  // namespace stformer
