// generate CHECKPOINT TOKENIZER STEPS: an exported causal language model (its header given at
// compile time: -DMODEL_HEADER='"NAME.hpp"' -DMODEL=NAME -DPOSITIONS=L) generating greedily from
// token 1 (BOS) through its key/value cache (DecodeOf), as llama2.c's run.c does with -t 0: at
// most STEPS positions, stopping where token 1 is drawn. It prints the tokens' text as run.c does
// (TOKENIZER: llama2.c's tokenizer.bin, read for the model's vocabulary), and to stderr the tokens
// per second over all but the first (run.c's measure) and the time of one step near positions 16
// and 256 (the median of 16 steps each; near the last position when fewer were taken).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <stformer/compose/generate.hpp>
#include <stformer/io/checkpoint.hpp>
#include <stformer/stformer.hpp>

#include MODEL_HEADER

using Model = MODEL;
constexpr size_t V = stformer::step::count<Model::Output<1, 1>>;

// llama2.c's tokenizer.bin: max_token_length, then per token its score, length and bytes.
std::vector<std::string> read_vocabulary(const char* path, size_t count) {
  std::ifstream f(path, std::ios::binary);
  std::int32_t longest = 0;
  f.read(reinterpret_cast<char*>(&longest), 4);
  std::vector<std::string> pieces(count);
  for (auto& piece : pieces) {
    float score;
    std::int32_t length = 0;
    f.read(reinterpret_cast<char*>(&score), 4).read(reinterpret_cast<char*>(&length), 4);
    if (!f || length < 0 || length > 1024) {
      std::fprintf(stderr, "generate: %s is not a tokenizer of %zu tokens\n", path, count);
      std::exit(2);
    }
    piece.resize(size_t(length));
    f.read(piece.data(), length);
  }
  return pieces;
}

// A token's text as run.c prints it: no leading space after BOS, <0xXX> as its byte, a byte that
// is neither printable nor a space left out.
void print_piece(const std::string& piece, std::int32_t previous) {
  std::string text = previous == 1 && !piece.empty() && piece[0] == ' ' ? piece.substr(1) : piece;
  unsigned byte = 0;
  if (text.size() == 6 && std::sscanf(text.c_str(), "<0x%02X>", &byte) == 1) text = std::string(1, char(byte));
  if (text.empty() || (text.size() == 1 && !(std::isprint(static_cast<unsigned char>(text[0])) || std::isspace(static_cast<unsigned char>(text[0])))))
    return;
  std::fputs(text.c_str(), stdout);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: generate CHECKPOINT TOKENIZER STEPS\n");
    return 2;
  }
  auto model = std::make_unique<Model>();
  stformer::load_params(argv[1], *model);
  const auto pieces = read_vocabulary(argv[2], V);
  const size_t steps = std::min<size_t>(std::stoul(argv[3]), POSITIONS);
  auto dec = std::make_unique<stformer::DecodeOf<Model, 1, POSITIONS>>();
  auto greedy = std::make_unique<stformer::Sampler<V>>();
  stformer::IdTensor<1, 1> x = {{1}};
  std::vector<double> step_time;
  std::chrono::steady_clock::time_point start;
  size_t pos = 0;
  while (pos < steps) {
    const auto a = std::chrono::steady_clock::now();
    const auto* logits = dec->step(*model, x);
    const std::int32_t next = greedy->next(logits->data());
    step_time.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    ++pos;
    if (next == 1) break;
    print_piece(pieces[size_t(next)], x(0, 0));
    std::fflush(stdout);
    x(0, 0) = next;
    if (pos == 1) start = std::chrono::steady_clock::now();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // the median of the 16 steps around position at (or the last 16 steps, when fewer were taken)
  const auto near = [&](size_t at) { return std::min(at, step_time.size() < 8 ? 8 : step_time.size() - 8); };
  const auto median_near = [&](size_t at) {
    if (step_time.size() < 16) return 0.0;
    std::vector<double> t(step_time.begin() + long(near(at)) - 8, step_time.begin() + long(near(at)) + 8);
    std::nth_element(t.begin(), t.begin() + 8, t.end());
    return t[8];
  };
  std::printf("\n");
  if (pos > 1) std::fprintf(stderr, "achieved tok/s: %f\n", double(pos - 1) / seconds);
  std::fprintf(stderr, "step at 16: %.2f us, at %zu: %.2f us; %zu B of decoding state (cache %zu B)\n", median_near(16) * 1e6, near(256),
               median_near(256) * 1e6, sizeof(stformer::DecodeOf<Model, 1, POSITIONS>),
               stformer::DecodeOf<Model, 1, POSITIONS>::cache_bytes);
  return 0;
}
