// Each CASE must fail to compile with the static_assert message that compile_fail.sh expects.
#include <stformer/stformer.hpp>

using namespace stformer;

namespace test_blocks {
// Steps that break the protocol (compose/sequential.hpp, step::Step): an in-place gain whose
// forward takes a mask of another length, and one that takes no mask and whose record takes none.
template <size_t D>
struct WrongMask {
  Tensor<D> g;
  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "g", Init{Init::constant, 1.0f}, s.g...);
  }
  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  static constexpr bool in_place = true;
  template <size_t B, size_t N, class Pool>
  void forward_in_place(Tensor<B, N, D>&, Nothing, const Mask<B, N + 1>& = {}, Pool&& = Pool{}) const {}
};
template <size_t D>
struct NoMask : WrongMask<D> {
  template <size_t B, size_t N>
  void forward_in_place(Tensor<B, N, D>&, Nothing) const {}
  template <size_t B, size_t N>
  struct Acts {
    using Dx = Tensor<B, N, D>;
    Tensor<B, N, D> out;
    const Tensor<B, N, D>& forward(const NoMask&, const Tensor<B, N, D>& x) { return out = x; }
  };
};
// Causal models: one with a step that reads every row (the rows' mean), one that decodes.
struct Pooled : Sequential<Embedding<11, 16>, EncoderBlock<16, 2, 32>, MeanPool<16>, Linear<16, 11>> {
  static constexpr bool causal = true;
};
struct Causal : Sequential<Embedding<11, 16>, PositionalEncoding<8, 16>, EncoderBlock<16, 2, 32>, Linear<16, 11>> {
  static constexpr bool causal = true;
};
}  // namespace test_blocks

int main() {
#if CASE == 1  // a Set Transformer whose PMA is narrower than its ISAB
  ISAB<64, 4, 16> isab;
  PMA<32, 4, 1> pma;
  ActsOf<ISAB<64, 4, 16>, 1, 50> ia;
  ActsOf<PMA<32, 4, 1>, 1, 50> pa;
  Tensor<1, 50, 64> x;
  pa.forward(pma, ia.forward(isab, x));
#elif CASE == 2  // points of width 3 into Linear<2, 16>
  Linear<2, 16> proj;
  ActsOf<Linear<2, 16>, 1, 50> a;
  Tensor<1, 50, 3> x;
  a.forward(proj, x);
#elif CASE == 3  // keys of the wrong width
  MultiHeadAttention<16, 8, 16, 4> mha;
  ActsOf<MultiHeadAttention<16, 8, 16, 4>, 1, 5, 7> a;
  Tensor<1, 5, 16> q;
  Tensor<1, 7, 16> kv;
  a.forward(mha, q, kv);
#elif CASE == 4  // heads do not divide the width
  MultiHeadAttention<16, 16, 18, 4> mha;
  (void)mha;
#elif CASE == 5  // decoder memory of another width
  DecoderBlock<16, 2, 32> dec;
  ActsOf<DecoderBlock<16, 2, 32>, 1, 5, 7> a;
  Tensor<1, 5, 16> x;
  Tensor<1, 7, 32> m;
  a.forward(dec, x, m);
#elif CASE == 6  // encoder blocks of different widths chained
  EncoderBlock<16, 2, 32> e1;
  EncoderBlock<32, 2, 32> e2;
  ActsOf<EncoderBlock<16, 2, 32>, 1, 5> a1;
  ActsOf<EncoderBlock<32, 2, 32>, 1, 5> a2;
  Tensor<1, 5, 16> x;
  a2.forward(e2, a1.forward(e1, x));
#elif CASE == 7  // a forward-only pass of SPEC's pointer model given points of width 3
  static PointerModel<2, 16, 1, 64, 2> model;
  static InferOf<PointerModel<2, 16, 1, 64, 2>, 1, 50> inf;
  Tensor<1, 50, 3> x;
  inf.forward(model, x);
#elif CASE == 8  // 40 rows into a pass made for 50
  Linear<2, 16> proj;
  ActsOf<Linear<2, 16>, 1, 50> a;
  Tensor<1, 40, 2> x;
  a.forward(proj, x);
#elif CASE == 9  // targets [B, N] where cross_entropy takes one per row of logits, flattened
  Tensor<4, 10> logits, grad;
  IdTensor<2, 2> target;
  cross_entropy(logits, target, grad);
#elif CASE == 10  // a composed model whose SAB is wider than the Linear before it
  static Sequential<Linear<2, 16>, SAB<32, 4>, PMA<32, 4, 1>> model;
  static InferOf<decltype(model), 1, 50> inf;
  Tensor<1, 50, 2> x;
  inf.forward(model, x);
#elif CASE == 11  // a composed model given points of width 3
  static Sequential<Linear<2, 16>, SAB<16, 4>> model;
  static ActsOf<decltype(model), 1, 50> acts;
  Tensor<1, 50, 3> x;
  acts.forward(model, x);
#elif CASE == 12  // a block whose mask is of another type (the keys of one row more): no run without it
  static Sequential<Linear<2, 16>, test_blocks::WrongMask<16>> m;
  static InferOf<decltype(m), 1, 50> inf;
  Tensor<1, 50, 2> x;
  inf.forward(m, x);
#elif CASE == 13  // a block that does not take the pass's mask at all
  static Sequential<Linear<2, 16>, test_blocks::NoMask<16>> m;
  static InferOf<decltype(m), 1, 50> inf;
  Tensor<1, 50, 2> x;
  inf.forward(m, x);
#elif CASE == 14  // a block whose training record does not take the pass's mask
  static Sequential<Linear<2, 16>, test_blocks::NoMask<16>> m;
  static ActsOf<decltype(m), 1, 50> acts;
  Tensor<1, 50, 2> x;
  acts.forward(m, x);
#elif CASE == 15  // decoding a model that does not declare itself causal
  static DecodeOf<Sequential<Embedding<11, 16>, Repeat<EncoderBlock<16, 2, 32>, 2>, Linear<16, 11>>, 1, 8> dec;
  (void)dec;
#elif CASE == 16  // decoding a causal model with a step that reads every row (the rows' mean)
  static DecodeOf<test_blocks::Pooled, 1, 8> dec;
  (void)dec;
#elif CASE == 17  // decoding a block over a memory whose rows are not causal (MAB)
  static DecodeOf<MAB<16, 2>, 1, 8, 4> dec;
  (void)dec;
#elif CASE == 18  // decoding a decoder without its memory's rows
  static DecodeOf<DecoderBlock<16, 2, 32>, 1, 8> dec;
  (void)dec;
#else  // the control: this compiles (the training pass of a layer, the forward-only pass of every model)
  Linear<2, 16> proj;
  ActsOf<Linear<2, 16>, 1, 50> a;
  Tensor<1, 50, 2> x;
  a.forward(proj, x);
  static PointerModel<2, 16, 1, 64, 2> pointer;
  static SetTransformer<2, 64, 4, 16, 2> set;
  static LanguageModel<100, 8, 16, 2, 32, 2> lm;
  static InferOf<PointerModel<2, 16, 1, 64, 2>, 1, 50> pi;
  static InferOf<SetTransformer<2, 64, 4, 16, 2>, 1, 50> si;
  static InferOf<LanguageModel<100, 8, 16, 2, 32, 2>, 1> li;
  static IdTensor<1, 8> ids;
  pi.forward(pointer, x);
  si.forward(set, x);
  li.forward(lm, ids);
  static Sequential<Named<"embedding", Embedding<100, 16>>, PositionalEncoding<8, 16>, Named<"blocks", Repeat<EncoderBlock<16, 2, 32>, 2>>,
                    MeanPool<16>, Linear<16, 3>> seq;
  static InferOf<decltype(seq), 1, 8> qi;
  static ActsOf<decltype(seq), 1, 8> qa;
  static Tensor<1, 1, 3> dy;
  qi.forward(seq, ids);
  qa.forward(seq, ids);
  qa.backward(seq, seq, dy);
  static test_blocks::Causal causal;
  static DecodeOf<test_blocks::Causal, 1, 8> dec;
  static IdTensor<1, 1> token;
  dec.step(causal, token);
  static DecoderBlock<16, 2, 32> decoder;
  static DecodeOf<DecoderBlock<16, 2, 32>, 1, 8, 5> over_memory;
  static Tensor<1, 5, 16> memory;
  static Tensor<1, 1, 16> row;
  over_memory.start(decoder, memory);
  over_memory.step(decoder, row);
#endif
}
