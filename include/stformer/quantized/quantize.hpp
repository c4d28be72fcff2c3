// quantize: any composed float model (a Sequential, stformer/compose/sequential.hpp) into its
// integer model, post-training, from calibration inputs (host side):
//
//   using Model = Sequential<Named<"embedding", Embedding<11, 16>>, PositionalEncoding<8, 16>,
//                            Named<"blocks", Repeat<EncoderBlock<16, 2, 32>, 2>>, MeanPool<16>,
//                            Named<"head", Linear<16, 3>>>;
//   stformer::Calibration<Model, B, N> cal(model);
//   for (const auto& batch : batches) cal.observe(batch.ids, &batch.keys);   // float passes
//   std::unique_ptr<Quantized<Model>> q = cal.quantize();
//   InferOf<Quantized<Model>, 1, N> pass;  pass.forward(*q, ids, &keys);     // integers
//
// Quantized<Model> is a Sequential of each step's integer form (Int8Of: beside each quantized
// leaf; a composite block at precision::int8), under the float model's names; its plan is made
// as any Sequential's. Between its steps flow int16 streams; the weights are int8 (the
// positions' table int16; a model's first and last linear layers, when small, two int8 tensors
// each, QFineLinear). Its input and output are the float model's:
// a model of float rows starts with QuantizeInput (`input.scale`), and every model ends with
// Dequantize (`output.scale`), or with its last step's Finish (the pointer head's logits:
// DequantizeLogits, the log-softmax); those are the pass's only float arithmetic. The steps
// between are integers only: InferOf's forward_steps<1, steps − 1> runs them alone, on a core
// without an FPU too (for rows in; from step 0 for token ids).
//
// The scales. Every step's output is a stream; a step whose output is at its input's scale
// (same_scale: a residual block, the positions' sum, in place) continues its input's stream,
// any other starts a new one. A stream's scale is 2·max|·|/32767 (quant::int16_scale) of what
// calibration saw of it: every step's input and output on it and the residual values inside
// its blocks (their Ranges' `residual`). Each step's own activations (a norm's rows, the
// attention's q, k, v and heads, a hidden layer) are scaled from its Ranges. One walk serves any
// model: observe runs the float model's Acts step by step (Repeat block by block), quantize
// gives each step its float block, its ranges and the scales of its two streams.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "../blocks/decoder.hpp"
#include "../blocks/feedforward.hpp"
#include "../blocks/encoder.hpp"
#include "../blocks/isab.hpp"
#include "../blocks/mab.hpp"
#include "../blocks/pma.hpp"
#include "../blocks/pointer.hpp"
#include "../blocks/sab.hpp"
#include "activation.hpp"
#include "attention.hpp"
#include "combinators.hpp"
#include "embedding.hpp"
#include "feedforward.hpp"
#include "layernorm.hpp"
#include "layerscale.hpp"
#include "linear.hpp"
#include "meanpool.hpp"
#include "pointer.hpp"
#include "positional.hpp"
#include "rotary_attention.hpp"
#include "scalenorm.hpp"
#include "self_attention.hpp"
#include "stream.hpp"
#include "tokens.hpp"
#include "../compose/sequential.hpp"

namespace stformer::inline STFORMER_ABI {

template <class Block, size_t Count>
struct Int8Of<Repeat<Block, Count>> {
  using type = Repeat<typename Int8Of<Block>::type, Count>;
};

namespace quant {

using step::ChainOf;
// A block derived from a chain (a chain that declares causal = true, used as a step).
template <class Block>
concept derived_chain = step::chain_model<Block> && !std::is_same_v<Block, ChainOf<Block>>;


// A step's integer form: Int8Of, but a small linear layer at the model's edge (Edge: its first
// or last step; at most 4,096 weights) takes QFineLinear, two int8 weight tensors: about 15 bits
// of weight where each weight's rounding reaches the output directly (a regressed point, SPEC's
// set model), for a few more bytes. A large one (a language model's head) stays int8.
template <class B, bool Edge>
struct Int8Step {
  using type = typename Int8Of<B>::type;
};
template <size_t In, size_t Out, Init::Kind K, Bias Bi>
  requires(In * Out <= 4096)
struct Int8Step<Linear<In, Out, K, Bi>, true> {
  using type = QFineLinear<In, Out>;
};

// The integer forms of a float chain's steps (Int8Step: the first and the last at the edge).
template <class Index, class... S>
struct StepForms;
template <size_t... I, class... S>
struct StepForms<std::index_sequence<I...>, S...> {
  using type = std::tuple<typename Int8Step<typename step::Info<S>::Block, I == 0 || I + 1 == sizeof...(S)>::type...>;
};
// Step I of the float chain in the quantized one: its integer form (a norm and a reader of its
// rows paired, quantized/rows.hpp), under its name, or its index.
template <size_t I, class S, class Forms>
struct StepOf {
  using type = Indexed<I, typename step::Paired<I, Forms>::type>;
};
template <size_t I, FixedString Name, class B, class Forms>
struct StepOf<I, Named<Name, B>, Forms> {
  using type = Named<Name, typename step::Paired<I, Forms>::type>;
};

// Whether the chain takes float rows (else token ids): its quantized form starts with QuantizeInput.
template <class Chain>
inline constexpr bool rows_in = std::is_same_v<typename Chain::template Input<1, 1>::value_type, float>;

template <class Chain, class Index>
struct QuantizedChain;
template <class... S, size_t... I>
struct QuantizedChain<Sequential<S...>, std::index_sequence<I...>> {
  using Float = Sequential<S...>;
  static constexpr size_t in_width = dims<typename Float::template Input<1, 1>>.back();
  static constexpr size_t out_width = dims<typename Float::template Output<1, 1>>.back();
  using Last = typename Int8Of<typename Float::template BlockAt<Float::steps - 1>>::type;
  // The float end: the last step's Finish (PointerHead: DequantizeLogits), else Dequantize.
  static constexpr auto finish() {
    if constexpr (requires { typename Last::Finish; })
      return std::type_identity<typename Last::Finish>{};
    else
      return std::type_identity<Dequantize<out_width>>{};
  }
  // Its scale: the last step's own output scale (the logits'), else its stream's.
  template <class L>
  static float finish_scale(const L& last, float stream_scale) {
    if constexpr (requires { typename L::Finish; })
      return last.output_scale();
    else
      return stream_scale;
  }
  template <class... T>
  using Chain = Sequential<T..., Named<"output", typename decltype(finish())::type>>;
  using Forms = typename StepForms<std::index_sequence<I...>, S...>::type;
  using type = std::conditional_t<rows_in<Float>, Chain<Named<"input", QuantizeInput<in_width>>, typename StepOf<I, S, Forms>::type...>,
                                  Chain<typename StepOf<I, S, Forms>::type...>>;
};

// The integer model's type: a model derived from the chain, declared Quantized<the float
// model's declaration> (stformer/core/declaration.hpp) and causal when the float model
// declares_causal (stformer/core/declaration.hpp), so that its C API needs the causal mask as well.
template <class Model, class Chain>
struct IntegerModel {
  struct type : Chain {
    static constexpr bool causal = declares_causal<Model>;
    static std::string declaration() { return declare("Quantized", DeclaredBlock<ChainOf<Model>>{}); }
  };
};

}  // namespace quant

// The integer form of a block derived from a chain: its chain's, as a model's (IntegerModel).
template <class Block>
  requires quant::derived_chain<Block>
struct Int8Of<Block> {
  using type = typename quant::IntegerModel<Block, typename Int8Of<quant::ChainOf<Block>>::type>::type;
};

// The integer model of a composed float model.
template <class Model>
using Quantized = typename quant::IntegerModel<
    Model, typename quant::QuantizedChain<quant::ChainOf<Model>, std::make_index_sequence<quant::ChainOf<Model>::steps>>::type>::type;

namespace quant {

// Whether a step is an integer form of a float block (one that is not its own Float).
template <class Step>
inline constexpr bool is_integer_step = [] {
  if constexpr (requires { typename Step::Float; })
    return !std::is_same_v<Step, typename Step::Float>;
  else
    return false;
}();
template <class Blk, size_t Count>
inline constexpr bool is_integer_step<Repeat<Blk, Count>> = is_integer_step<Blk>;
// A chain or combinator: when its parts are.
template <class... P>
inline constexpr bool any_integer_part = (is_integer_step<typename step::Info<P>::Block> || ...);
template <class... S>
inline constexpr bool is_integer_step<Sequential<S...>> = any_integer_part<S...>;
template <class Step>
  requires derived_chain<Step>
inline constexpr bool is_integer_step<Step> = is_integer_step<ChainOf<Step>>;
template <class Body>
inline constexpr bool is_integer_step<Residual<Body>> = any_integer_part<Body>;
template <class... Br>
inline constexpr bool is_integer_step<Parallel<Br...>> = any_integer_part<Br...>;
template <class G, class V>
inline constexpr bool is_integer_step<QGated<G, V>> = true;
// Whether Model is a quantized model (its steps integer forms of float blocks).
template <class Model>
inline constexpr bool is_quantized = [] {
  if constexpr (requires { Model::steps; typename Model::template BlockAt<0>; })
    return []<size_t... I>(std::index_sequence<I...>) {
      return (is_integer_step<typename Model::template BlockAt<I>> || ...);
    }(std::make_index_sequence<Model::steps>{});
  else
    return false;
}();

// What calibration keeps of a float block: a step's Ranges and the streams of its input and
// output; a Repeat's, block by block; a chain's, step by step.
template <class F>
struct Observed {
  typename Int8Of<F>::type::Ranges ranges;
  size_t in = 0, out = 0;
};
template <class B, size_t Count>
struct Observed<Repeat<B, Count>> {
  std::array<Observed<B>, Count> blocks;
};
// A chain whose integer form is one step (QFeedForward) is observed as a leaf.
template <class Chain>
inline constexpr bool one_step = false;
template <class S1, class A, class S2>
  requires feed_forward<S1, A, S2>
inline constexpr bool one_step<Sequential<S1, A, S2>> = true;
template <class Chain>
struct StepsObserved;
template <class... S>
struct StepsObserved<Sequential<S...>> {
  step::Members<Observed<typename step::Info<S>::Block>...> steps;
};
template <class... S>
  requires(!one_step<Sequential<S...>>)
struct Observed<Sequential<S...>> : StepsObserved<Sequential<S...>> {};
template <class F>
  requires derived_chain<F>
struct Observed<F> : Observed<ChainOf<F>> {};
template <class Body>
struct Observed<Residual<Body>> {
  Observed<typename step::Info<Body>::Block> body;
};
template <class... Br>
struct Observed<Parallel<Br...>> {
  step::Members<Observed<typename step::Info<Br>::Block>...> parts;
};
template <class G, class V>
struct Observed<Gated<G, V>> {
  step::Members<Observed<typename step::Info<G>::Block>, Observed<typename step::Info<V>::Block>> parts;
  size_t gate = 0, value = 0, out = 0;  // the streams of Gate(x), Value(x) and the product
};

// An Attend whose key/value part is a chain of its own (ISAB's MAB1(I, X) then a norm): its
// ranges and streams, and the chain's.
template <class Qp, class KVp, class Ap, bool O>
  requires(!step::row_local<typename step::Info<KVp>::Block>())
struct Observed<Attend<Qp, KVp, Ap, O>> {
  typename Int8Of<Attend<Qp, KVp, Ap, O>>::type::Ranges ranges;
  size_t in = 0, out = 0;
  Observed<typename step::Info<KVp>::Block> kv;
};

// The streams of a pass: max|·| of each, the current one and the next new one's number.
struct Streams {
  std::vector<float> max{0.0f};
  size_t current = 0, next = 1;
  static constexpr size_t none = size_t(-1);
  // The stream a residual's body adds into by its last step (run_add, the integer Residual fused):
  // that step's output is never on the stream by itself, only the sum is.
  size_t adds = none;
  // The stream a step that starts one writes: `target` (a part whose output a combinator needs
  // at a given stream: a residual body's, a Parallel's branches'), or a new one.
  size_t open(size_t target) { return target != none ? target : next++; }
  // A step that keeps its input's stream where target asks for another: not supported.
  void check_keeps(size_t target) const {
    STFORMER_CHECK(target == none || target == current,
                   "Calibration: a step that keeps its input's scale (a Residual, a class token) ends a part whose output must be at another "
                   "stream's scale (a Parallel's branch, a Residual's body)");
  }
  void see(size_t s, float m) {
    if (s >= max.size()) max.resize(s + 1, 0.0f);
    max[s] = std::max(max[s], m);
  }
  // Its scale: int16's, or, for int8 rows (a norm's for the step after it, quantized/rows.hpp),
  // max|·| at 127.
  float scale(size_t s, bool rows = false) const { return rows ? scale_for(max[s]) : int16_scale(max[s]); }
};

template <class X>
float max_abs_rows(const X& x) {
  if constexpr (std::is_same_v<typename X::value_type, float>)
    return max_abs(x);
  else
    return 0.0f;  // token ids
}
template <class X>
bool finite(const X& x) {
  if constexpr (std::is_same_v<typename X::value_type, float>)
    return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
  else
    return true;
}

// observe(f, acts, x, mask, o, s, target): the float part f's pass on x through its record acts,
// its ranges into o, its streams' max|·| into s; its output on stream `target` unless none.
// A leaf's output y (of any block with an integer form of its own), its input on o.in: on a
// stream of its own unless it keeps its input's scale.
template <class F, class A, class X, class Y>
const Y& observe_output(const F& f, A& acts, const X& x, const Y& y, Observed<F>& o, Streams& s, size_t target) {
  STFORMER_CHECK(finite(y), "Calibration::observe: a step's output is not finite (NaN or infinity): the model's parameters are");
  if constexpr (Int8Of<F>::type::same_scale)
    s.check_keeps(target);
  else
    s.current = s.open(target);
  o.out = s.current;
  if (target == Streams::none || target != s.adds) s.see(o.out, max_abs(y));
  o.ranges.observe(f, acts, x, y);
  if constexpr (requires { o.ranges.residual; }) s.see(o.out, o.ranges.residual);
  return y;
}
// A leaf:
template <class F, class A, class X, size_t B, size_t N>
const auto& observe(const F& f, A& acts, const X& x, const Mask<B, N>& mask, Observed<F>& o, Streams& s, size_t target = Streams::none) {
  o.in = s.current;
  return observe_output(f, acts, x, step::forward(acts, f, x, mask), o, s, target);
}
// A Repeat, block by block; a chain, step by step (the last on target).
template <class Blk, size_t Count, class A, class X, size_t B, size_t N>
const auto& observe(const Repeat<Blk, Count>& f, A& acts, const X& x, const Mask<B, N>& mask, Observed<Repeat<Blk, Count>>& o, Streams& s,
                    size_t target = Streams::none) {
  const auto* h = &observe(f[0], acts.blocks[0], x, mask, o.blocks[0], s, Count == 1 ? target : Streams::none);
  for (size_t i = 1; i < Count; ++i) h = &observe(f[i], acts.blocks[i], *h, mask, o.blocks[i], s, i + 1 == Count ? target : Streams::none);
  return *h;
}
template <size_t I = 0, class... S, class A, class X, size_t B, size_t N>
const auto& observe_chain(const Sequential<S...>& f, A& acts, const X& x, const Mask<B, N>& mask, StepsObserved<Sequential<S...>>& o, Streams& s,
                          size_t target = Streams::none) {
  if constexpr (I == 0) Sequential<S...>::shift_keys(mask, acts.shifted);
  const auto& y = observe(f.template get<I>(), acts.template at<I>(), x, Sequential<S...>::template mask_at<B, N, I>(mask, acts.shifted),
                          step::get<I>(o.steps), s, I + 1 == sizeof...(S) ? target : Streams::none);
  if constexpr (I + 1 == sizeof...(S))
    return y;
  else
    return observe_chain<I + 1>(f, acts, y, mask, o, s, target);
}
template <class... S, class A, class X, size_t B, size_t N>
  requires(!one_step<Sequential<S...>>)
const auto& observe(const Sequential<S...>& f, A& acts, const X& x, const Mask<B, N>& mask, Observed<Sequential<S...>>& o, Streams& s,
                    size_t target = Streams::none) {
  return observe_chain(f, acts, x, mask, o, s, target);
}
// A block derived from a chain: its chain's, with the mask it declares.
template <class F, class A, class X, size_t B, size_t N>
  requires derived_chain<F>
const auto& observe(const F& f, A& acts, const X& x, const Mask<B, N>& mask, Observed<F>& o, Streams& s, size_t target = Streams::none) {
  return observe_chain(static_cast<const ChainOf<F>&>(f), acts, x, step::mask_for<F>(mask), static_cast<Observed<ChainOf<F>>&>(o), s, target);
}
// The combinators, as their records' forward computes (stformer/compose/combinators.hpp), each part
// observed: Residual's body writes on the stream it reads, Parallel's branches on the output's.
template <class Body, class A, class X, size_t B, size_t N>
const auto& observe(const Residual<Body>& f, A& acts, const X& x, const Mask<B, N>& mask, Observed<Residual<Body>>& o, Streams& s,
                    size_t target = Streams::none) {
  s.check_keeps(target);
  const size_t h = s.current, outer = s.adds;
  s.adds = Int8Of<Residual<Body>>::type::template fused<dims<X>[0], dims<X>[1]> ? h : Streams::none;
  const auto& y = observe(f.body, acts.body, x, mask, o.body, s, h);
  s.adds = outer;
  kernels::add<step::count<X>>(x.data(), y.data(), acts.out.data());
  s.see(h, max_abs(acts.out));
  return acts.out;
}
template <class... Br, class A, class X, size_t B, size_t N>
const auto& observe(const Parallel<Br...>& f, A& acts, const X& x, const Mask<B, N>& mask, Observed<Parallel<Br...>>& o, Streams& s,
                    size_t target = Streams::none) {
  const size_t in = s.current, out = s.open(target);
  [&]<size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          s.current = in;
          const auto& y = observe(f.template get<I>(), step::get<I>(acts.records), x, mask, step::get<I>(o.parts), s, out);
          if constexpr (I == 0)
            std::copy(y.begin(), y.end(), acts.out.begin());
          else
            kernels::add_to<step::count<std::remove_cvref_t<decltype(y)>>>(y.data(), acts.out.data());
        }(),
        ...);
  }(std::index_sequence_for<Br...>{});
  s.current = out;
  s.see(out, max_abs(acts.out));
  return acts.out;
}
template <class G, class V, class A, class X, size_t B, size_t N>
const auto& observe(const Gated<G, V>& f, A& acts, const X& x, const Mask<B, N>& mask, Observed<Gated<G, V>>& o, Streams& s,
                    size_t target = Streams::none) {
  const size_t in = s.current;
  const auto& g = observe(f.template get<0>(), step::get<0>(acts.records), x, mask, step::get<0>(o.parts), s);
  o.gate = s.current, s.current = in;
  const auto& v = observe(f.template get<1>(), step::get<1>(acts.records), x, mask, step::get<1>(o.parts), s);
  o.value = s.current;
  o.out = s.current = s.open(target);
  step::multiply<step::count<std::remove_cvref_t<decltype(g)>>>(g.data(), v.data(), acts.out.data());
  s.see(o.out, max_abs(acts.out));
  return acts.out;
}

// An Attend over a chain of its own: the chain observed on its own streams, then the attention,
// as Attend's record computes; its output a leaf's.
template <class Qp, class KVp, class Ap, bool O, class A, class X, size_t B, size_t N>
  requires(!step::row_local<typename step::Info<KVp>::Block>())
const auto& observe(const Attend<Qp, KVp, Ap, O>& f, A& acts, const X& x, const Mask<B, N>& mask, Observed<Attend<Qp, KVp, Ap, O>>& o, Streams& s,
                    size_t target = Streams::none) {
  const Mask<B, N> m = step::mask_for<Attend<Qp, KVp, Ap, O>>(mask);
  const auto& xq = step::forward(acts.q, f.template get<0>(), x, m);
  o.in = s.current;
  const auto& xkv = observe(f.template get<1>(), acts.kv, x, m, o.kv, s);
  s.current = o.in;
  return observe_output(f, acts, x, acts.attn.forward(f.attention(), xq, xkv, Attend<Qp, KVp, Ap, O>::keys(m)), o, s, target);
}

// Whether rows T (a step's input or output) are int8 rows.
template <class T>
inline constexpr bool int8_rows = std::is_same_v<typename T::value_type, std::int8_t>;
template <class Q, class F>
void from_float(Q& q, const F& f, const Observed<F>& o, const Streams& s) {
  if constexpr (requires { typename Q::template Input<1, 1>; })
    q.from_float(f, o.ranges, s.scale(o.in, int8_rows<typename Q::template Input<1, 1>>), s.scale(o.out, int8_rows<step::Output<Q, 1, 1>>));
  else
    q.from_float(f, o.ranges, s.scale(o.in), s.scale(o.out));
}
template <class Q, class F>
  requires derived_chain<F>
void from_float(Q& q, const F& f, const Observed<F>& o, const Streams& s) {
  from_float(static_cast<typename Int8Of<ChainOf<F>>::type&>(q), static_cast<const ChainOf<F>&>(f), static_cast<const Observed<ChainOf<F>>&>(o), s);
}
template <class Q, class Blk, size_t Count>
void from_float(Q& q, const Repeat<Blk, Count>& f, const Observed<Repeat<Blk, Count>>& o, const Streams& s) {
  for (size_t i = 0; i < Count; ++i) from_float(q[i], f[i], o.blocks[i], s);
}
template <class Q, class... S>
  requires(!one_step<Sequential<S...>>)
void from_float(Q& q, const Sequential<S...>& f, const Observed<Sequential<S...>>& o, const Streams& s) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (from_float(q.template get<I>(), f.template get<I>(), step::get<I>(o.steps), s), ...);
  }(std::index_sequence_for<S...>{});
}
template <class Q, class Qp, class KVp, class Ap, bool O>
  requires(!step::row_local<typename step::Info<KVp>::Block>())
void from_float(Q& q, const Attend<Qp, KVp, Ap, O>& f, const Observed<Attend<Qp, KVp, Ap, O>>& o, const Streams& s) {
  from_float(q.template get<1>(), f.template get<1>(), o.kv, s);
  q.from_float(f, o.ranges, s.scale(o.in), s.scale(o.out));
}
template <class Q, class Body>
void from_float(Q& q, const Residual<Body>& f, const Observed<Residual<Body>>& o, const Streams& s) {
  from_float(q.body, f.body, o.body, s);
}
template <class Q, class... Br>
void from_float(Q& q, const Parallel<Br...>& f, const Observed<Parallel<Br...>>& o, const Streams& s) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (from_float(q.template get<I>(), f.template get<I>(), step::get<I>(o.parts), s), ...);
  }(std::index_sequence_for<Br...>{});
}
template <class Q, class G, class V>
void from_float(Q& q, const Gated<G, V>& f, const Observed<Gated<G, V>>& o, const Streams& s) {
  from_float(q.template get<0>(), f.template get<0>(), step::get<0>(o.parts), s);
  from_float(q.template get<1>(), f.template get<1>(), step::get<1>(o.parts), s);
  q.set_scales(s.scale(o.gate), s.scale(o.value), s.scale(o.out));
}

// The integer model of a float model from what calibration kept of it: each step's ranges and
// streams, the streams' scales.
template <class Model>
std::unique_ptr<Quantized<Model>> integer_model(const Model& model, const StepsObserved<ChainOf<Model>>& observed, const Streams& streams) {
  using Chain = ChainOf<Model>;
  using Q = Quantized<Model>;
  auto q = std::make_unique<Q>();
  constexpr size_t first = rows_in<Chain> ? 1 : 0;
  if constexpr (first == 1) q->template get<0>().scale(0) = streams.scale(0);
  [&]<size_t... I>(std::index_sequence<I...>) {
    (from_float(q->template get<first + I>(), static_cast<const Chain&>(model).template get<I>(), step::get<I>(observed.steps), streams), ...);
  }(std::make_index_sequence<Chain::steps>{});
  using QC = QuantizedChain<Chain, std::make_index_sequence<Chain::steps>>;
  q->template get<Q::steps - 1>().scale(0) = QC::finish_scale(q->template get<Q::steps - 2>(), streams.scale(streams.current));
  return q;
}

}  // namespace quant

// Post-training quantization of Model from calibration batches of B inputs of N rows (or ids):
// observe runs the float model on each (keep them representative: the scales cover what they
// reach and twice that), quantize makes the integer model. Host side.
template <class Model, size_t B, size_t N>
class Calibration {
 public:
  using Chain = quant::ChainOf<Model>;
  using Q = Quantized<Model>;

  explicit Calibration(const Model& model) : model_(model), acts_(std::make_unique<ActsOf<Chain, B, N>>()) {}

  template <class X>
  void observe(const X& x, const Mask<B, N>& mask = {}) {
    Chain::template check_input<B, N, X>();
    STFORMER_CHECK(quant::finite(x), "Calibration::observe: the input holds a NaN or an infinity");
    streams_.current = 0, streams_.next = 1;
    streams_.see(0, quant::max_abs_rows(x));  // the model's input; each later step's input was seen as an output
    // a model that declares causal is observed with its mask, as every pass of it runs
    quant::observe_chain(static_cast<const Chain&>(model_), *acts_, x, step::mask_for<Model>(mask), observed_, streams_);
    ++batches_;
  }
  template <class X>
  void observe(const X& x, const KeyMask<B, N>* keys) {
    observe(x, Mask<B, N>{.keys = keys});
  }
  size_t batches() const { return batches_; }

  // The integer model (on the heap: a model's weights may not fit a stack).
  std::unique_ptr<Q> quantize() const {
    STFORMER_CHECK(batches_ > 0, "Calibration::quantize: no calibration batch observed");
    return quant::integer_model(model_, observed_, streams_);
  }

 private:
  const Model& model_;
  std::unique_ptr<ActsOf<Chain, B, N>> acts_;
  quant::StepsObserved<Chain> observed_;
  quant::Streams streams_;
  size_t batches_ = 0;
};

}  // namespace stformer
