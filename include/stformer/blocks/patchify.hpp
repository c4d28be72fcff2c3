// Patchify<C, H, W, P>: an image as rows of patches, the first half of a ViT's patch embedding
// (torchvision's conv_proj, timm's PatchEmbed: a Conv2d with kernel = stride = P is this, then a
// Linear<C·P·P, D> whose weight is the convolution's [D, C, P, P] read as [D, C·P·P]).
//   x: the image [B, C, H, W], held as C·H rows of W pixels, Tensor<B, C·H, W> (the same bytes,
//      row-major: a pass over it is InferOf<Model, B, C·H>)
//   y [B, (H/P)·(W/P), C·P·P]: row n = h·(W/P) + w, patch (h, w)'s pixels in (c, i, j) order:
//      y[b, n, (c·P + i)·P + j] = x[b, c, h·P + i, w·P + j]
//   backward: dx[b, c, h·P + i, w·P + j] = dy[b, n, (c·P + i)·P + j] (every pixel in one patch)
// No parameters. T: the element type, float; int16 in a quantized model (Int8Of, below), where
// it keeps its input's scale. In a chain its output lies over its input (over_input: the same
// bytes), the pixels moved in place in runs of P, one cycle of the permutation at a time.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <cstdint>

#include "../core/params.hpp"
#include "../core/precision.hpp"

namespace stformer::inline STFORMER_ABI {

template <size_t C, size_t H, size_t W, size_t P, class T = float>
struct Patchify {
  static std::string declaration() { return declare("Patchify", C, H, W, P); }
  static_assert(H % P == 0 && W % P == 0, "Patchify: the image's height and width are multiples of the patch size P");
  static constexpr size_t patches = (H / P) * (W / P), K = C * P * P;
  static constexpr bool reads_mask = false;  // step::reads_mask: no keys over pixels
  template <class F, class... S>
  static constexpr void visit(const Path&, F&, S&...) {}

  template <size_t B, size_t N>
  using Input = TensorOf<T, B, N, W>;
  template <size_t B, size_t N>
  using Output = TensorOf<T, B, patches, K>;

  // y ← the patches of x (to = true), or x ← y's pixels back in their places (to = false).
  template <size_t B, bool To, class X, class Y>
  static void move(X* x, Y* y) {
    for (size_t b = 0; b < B; ++b)
      for (size_t h = 0; h < H / P; ++h)
        for (size_t w = 0; w < W / P; ++w)
          for (size_t c = 0; c < C; ++c)
            for (size_t i = 0; i < P; ++i) {
              auto* pixels = x + ((b * C + c) * H + h * P + i) * W + w * P;
              auto* row = y + (b * patches + h * (W / P) + w) * K + (c * P + i) * P;
              if constexpr (To)
                std::copy_n(pixels, P, row);
              else
                std::copy_n(row, P, pixels);
            }
  }

  // The run of P pixels that patch row n's columns (c·P + i)·P … hold, run t = n·C·P + c·P + i of
  // y: its index among x's runs, (c·H + h·P + i)·(W/P) + w for patch n = h·(W/P) + w.
  static constexpr size_t source(size_t t) {
    const size_t n = t / (C * P), c = t % (C * P) / P, i = t % P;
    return (c * H + (n / (W / P)) * P + i) * (W / P) + n % (W / P);
  }
  // v: each image's pixels become its patches in place. Every cycle of `source` is moved once,
  // from its least run (the cycle's other runs reach a smaller one first), P values held aside.
  template <size_t B, class V>
  static void move_in_place(V* v) {
    constexpr size_t runs = C * H * (W / P);
    for (size_t b = 0; b < B; ++b) {
      V* image = v + b * runs * P;
      for (size_t least = 0; least < runs; ++least) {
        size_t s = source(least);
        while (s > least) s = source(s);
        if (s < least) continue;
        V held[P];
        std::copy_n(image + least * P, P, held);
        size_t t = least;
        for (size_t from = source(t); from != least; t = from, from = source(t)) std::copy_n(image + from * P, P, image + t * P);
        std::copy_n(held, P, image + t * P);
      }
    }
  }

  static constexpr bool over_input = true;  // step::over_input: y may be x's bytes
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&&) const {
    static_assert(N == C * H, "Patchify: the pass's rows are the image's C·H rows of W pixels");
    if (static_cast<const void*>(x.data()) == static_cast<const void*>(y.data()))
      move_in_place<B>(y.data());
    else
      move<B, true>(x.data(), y.data());
  }

  template <size_t B, size_t N>
  struct Acts {
    using Dx = Input<B, N>;
    Output<B, N> out;
    template <class X>
    const Output<B, N>& forward(const Patchify& p, const X& x) {
      p.run(x, out, Nothing{}, Mask<B, N>{}, Serial{});
      return out;
    }
    const Dx& backward(const Patchify&, Patchify&, const Output<B, N>& dout, Dx& dx) {
      move<B, false>(dx.data(), dout.data());
      return dx;
    }
  };

  // Its integer form: the same patches of an int16 image, at the image's scale.
  using Float = Patchify<C, H, W, P>;
  static constexpr bool same_scale = true;
  using Ranges = NoRanges;
  void from_float(const Float&, const Ranges&, float, float) {}
};
template <size_t C, size_t H, size_t W, size_t P>
struct Int8Of<Patchify<C, H, W, P>> {
  using type = Patchify<C, H, W, P, std::int16_t>;
};

}  // namespace stformer
