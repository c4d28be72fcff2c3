// SPEC Example 2: a language model that predicts the token after a window of L tokens.
// A sample is the window ids[t−L, t) and its next token ids[t], for every position t ≥ L of a
// token stream; training visits the training stream's samples in an order shuffled from the
// seed, batch by batch (a new permutation per pass). Perplexity on a split is
// exp(mean NLL) over every position t ≥ L of its stream.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <stformer/io/checkpoint.hpp>
#include <stformer/io/corpus.hpp>
#include <stformer/quantized/checkpoint.hpp>
#include <stformer/quantized/quantize.hpp>
#include <stformer/quantized/weight_int8.hpp>
#include <stformer/stformer.hpp>
#include <stformer/train/training.hpp>
#include <stformer/train/parallel.hpp>

#include "byte_gpt.hpp"

namespace lm {

using namespace stformer;

struct TrainOptions {
  float lr = 1e-3f;
  std::int64_t steps = 1000;   // the schedule's length
  std::int64_t warmup = 500;   // linear warm-up steps (SPEC)
  float clip = 1.0f;           // global-norm clipping (SPEC)
  bool sgd = false;            // the seed's recipe: SGD, momentum 0.9, Nesterov, weight decay 1e-4
};

// Negative log-likelihood of target t under logits z [V]; scratch [V] is overwritten.
template <size_t V>
double nll_of(const float* z, std::int32_t t, float* scratch) {
  float m;
  return std::log(exp_shifted_sum<V>(z, scratch, m)) + m - z[t];
}

inline void check_vocabulary(const Vocabulary& vocab, size_t V, const std::string& where) {
  if (vocab.size() != V)
    throw std::runtime_error(where + ": the vocabulary has " + std::to_string(vocab.size()) + " words; this build's model has V = " +
                             std::to_string(V));
}
template <size_t V>
void check_vocabulary(const Vocabulary& vocab, const std::string& where) {
  check_vocabulary(vocab, V, where);
}

// Model and vocabulary from a checkpoint written by Run::save (a parameters-only file under
// SPEC's names plus state.vocab is enough); a vocabulary whose size is not the model's V is
// refused. A checkpoint without a vocabulary (a model exported from PyTorch under SPEC's names)
// takes the one SPEC's rule derives from the corpus it is used with, corpus() (called only
// then), and is refused with how to give one when there is no corpus. A file that holds another
// model is refused as such (max_value's checkpoints name theirs).
template <class M>
Vocabulary load_model(const std::string& path, M& model, const std::function<const Vocabulary&()>& corpus = {}) {
  auto f = safetensors::File::read(path);
  if (f.find("embedding.weight") == nullptr) {
    auto m = f.metadata().find("model");
    throw std::runtime_error("checkpoint " + path + " holds no language model (no tensor 'embedding.weight')" +
                             (m != f.metadata().end() ? ": it holds max_value's " + m->second + " model" : std::string()));
  }
  const auto* v = f.find("state.vocab");
  Vocabulary vocab;
  if (v != nullptr && v->dtype == safetensors::Dtype::U8) {
    try {
      vocab = Vocabulary::deserialize({reinterpret_cast<const char*>(v->bytes.data()), v->bytes.size()});
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("checkpoint " + path + ": its 'state.vocab' is not a vocabulary: " + e.what());
    }
  } else if (v != nullptr) {
    throw std::runtime_error("checkpoint " + path + ": its vocabulary 'state.vocab' is " + std::string(dtype_name(v->dtype)) + ", not U8");
  } else if (corpus) {
    vocab = corpus();
  } else {
    throw std::runtime_error("checkpoint " + path +
                             " has no vocabulary (no tensor 'state.vocab', as in a model exported from PyTorch): give the corpus "
                             "it was trained on, --data WIKITEXT2_DIR, and the vocabulary is derived from it by SPEC's rule");
  }
  using Embedding = std::remove_cvref_t<decltype(model.template get<"embedding">())>;
  check_vocabulary(vocab, Embedding::vocabulary, "checkpoint " + path);
  constexpr bool float_table = requires(const Embedding& e) { requires std::is_same_v<typename decltype(e.weight)::value_type, float>; };
  if constexpr (!float_table)
    load_quantized(f, model);  // the integer weights' scales checked too
  else
    load_params(f, model);
  return vocab;
}

// SPEC's schedule: linear warm-up over o.warmup steps, then cosine to 0 at o.steps.
inline float learning_rate(const TrainOptions& o, std::int64_t step) {
  return Schedule{Schedule::warmup_cosine, o.lr, o.steps, o.warmup}(step);
}

// Model, optimisers and the batch's workspace, allocated once. The batch of B windows is
// split into Lanes chunks of B / Lanes windows (stformer/train/parallel.hpp), Lanes being part
// of the configuration like B (a chunk's shape is a type): each lane runs forward, loss and
// backward on its chunk into its own gradient; the gradients are summed in lane order, then
// clipping and the optimiser step run split over the pool. The work does not depend on the
// number of threads (any number: lane l runs on thread l % T), so neither do the results.
//
// Two tensors are 17 MB each in SPEC's configuration and would make a step mostly memory
// traffic if every lane kept, cleared and added a whole copy of their gradients:
// - head (Linear<D, V>): its forward and its backward over the whole batch run once each, in
//   HeadParts fixed parts of the vocabulary on the pool, each in blocks of HeadRows rows so that
//   a block of W and of its gradient stays in cache for every lane. Forward: the block of W
//   packed once into the product's panels for every lane's logits (the same bits as the lanes'
//   own products). Backward: dW, db straight into grad() (each lane's rows in lane order), each
//   lane's share of dL/d(pooled) = dlogits · W (the parts added in part order), and the block's
//   sum of squares for the gradient norm.
// - embedding: a lane's gradient is non-zero only in the rows of its windows, so only those
//   rows are added into grad() and cleared (at the start of the next gradient()), and only
//   those rows enter the gradient norm (norm()).
// Whether the checkpoint at `path` holds the weight-only int8 model (wikitext_lm quantize):
// an I8 embedding.
inline bool int8_weights(const safetensors::File& f) {
  const auto* e = f.find("embedding.weight");
  return e != nullptr && e->dtype == safetensors::Dtype::I8;
}
// Whether it holds the integer model (wikitext_lm quantize --integer): an output.scale.
inline bool integer_model(const safetensors::File& f) { return f.find("output.scale") != nullptr; }

template <size_t V, size_t L, size_t D, size_t H, size_t F, size_t Blocks, size_t B, size_t LaneCount = (B % 2 == 0 ? 2 : 1)>
struct Run {
  static constexpr size_t Lanes = LaneCount;
  using Model = LanguageModel<V, L, D, H, F, Blocks>;
  using Model8 = LanguageModelW8<V, L, D, H, F, Blocks>;  // int8 embedding and head (evaluation only)
  static_assert(Lanes >= 1 && B % Lanes == 0, "lm::Run: the batch B must split into Lanes equal chunks");
  static constexpr size_t Chunk = B / Lanes;
  // The head's backward: parts of VP rows (the last takes the rest), split over the pool, each
  // in blocks of HeadRows rows (W's: 128 KB at D = 128).
  static constexpr size_t HeadParts = 8, VP = V / HeadParts / 16 * 16, HeadRows = 256;

  struct Lane {
    Model grad;
    ActsOf<Model, Chunk> acts;    // training
    InferOf<Model, Chunk> infer;  // evaluation (forward only: the same logits)
    Tensor<Chunk, 1, V> dlogits;
    Tensor<Chunk, 1, D> dpooled;
    IdTensor<Chunk, L> window;
    IdTensor<Chunk> next;
    IdTensor<Chunk, L> written;  // the windows of the last gradient(): its embedding rows
    double loss;
  };

  std::unique_ptr<Model> model = std::make_unique<Model>();
  using ModelQ = Quantized<Model>;  // the whole model in integers (evaluation only)
  std::unique_ptr<Model8> model8;  // set (use_int8): mean_nll evaluates it instead
  std::unique_ptr<std::array<InferOf<Model8, Chunk>, Lanes>> infer8;  // model8's passes, one per lane
  std::unique_ptr<ModelQ> modelq;  // set (use_integer): mean_nll evaluates it instead
  std::unique_ptr<std::array<InferOf<ModelQ, Chunk, L>, Lanes>> inferq;

  // The int8-weight model for mean_nll, and its passes (allocated only then: 2 MB of logits each).
  Model8& use_int8() {
    model8 = std::make_unique<Model8>();
    infer8 = std::make_unique<std::array<InferOf<Model8, Chunk>, Lanes>>();
    return *model8;
  }
  // The integer model for mean_nll, and its passes.
  ModelQ& use_integer() {
    modelq = std::make_unique<ModelQ>();
    inferq = std::make_unique<std::array<InferOf<ModelQ, Chunk, L>, Lanes>>();
    return *modelq;
  }
  std::unique_ptr<std::array<Lane, Lanes>> lanes = std::make_unique<std::array<Lane, Lanes>>();
  std::unique_ptr<AdamW<Model>> adamw = std::make_unique<AdamW<Model>>(0.01f);
  std::unique_ptr<SGD<Model>> sgd = std::make_unique<SGD<Model>>(SGDOptions{.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true});
  using HeadPanels = kernels::PanelsNT<HeadRows, D>;  // a block of the head's W, packed (head_forward)
  std::unique_ptr<std::array<HeadPanels, HeadParts>> head_panels = std::make_unique<std::array<HeadPanels, HeadParts>>();
  Tensor<B, D> pooled;                         // every lane's pooled rows (lane l's at l·Chunk), for the head's dW
  Tensor<HeadParts, Lanes, Chunk, D> head_dx;  // each head part's share of each lane's dL/d(pooled)
  std::unique_ptr<std::array<Tensor<HeadRows, B>, HeadParts>> head_dlt = std::make_unique<std::array<Tensor<HeadRows, B>, HeadParts>>();  // head_backward's dlᵀ, one per part
  double head_sq[HeadParts] = {};              // each head part's Σ dW² + Σ db²
  std::vector<std::uint8_t> seen = std::vector<std::uint8_t>(V);  // norm(): embedding rows counted
  TrainingState state;
  std::vector<std::uint32_t> order;  // shuffled sample positions of the current pass
  size_t cursor = 0;
  ThreadPool pool;

  explicit Run(std::uint64_t seed, size_t threads = 1) : state{0, Rng(seed, 1)}, pool(threads) {
    Rng init(seed, 0);
    init_params(*model, init);
    for (Lane& lane : *lanes) {
      zero_grad(lane.grad);
      lane.written.fill(0);
    }
  }

  // The batch's gradient, after gradient().
  Model& grad() { return (*lanes)[0].grad; }

  // Fills a lane's window/next with the samples at positions ids[t] (t ≥ L); rows past
  // `count` repeat the last sample.
  static void gather(Lane& lane, const std::vector<std::int32_t>& ids, const std::uint32_t* positions, size_t count) {
    for (size_t b = 0; b < Chunk; ++b) {
      size_t t = positions[b < count ? b : count - 1];
      for (size_t i = 0; i < L; ++i) lane.window(b, i) = ids[t - L + i];
      lane.next(b) = ids[t];
    }
  }

  // One optimiser step on the next batch of shuffled training samples at the schedule's
  // learning rate for o.steps steps; returns the loss.
  float step(const std::vector<std::int32_t>& train, const TrainOptions& o) {
    return step(train, o, learning_rate(o, state.step));
  }
  float step(const std::vector<std::int32_t>& train, const TrainOptions& o, float lr) {
    float loss = gradient(train);
    const float norm = this->norm();
    check_finite(state.step + 1, loss, norm, grad());  // NonFiniteError before the step (stformer/train/training.hpp)
    const float scale = o.clip > 0 ? clip_scale(norm, o.clip) : 1.0f;  // clipping, in the step
    if (o.sgd)
      sgd->step(*model, grad(), lr, pool, scale);
    else
      adamw->step(*model, grad(), lr, pool, scale);
    ++state.step;
    return loss;
  }

  // Loss and gradient (into grad()) of the next batch of shuffled training samples.
  float gradient(const std::vector<std::int32_t>& train) {
    STFORMER_CHECK(train.size() > L + B, "lm: the training stream is shorter than one batch of windows");
    if (order.empty() || cursor + B > order.size()) {  // a new pass: shuffle every position t >= L
      order.resize(train.size() - L);
      std::iota(order.begin(), order.end(), std::uint32_t(L));
      for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[state.rng.below(std::uint32_t(i + 1))]);
      cursor = 0;
    }
    const std::uint32_t* positions = order.data() + cursor;
    cursor += B;
    for (const Lane& lane : *lanes)  // grad()'s embedding rows from the last gradient() (the other lanes' were cleared when added)
      for (std::int32_t id : lane.written) std::fill_n(grad().template get<"embedding">().weight.data() + size_t(id) * D, D, 0.0f);
    pool.run(Lanes, [&](size_t l) {
      Lane& lane = (*lanes)[l];
      gather(lane, train, positions + l * Chunk, Chunk);
      lane.written = lane.window;
      zero_grad(lane.grad.template get<"blocks">());
      zero_grad(lane.grad.template get<"pool">());
      const auto& rows = lane.acts.template forward_to<3>(*model, lane.window);
      std::copy_n(rows.data(), Chunk * D, pooled.data() + l * Chunk * D);
    });
    pool.run(HeadParts, [&](size_t part) { head_forward(part); });
    pool.run(Lanes, [&](size_t l) {
      Lane& lane = (*lanes)[l];
      lane.loss = cross_entropy(lane.acts.template at<"head">().out, lane.next, lane.dlogits, B);
    });
    pool.run(HeadParts, [&](size_t part) { head_backward(part); });
    pool.run(Lanes, [&](size_t l) {
      Lane& lane = (*lanes)[l];
      constexpr size_t n = Chunk * D;
      kernels::add<n>(head_dx.data() + l * n, head_dx.data() + (Lanes + l) * n, lane.dpooled.data());
      for (size_t part = 2; part < HeadParts; ++part) kernels::add_to<n>(head_dx.data() + (part * Lanes + l) * n, lane.dpooled.data());
      lane.acts.template backward_to<0, 3>(*model, lane.grad, lane.dpooled);
    });
    return float(sum_lanes());
  }

  // The other lanes' gradients added into grad() in lane order (the embedding's only in the rows
  // of their windows, which are then cleared in the lane), and the lanes' losses summed.
  double sum_lanes() {
    double loss = (*lanes)[0].loss;
    for (size_t l = 1; l < Lanes; ++l) {
      Lane& lane = (*lanes)[l];
      add_grads(grad().template get<"blocks">(), lane.grad.template get<"blocks">(), pool);
      add_grads(grad().template get<"pool">(), lane.grad.template get<"pool">(), pool);
      for (size_t i = 0; i < Chunk * L; ++i) {  // its embedding rows, each once
        const size_t id = size_t(lane.window.data()[i]);
        float* row = lane.grad.template get<"embedding">().weight.data() + id * D;
        kernels::add_to<D>(row, grad().template get<"embedding">().weight.data() + id * D);
        std::fill_n(row, D, 0.0f);
      }
      loss += lane.loss;
    }
    return loss;
  }

  // f.template operator()<part, v0, M>() for part `which` of the head: rows [v0, v0 + M) of the
  // vocabulary (sizes known at compile time).
  template <size_t part = 0, class Fn>
  static void on_head_part(size_t which, Fn&& f) {
    if constexpr (part + 1 < HeadParts)
      if (which != part) return on_head_part<part + 1>(which, f);
    f.template operator()<part, part * VP, part + 1 < HeadParts ? VP : V - part * VP>();
  }

  // Part `which` of the head's forward over the whole batch, rows [v0, v0 + M) of every lane's
  // logits = pooled · Wᵀ + b, block by block, each whole block of W packed once for the lanes.
  void head_forward(size_t which) {
    on_head_part(which, [&]<size_t part, size_t v0, size_t M>() {
      for_tiles<M, HeadRows>([&]<size_t R>(size_t i) {
        const size_t v = v0 + i;
        const float* w = model->template get<"head">().weight.data() + v * D;
        const kernels::PanelsNT<R, D>* panels = nullptr;
        if constexpr (R == HeadRows && kernels::packs<Chunk>) {
          (*head_panels)[part].pack(w, D);
          panels = &(*head_panels)[part];
        }
        for (size_t l = 0; l < Lanes; ++l)
          kernels::matmul_nt<Chunk, R, D, false, Chunk>(pooled.data() + l * Chunk * D, D, w, D, (*lanes)[l].acts.template at<"head">().out.data() + v, V,
                                                        1.0f, model->template get<"head">().bias.data() + v, panels);
      });
    });
  }

  // Part `which` of the head's backward over the whole batch, rows [v0, v0 + M), block by block:
  //   dlᵀ = the block's columns of every lane's dlogits, transposed: [R, B], lane l's at l·Chunk
  //   dW = dlᵀ · pooled,  db = Σ_lanes Σ_rows dlogits        (into grad(); pooled: [B, D])
  //   head_dx[part] += dl · W[block]                          (its share of dL/d(pooled), [B, D])
  //   head_sq[part] = Σ dW² + Σ db²
  // The whole batch's rows in one product: each entry of dW is one chain over the B rows in lane
  // order (the same as the lanes' products one after the other: a stored sum reloads exactly),
  // 32 terms long instead of two of 16, and W's block is read for B rows of dx at once.
  void head_backward(size_t which) {
    on_head_part(which, [&]<size_t part, size_t v0, size_t M>() {
      float* dx = head_dx.data() + part * B * D;
      float* dlt = (*head_dlt)[part].data();
      std::fill_n(dx, B * D, 0.0f);
      double sq = 0;
      for_tiles<M, HeadRows>([&]<size_t R>(size_t i) {
        const size_t v = v0 + i;
        float* dw = grad().template get<"head">().weight.data() + v * D;
        float* db = grad().template get<"head">().bias.data() + v;
        std::fill_n(db, R, 0.0f);
        for (size_t l = 0; l < Lanes; ++l) {
          const float* dl = (*lanes)[l].dlogits.data() + v;
          kernels::transpose<R>(dl, V, Chunk, dlt + l * Chunk, B);
          for (size_t b = 0; b < Chunk; ++b) kernels::add_to<R>(dl + b * V, db);
        }
        kernels::matmul_nn<R, D, B, false>(dlt, B, pooled.data(), D, dw, D);
        kernels::matmul_tn<B, D, R, true>(dlt, B, model->template get<"head">().weight.data() + v * D, D, dx, D);
        sq += kernels::sum_squares(dw, R * D) + kernels::sum_squares(db, R);
      });
      head_sq[part] = sq;
    });
  }

  // The global L2 norm of grad() after gradient() (as grad_norm(grad()), up to summation
  // order): the head's from head_backward, the embedding's over the rows this batch's windows
  // touched (every other row is 0), the blocks' and the pool's in full.
  float norm() {
    double sum = 0;
    for (double sq : head_sq) sum += sq;
    sum += grad_sum_squares(grad().template get<"blocks">()) + grad_sum_squares(grad().template get<"pool">());
    for (const Lane& lane : *lanes)
      for (std::int32_t id : lane.written)
        if (!seen[size_t(id)]) {
          seen[size_t(id)] = 1;
          sum += kernels::sum_squares(grad().template get<"embedding">().weight.data() + size_t(id) * D, D);
        }
    for (const Lane& lane : *lanes)
      for (std::int32_t id : lane.written) seen[size_t(id)] = 0;
    return float(std::sqrt(sum));
  }

  // The configuration, as save() writes it in a checkpoint's metadata "config".
  static std::string config() {
    return "V=" + std::to_string(V) + " L=" + std::to_string(L) + " D=" + std::to_string(D) + " H=" + std::to_string(H) + " F=" + std::to_string(F) +
           " blocks=" + std::to_string(Blocks) + " batch=" + std::to_string(B) + " lanes=" + std::to_string(Lanes);
  }

  // A checkpoint: save_checkpoint's layout (the model under SPEC's names, the optimiser of
  // o, the step and generator) plus the vocabulary as "state.vocab" (U8: the words in id
  // order, one per line).
  void save(const std::string& path, const Vocabulary& vocab, const TrainOptions& o) {
    safetensors::Writer w;
    w.set_metadata("model", "wikitext_lm");
    w.set_metadata("config", config());
    if (o.sgd)
      add_checkpoint(w, *model, *sgd, state);
    else
      add_checkpoint(w, *model, *adamw, state);
    std::string words = vocab.serialize();
    w.add("state.vocab", safetensors::Dtype::U8, {words.size()}, std::as_bytes(std::span(words)));
    w.write(path);
  }

  // Mean NLL over positions [first, last) of ids (each t ≥ L), B windows at a time split over
  // the lanes, summed in lane order; exp of it is the perplexity. Of model8 when it is set.
  double mean_nll(const std::vector<std::int32_t>& ids, size_t first = L, size_t last = 0) {
    if (last == 0 || last > ids.size()) last = ids.size();
    first = std::max(first, L);
    if (first >= last) return 0;
    double sum = 0;
    for (size_t t0 = first; t0 < last; t0 += B) {
      pool.run(Lanes, [&](size_t l) {
        Lane& lane = (*lanes)[l];
        lane.loss = 0;
        size_t begin = t0 + l * Chunk, count = begin < last ? std::min(Chunk, last - begin) : 0;
        if (count == 0) return;
        std::uint32_t positions[Chunk];
        for (size_t b = 0; b < Chunk; ++b) positions[b] = std::uint32_t(begin + std::min(b, count - 1));
        gather(lane, ids, positions, count);
        const float* logits = (modelq   ? (*inferq)[l].forward(*modelq, lane.window)
                               : model8 ? (*infer8)[l].forward(*model8, lane.window)
                                        : lane.infer.forward(*model, lane.window))
                                  .data();
        for (size_t b = 0; b < count; ++b) lane.loss += nll_of<V>(logits + b * V, lane.next(b), lane.dlogits.data());
      });
      for (size_t l = 0; l < Lanes; ++l) sum += (*lanes)[l].loss;
    }
    return sum / double(last - first);
  }
};

// The whole model in integers (stformer/quantized/quantize.hpp): calibrated on `windows` training
// windows at positions drawn from Rng(seed, 4), 16 at a time.
template <size_t V, size_t L, size_t D, size_t H, size_t F, size_t Blocks>
std::unique_ptr<Quantized<LanguageModel<V, L, D, H, F, Blocks>>> quantize_integer(const LanguageModel<V, L, D, H, F, Blocks>& f,
                                                                                 const std::vector<std::int32_t>& train, size_t windows,
                                                                                 std::uint64_t seed = 0) {
  constexpr size_t C = 16;
  Calibration<LanguageModel<V, L, D, H, F, Blocks>, C, L> calibration(f);
  auto ids = std::make_unique<IdTensor<C, L>>();
  Rng rng(seed, 4);
  for (size_t done = 0; done < windows; done += C) {
    for (size_t b = 0; b < C; ++b) {
      const size_t t = L + size_t(rng.below(std::uint32_t(train.size() - L)));
      for (size_t i = 0; i < L; ++i) (*ids)(b, i) = train[t - L + i];
    }
    calibration.observe(*ids);
  }
  return calibration.quantize();
}

// The text of a split as bytes (token ids of a Corpus): each line's words joined by spaces, its
// <eos> a newline. A word's bytes and the separator after it are its share of the text.
inline std::vector<std::int32_t> text_bytes(const std::vector<std::int32_t>& ids, const Vocabulary& vocab) {
  std::vector<std::int32_t> bytes;
  const std::int32_t eos = vocab.find(Vocabulary::eos);
  bool line_start = true;
  for (std::int32_t id : ids) {
    if (id == eos) {
      bytes.push_back('\n');
      line_start = true;
      continue;
    }
    if (!line_start) bytes.push_back(' ');
    for (unsigned char c : vocab.word(id)) bytes.push_back(c);
    line_start = false;
  }
  return bytes;
}

// Training and evaluation of ByteGpt (byte_gpt.hpp) on a byte stream. A step: B windows of L bytes at offsets
// drawn from the run's generator, each position's next byte the target (cross-entropy over the
// B·L positions), B / Lanes windows a lane (chunked_gradient: any thread count, the same bits),
// global-norm clipping, AdamW on SPEC's schedule (warm-up, cosine).
template <size_t L, size_t D, size_t H, size_t Blocks, size_t B, size_t Lanes = 2>
struct GptRun {
  using Model = ByteGpt<L, D, H, Blocks>;
  static constexpr size_t V = 256, Chunk = B / Lanes;
  static_assert(B % Lanes == 0, "lm::GptRun: the batch B must split into Lanes equal chunks");
  struct Lane {
    Model grad;
    double loss;
    ActsOf<Model, Chunk, L> acts;
    InferOf<Model, Chunk, L> infer;
    Tensor<Chunk, L, V> dlogits;
    IdTensor<Chunk, L> x;
    IdTensor<Chunk * L> y;
  };
  std::unique_ptr<Model> model = std::make_unique<Model>();
  std::unique_ptr<std::array<Lane, Lanes>> lanes = std::make_unique<std::array<Lane, Lanes>>();
  std::unique_ptr<AdamW<Model>> adamw = std::make_unique<AdamW<Model>>(0.01f);
  TrainingState state;
  ThreadPool pool;
  std::vector<std::uint32_t> offsets = std::vector<std::uint32_t>(B);

  explicit GptRun(std::uint64_t seed, size_t threads = 1) : state{0, Rng(seed, 1)}, pool(threads) {
    Rng init(seed, 0);
    init_params(*model, init);
  }

  // One optimiser step at learning rate lr; returns the batch's mean loss (nats a byte).
  float step(const std::vector<std::int32_t>& train, const TrainOptions& o, float lr) {
    STFORMER_CHECK(train.size() > L + 1, "lm::GptRun: the training stream is shorter than a window");
    for (auto& t : offsets) t = state.rng.below(std::uint32_t(train.size() - L));
    const double loss = chunked_gradient(*lanes, Lanes, pool, [&](Lane& lane, size_t c) {
      for (size_t b = 0; b < Chunk; ++b)
        for (size_t i = 0; i < L; ++i) lane.x(b, i) = train[offsets[c * Chunk + b] + i], lane.y(b * L + i) = train[offsets[c * Chunk + b] + i + 1];
      const float chunk_loss = cross_entropy(lane.acts.forward(*model, lane.x, Mask<Chunk, L>{.causal = true}), lane.y, lane.dlogits, B * L);
      lane.acts.backward(*model, lane.grad, lane.dlogits);
      return chunk_loss;
    });
    Model& grad = (*lanes)[0].grad;
    const float norm = grad_norm(grad, pool, Lanes);
    check_finite(state.step + 1, loss, norm, grad);
    adamw->step(*model, grad, lr, pool, o.clip > 0 ? clip_scale(norm, o.clip) : 1.0f);
    ++state.step;
    return float(loss);
  }

  // The NLL (nats) summed over bytes 1 .. n − 1 of the stream's first n (limit, or all), each
  // predicted once by windows of L bytes every L/2: the first window predicts its bytes 1 .. L,
  // each later one its last L/2 (after at least L/2 bytes of context), a last window ending at
  // the stream's end the bytes left; and how many (n − 1). Of M (the float model, or its integer
  // one: pass_of(l), lane l's InferOf<M, Chunk, L>) over Chunk windows a lane, Lanes at a time;
  // limit: the stream's first bytes alone (0: all).
  template <class M, class PassOf>
  std::pair<double, size_t> stream_nll(const M& m, PassOf&& pass_of, const std::vector<std::int32_t>& bytes, size_t limit = 0) {
    const size_t n = limit && limit < bytes.size() ? limit : bytes.size();
    struct Window {
      size_t start, first;  // its bytes, and the first position it scores
    };
    std::vector<Window> starts;
    size_t covered = 0;  // the last byte predicted so far
    for (size_t s = 0; s + L < n; s += L / 2) starts.push_back({s, s == 0 ? 0 : L / 2}), covered = s + L;
    if (n > L && covered < n - 1) starts.push_back({n - 1 - L, covered - (n - 1 - L)});
    double sum = 0;
    size_t count = 0;
    double lane_sum[Lanes];
    size_t lane_count[Lanes];
    for (size_t w0 = 0; w0 < starts.size(); w0 += Chunk * Lanes) {
      pool.run(Lanes, [&](size_t l) {
        Lane& lane = (*lanes)[l];
        lane_sum[l] = 0, lane_count[l] = 0;
        const size_t first = w0 + l * Chunk;
        if (first >= starts.size()) return;
        const size_t k = std::min(Chunk, starts.size() - first);
        for (size_t b = 0; b < Chunk; ++b)
          for (size_t i = 0; i < L; ++i) lane.x(b, i) = bytes[starts[first + std::min(b, k - 1)].start + i];
        const float* logits = pass_of(l).forward(m, lane.x, Mask<Chunk, L>{.causal = true}).data();
        for (size_t b = 0; b < k; ++b) {
          const size_t s = starts[first + b].start;
          for (size_t i = starts[first + b].first; i < L; ++i)
            lane_sum[l] += nll_of<V>(logits + (b * L + i) * V, bytes[s + i + 1], lane.dlogits.data()), ++lane_count[l];
        }
      });
      for (size_t l = 0; l < Lanes; ++l) sum += lane_sum[l], count += lane_count[l];
    }
    return {sum, count};
  }
  // The float model's.
  std::pair<double, size_t> stream_nll(const std::vector<std::int32_t>& bytes, size_t limit = 0) {
    return stream_nll(*model, [&](size_t l) -> auto& { return (*lanes)[l].infer; }, bytes, limit);
  }

  static std::string config() {
    return "bytes L=" + std::to_string(L) + " D=" + std::to_string(D) + " H=" + std::to_string(H) + " blocks=" + std::to_string(Blocks) +
           " batch=" + std::to_string(B) + " lanes=" + std::to_string(Lanes);
  }
  // A checkpoint: the model under its names, AdamW's moments, the step and generator.
  void save(const std::string& path) {
    safetensors::Writer w;
    w.set_metadata("model", "wikitext_lm_gpt");
    w.set_metadata("config", config());
    add_checkpoint(w, *model, *adamw, state);
    w.write(path);
  }
};

// The GPT in integers: calibrated on `windows` windows of the training bytes at offsets drawn
// from Rng(seed, 4), 16 at a time, each pass causal.
template <size_t L, size_t D, size_t H, size_t Blocks>
std::unique_ptr<Quantized<ByteGpt<L, D, H, Blocks>>> quantize_gpt(const ByteGpt<L, D, H, Blocks>& f, const std::vector<std::int32_t>& train,
                                                                  size_t windows, std::uint64_t seed = 0) {
  constexpr size_t C = 16;
  auto calibration = std::make_unique<Calibration<ByteGpt<L, D, H, Blocks>, C, L>>(f);
  auto ids = std::make_unique<IdTensor<C, L>>();
  Rng rng(seed, 4);
  for (size_t done = 0; done < windows; done += C) {
    for (size_t b = 0; b < C; ++b) {
      const size_t t = size_t(rng.below(std::uint32_t(train.size() - L)));
      for (size_t i = 0; i < L; ++i) (*ids)(b, i) = train[t + i];
    }
    calibration->observe(*ids, Mask<C, L>{.causal = true});
  }
  return calibration->quantize();
}

}  // namespace lm
