// The language-model training code (tasks/language_model.hpp) on a small corpus written
// here: a few steps lower the loss, two runs from one seed (on 1 and on 2 threads) agree to the
// bit, and the batched perplexity equals a one-window-at-a-time computation over every
// position t ≥ L; a checkpoint brings model and vocabulary back. The GPT over bytes: the text as
// bytes, its loss falling, runs on 1 and 2 threads agreeing, the windows scoring every byte once.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include <stformer/io/corpus.hpp>

#include "language_model.hpp"
#include "util.hpp"

using namespace stformer;

namespace {
constexpr size_t V = 11, L = 6, D = 16, H = 2, F = 32;  // 10 words + <eos>

// Counting sequences over `words` words ("w3 w4 w5 ..."): learnable; V = words + 1 (<eos>).
Corpus small_corpus(int words = 10) {
  auto dir = std::filesystem::temp_directory_path() / ("stformer_lm_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream train(dir / "train.txt"), valid(dir / "valid.txt"), test(dir / "test.txt");
  Rng rng(4);
  for (int line = 0; line < 60; ++line) {  // counting sequences: "w3 w4 w5 ..." — learnable
    int start = int(rng.below(std::uint32_t(words))), n = 3 + int(rng.below(8));
    for (int i = 0; i < n; ++i) train << 'w' << (start + i) % words << ' ';
    train << '\n';
    if (line % 6 == 0) valid << "w1 w2 w3 w4 w5 w6 w7\n";
  }
  for (int i = 0; i < words; ++i) test << 'w' << i << (i % 9 == 8 ? "\n" : " ");  // every word: each is in the vocabulary
  test << "\nw5 w6 w7 w8 w9 w0 w1 w2 w3\nw0 w1 w2\n";
  train.close(), valid.close(), test.close();
  Corpus c = Corpus::read(dir);
  std::filesystem::remove_all(dir);
  return c;
}
}  // namespace

TEST_CASE("language model: loss falls, runs reproduce, batched perplexity = direct perplexity") {
  Corpus c = small_corpus();
  REQUIRE(c.vocab.size() == V);
  lm::TrainOptions o;
  o.lr = 3e-3f;
  o.steps = 150;
  o.warmup = 10;
  std::vector<float> losses[2];
  double nll[2];
  for (int r = 0; r < 2; ++r) {
    lm::Run<V, L, D, H, F, 1, 8> run(9, r + 1);  // 1 thread, then 2: the same losses
    double before = run.mean_nll(c.valid);
    for (int s = 0; s < 150; ++s) losses[r].push_back(run.step(c.train, o));
    nll[r] = run.mean_nll(c.valid);
    CHECK(nll[r] < 0.5 * before);
    if (r == 0) {
      // direct: every position t >= L of the test stream, one window at a time
      using Model = LanguageModel<V, L, D, H, F, 1>;
      auto acts = std::make_unique<ActsOf<Model, 1>>();
      IdTensor<1, L> window;
      double sum = 0;
      for (size_t t = L; t < c.test.size(); ++t) {
        for (size_t i = 0; i < L; ++i) window(0, i) = c.test[t - L + i];
        const auto& z = acts->forward(*run.model, window);
        double m = -1e30, e = 0;
        for (size_t v = 0; v < V; ++v) m = std::max(m, double(z(0, 0, v)));
        for (size_t v = 0; v < V; ++v) e += std::exp(double(z(0, 0, v)) - m);
        sum += m + std::log(e) - z(0, 0, size_t(c.test[t]));
      }
      double direct = sum / double(c.test.size() - L);
      CHECK(run.mean_nll(c.test) == doctest::Approx(direct).epsilon(1e-5));
      MESSAGE("valid perplexity " << std::exp(before) << " -> " << std::exp(nll[r]) << "; test perplexity " << std::exp(direct));

      // save/load round trip: model and vocabulary come back, and give the same perplexity
      auto path = std::filesystem::temp_directory_path() / ("stformer_lm_ckpt_" + std::to_string(::getpid()) + ".safetensors");
      run.save(path, c.vocab, o);
      lm::Run<V, L, D, H, F, 1, 8> loaded(123);
      Vocabulary vocab = lm::load_model(path, *loaded.model);
      CHECK(vocab.serialize() == c.vocab.serialize());
      CHECK(vocab.find("w7") == c.vocab.find("w7"));
      CHECK(test::tensors_differing(*run.model, *loaded.model) == 0);
      CHECK(loaded.mean_nll(c.test) == run.mean_nll(c.test));
      // a parameters-only file under SPEC's names (as exported from PyTorch) plus the vocabulary
      auto bare = std::filesystem::temp_directory_path() / ("stformer_lm_bare_" + std::to_string(::getpid()) + ".safetensors");
      safetensors::Writer w;
      add_params(w, *run.model);
      std::string words = c.vocab.serialize();
      w.add("state.vocab", safetensors::Dtype::U8, {words.size()}, std::as_bytes(std::span(words)));
      w.write(bare);
      lm::Run<V, L, D, H, F, 1, 8> from_bare(321);
      CHECK(lm::load_model(bare, *from_bare.model).serialize() == c.vocab.serialize());
      CHECK(from_bare.mean_nll(c.test) == run.mean_nll(c.test));
      // the parameters alone (no vocabulary): refused without a corpus, saying how to give one;
      // with the corpus's vocabulary, which SPEC's rule derives, the same model
      safetensors::Writer params_only;
      add_params(params_only, *run.model);
      params_only.write(bare);
      lm::Run<V, L, D, H, F, 1, 8> from_params(99);
      CHECK_THROWS_WITH_AS(lm::load_model(bare, *from_params.model), doctest::Contains("has no vocabulary (no tensor 'state.vocab'"),
                           std::runtime_error);
      CHECK_THROWS_WITH_AS(lm::load_model(bare, *from_params.model), doctest::Contains("--data WIKITEXT2_DIR"), std::runtime_error);
      bool derived = false;  // the corpus was asked for its vocabulary
      auto corpus = [&]() -> const Vocabulary& {
        derived = true;
        return c.vocab;
      };
      CHECK(lm::load_model(bare, *from_params.model, corpus).serialize() == c.vocab.serialize());
      CHECK(derived);
      CHECK(from_params.mean_nll(c.test) == run.mean_nll(c.test));
      derived = false;
      lm::load_model(path, *from_params.model, corpus);  // a vocabulary of its own comes first
      CHECK_FALSE(derived);
      std::filesystem::remove(bare);
      auto bigger = std::make_unique<LanguageModel<V + 1, L, D, H, F, 1>>();  // a model of another vocabulary size
      CHECK_THROWS_WITH_AS(lm::load_model(path, *bigger), doctest::Contains("this build's model has V = 12"), std::runtime_error);
      std::filesystem::remove(path);
    }
  }
  CHECK(losses[0] == losses[1]);
  CHECK(nll[0] == nll[1]);
}

TEST_CASE("language model: windows and the shuffled pass over every training position") {
  Corpus c = small_corpus();
  using Run = lm::Run<V, L, D, H, F, 1, 8>;
  Run run(2);
  lm::TrainOptions o;
  run.step(c.train, o);
  // one pass: every position t >= L of the training stream exactly once, not in stream order
  std::vector<std::uint32_t> sorted = run.order;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::uint32_t> every(c.train.size() - L);
  std::iota(every.begin(), every.end(), std::uint32_t(L));
  CHECK(sorted == every);
  CHECK(run.order != every);
  // a sample: the window ids[t-L, t) and the next token ids[t]; rows past `count` repeat the last
  auto lane = std::make_unique<Run::Lane>();
  const std::uint32_t positions[] = {std::uint32_t(L), 17, 40};
  Run::gather(*lane, c.train, positions, 3);
  for (size_t b = 0; b < Run::Chunk; ++b) {
    size_t t = positions[std::min<size_t>(b, 2)];
    for (size_t i = 0; i < L; ++i) CHECK(lane->window(b, i) == c.train[t - L + i]);
    CHECK(lane->next(b) == c.train[t]);
  }
}

// The gradient of Run (Lanes lanes; the head's forward and backward in HeadParts parts of the
// vocabulary, of 16 rows each when V = 201, of a whole block of HeadRows = 256 rows and a rest
// when V = 2,561: with 8 windows a lane, that block's W is packed once for the lanes' logits)
// against one forward and backward over the whole batch. The head's bias is made non-zero.
template <size_t V, size_t Lanes, size_t B = 8>
void check_step_gradient() {
  Corpus c = small_corpus(int(V) - 1);
  REQUIRE(c.vocab.size() == V);
  using Run = lm::Run<V, L, D, H, F, 1, B, Lanes>;
  using Model = typename Run::Model;
  Run run(6, 2);
  Rng rng(9);
  for (float& b : run.model->template get<"head">().bias) b = rng.uniform() - 0.5f;
  auto acts = std::make_unique<ActsOf<Model, B>>();
  auto want = std::make_unique<Model>();
  Tensor<B, 1, V> dlogits;
  IdTensor<B, L> window;
  IdTensor<B> next;
  for (int k = 0; k < 3; ++k) {  // the second and third batches check that the last one's rows were cleared
    const float loss = run.gradient(c.train);
    const std::uint32_t* positions = run.order.data() + run.cursor - B;
    for (size_t b = 0; b < B; ++b) {
      for (size_t i = 0; i < L; ++i) window(b, i) = c.train[positions[b] - L + i];
      next(b) = c.train[positions[b]];
    }
    zero_grad(*want);
    const float want_loss = cross_entropy(acts->forward(*run.model, window), next, dlogits);
    acts->backward(*run.model, *want, dlogits);
    CHECK(loss == doctest::Approx(want_loss).epsilon(1e-6));
    double largest = 0, err = 0;
    for_each_param([&](const Path&, Init, const auto& w) { for (float x : w) largest = std::max(largest, double(std::abs(x))); }, *want);
    for_each_param([&](const Path& name, Init, const auto& g, const auto& w) {
      for (size_t i = 0; i < w.size(); ++i) err = std::max(err, double(std::abs(g.data()[i] - w.data()[i])));
      CHECK_MESSAGE(err <= 1e-5 * largest, name.name().c_str());
    }, run.grad(), *want);
    CHECK(run.norm() == doctest::Approx(grad_norm(run.grad())).epsilon(1e-6));  // the touched rows only: the same norm
    run.mean_nll(c.valid, L, L + 20);  // evaluation between steps uses the lanes' windows too
  }
}

TEST_CASE("language model: a step's gradient (head over the batch, embedding rows per lane) and its norm equal the whole batch's") {
  check_step_gradient<V, 2>();
  check_step_gradient<201, 4>();
  check_step_gradient<2561, 2, 16>();
}

// Lanes fixed (4), threads 1 to 5 (more than the lanes, and than this machine's cores): the
// same losses and the same checkpoint, byte for byte.
TEST_CASE("language model: 4 lanes on 1, 2, 3, 4 and 5 threads give the same checkpoint") {
  Corpus c = small_corpus();
  lm::TrainOptions o;
  o.lr = 3e-3f;
  o.steps = 20;
  o.warmup = 5;
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  std::vector<float> losses[5];
  std::string bytes[5];
  for (size_t t = 1; t <= 5; ++t) {
    auto run = std::make_unique<lm::Run<V, L, D, H, F, 1, 8, 4>>(3, t);
    CHECK(run->pool.size() == t);
    for (int s = 0; s < 20; ++s) losses[t - 1].push_back(run->step(c.train, o));
    const auto path = dir / ("stformer_lm_threads_" + tag + ".safetensors");
    run->save(path, c.vocab, o);
    std::ifstream f(path, std::ios::binary);
    bytes[t - 1].assign(std::istreambuf_iterator<char>(f), {});
    std::filesystem::remove(path);
  }
  for (size_t t = 2; t <= 5; ++t) {
    CHECK_MESSAGE(losses[t - 1] == losses[0], t << " threads");
    CHECK_MESSAGE(bytes[t - 1] == bytes[0], t << " threads");
  }
  CHECK(losses[0].back() < losses[0].front());
  CHECK(bytes[0].find("lanes=4") != std::string::npos);  // the configuration, in the checkpoint's metadata
}

TEST_CASE("language model, the GPT over bytes: the text's bytes, loss falls, 1 and 2 threads agree, every byte scored once as the full pass does") {
  Corpus c = small_corpus();
  const auto train = lm::text_bytes(c.train, c.vocab), test = lm::text_bytes(c.test, c.vocab);
  // the test file's text again: its lines' words joined by spaces, each line ending in a newline
  std::string text;
  for (std::int32_t b : test) text.push_back(char(b));
  CHECK(text.rfind("w0 w1 w2 w3 w4 w5 w6 w7 w8\nw9\n", 0) == 0);
  CHECK(text.size() >= 13);
  CHECK(text.substr(text.size() - 9) == "w0 w1 w2\n");
  constexpr size_t GL = 16, GB = 8;
  using GRun = lm::GptRun<GL, 16, 2, 1, GB>;
  lm::TrainOptions o{.lr = 3e-3f, .steps = 120, .warmup = 10};
  std::vector<float> losses[2];
  for (int r = 0; r < 2; ++r) {
    GRun run(5, r + 1);
    const auto before = run.stream_nll(test);
    for (int s = 0; s < 120; ++s) losses[r].push_back(run.step(train, o, lm::learning_rate(o, s)));
    const auto after = run.stream_nll(test);
    CHECK(before.second == test.size() - 1);  // every byte but the first, once
    CHECK(after.first < 0.6 * before.first);
    if (r == 0) {
      // the windows' NLL against the causal pass over each window of L bytes at its own offsets:
      // byte t + 1 from the pass over the window that scores it, recomputed here one window at a
      // time (from 0, then every L/2, a last one at the end)
      auto pass = std::make_unique<InferOf<GRun::Model, 1, GL>>();
      IdTensor<1, GL> x;
      std::vector<float> scratch(256);
      double direct = 0;
      size_t scored = 0, covered = 0;
      const auto window = [&](size_t s, size_t first) {
        for (size_t i = 0; i < GL; ++i) x(0, i) = test[s + i];
        const auto& y = pass->forward(*run.model, x, Mask<1, GL>{.causal = true});
        for (size_t i = first; i < GL; ++i) direct += lm::nll_of<256>(y.data() + i * 256, test[s + i + 1], scratch.data()), ++scored;
        covered = s + GL;
      };
      for (size_t s = 0; s + GL < test.size(); s += GL / 2) window(s, s == 0 ? 0 : GL / 2);
      if (covered < test.size() - 1) window(test.size() - 1 - GL, covered - (test.size() - 1 - GL));
      CHECK(scored == after.second);
      CHECK(after.first == doctest::Approx(direct).epsilon(1e-6));
    }
  }
  CHECK(losses[0] == losses[1]);
}
