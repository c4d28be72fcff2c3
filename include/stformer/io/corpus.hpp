// stformer — a word-level corpus such as WikiText-2: a folder with train.txt, valid.txt and
// test.txt. Tokens are the whitespace-separated words of each line followed by "<eos>" (SPEC
// Example 2). The vocabulary holds every word of the three files, with ids in order of first
// appearance reading train, then valid, then test, line by line, so that a train.txt whose
// first line is blank makes "<eos>" id 0 (PyTorch's word-language-model convention).
#pragma once

#include "../core/config.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace stformer::inline STFORMER_ABI {

class Vocabulary {
 public:
  static constexpr std::string_view eos = "<eos>";

  // The id of word, added at the end when new.
  std::int32_t add(std::string_view word);
  // The id of word, or -1 when it is not in the vocabulary.
  std::int32_t find(std::string_view word) const;
  const std::string& word(std::int32_t id) const { return words_.at(std::size_t(id)); }
  std::size_t size() const { return words_.size(); }

  // The words in id order, one per line (words never contain whitespace), and back;
  // deserialize throws std::runtime_error naming the line and the word of an empty line, a
  // word with white space or a repeated word.
  std::string serialize() const;
  static Vocabulary deserialize(std::string_view text);

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> words_;
  std::unordered_map<std::string, std::int32_t, Hash, std::equal_to<>> ids_;
};

struct Corpus {
  Vocabulary vocab;
  std::vector<std::int32_t> train, valid, test;  // token ids, <eos> after every line

  // Reads dir/{train,valid,test}.txt; throws std::runtime_error naming the folder or file when
  // one is missing, not a regular file (a folder, a device, a FIFO: not opened), unreadable or
  // holds no words.
  static Corpus read(const std::filesystem::path& dir);
};

// Appends the ids of text's tokens (adding new words to vocab) to ids.
void tokenize(std::string_view text, Vocabulary& vocab, std::vector<std::int32_t>& ids);

}  // namespace stformer
