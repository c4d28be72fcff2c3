// FeedForward<D, F>: y = ReLU(x W1ᵀ + b1) W2ᵀ + b2, rows [L..., D] -> [L..., D].
// Parameters: fc1 (Linear<D, F>), fc2 (Linear<F, D>), Kaiming-normal weights.
#pragma once

#include "../config.hpp"

#include <algorithm>

#include "linear.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t D, size_t F>
struct FeedForward {
  Linear<D, F, Init::kaiming_normal> fc1;
  Linear<F, D, Init::kaiming_normal> fc2;

  template <class Fn, class... S>
  static constexpr void visit(const Path& at, Fn& f, S&... s) {
    stformer::visit(at / "fc1", f, s.fc1...);
    stformer::visit(at / "fc2", f, s.fc2...);
  }

  // FFN on Rows rows of x, T rows at a time: hid [T, F] = ReLU(x_t W1ᵀ + b1), then x_t ← hid W2ᵀ
  // + b2 (in place), and y_t += x_t when Add (a residual connection) (the same bits as the
  // whole rows at once; small weights are packed once for all the tiles: Linear::with_panels).
  template <size_t Rows, size_t T, bool Add = false>
  void apply_tiled(float* x, float* y, float* hid) const {
    fc1.template with_panels<Rows, T>([&](const auto* panels1) {
      fc2.template with_panels<Rows, T>([&](const auto* panels2) {
        for_tiles<Rows, T>([&]<size_t R>(size_t i) {
          fc1.template apply<R, true, Rows>(x + i * D, hid, panels1);
          fc2.template apply<R, false, Rows>(hid, x + i * D, panels2);
          if constexpr (Add) kernels::add_to<R * D>(x + i * D, y + i * D);
        });
      });
    });
  }

  // In a composite block: residual [Rows, D] += FFN(x [Rows, D]) T rows at a time, x
  // overwritten; Tile<T> its scratch, tile_row_bytes a row of it (QFeedForward's the same).
  template <size_t T>
  using Tile = Tensor<T, F>;
  static constexpr size_t tile_row_bytes = F * sizeof(float);
  template <size_t Rows, size_t T>
  void add_tiled(float* x, float* residual, Tile<T>& hid) const {
    apply_tiled<Rows, T, true>(x, residual, hid.data());
  }

  // A step of a Sequential (stformer/sequential.hpp), in place on rows [B, N, D]; its scratch
  // the hidden rows [T, F] (T: tile_rows, or as many rows as Room holds).
  template <size_t B, size_t N>
  using Input = Tensor<B, N, D>;
  static constexpr bool in_place = true;
  template <size_t B, size_t N, size_t Room>
  using Scratch = Tensor<rows_in_room(B * N, tile_rows(B * N), Room, tile_row_bytes), F>;
  template <size_t B, size_t N, size_t T>
  void forward_in_place(Tensor<B, N, D>& h, Tensor<T, F>& hid) const {
    apply_tiled<B * N, T>(h.data(), h.data(), hid.data());
  }

  template <size_t... L>
  struct Acts {
    static constexpr size_t rows = (L * ... * 1);
    ActsOf<Linear<D, F, Init::kaiming_normal>, L...> fc1;  // fc1.out holds ReLU(x W1ᵀ + b1)
    ActsOf<Linear<F, D, Init::kaiming_normal>, L...> fc2;

    template <class X>
    const Tensor<L..., D>& forward(const FeedForward& p, const X& x) {
      static_assert(shape_is<X, L..., D>, "FeedForward: input rows x must be [..., D] (the pass's sizes, the layer's width D)");
      return fc2.forward(p.fc2, fc1.template forward<true>(p.fc1, x));
    }

    const Tensor<L..., D>& backward(const FeedForward& p, FeedForward& grad, const Tensor<L..., D>& dout) {
      fc2.backward(p.fc2, grad.fc2, dout);
      kernels::relu_backward<rows * F>(fc1.out.data(), fc2.dx.data());
      return fc1.backward(p.fc1, grad.fc1, fc2.dx);
    }
  };

  template <size_t... L>
  struct Infer {
    static constexpr size_t rows = (L * ... * 1), T = tile_rows(rows);
    Tensor<L..., D> out;
    Tensor<T, F> hid;  // T rows of the hidden layer

    template <class X>
    const Tensor<L..., D>& forward(const FeedForward& p, const X& x) {
      static_assert(shape_is<X, L..., D>, "FeedForward: input rows x must be [..., D] (the pass's sizes, the layer's width D)");
      std::copy(x.begin(), x.end(), out.begin());
      p.template apply_tiled<rows, T>(out.data(), out.data(), hid.data());
      return out;
    }
  };
};

}  // namespace stformer
