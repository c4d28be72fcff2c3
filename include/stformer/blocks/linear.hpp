// Linear<In, Out>: y = x Wᵀ + b over rows [L..., In] -> [L..., Out].
//   backward: dW += dyᵀ x, db += Σ_rows dy, dx = dy W
// Parameters: weight [Out, In], bias [Out] (PyTorch's layout); Bias::no: weight alone, b = 0
// (nn.Linear(In, Out, bias=False)). The Init kind is part of the type because it depends on the
// role: Xavier-normal for attention projections, input projections and heads; Kaiming-normal
// (fan-in, gain √2) in feed-forward layers.
#pragma once

#include "../core/config.hpp"

#include <algorithm>
#include <type_traits>

#include "../kernels/matmul.hpp"
#include "../core/params.hpp"

namespace stformer::inline STFORMER_ABI {

// The calls of a linear layer on its weight [Out, In] and bias [Out] wherever they are (Self's
// weight.data() and bias.data()): Linear's own tensors, or LinearRef's.
template <class Self, size_t In, size_t Out>
struct LinearCalls {
  // y = x Wᵀ + b (max(·, 0) when Relu) for Rows rows x [Rows, In] -> y [Rows, Out]: the one
  // call of the layer. Of: the rows of the whole layer when these are a tile of it (the kernel's
  // path follows Of, so a tile gives the same bits as the whole); panels: the weight packed
  // beforehand (with_panels).
  using Panels = kernels::PanelsNT<Out, In>;
  template <size_t Rows, bool Relu = false, size_t Of = Rows>
  void apply(const float* x, float* y, const Panels* panels = nullptr) const {
    kernels::matmul_nt<Rows, Out, In, Relu, Of>(x, In, self().weight.data(), In, y, Out, 1.0f, self().bias.data(), panels);
  }

  // fn(panels) for a layer of Rows rows taken T at a time: panels is the weight packed once (on
  // the stack, at most the backend's tuning.stack_panels bytes: 64 KB, a 128 × 128 weight, on
  // hosts, whose threads have stacks of megabytes) when the kernel packs it and there are
  // several tiles, else null (each tile packs its own: a tile of 16 rows spends about as long
  // packing a weight as multiplying by it). The same bits either way. Not with Helium: a
  // microcontroller's stack is small, and there packing each tile's panel costs no more instructions.
  template <size_t Rows, size_t T, size_t Of = Rows, class Fn>
  void with_panels(Fn&& fn) const {
    if constexpr (T < Rows && kernels::packs<Of> && !kernels::transposes<Of, Out, In> && sizeof(Panels) <= kernels::tuning.stack_panels) {
      Panels panels;
      panels.pack(self().weight.data(), In);
      fn(&panels);
    } else {
      fn(static_cast<const Panels*>(nullptr));
    }
  }

  // The same on Rows rows T at a time, each tile into tile [T, Out], then y_t = tile (y may be
  // x when In = Out: in place), or y_t += tile when Add (a residual connection: the same bits as
  // adding the whole output afterwards).
  // Of: as apply's (these Rows rows one part of a layer of Of rows).
  template <size_t Rows, size_t T, bool Relu = false, bool Add = false, size_t Of = Rows>
  void apply_tiled(const float* x, float* y, float* tile) const {
    with_panels<Rows, T, Of>([&](const Panels* panels) {
      for_tiles<Rows, T>([&]<size_t R>(size_t i) {
        apply<R, Relu, Of>(x + i * In, tile, panels);
        if constexpr (Add)
          kernels::add_to<R * Out>(tile, y + i * Out);
        else
          std::copy_n(tile, R * Out, y + i * Out);
      });
    });
  }

  // The backward of Rows rows x [Rows, In] given dy [Rows, Out]: dW += dyᵀ x, db += Σ_rows dy
  // (into grad, the gradients' layer), dx [Rows, In] = dy W.
  template <size_t Rows, class Grad>
  void backward_rows(const float* x, const float* dy, Grad&& grad, float* dx) const {
    kernels::matmul_tn<Out, In, Rows>(dy, Out, x, In, grad.weight.data(), In);
    if (float* db = grad.bias.data()) kernels::add_column_sums<Rows, Out>(dy, db);
    kernels::matmul_nn<Rows, In, Out>(dy, Out, self().weight.data(), In, dx, In);
  }

  // On the threads of pool (stformer/core/tensor.hpp: with_parts), the same bits as on one:
  // apply_tiled with the rows in S parts, part s through its own T/S rows of tile (one part
  // when T < S); apply_rows with the rows in S parts; apply_columns with the outputs (W's rows)
  // in S parts of whole panels, for a wide layer over few rows (the language model's head).
  template <size_t Rows, size_t T, bool Relu = false, bool Add = false, class Pool>
  void apply_tiled(const float* x, float* y, float* tile, Pool& pool) const {
    with_parts(pool, [&]<size_t S>() {
      if constexpr (S == 1 || T < S) {
        apply_tiled<Rows, T, Relu, Add>(x, y, tile);
      } else {
        constexpr size_t Ts = T / S;
        for_parts<Rows, S>(pool, [&]<size_t R>(size_t r0, size_t s) {
          apply_tiled<R, Ts, Relu, Add, Rows>(x + r0 * In, y + r0 * Out, tile + s * Ts * Out);
        });
      }
    });
  }
  template <size_t Rows, bool Relu = false, class Pool>
  void apply_rows(const float* x, float* y, Pool& pool) const {
    with_parts(pool, [&]<size_t S>() {
      if constexpr (S == 1)
        apply<Rows, Relu>(x, y);
      else
        for_parts<Rows, S>(pool, [&]<size_t R>(size_t r0, size_t) { apply<R, Relu, Rows>(x + r0 * In, y + r0 * Out); });
    });
  }
  template <size_t Rows, class Pool>
  void apply_columns(const float* x, float* y, Pool& pool) const {
    with_parts(pool, [&]<size_t S>() {
      constexpr size_t G = kernels::panel_width<Out>, Q = ((Out + S - 1) / S + G - 1) / G * G;
      if constexpr (S == 1 || Q >= Out) {
        apply<Rows>(x, y);
      } else {
        const float* b = self().bias.data();
        pool.run(parts_of<Out, Q>, [&](size_t s) {
          nth_part<Out, Q>(s, [&]<size_t C>(size_t c0) {
            kernels::matmul_nt<Rows, C, In, false, Rows>(x, In, self().weight.data() + c0 * In, In, y + c0, Out, 1.0f, b ? b + c0 : nullptr);
          });
        });
      }
    });
  }

 private:
  const Self& self() const { return static_cast<const Self&>(*this); }
};

// A linear layer whose weight [Out, In] and bias [Out] lie elsewhere, T* each (const float or
// float): rows of a packed projection (PyTorch's in_proj_weight, in_proj_bias).
template <class T>
struct DataOf {
  T* p;
  T* data() const { return p; }
};
template <size_t In, size_t Out, class T = const float>
struct LinearRef : LinearCalls<LinearRef<In, Out, T>, In, Out> {
  DataOf<T> weight, bias;
  LinearRef(T* w, T* b) : weight{w}, bias{b} {}
};

enum class Bias : bool { no, yes };
inline std::string declared_value(Bias b) { return b == Bias::yes ? "Bias::yes" : "Bias::no"; }

// The bias of a layer without one: b = 0, no storage, a null data().
struct NoBias {
  constexpr float* data() const { return nullptr; }
  constexpr float operator()(size_t) const { return 0.0f; }
};

template <size_t In, size_t Out, Init::Kind WeightInit = Init::xavier_normal, Bias HasBias = Bias::yes>
struct Linear : LinearCalls<Linear<In, Out, WeightInit, HasBias>, In, Out> {
  static std::string declaration() { return declare("Linear", In, Out, HasBias); }  // its initialisation does not change what it computes
  Tensor<Out, In> weight;
  [[no_unique_address]] std::conditional_t<HasBias == Bias::yes, Tensor<Out>, NoBias> bias;

  template <class F, class... S>
  static constexpr void visit(const Path& at, F& f, S&... s) {
    f(at / "weight", Init{WeightInit}, s.weight...);
    if constexpr (HasBias == Bias::yes) f(at / "bias", Init{Init::zeros}, s.bias...);
  }

  // A step of a Sequential (stformer/compose/sequential.hpp): rows [B, N, In] -> [B, N, Out].
  template <size_t B, size_t N>
  using Input = Tensor<B, N, In>;
  template <size_t B, size_t N>
  using Output = Tensor<B, N, Out>;
  static constexpr bool row_local = true;  // step::row_local
  template <size_t B, size_t N, class Pool>
  void run(const Input<B, N>& x, Output<B, N>& y, Nothing, const Mask<B, N>&, Pool&& pool) const {
    this->template apply_columns<B * N>(x.data(), y.data(), pool);
  }

  template <size_t... L>
  struct Acts {
    static constexpr size_t rows = (L * ... * 1);
    using Dx = Tensor<L..., In>;
    // forward returns out, which backward does not read: the next step of a chain may write over
    // it (step::RecordOverInput)
    static constexpr bool output_unread = true;
    const Tensor<L..., In>* x = nullptr;  // the input of the last forward
    Tensor<L..., Out> out;

    // Relu: out = max(x Wᵀ + b, 0) in the same pass (FeedForward's first layer). p: a Linear, or
    // a LinearRef (and grad: the gradients' Linear or LinearRef<In, Out, float>).
    template <bool Relu = false, class Lin, class X>
    const Tensor<L..., Out>& forward(const Lin& p, const X& in) {
      static_assert(shape_is<X, L..., In>, "Linear: input rows x must be [L..., In] (L... of Acts<L...>, In of the weight [Out, In])");
      x = &in;
      p.template apply<rows, Relu>(in.data(), out.data());
      return out;
    }

    template <class Lin, class Grad>
    const Tensor<L..., In>& backward(const Lin& p, Grad&& grad, const Tensor<L..., Out>& dout, Tensor<L..., In>& dx) {
      p.template backward_rows<rows>(x->data(), dout.data(), grad, dx.data());
      return dx;
    }
  };

  template <size_t... L>
  struct Infer {
    Tensor<L..., Out> out;

    template <class X>
    const Tensor<L..., Out>& forward(const Linear& p, const X& x) {
      static_assert(shape_is<X, L..., In>, "Linear: input rows x must be [L..., In] (L... of Infer<L...>, In of the weight [Out, In])");
      p.template apply<(L * ... * 1)>(x.data(), out.data());
      return out;
    }
  };
};

}  // namespace stformer
