// wikitext_lm — SPEC Example 2: encoder blocks + attention pooling predicting the next word;
// with --model gpt, a causal GPT over the text's bytes generating through its cache (gpt.hpp).
//
//   wikitext_lm train    --data DIR [--steps N | --minutes M] [--threads T] [--seed S] [--lr LR]
//                        [--sgd] [--checkpoint P] [--curve CSV] [--eval-every N]
//                        [--eval-positions N] [--save-every N] [--resume P]
//   wikitext_lm train --model gpt --data DIR [--steps N | --minutes M] [--threads T] [--seed S]
//                        [--lr LR] [--checkpoint P] [--eval-every N] [--eval-positions BYTES]
//   (eval, generate and quantize take the GPT's checkpoints as they are: generate --bytes N)
//   wikitext_lm eval     --checkpoint P --data DIR [--split valid|test]
//   wikitext_lm predict  --checkpoint P --context "words ..." [--top 10] [--data DIR]
//   wikitext_lm generate --checkpoint P --prompt "words ..." [--words 30] [--temperature 1]
//                        [--top-k 40] [--seed S] [--data DIR]
//   wikitext_lm quantize --checkpoint P --output Q [--data DIR]   (int8 embedding and head;
//                        eval, predict and generate take Q)
//   wikitext_lm quantize --integer --checkpoint P --output Q --data DIR   (the whole model in
//                        integers, calibrated on 1,024 training windows)
//   wikitext_lm plot     --curve CSV [--compare CSV] [--output curve.png]
//   wikitext_lm info     (the memory plan of a forward-only pass over one window)
//
// The learning curve (--curve) is a CSV: step, minutes, train_loss (mean over the last 100
// steps), valid_ppl (empty between validations); bench/lm_torch.py writes the same columns.
//
// Faults (stformer/train/training.hpp): a non-finite loss or gradient stops training with a message
// naming the step and the tensor, and saves nothing over the last checkpoint; SIGINT/SIGTERM
// end the step under way, write the checkpoint (continue with --resume) and exit with 128 +
// the signal; checkpoints are replaced atomically, so a kill never leaves a broken one.
//
// The checkpoint holds the model under SPEC's names, the vocabulary ("state.vocab", U8: the
// words in id order, one per line) and, from `train`, the optimiser and generator state. A
// checkpoint without a vocabulary (exported from PyTorch under SPEC's names) takes the one
// SPEC's rule derives from the corpus: `eval`'s --data, or --data given to predict/generate.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <thread>

#include <stformer/io/corpus.hpp>
#include <stformer/io/gnuplot.hpp>

#include "../checks.hpp"
#include "gpt.hpp"
#include "language_model.hpp"

using namespace stformer;

namespace {

constexpr size_t V = 33278, L = 32, D = 128, H = 4, F = 512, Blocks = 2, B = 32;  // SPEC's default
using LmRun = lm::Run<V, L, D, H, F, Blocks, B>;
using Model = LmRun::Model;
using Model8 = LmRun::Model8;
using ModelQ = LmRun::ModelQ;

// predict and generate: one window at a time, forward only, of the float model, (M = Model8)
// the one with int8 embedding and head, or (M = ModelQ) the integer one.
template <class M>
struct Inference {
  M model;
  InferOf<M, 1, L> infer;
  IdTensor<1, L> window;
};

// The last L ids of text's words (unknown words are an error naming the word, `what` the text
// is and `source` the vocabulary's file), left-padded with <eos>.
void context_window(const Vocabulary& vocab, const std::string& text, IdTensor<1, L>& window, const std::string& what, const std::string& source) {
  std::vector<std::int32_t> ids;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    std::int32_t id = vocab.find(w);
    if (id < 0)
      throw std::runtime_error("the word '" + w + "' of " + what + " is not in the vocabulary of " + source +
                               " (WikiText-2 writes rare words as <unk>)");
    ids.push_back(id);
  }
  std::int32_t eos = vocab.find(Vocabulary::eos);
  for (size_t i = 0; i < L; ++i) {
    size_t from_end = L - i;
    window(0, i) = from_end <= ids.size() ? ids[ids.size() - from_end] : eos;
  }
}

// Probabilities of the next word after the window, softmax with temperature.
template <class M>
std::vector<double> next_word(Inference<M>& run, double temperature = 1.0) {
  const auto& z = run.infer.forward(run.model, run.window);
  double m = -1e30, sum = 0;
  for (size_t v = 0; v < V; ++v) m = std::max(m, double(z(0, 0, v)));
  std::vector<double> p(V);
  for (size_t v = 0; v < V; ++v) sum += p[v] = std::exp((double(z(0, 0, v)) - m) / temperature);
  for (auto& x : p) x /= sum;
  return p;
}

struct Budget {
  std::int64_t steps = 1000;
  double minutes = 0;  // > 0: a time budget instead of steps
};

// A training checkpoint's configuration (its metadata "config", key=value words) against this
// build's: a run resumes bit for bit only with the same batch and lanes. Checkpoints written
// before "lanes" was recorded had 2.
void check_config(const safetensors::File& f) {
  const auto it = f.metadata().find("config");
  if (it == f.metadata().end()) throw std::runtime_error("checkpoint " + f.label() + ": no \"config\" in its metadata: not written by wikitext_lm train");
  const auto words = [](const std::string& line) {
    std::map<std::string, std::string> m;
    std::istringstream in(line);
    for (std::string w; in >> w;)
      if (const auto eq = w.find('='); eq != std::string::npos) m[w.substr(0, eq)] = w.substr(eq + 1);
    return m;
  };
  auto theirs = words(it->second);
  theirs.try_emplace("lanes", "2");
  for (const auto& [key, value] : words(LmRun::config()))
    if (theirs[key] != value)
      throw std::runtime_error("checkpoint " + f.label() + " was trained with " + key + "=" + theirs[key] + "; this build has " + key + "=" + value +
                               " (config " + LmRun::config() + ")");
}

// Trains. With a time budget the schedule's length is estimated once, at the end of warm-up,
// from the steps per second so far (warm-up: SPEC's 500 steps, or a quarter of a step budget
// under 2,000); training stops when the time or those steps run out. Validation time is not
// counted. A time budget depends on the machine's speed: only a step budget is reproducible
// from the seed.
int train(const std::string& data, Budget budget, std::uint64_t seed, size_t threads, lm::TrainOptions o, const std::string& checkpoint,
          const std::string& curve, std::int64_t eval_every, size_t eval_positions, std::int64_t save_every, const std::string& resume) {
  auto t_read = std::chrono::steady_clock::now();
  Corpus c = Corpus::read(data);
  lm::check_vocabulary<V>(c.vocab, "corpus " + data);
  std::printf("corpus %s: %zu words, %zu / %zu / %zu tokens (%.1f s)\n", data.c_str(), c.vocab.size(), c.train.size(), c.valid.size(),
              c.test.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t_read).count());
  auto run = std::make_unique<LmRun>(seed, threads);
  if (!resume.empty()) {
    check_config(safetensors::File::read(resume));
    std::int64_t optim_steps = 0;
    if (o.sgd)
      load_checkpoint(resume, *run->model, *run->sgd, run->state), optim_steps = run->sgd->steps;
    else
      load_checkpoint(resume, *run->model, *run->adamw, run->state), optim_steps = run->adamw->steps;
    // a step from 0 to the run's length (--steps; any with --minutes)
    const std::int64_t last = budget.minutes > 0 ? std::numeric_limits<std::int64_t>::max() : budget.steps;
    if (const std::string problem = resumed_state_problem(resume, run->state.step, optim_steps, last, "the run's --steps"); !problem.empty())
      throw std::runtime_error(problem);
    std::printf("resumed from %s at step %lld\n", resume.c_str(), (long long)run->state.step);
  }
  const bool timed = budget.minutes > 0;
  o.steps = timed ? std::int64_t(1) << 40 : budget.steps;  // a time budget: set after warm-up
  if (!timed) o.warmup = std::min<std::int64_t>(o.warmup, budget.steps / 4);  // SPEC: 500; short runs warm up over a quarter
  std::printf("training %zu parameters, batch %zu in %zu lanes, %s, %zu thread%s, %s lr %g\n", param_count(*run->model), B, LmRun::Lanes,
              timed ? (std::to_string(budget.minutes) + " minutes").c_str() : (std::to_string(budget.steps) + " steps").c_str(),
              run->pool.size(), run->pool.size() > 1 ? "s" : "",
              o.sgd ? "SGD (Nesterov 0.9, decay 1e-4)" : "AdamW (decay 0.01, warm-up, cosine)", o.lr);
  std::ofstream csv;
  if (!curve.empty()) {
    csv.open(curve, resume.empty() ? std::ios::trunc : std::ios::app);
    if (!csv) throw std::runtime_error("cannot write the learning curve to " + curve);
    if (resume.empty()) csv << "step,minutes,train_loss,valid_ppl\n";
  }
  auto start = std::chrono::steady_clock::now();
  double paused = 0;  // seconds of validation: not training time
  auto seconds_since = [](auto t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); };
  auto minutes = [&] { return (seconds_since(start) - paused) / 60; };
  std::int64_t first = run->state.step, saved = !resume.empty() && resume == checkpoint ? first : -1;
  double loss_sum = 0;
  int loss_count = 0;
  stop_on_signals();
  for (;;) {
    std::int64_t s = run->state.step;
    if (s >= o.steps || (timed && minutes() >= budget.minutes) || stop_signal()) break;
    float lr = lm::learning_rate(o, s);
    try {
      loss_sum += run->step(c.train, o, lr);
    } catch (const NonFiniteError& e) {
      throw NonFiniteError(e.what() + stopped_by_numbers(checkpoint, saved, "step"));
    }
    ++loss_count;
    s = run->state.step;
    if (timed && s == first + o.warmup) {  // the schedule's length, from the warm-up's speed
      double per_minute = double(s - first) / minutes();
      o.steps = s + std::max<std::int64_t>(1, std::int64_t(per_minute * (budget.minutes - minutes())));
      std::printf("warm-up done: %.0f steps per minute, schedule of %lld steps\n", per_minute, (long long)o.steps);
    }
    bool last = s >= o.steps || (timed && minutes() >= budget.minutes);
    bool validate = eval_every > 0 && (s % eval_every == 0 || last);
    if (s % 100 == 0 || last) {
      double m = minutes(), rate = double(s - first) / (m * 60);
      double left = timed ? (budget.minutes - m) * 60 : double(o.steps - s) / rate;
      std::printf("step %7lld  loss %.4f  %6.0f tokens/s  lr %.2e  ETA %5.0f s\n", (long long)s, loss_sum / loss_count, rate * B,
                  lm::learning_rate(o, s), std::max(0.0, left));
      std::fflush(stdout);
      if (csv.is_open() && !validate) csv << s << ',' << m << ',' << loss_sum / loss_count << ",\n" << std::flush;
      if (!validate) loss_sum = 0, loss_count = 0;
    }
    if (validate) {
      double m = minutes();
      auto t_eval = std::chrono::steady_clock::now();
      double ppl = std::exp(run->mean_nll(c.valid, L, L + eval_positions));
      paused += seconds_since(t_eval);
      std::printf("step %7lld  validation perplexity %.2f (first %zu positions)\n", (long long)s, ppl, eval_positions);
      if (csv.is_open()) csv << s << ',' << m << ',' << (loss_count ? loss_sum / loss_count : NAN) << ',' << ppl << '\n' << std::flush;
      loss_sum = 0, loss_count = 0;
    }
    if (save_every > 0 && s % save_every == 0 && !checkpoint.empty()) run->save(checkpoint, c.vocab, o), saved = s;
  }
  if (const int sig = stop_signal()) {
    if (!checkpoint.empty()) run->save(checkpoint, c.vocab, o);
    std::printf("%s\n", stopped_by_signal(sig, run->state.step, checkpoint, "step").c_str());
    return 128 + sig;
  }
  std::printf("%lld steps in %.1f minutes of training (validation not counted)\n", (long long)(run->state.step - first), minutes());
  if (!checkpoint.empty()) {
    run->save(checkpoint, c.vocab, o);
    std::printf("checkpoint: %s\n", checkpoint.c_str());
  }
  return 0;
}

// The learning curve(s): training loss and validation perplexity against steps and minutes.
int plot(const std::string& curve, const std::string& compare, const std::string& png) {
  for (const auto& f : {curve, compare})
    if (!f.empty() && !std::ifstream(f)) throw std::runtime_error("cannot read the learning curve " + f);
  std::ostringstream g;
  g << "set terminal pngcairo size 1400,900\nset output '" << png << "'\nset datafile separator ','\nset key autotitle columnhead\n"
    << "set multiplot layout 2,2 title 'WikiText-2 language model: learning curves'\nset grid\n";
  auto series = [&](int x, int y, const char* what) {
    g << "plot '" << curve << "' using " << x << ':' << y << " with lines lw 2 title 'stformer " << what << "'";
    if (!compare.empty()) g << ", '" << compare << "' using " << x << ':' << y << " with lines lw 2 title 'PyTorch " << what << "'";
    g << '\n';
  };
  g << "set xlabel 'step'\nset ylabel 'training loss'\n";
  series(1, 3, "train loss");
  g << "set xlabel 'minutes'\n";
  series(2, 3, "train loss");
  g << "set xlabel 'step'\nset ylabel 'validation perplexity'\nset logscale y\n";
  series(1, 4, "valid ppl");
  g << "set xlabel 'minutes'\n";
  series(2, 4, "valid ppl");
  g << "unset multiplot\n";
  gnuplot(g.str());
  std::printf("%s\n", png.c_str());
  return 0;
}

// The corpus in the folder `data`, read once into *corpus, its vocabulary checked against V.
const Corpus& read_corpus(const std::string& data, std::optional<Corpus>& corpus) {
  if (!corpus) {
    corpus = Corpus::read(data);
    lm::check_vocabulary<V>(corpus->vocab, "corpus " + data);
  }
  return *corpus;
}

// Model and vocabulary from `checkpoint`; one without a vocabulary takes that of the corpus in
// `data` (SPEC's rule; read into *corpus), saying so, when `data` is given.
template <class M>
Vocabulary load_model(const std::string& checkpoint, M& model, const std::string& data, std::optional<Corpus>& corpus) {
  std::function<const Vocabulary&()> from_corpus;
  if (!data.empty())
    from_corpus = [&]() -> const Vocabulary& {
      std::fprintf(stderr, "wikitext_lm: %s has no vocabulary: the corpus's is used (SPEC's rule)\n", checkpoint.c_str());
      return read_corpus(data, corpus).vocab;
    };
  return lm::load_model(checkpoint, model, from_corpus);
}

// Which precision runs, said by eval, predict and generate.
template <class M>
const char* precision_of() {
  if constexpr (std::is_same_v<M, ModelQ>) return "integers from the ids to the logits (int8 weights, int8 and int16 activations)";
  return std::is_same_v<M, Model8> ? "int8 embedding and head (weight-only), float32 blocks and pool" : "float32";
}

// quantize: the float model of `checkpoint` with its embedding and head in int8 (one scale per
// row), saved with its vocabulary.
// With `integer`, the whole model in integers (lm::quantize_integer: ranges over 1,024 windows
// of the training split).
int quantize(const std::string& checkpoint, const std::string& output, const std::string& data, bool integer) {
  auto f = std::make_unique<Model>();
  std::optional<Corpus> corpus;
  Vocabulary vocab = load_model(checkpoint, *f, data, corpus);
  safetensors::Writer w;
  w.set_metadata("model", "wikitext_lm");
  char said[200];
  if (integer) {
    if (data.empty()) throw std::runtime_error("quantize --integer calibrates on the training split: give it, --data WIKITEXT2_DIR");
    const Corpus& c = read_corpus(data, corpus);
    if (c.vocab.serialize() != vocab.serialize()) throw std::runtime_error("the corpus's vocabulary differs from the checkpoint's");
    auto start = std::chrono::steady_clock::now();
    auto q = lm::quantize_integer(*f, c.train, 1024);
    w.set_metadata("precision", "integer: int8 weights, int8 and int16 activations");
    w.set_metadata("calibration", "1024 training windows");
    add_params(w, *q);
    std::snprintf(said, sizeof said, "the whole model in integers, calibrated on 1,024 training windows in %.1f s, %zu B of parameters",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), sizeof(ModelQ));
  } else {
    auto q = std::make_unique<Model8>();
    quantize_weights(*f, *q);
    w.set_metadata("precision", "int8 weights: embedding, head");
    add_params(w, *q);
    std::snprintf(said, sizeof said, "embedding and head in int8, %zu B of parameters", sizeof(Model8));
  }
  const std::string words = vocab.serialize();
  w.add("state.vocab", safetensors::Dtype::U8, {words.size()}, std::as_bytes(std::span(words)));
  w.write(output);
  std::printf("%s: %s (float32: %zu B)\n", output.c_str(), said, sizeof(Model));
  return 0;
}

// info: the model's size and the memory of a forward-only pass over one window, step by step
// (sizeof(InferOf<Model, 1>) is the whole of it: one arena, stformer/compose/sequential.hpp).
int info() {
  using I = InferOf<Model, 1>;
  auto model = std::make_unique<Model>();
  std::printf("language model (V = %zu, L = %zu, D = %zu, H = %zu, F = %zu, %zu blocks): %zu parameters, sizeof(model) = %zu B\n", V, L, D, H,
              F, Blocks, param_count(*model), sizeof(Model));
  std::printf("forward-only pass over one window: sizeof(InferOf<Model, 1>) = %zu B, one arena:\n", sizeof(I));
  write_plan<I>(stdout);
  std::printf("(training activations for one window: sizeof(ActsOf<Model, 1>) = %zu B)\n", sizeof(ActsOf<Model, 1>));
  return 0;
}

// predict (the top words after the context) or generate (words sampled after the prompt) with
// the model of type M in `checkpoint`.
template <class M>
int predict_or_generate(bool predict, const std::string& checkpoint, const std::string& data, const std::string& text, size_t top,
                        size_t words, double temperature, size_t top_k, std::uint64_t seed) {
  auto run = std::make_unique<Inference<M>>();
  std::optional<Corpus> corpus;
  Vocabulary vocab = load_model(checkpoint, run->model, data, corpus);
  std::fprintf(stderr, "%s: %s\n", checkpoint.c_str(), precision_of<M>());
  context_window(vocab, text, run->window, predict ? "--context" : "--prompt",
                 corpus ? "the corpus " + data + " (" + checkpoint + " has none)" : "checkpoint " + checkpoint);
  if (predict) {
    auto prob = next_word(*run);
    std::vector<size_t> idx(V);
    std::iota(idx.begin(), idx.end(), size_t{0});
    std::partial_sort(idx.begin(), idx.begin() + long(top), idx.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
    for (size_t i = 0; i < top; ++i) std::printf("%-20s %.4f\n", vocab.word(std::int32_t(idx[i])).c_str(), prob[idx[i]]);
    return 0;
  }
  Rng rng(seed, 3);
  std::printf("%s", text.c_str());
  for (size_t n = 0; n < words; ++n) {
    auto prob = next_word(*run, temperature);
    std::vector<size_t> idx(V);
    std::iota(idx.begin(), idx.end(), size_t{0});
    std::partial_sort(idx.begin(), idx.begin() + long(top_k), idx.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
    double total = 0;
    for (size_t i = 0; i < top_k; ++i) total += prob[idx[i]];
    double u = rng.uniform() * total;
    size_t pick = idx[0];
    for (size_t i = 0; i < top_k; ++i)
      if ((u -= prob[idx[i]]) <= 0) {
        pick = idx[i];
        break;
      }
    const std::string& w = vocab.word(std::int32_t(pick));
    std::printf(w == Vocabulary::eos ? "\n" : " %s", w.c_str());
    for (size_t i = 0; i + 1 < L; ++i) run->window(0, i) = run->window(0, i + 1);
    run->window(0, L - 1) = std::int32_t(pick);
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wikitext_lm: SPEC Example 2, a WikiText-2 language model trained and used by stformer"};
  app.require_subcommand(1);
  std::string data, checkpoint, resume, split = "test", text;
  std::int64_t eval_every = 1000, save_every = 0;
  std::string curve, compare, png = "lm_curve.png";
  size_t eval_positions = 20000, top = 10, words = 30, top_k = 40;
  std::uint64_t seed = 0;
  double temperature = 1.0;
  lm::TrainOptions o;

  auto* t = app.add_subcommand("train", "train on DIR/train.txt, with validation perplexity and checkpoints");
  std::string model_kind = "window";
  t->add_option("--model", model_kind, "window: SPEC's model of a window of words; gpt: a causal GPT over the text's bytes (generates through its cache)")
      ->check(CLI::IsMember({"window", "gpt"}))
      ->capture_default_str();
  t->add_option("--data", data, "WikiText-2 folder (train.txt, valid.txt, test.txt)")->required()->check(CLI::ExistingDirectory);
  Budget budget;
  auto* steps_opt = t->add_option("--steps", budget.steps, "optimiser steps (the schedule's length)")
                        ->check(Whole(std::int64_t{1}, std::int64_t{1} << 40))->capture_default_str();
  t->add_option("--minutes", budget.minutes, "a time budget instead of --steps (the schedule fitted to it after warm-up)")
      ->check(Positive)->excludes(steps_opt);
  t->add_option("--curve", curve, "learning curve CSV (step, minutes, train_loss, valid_ppl)")->check(OutputPath);
  t->add_option("--seed", seed, "seed of initialisation and sample order")->check(Seed)->capture_default_str();
  t->add_option("--lr", o.lr, "peak learning rate")->check(Positive)->capture_default_str();
  t->add_flag("--sgd", o.sgd, "the seed's recipe: SGD, momentum 0.9, Nesterov, weight decay 1e-4");
  t->add_option("--checkpoint", checkpoint, "checkpoint written at the end (and every --save-every steps)")->check(OutputPath);
  t->add_option("--save-every", save_every, "steps between checkpoints (0: only at the end)")->check(Whole(std::int64_t{0}, std::int64_t{1} << 40));
  t->add_option("--eval-every", eval_every, "steps between validation perplexities (0: never)")
      ->check(Whole(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str();
  t->add_option("--eval-positions", eval_positions, "validation positions used there")->check(Whole(size_t{1}, size_t{1} << 30))->capture_default_str();
  t->add_option("--resume", resume, "continue from a training checkpoint")->check(InputFile);

  auto* e = app.add_subcommand("eval", "perplexity over every position of a split");
  e->add_option("--checkpoint", checkpoint, "checkpoint")->required()->check(InputFile);
  e->add_option("--data", data, "WikiText-2 folder")->required()->check(CLI::ExistingDirectory);
  e->add_option("--split", split, "valid or test")->check(CLI::IsMember({"valid", "test"}))->capture_default_str();

  auto* p = app.add_subcommand("predict", "the most likely next words after a context");
  p->add_option("--checkpoint", checkpoint, "checkpoint")->required()->check(InputFile);
  p->add_option("--context", text, "words before the prediction")->required()->check(NotBlank);
  p->add_option("--top", top, "how many words")->check(Whole(size_t{1}, V))->capture_default_str();

  auto* g = app.add_subcommand("generate", "sample a continuation");
  g->add_option("--checkpoint", checkpoint, "checkpoint")->required()->check(InputFile);
  g->add_option("--prompt", text, "words to continue")->required()->check(NotBlank);
  g->add_option("--words", words, "words to generate")->check(Whole(size_t{1}, size_t{100000}))->capture_default_str();
  g->add_option("--temperature", temperature, "softmax temperature")->check(Between(1e-3, 100.0))->capture_default_str();
  g->add_option("--top-k", top_k, "sample among the k most likely words")->check(Whole(size_t{1}, V))->capture_default_str();
  g->add_option("--seed", seed, "seed of the sampling")->check(Seed)->capture_default_str();
  size_t bytes = 300;
  g->add_option("--bytes", bytes, "bytes to generate (the GPT's checkpoints)")->check(Whole(size_t{1}, size_t{10000000}))->capture_default_str();

  for (auto* cmd : {p, g})
    cmd->add_option("--data", data, "the corpus the model was trained on, for a checkpoint without a vocabulary (SPEC's rule derives it)")
        ->check(CLI::ExistingDirectory);

  std::string output;
  auto* qz = app.add_subcommand("quantize", "the model with its embedding and head in int8 (weight-only); eval, predict, generate take it");
  qz->add_option("--checkpoint", checkpoint, "float checkpoint")->required()->check(InputFile);
  qz->add_option("--output", output, "the quantized checkpoint")->required()->check(OutputPath);
  qz->add_option("--data", data, "the corpus: for a checkpoint without a vocabulary, and --integer's calibration")->check(CLI::ExistingDirectory);
  bool integer = false;
  qz->add_flag("--integer", integer, "the whole model in integers (int8 weights, int8 and int16 activations), not only the embedding and head");

  auto* pl = app.add_subcommand("plot", "learning curves (PNG through gnuplot) from train's --curve CSV");
  pl->add_option("--curve", curve, "stformer's curve CSV")->required()->check(InputFile);
  pl->add_option("--compare", compare, "a second curve in the same columns (bench/lm_torch.py's)")->check(InputFile);
  pl->add_option("--output", png, "PNG file")->check(OutputPath)->capture_default_str();

  auto* info_cmd = app.add_subcommand("info", "the model's size and the memory of a forward-only pass over one window, phase by phase");

  size_t threads = std::max<size_t>(std::thread::hardware_concurrency(), 1);
  for (auto* cmd : {t, e})
    cmd->add_option("--threads", threads, "threads (default: this machine's cores; the results do not depend on it)")
        ->check(Whole(size_t{1}, size_t{1024}))
        ->capture_default_str();

  app.footer(exit_codes);
  for (auto* cmd : app.get_subcommands({})) cmd->footer(exit_codes);
  if (const auto code = parse(app, argc, argv, "wikitext_lm")) return *code;
  if (*t && model_kind == "gpt" && (o.sgd || !curve.empty() || !resume.empty() || save_every > 0)) {
    std::fprintf(stderr, "wikitext_lm: train --model gpt takes --steps or --minutes, --threads, --seed, --lr, --checkpoint, --eval-every and "
                         "--eval-positions (bytes); not --sgd, --curve, --resume or --save-every\n");
    return 2;
  }
  if (*qz && integer && data.empty()) {
    std::fprintf(stderr, "wikitext_lm: quantize --integer calibrates on the training split: give it, --data WIKITEXT2_DIR\n");
    return 2;
  }
  // the corpus's files, read by every command given --data, are inputs like --checkpoint
  for (const char* name : {"train.txt", "valid.txt", "test.txt"})
    if (const std::string problem = data.empty() ? "" : input_problem((std::filesystem::path(data) / name).string(), "corpus file"); !problem.empty()) {
      std::fprintf(stderr, "wikitext_lm: --data %s: %s\n", data.c_str(), problem.c_str());
      return 2;
    }
  // an output over an input would destroy it: the corpus, the float model, the curve plotted
  {
    const auto split = [&](const char* name) { return data.empty() ? std::string() : (std::filesystem::path(data) / name).string(); };
    const std::string model_in = *t ? std::string() : checkpoint;  // train writes its checkpoint (and may resume from it)
    for (const std::string& out : {*t ? checkpoint : std::string(), *t ? curve : std::string(), output, *pl ? png : std::string()})
      if (const std::string clash = overwrites(out, {split("train.txt"), split("valid.txt"), split("test.txt"), model_in, *pl ? curve : std::string(), compare});
          !clash.empty()) {
        std::fprintf(stderr, "wikitext_lm: %s\n", clash.c_str());
        return 2;
      }
  }
  try {
    // the GPT's checkpoints, whatever the command
    const bool gpt_file = !*t && !*pl && !*info_cmd && gpt::is_gpt(safetensors::File::read(checkpoint));
    if (*t && model_kind == "gpt")
      return gpt::train(data, budget.minutes > 0 ? 0 : budget.steps, budget.minutes, seed, threads, o.lr, checkpoint, eval_every, eval_positions);
    if (*e && gpt_file) return gpt::eval(checkpoint, data, split, threads);
    if (*g && gpt_file) return gpt::generate(checkpoint, text, bytes, temperature, top_k, seed);
    if (*qz && gpt_file) {
      if (data.empty()) throw std::runtime_error("quantize: the GPT is calibrated on the training text: give it, --data WIKITEXT2_DIR");
      return gpt::quantize(checkpoint, output, data);
    }
    if (*p && gpt_file) throw std::runtime_error(checkpoint + " holds the GPT over bytes: it predicts bytes, not words; use generate");
    if (*t) return train(data, budget, seed, threads, o, checkpoint, curve, eval_every, eval_positions, save_every, resume);
    if (*pl) return plot(curve, compare, png);
    if (*qz) return quantize(checkpoint, output, data, integer);
    if (*info_cmd) return info();
    if (*e) {
      auto run = std::make_unique<LmRun>(0, threads);
      std::optional<Corpus> corpus;
      Vocabulary vocab;  // the checkpoint first
      const auto file = safetensors::File::read(checkpoint);
      if (lm::integer_model(file)) {
        vocab = load_model(checkpoint, run->use_integer(), data, corpus);
      } else if (lm::int8_weights(file)) {
        vocab = load_model(checkpoint, run->use_int8(), data, corpus);
      } else {
        vocab = load_model(checkpoint, *run->model, data, corpus);
      }
      std::printf("%s: %s\n", checkpoint.c_str(), run->modelq ? precision_of<ModelQ>() : run->model8 ? precision_of<Model8>() : precision_of<Model>());
      const Corpus& c = read_corpus(data, corpus);
      if (c.vocab.serialize() != vocab.serialize()) throw std::runtime_error("the corpus's vocabulary differs from the checkpoint's");
      const auto& ids = split == "valid" ? c.valid : c.test;
      auto start = std::chrono::steady_clock::now();
      double nll = run->mean_nll(ids);
      std::printf("%s perplexity %.2f over %zu positions (%.1f s)\n", split.c_str(), std::exp(nll), ids.size() - L,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return 0;
    }
    if (lm::integer_model(safetensors::File::read(checkpoint)))
      return predict_or_generate<ModelQ>(bool(*p), checkpoint, data, text, top, words, temperature, top_k, seed);
    if (lm::int8_weights(safetensors::File::read(checkpoint)))
      return predict_or_generate<Model8>(bool(*p), checkpoint, data, text, top, words, temperature, top_k, seed);
    return predict_or_generate<Model>(bool(*p), checkpoint, data, text, top, words, temperature, top_k, seed);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "wikitext_lm: %s\n", ex.what());
    return 1;
  }
  return 0;
}
