// quantize() of trained sequence classifiers: in integers within 1 point of the float model's
// accuracy (see test_quantized.cpp).
#include <doctest/doctest.h>

#include "quantized.hpp"

// ---- quantize: any composed model (stformer/quantized/quantize.hpp) ----

namespace {
// A model that is not SPEC's: ids -> embedding + positions -> 2 encoder blocks -> mean over the
// tokens that exist -> 2 classes; its task: whether token 1 occurs among the first n tokens
// (the rest padding).
constexpr size_t kV = 8, kL = 16, kD = 32;
using Classifier = Sequential<Named<"embedding", Embedding<kV, kD>>, PositionalEncoding<kL, kD>,
                              Named<"blocks", Repeat<EncoderBlock<kD, 4, 64>, 2>>, MeanPool<kD>, Named<"head", Linear<kD, 2>>>;

template <size_t B>
struct ClassifierBatch {
  IdTensor<B, kL> ids;
  IdTensor<B> label;
  KeyMask<B, kL> keys;
  void draw(Rng& r) {
    for (size_t b = 0; b < B; ++b) {
      const size_t n = 4 + r.below(kL - 3);
      for (size_t i = 0; i < kL; ++i) {
        ids(b, i) = i < n ? std::int32_t(2 + r.below(kV - 2)) : 0;
        keys(b, i) = i < n;
      }
      const bool has = r.below(2) == 1;
      if (has) ids(b, r.below(n)) = 1;
      label(b) = has ? 1 : 0;
    }
  }
};
}  // namespace

// Trains Classifier (a model of ids [B, kL] -> 2 logits), quantizes it, and checks the integer
// model: accuracy within 1 point, every logit within logit_bound of the float model's, the float
// model's names (`names`), saved and loaded the same.
template <class Classifier>
void trained_classifier(const char* what, std::initializer_list<const char*> names_wanted, double logit_bound = 0.25) {
  constexpr size_t B = 16;
  auto p = test::make<Classifier>();
  Rng rng(71);
  init_params(*p, rng);
  {
    auto opt = test::make<Adam<Classifier>>();
    auto g = test::make<Classifier>();
    auto acts = test::make<ActsOf<Classifier, B, kL>>();
    ClassifierBatch<B> batch;
    Tensor<B, 1, 2> dlogits;
    for (int s = 0; s < (test::slow() ? 40 : 400); ++s) {
      batch.draw(rng);
      zero_grad(*g);
      cross_entropy(acts->forward(*p, batch.ids, &batch.keys), batch.label, dlogits, B);
      acts->backward(*p, *g, dlogits);
      opt->step(*p, *g, 1e-3f);
    }
  }
  Calibration<Classifier, B, kL> cal(*p);
  Rng calib(72);
  for (int i = 0; i < 8; ++i) {
    ClassifierBatch<B> batch;
    batch.draw(calib);
    cal.observe(batch.ids, &batch.keys);
  }
  const auto q = cal.quantize();
  using Q = Quantized<Classifier>;
  static_assert(std::is_same_v<typename Q::template Input<B, kL>, IdTensor<B, kL>> && std::is_same_v<typename Q::template Output<B, kL>, Tensor<B, 1, 2>>,
                "the quantized model takes and gives what the float one does");
  // the float model's names, the integer tensors of each step, and the output's scale
  const auto names = test::param_names(*q);
  for (const char* n : names_wanted)
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);

  auto fi = test::make<InferOf<Classifier, B, kL>>();
  auto qi = test::make<InferOf<Q, B, kL>>();
  Rng fresh(73);
  double acc_f = 0, acc_q = 0, worst = 0;
  const int batches = 32;
  for (int i = 0; i < batches; ++i) {
    ClassifierBatch<B> batch;
    batch.draw(fresh);
    const auto& yf = fi->forward(*p, batch.ids, &batch.keys);
    const auto& yq = qi->forward(*q, batch.ids, &batch.keys);
    acc_f += accuracy(yf, batch.label) / batches, acc_q += accuracy(yq, batch.label) / batches;
    for (size_t k = 0; k < yf.size(); ++k) worst = std::max(worst, double(std::abs(yf.data()[k] - yq.data()[k])));
  }
  MESSAGE(std::string(what) << ", " << batches * B << " sequences: float accuracy " << acc_f << ", int8 " << acc_q << "; largest logit difference "
                                  << worst << "; plans: float " << sizeof(InferOf<Classifier, 1, kL>) << " B, int8 " << sizeof(InferOf<Q, 1, kL>)
                                  << " B");
  if (!test::slow()) CHECK(acc_f >= 0.9);
  CHECK(std::abs(acc_f - acc_q) <= 0.01);
  CHECK(worst < logit_bound);
  CHECK(sizeof(InferOf<Q, 1, kL>) < sizeof(InferOf<Classifier, 1, kL>));

  // saved and loaded, the same integers
  const auto path = std::filesystem::temp_directory_path() / "stformer_quantized_classifier.safetensors";
  save_params(path, *q);
  auto back = test::make<Q>();
  load_quantized(path, *back);
  std::filesystem::remove(path);
  ClassifierBatch<B> batch;
  batch.draw(fresh);
  const Tensor<B, 1, 2> before = qi->forward(*q, batch.ids, &batch.keys);
  CHECK(test::same_bits(before, qi->forward(*back, batch.ids, &batch.keys)));
}

TEST_CASE("quantize: a sequence classifier of the library's blocks, trained, in integers within 1 point of its float accuracy") {
  trained_classifier<Classifier>("sequence classifier (SPEC's blocks)", {"embedding.weight", "1.table", "blocks.0.sn1.g", "blocks.1.ffn.fc2.weight",
                                                                        "3.requant.multiplier", "head.coarse.weight", "head.fine.weight", "output.scale"});
}

TEST_CASE("quantize: a BERT-style classifier (ids, a class token read back by FirstToken, pre-norm GELU layers, a final LayerNorm), trained, key-padded, in integers within 1 point") {
  using TokenClassifier = Sequential<Named<"embedding", Embedding<kV, kD>>, Named<"cls", ClassToken<kD>>, PositionEmbedding<kL + 1, kD>,
                                     Named<"layers", Repeat<EncoderBlock<kD, 4, 64, PreNorm<act::GELU>>, 2>>, Named<"norm", LayerNorm<kD>>,
                                     FirstToken<kD>, Named<"head", Linear<kD, 2>>>;
  trained_classifier<TokenClassifier>("sequence classifier (class token, pre-norm layers)",
                                      {"embedding.weight", "cls.cls_token", "2.table", "layers.1.self_attn.wq.weight", "layers.1.table",
                                       "norm.eps", "head.fine.weight", "output.scale"},
                                      // pre-norm GELU layers and a final LayerNorm quantize with a larger logit error than
                                      // the other classifiers (0.09 trained with AVX2 kernels, 0.52 with NEON's, whose
                                      // float training ends elsewhere), at the same accuracy
                                      0.75);
}

TEST_CASE("quantize: the classifier of PyTorch's layers (learned positions, post-norm LayerNorm and GELU, a final LayerNorm), trained, in integers within 1 point") {
  using TorchClassifier = Sequential<Named<"embedding", Embedding<kV, kD>>, PositionEmbedding<kL, kD>,
                                     Named<"layers", Repeat<EncoderBlock<kD, 4, 64, PostNorm<act::GELU>>, 2>>, Named<"norm", LayerNorm<kD>>,
                                     MeanPool<kD>, Named<"head", Linear<kD, 2>>>;
  trained_classifier<TorchClassifier>("sequence classifier (PyTorch's layers)",
                                      {"embedding.weight", "1.table", "layers.0.norm1.weight", "layers.0.self_attn.wq.weight", "layers.1.table",
                                       "norm.eps", "head.fine.weight", "output.scale"});
}
