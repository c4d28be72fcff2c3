// The corpus reader: a small corpus written here (vocabulary order, <eos>, ids, errors), and
// WikiText-2 itself when ../shared/data/wikitext-2 is present (SPEC's and its README's counts).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <stformer/io/corpus.hpp>

using namespace stformer;

namespace {
std::filesystem::path small_corpus(const std::string& name, const char* train, const char* valid, const char* test) {
  auto dir = std::filesystem::temp_directory_path() / ("stformer_corpus_" + name + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "train.txt") << train;
  std::ofstream(dir / "valid.txt") << valid;
  std::ofstream(dir / "test.txt") << test;
  return dir;
}
}  // namespace

TEST_CASE("corpus: tokens, <eos> per line, ids by first appearance over train, valid, test") {
  auto dir = small_corpus("ok", "\n the cat  sat\n\tthe dog\n", " a cat\n", "zebra the\n");
  Corpus c = Corpus::read(dir);
  // train: "" | "the cat sat" | "the dog"  -> <eos> first (blank first line)
  CHECK(c.vocab.word(0) == "<eos>");
  CHECK(c.vocab.find("the") == 1);
  CHECK(c.vocab.find("cat") == 2);
  CHECK(c.vocab.find("sat") == 3);
  CHECK(c.vocab.find("dog") == 4);
  CHECK(c.vocab.find("a") == 5);  // first seen in valid
  CHECK(c.vocab.find("zebra") == 6);
  CHECK(c.vocab.size() == 7);
  CHECK(c.vocab.find("unicorn") == -1);
  CHECK(c.train == std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 4, 0});
  CHECK(c.valid == std::vector<std::int32_t>{5, 2, 0});
  CHECK(c.test == std::vector<std::int32_t>{6, 1, 0});
  auto v = Vocabulary::deserialize(c.vocab.serialize());
  CHECK(v.size() == 7);
  CHECK(v.find("zebra") == 6);
  std::filesystem::remove_all(dir);

  auto words_first = small_corpus("first", "x y\n", "y\n", "x\n");  // no blank first line: <eos> after x, y
  Corpus c2 = Corpus::read(words_first);
  CHECK(c2.vocab.find("<eos>") == 2);
  std::filesystem::remove_all(words_first);
}

TEST_CASE("corpus: a missing folder, a missing file or a file without words is a clear error") {
  CHECK_THROWS_WITH_AS(Corpus::read("/nonexistent/wikitext"), doctest::Contains("does not exist"), std::runtime_error);
  auto dir = small_corpus("bad", "a b\n", "c\n", "d\n");
  std::filesystem::remove(dir / "valid.txt");
  CHECK_THROWS_WITH_AS(Corpus::read(dir), doctest::Contains("valid.txt is missing or unreadable"), std::runtime_error);
  std::ofstream(dir / "valid.txt") << "\n \n";
  CHECK_THROWS_WITH_AS(Corpus::read(dir), doctest::Contains("valid.txt holds no words"), std::runtime_error);
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(Vocabulary::deserialize("a\na\n"), std::runtime_error);
}

TEST_CASE("corpus: WikiText-2 (SPEC: 33,278 types, <eos> id 0; README token counts)") {
  std::filesystem::path dir = std::filesystem::path(STFORMER_SOURCE_DIR) / "../shared/data/wikitext-2";
  if (!std::filesystem::exists(dir / "train.txt")) {
    MESSAGE("skipped: " << dir << " not found");
    return;
  }
  Corpus c = Corpus::read(dir);
  CHECK(c.vocab.size() == 33278);
  CHECK(c.vocab.find("<eos>") == 0);
  CHECK(c.train.size() == 2088628);
  CHECK(c.valid.size() == 217646);
  CHECK(c.test.size() == 245569);
  CHECK(c.vocab.word(c.train[1]) == "=");  // " = Valkyria Chronicles III = "
  CHECK(c.vocab.word(c.train[2]) == "Valkyria");
}
