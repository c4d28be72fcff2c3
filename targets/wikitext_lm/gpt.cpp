// wikitext_lm --model gpt: see gpt.hpp.
#include "gpt.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include <stformer/compose/decode.hpp>
#include <stformer/compose/generate.hpp>
#include <stformer/io/checkpoint.hpp>
#include <stformer/io/corpus.hpp>
#include <stformer/quantized/checkpoint.hpp>

#include "language_model.hpp"

using namespace stformer;

namespace gpt {
namespace {

using lm::WikiGpt;
constexpr size_t L = 128, B = 32;
using Run = lm::GptRun<L, 64, 4, 3, B>;
static_assert(std::is_same_v<Run::Model, WikiGpt>);
using GptQ = Quantized<WikiGpt>;

double seconds_since(std::chrono::steady_clock::time_point t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); }

// The corpus and the text of its splits as bytes.
struct Text {
  Corpus corpus;
  std::vector<std::int32_t> train, valid, test;
  explicit Text(const std::string& data) : corpus(Corpus::read(data)) {
    train = lm::text_bytes(corpus.train, corpus.vocab), valid = lm::text_bytes(corpus.valid, corpus.vocab);
    test = lm::text_bytes(corpus.test, corpus.vocab);
  }
};

bool integer_file(const safetensors::File& f) { return f.find("output.scale") != nullptr; }

// What runs (generate: on stderr, its text alone on stdout).
void said_model(std::FILE* out, const std::string& path, const safetensors::File& f) {
  std::fprintf(out, "%s: the GPT over bytes (L %zu, D 64, 4 heads, 3 blocks), %s\n", path.c_str(), L,
              integer_file(f) ? "in integers (int8 weights, int8 and int16 activations)" : "float32");
}

// The text's bits a byte and its word-level perplexity, from the NLL of its bytes (all but the
// first): e^(NLL / its tokens), each word's bytes and the separator after it its share.
void report(const char* split, std::pair<double, size_t> nll, size_t tokens, double seconds) {
  std::printf("%s: %.4f bits a byte over %zu bytes; word-level perplexity %.2f (e^(the text's NLL / its %zu tokens, <eos> included); "
              "%.1f s)\n",
              split, nll.first / double(nll.second) / std::log(2.0), nll.second, std::exp(nll.first / double(tokens)), tokens, seconds);
}

// Bytes after the prompt through DecodeOf<M, 1, L>: each drawn by the sampler, stepped, printed;
// a full cache restarts from the last L/2 bytes of the text.
template <class M>
void generate_with(const M& model, const std::string& prompt, size_t count, Sampler<256>& sampler) {
  auto dec = std::make_unique<DecodeOf<M, 1, L>>();
  std::vector<std::int32_t> text(prompt.begin(), prompt.end());
  for (auto& c : text) c = std::int32_t(static_cast<unsigned char>(c));
  IdTensor<1, 1> one;
  const typename DecodeOf<M, 1, L>::Output* logits = nullptr;
  const auto restart = [&] {  // the last L/2 bytes of the text (all of a shorter one) into an empty cache
    dec->reset();
    for (size_t i = text.size() > L / 2 ? text.size() - L / 2 : 0; i < text.size(); ++i) one(0, 0) = text[i], logits = dec->step(model, one);
  };
  restart();
  std::printf("%s", prompt.c_str());
  for (size_t n = 0; n < count; ++n) {
    const std::int32_t next = sampler.next(logits->data());
    if (next < 0) throw std::runtime_error("the model's logits are not finite");
    std::putchar(int(next));
    text.push_back(next);
    if (dec->position() == L) {
      restart();
    } else {
      one(0, 0) = next;
      logits = dec->step(model, one);
    }
  }
  std::printf("\n");
}

}  // namespace

bool is_gpt(const safetensors::File& f) { return f.find("wte.weight") != nullptr; }

int train(const std::string& data, std::int64_t steps, double minutes, std::uint64_t seed, size_t threads, float lr, const std::string& checkpoint,
          std::int64_t eval_every, size_t eval_bytes) {
  auto t_read = std::chrono::steady_clock::now();
  const Text text(data);
  std::printf("corpus %s as bytes: %zu / %zu / %zu (%.1f s)\n", data.c_str(), text.train.size(), text.valid.size(), text.test.size(), seconds_since(t_read));
  auto run = std::make_unique<Run>(seed, threads);
  lm::TrainOptions o{.lr = lr};
  const bool timed = minutes > 0;
  o.steps = timed ? std::int64_t(1) << 40 : steps;
  if (!timed) o.warmup = std::min<std::int64_t>(o.warmup, steps / 4);
  std::printf("training the GPT over bytes: %zu parameters, batch %zu windows of %zu bytes in %zu lanes, %s, %zu thread%s, AdamW lr %g\n",
              param_count(*run->model), B, L, size_t(2), timed ? (std::to_string(minutes) + " minutes").c_str() : (std::to_string(steps) + " steps").c_str(),
              run->pool.size(), run->pool.size() > 1 ? "s" : "", double(lr));
  const auto start = std::chrono::steady_clock::now();
  double paused = 0, loss_sum = 0;
  int loss_count = 0;
  const auto elapsed = [&] { return (seconds_since(start) - paused) / 60; };
  stop_on_signals();
  for (;;) {
    std::int64_t s = run->state.step;
    if (s >= o.steps || (timed && elapsed() >= minutes) || stop_signal()) break;
    loss_sum += run->step(text.train, o, lm::learning_rate(o, s));
    ++loss_count, ++s;
    if (timed && s == o.warmup) {
      const double per_minute = double(s) / elapsed();
      o.steps = s + std::max<std::int64_t>(1, std::int64_t(per_minute * (minutes - elapsed())));
      std::printf("warm-up done: %.0f steps per minute, schedule of %lld steps\n", per_minute, (long long)o.steps);
    }
    const bool last = s >= o.steps || (timed && elapsed() >= minutes);
    if (s % 100 == 0 || last) {
      const double m = elapsed();
      std::printf("step %7lld  loss %.4f (%.3f bits a byte)  %6.0f bytes/s  lr %.2e\n", (long long)s, loss_sum / loss_count,
                  loss_sum / loss_count / std::log(2.0), double(s) * B * L / (m * 60), lm::learning_rate(o, s));
      std::fflush(stdout);
      loss_sum = 0, loss_count = 0;
    }
    if (eval_every > 0 && (s % eval_every == 0 || last)) {
      const auto t = std::chrono::steady_clock::now();
      const auto nll = run->stream_nll(text.valid, eval_bytes);
      paused += seconds_since(t);
      std::printf("step %7lld  validation %.4f bits a byte (first %zu bytes)\n", (long long)s, nll.first / double(nll.second) / std::log(2.0), eval_bytes);
    }
  }
  if (const int sig = stop_signal()) {
    if (!checkpoint.empty()) run->save(checkpoint);
    std::printf("%s\n", stopped_by_signal(sig, run->state.step, checkpoint, "step").c_str());
    return 128 + sig;
  }
  std::printf("%lld steps in %.1f minutes of training (validation not counted)\n", (long long)run->state.step, elapsed());
  if (!checkpoint.empty()) {
    run->save(checkpoint);
    std::printf("checkpoint: %s\n", checkpoint.c_str());
  }
  return 0;
}

int eval(const std::string& checkpoint, const std::string& data, const std::string& split, size_t threads) {
  const auto file = safetensors::File::read(checkpoint);
  said_model(stdout, checkpoint, file);
  const Text text(data);
  const auto& bytes = split == "valid" ? text.valid : text.test;
  if (bytes.size() <= L)
    throw std::runtime_error("the " + split + " split has " + std::to_string(bytes.size()) + " bytes: the GPT scores a text of at least " +
                             std::to_string(L + 1) + " (its window and the byte after it)");
  const size_t tokens = (split == "valid" ? text.corpus.valid : text.corpus.test).size();
  auto run = std::make_unique<Run>(0, threads);
  const auto start = std::chrono::steady_clock::now();
  if (integer_file(file)) {
    auto q = std::make_unique<GptQ>();
    load_quantized(file, *q);
    auto passes = std::make_unique<std::array<InferOf<GptQ, Run::Chunk, L>, 2>>();
    const auto nll = run->stream_nll(*q, [&](size_t l) -> auto& { return (*passes)[l]; }, bytes);
    report(split.c_str(), nll, tokens, seconds_since(start));
  } else {
    load_params(file, *run->model, "", Unexpected::ignore);  // (a training checkpoint's optimiser and state beside it)
    const auto nll = run->stream_nll(bytes);
    report(split.c_str(), nll, tokens, seconds_since(start));
  }
  return 0;
}

int generate(const std::string& checkpoint, const std::string& prompt, size_t bytes, double temperature, size_t top_k, std::uint64_t seed) {
  const auto file = safetensors::File::read(checkpoint);
  said_model(stderr, checkpoint, file);
  Sampler<256> sampler({.temperature = float(temperature), .top_k = top_k}, seed);
  if (integer_file(file)) {
    auto q = std::make_unique<GptQ>();
    load_quantized(file, *q);
    generate_with(*q, prompt, bytes, sampler);
  } else {
    auto m = std::make_unique<WikiGpt>();
    load_params(file, *m, "", Unexpected::ignore);
    generate_with(*m, prompt, bytes, sampler);
  }
  return 0;
}

int quantize(const std::string& checkpoint, const std::string& output, const std::string& data) {
  auto m = std::make_unique<WikiGpt>();
  load_params(safetensors::File::read(checkpoint), *m, "", Unexpected::ignore);
  const Text text(data);
  const auto start = std::chrono::steady_clock::now();
  const auto q = lm::quantize_gpt(*m, text.train, 1024);
  safetensors::Writer w;
  w.set_metadata("model", "wikitext_lm_gpt");
  w.set_metadata("precision", "integer: int8 weights, int8 and int16 activations");
  w.set_metadata("calibration", "1024 training windows");
  add_params(w, *q);
  w.write(output);
  std::printf("%s: the GPT in integers, calibrated on 1,024 training windows in %.1f s, %zu B of parameters (float32: %zu B)\n", output.c_str(),
              seconds_since(start), sizeof(GptQ), sizeof(WikiGpt));
  return 0;
}

}  // namespace gpt
