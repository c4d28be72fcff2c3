// CrossAttend in integers (stformer/compose/memory.hpp), a decoder's cross-attention: on the
// rows' int16 stream h at s_h over the memory's int16 stream m at s_m,
//   a_q = Query(h) as int8 rows at s_a (a norm writing them, or, Identity, the stream
//         requantized: apply(h_q, s_h/s_a)), s_a from the calibrated max|Query(h)|
//   h_q = sat(h_q + QMultiHeadAttention(a_q, m_q))   the keys and values projected from m_q
// the same composition as the hand-written DecoderBlock<…, precision::int8>'s. KeyValue is
// Identity here; a norm there (MAB: int16 rows, as QAttend's) is not written yet.
// Tensors: the norm's (or branch_scale, stream_scale, branch_requant), the attention's.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../blocks/form.hpp"
#include "../compose/memory.hpp"
#include "attention.hpp"
#include "rows.hpp"

namespace stformer::inline STFORMER_ABI {

template <class Query, class KeyValue, class Attention>
struct QCrossAttend {
  using Float = CrossAttend<Query, KeyValue, Attention>;
  static_assert(Float::kv_itself, "QCrossAttend: a key/value part of its own (a norm) has no integer form yet");
  static constexpr bool reads_memory = true, same_scale = true;
  using FQ = typename Float::Q;
  static constexpr bool query_itself = std::is_empty_v<FQ>;  // Identity: the stream requantized
  static constexpr size_t D = dims<typename Float::template Input<1, 1>>.back();
  using QueryPart = typename std::conditional_t<query_itself, std::type_identity<BranchScales<1>>, Int8Of<FQ>>::type;
  using A = typename IntegerForm<typename Float::A, 8>::type;
  QueryPart query;
  A attn;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    step::visit_part<std::tuple_element_t<0, std::tuple<Query, KeyValue, Attention>>>(at, 0, true, f, s.query...);
    step::visit_part<Attention>(at, 2, true, f, s.attn...);
  }

  template <size_t B, size_t N>
  using Input = TensorOf<std::int16_t, B, N, D>;
  template <size_t B, size_t M>
  using MemoryRows = TensorOf<std::int16_t, B, M, dims<typename Float::template MemoryRows<1, 1>>.back()>;

  template <size_t B, size_t N, size_t M, size_t Room = 0>
  struct Scratch {
    static constexpr size_t T = precision::int8::tile_rows(B * N, B * M);
    TensorOf<std::int8_t, B, N, D> a;
    typename A::template Work<B, N, M, T> w;
  };
  template <size_t B, size_t N, size_t M, size_t Room, class Pool = Serial>
  void forward_in_place(Input<B, N>& h, const MemoryRows<B, M>& m, Scratch<B, N, M, Room>& w, const Mask<B, N>&, const KeyMask<B, M>* keys,
                        Pool&& pool = Pool{}) const {
    constexpr size_t T = Scratch<B, N, M, Room>::T;
    attn.template prepare<B, N, M, T>(m.data(), w.w, pool);
    if constexpr (query_itself)
      for (size_t k = 0; k < B * N * D; ++k) w.a.data()[k] = std::int8_t(kernels::clamp_i32(query.branch_requant.apply(0, h.data()[k]), -128, 127));
    else
      query.template apply<B * N>(h.data(), w.a.data());
    attn.template forward_add<B, N, M, T>(w.a.data(), h.data(), w.w, Mask<B, M>{.keys = keys}, pool);
  }

  // From the float part: the query rows' range (Query(h), or h itself) and the attention's.
  struct Ranges {
    float query = 0;
    typename A::Ranges attn;
    template <class Acts, class X>
    void observe(const Float& f, const Acts& acts, const X& x) {
      if constexpr (query_itself)
        query = std::max(query, quant::max_abs(x));
      else
        query = std::max(query, quant::max_abs(acts.q.out));
      attn.observe(f.attention(), acts.attn);
    }
  };
  void from_float(const Float& f, const Ranges& r, float s_h, float s_m) {
    const float s_a = quant::scale_for(r.query);
    if constexpr (query_itself)
      query.set(0, s_a, s_h);
    else
      query.from_float(f.template get<0>(), {}, s_h, s_a);
    attn = A::quantize(f.attention(), r.attn, s_a, s_m, s_h);
  }
};
template <class Query, class KeyValue, class Attention>
struct Int8Of<CrossAttend<Query, KeyValue, Attention>> {
  using type = QCrossAttend<Query, KeyValue, Attention>;
};

}  // namespace stformer
