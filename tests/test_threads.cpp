// Forward-only passes on several threads: Infer::forward given a ThreadPool of 2, 3 or 4
// threads gives the same bits as on the calling thread alone (attention, the encoder and decoder
// blocks with every mask, the online softmax beyond 256 keys, PyTorch's post-norm layer with
// packed projections, a language model whose head is split by columns), and the pass can run
// again on the same arena.
#include <doctest/doctest.h>

#include <stformer/stformer.hpp>
#include <stformer/train/parallel.hpp>

#include "util.hpp"

using namespace stformer;
using test::fill;
using test::make;
using test::same_bits;

namespace {

// pass(infer, pool) on one thread, then on pools of 2, 3 and 4 threads: the same bits each time.
template <class Infer, class Pass>
void same_on_threads(Pass&& pass) {
  auto one = make<Infer>();
  const auto expected = pass(*one, Serial{});
  for (size_t threads : {2, 3, 4}) {
    CAPTURE(threads);
    ThreadPool pool(threads);
    auto many = make<Infer>();
    CHECK(same_bits(pass(*many, pool), expected));
    CHECK(same_bits(pass(*many, pool), expected));  // the same arena again
  }
}

}  // namespace

TEST_CASE("MultiHeadAttention::Infer on threads: the same bits") {
  Rng rng(31);
  constexpr size_t B = 2, Nq = 37, Nk = 50, D = 64;
  auto mha = make<MultiHeadAttention<D, 32, D, 4>>();
  test::randomize(*mha, rng);
  Tensor<B, Nq, D> xq;
  Tensor<B, Nk, 32> xkv;
  fill(xq, rng);
  fill(xkv, rng);
  const auto keys = test::lengths_mask<B, Nk>({50, 7});
  same_on_threads<InferOf<MultiHeadAttention<D, 32, D, 4>, B, Nq, Nk>>([&](auto& infer, auto&& pool) {
    return infer.forward(*mha, xq, xkv, Mask<B, Nk>{.keys = &keys}, pool);
  });
}

TEST_CASE("EncoderBlock::Infer on threads: the same bits, with causal and padding masks, beyond 256 keys") {
  Rng rng(32);
  {
    constexpr size_t B = 2, N = 70, D = 64;  // query blocks of 16 and a last one of 6
    using Block = EncoderBlock<D, 4, 256>;
    auto enc = make<Block>();
    test::randomize(*enc, rng);
    Tensor<B, N, D> x;
    fill(x, rng);
    const auto keys = test::lengths_mask<B, N>({70, 0});
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      same_on_threads<InferOf<Block, B, N>>([&](auto& infer, auto&& pool) {
        return infer.forward(*enc, x, Mask<B, N>{.causal = causal, .keys = &keys}, pool);
      });
    }
  }
  {
    constexpr size_t N = 300, D = 32;  // the online softmax over tiles of 256 keys
    using Block = EncoderBlock<D, 2, 64>;
    // parameters and wide inputs (scale 4) whose last tile of keys (256 … 299) raises rows' running
    // maxima: a correction e^{c(m − m')} that depended on the rows per call would change bits here
    Rng rng4(4);
    auto enc = make<Block>();
    test::randomize(*enc, rng4);
    Tensor<1, N, D> x;
    fill(x, rng4, 4.0f);
    for (bool causal : {false, true}) {
      CAPTURE(causal);
      same_on_threads<InferOf<Block, 1, N>>([&](auto& infer, auto&& pool) { return infer.forward(*enc, x, Mask<1, N>{.causal = causal}, pool); });
    }
  }
  {
    constexpr size_t B = 1, N = 40, D = 32;  // PyTorch's nn.TransformerEncoderLayer: post-norm, LayerNorm, packed projections
    using Block = EncoderBlock<D, 4, 64, PostNorm<>>;
    auto enc = make<Block>();
    test::randomize(*enc, rng);
    Tensor<B, N, D> x;
    fill(x, rng);
    same_on_threads<InferOf<Block, B, N>>([&](auto& infer, auto&& pool) { return infer.forward(*enc, x, Mask<B, N>{}, pool); });
  }
}

TEST_CASE("EncoderBlock::Infer on threads: heads narrower than a vector, fewer rows than threads") {
  Rng rng(35);
  using Block = EncoderBlock<32, 8, 64>;  // Dh = 4: the query blocks are not split where 4 < W
  auto enc = make<Block>();
  test::randomize(*enc, rng);
  Tensor<2, 40, 32> x;
  Tensor<1, 3, 32> x3;
  fill(x, rng);
  fill(x3, rng);
  same_on_threads<InferOf<Block, 2, 40>>([&](auto& infer, auto&& pool) { return infer.forward(*enc, x, Mask<2, 40>{.causal = true}, pool); });
  same_on_threads<InferOf<Block, 1, 3>>([&](auto& infer, auto&& pool) { return infer.forward(*enc, x3, Mask<1, 3>{}, pool); });
}

TEST_CASE("DecoderBlock::Infer on threads: the same bits, with a memory mask") {
  Rng rng(33);
  constexpr size_t B = 2, N = 21, M = 33, D = 32;
  using Block = DecoderBlock<D, 4, 64>;
  auto dec = make<Block>();
  test::randomize(*dec, rng);
  Tensor<B, N, D> x;
  Tensor<B, M, D> m;
  fill(x, rng);
  fill(m, rng);
  const auto keys = test::lengths_mask<B, M>({3, 33});
  same_on_threads<InferOf<Block, B, N, M>>([&](auto& infer, auto&& pool) { return infer.forward(*dec, x, m, &keys, pool); });
}

TEST_CASE("LanguageModel's Infer on threads: the same bits (the head split by columns)") {
  Rng rng(34);
  using LM = LanguageModel<1000, 16, 32, 4, 64, 2>;
  auto lm = make<LM>();
  test::randomize(*lm, rng);
  IdTensor<3, 16> ids;
  for (auto& id : ids) id = std::int32_t(rng.below(1000));
  same_on_threads<InferOf<LM, 3>>([&](auto& infer, auto&& pool) { return infer.forward(*lm, ids, Mask<3, 16>{}, pool); });
  IdTensor<1, 16> one;
  std::copy_n(ids.data(), 16, one.data());
  same_on_threads<InferOf<LM, 1>>([&](auto& infer, auto&& pool) { return infer.forward(*lm, one, Mask<1, 16>{}, pool); });
}

TEST_CASE("Sequential on threads: steps without a pool run on the calling thread; key masks; part of the chain") {
  Rng rng(36);
  using Model = Sequential<Linear<3, 32>, EncoderBlock<32, 4, 64>, PMA<32, 4, 1>, Linear<32, 300>>;
  auto model = make<Model>();
  test::randomize(*model, rng);
  constexpr size_t B = 20, N = 24;  // 20 rows through the last layer
  Tensor<B, N, 3> x;
  fill(x, rng);
  std::vector<size_t> lengths(B, N);
  lengths[3] = 5, lengths[7] = 0;
  KeyMask<B, N> keys;
  for (size_t b = 0; b < B; ++b)
    for (size_t j = 0; j < N; ++j) keys(b, j) = j < lengths[b];
  same_on_threads<InferOf<Model, B, N>>([&](auto& infer, auto&& pool) { return infer.forward(*model, x, &keys, pool); });
  same_on_threads<InferOf<Model, B, N>>([&](auto& infer, auto&& pool) {
    return infer.template forward_steps<0, 2>(*model, x, Mask<B, N>{.keys = &keys}, pool);
  });
}
