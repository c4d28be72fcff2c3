// The ranges a quantized model's integers and scales are held to, so that its kernels meet no
// overflow and no over-wide shift (kernels/int8.hpp: exact in int32 inside them). quantize()
// makes models inside them; out_of_bounds checks a model that came from elsewhere, once, where
// it comes in: load_quantized (quantized/checkpoint.hpp) and the C API's image check
// (codegen/c_api.hpp). By tensor, from its name's last part and its dtype:
//   *scale    F32  a float in [2^−64, 2^64] (no 0, denormal, negative or huge scale)
//   weight    I8   in [−127, 127] (symmetric weights: every product |a·b| ≤ 128·127)
//   weight    I16  in [−32767, 32767] (QLayerNorm's: t·w stays in int32)
//   bias      I32  after an I8 weight W [Out, In] (QLinear's): |b_c| + x·Σ_k |W_ck| < 2^31,
//                  x = 32768 when In ≤ 516 (its inputs may be an int16 stream), else 128:
//                  no partial sum of the product overflows
//   bias      I32  after an I16 weight (QLayerNorm's): |b| ≤ 2^30
//   multiplier I32 0, or in [2^30, 2^31) (kernels::Multiplier's mantissa)
//   shift     I32  in [−31, 30]: a shift right of at most 31 bits, and a row's multiplier made
//                  from it (kernels::divide, divide_by_root: at most one more) at most 31 left
//   eps       I32  [2] (QLayerNorm's 64-bit e): 0 ≤ e ≤ 2^62
//   table     I32  (QActivation's knots): in [−65536, 65536], so (t₁ − t₀)·f < 2^25
// Freestanding (no exceptions, no heap): a microcontroller checks its image with it.
#pragma once

#include "../core/config.hpp"

#include <bit>
#include <climits>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "../kernels/int8.hpp"
#include "../core/params.hpp"
#include "../core/precision.hpp"

namespace stformer::inline STFORMER_ABI {

// The first entry of a model outside its bounds: the tensor's dotted name, the entry's index
// (row-major), its value and the bound it breaks; false when every tensor is within bounds. The
// value is held as an integer (a float entry's bits) so that the check does no floating point:
// a core without an FPU checks its image with it and links no soft-float routine.
struct OutOfBounds {
  Name tensor;
  size_t entry = 0;
  std::int64_t bits = 0;  // an integer entry's value, or a float entry's bits (real)
  bool real = false;
  const char* bound = nullptr;
  explicit constexpr operator bool() const { return bound != nullptr; }
  double value() const { return real ? double(std::bit_cast<float>(std::uint32_t(bits))) : double(bits); }
};

namespace detail {
// out_of_bounds's visitor. A bias is held to the last weight of its block (QLinear and
// QLayerNorm visit it before their bias): the weight's Path was made from the same Path object
// (the block's, alive through the block's visit) and no block began since (block(): a sibling's
// Path may take a finished one's place in the frame). Names are written out only for the entry
// found, in a frame of its own: the visit's frames stay small on a microcontroller.
struct BoundsCheck {
  OutOfBounds found;
  const Path* weight_of = nullptr;  // the last weight's block, null when none
  const std::int8_t* w8 = nullptr;  // an I8 weight's data and shape
  size_t w8_out = 0, w8_in = 0;
  bool w16 = false;

  template <class B>
  void block(const Path&, const B&) {
    weight_of = nullptr;
  }
  [[gnu::noinline]] void record(const Path& path, size_t i, std::int64_t bits, bool real, const char* bound) {
    found = {path.name(), i, bits, real, bound};
  }

  template <class T>
  void operator()(const Path& path, Init, const T& t) {
    if (found) return;
    using E = typename T::value_type;
    const std::string_view leaf = path.last();
    const auto* v = t.data();
    const size_t size = t.size();
    const auto check = [&](auto in_bounds, const char* bound) {
      for (size_t i = 0; i < size && !found; ++i)
        if (!in_bounds(i)) {
          if constexpr (std::is_same_v<E, float>) record(path, i, std::bit_cast<std::uint32_t>(v[i]), true, bound);
          else record(path, i, v[i], false, bound);
        }
    };
    if (weight_of != path.parent()) weight_of = nullptr;
    if (weight_of == nullptr) w8 = nullptr, w16 = false;
    if constexpr (std::is_same_v<E, float>) {
      // on the bits: positive floats order as their bits; a negative one or a NaN lies above 2^64's
      constexpr std::uint32_t low = std::bit_cast<std::uint32_t>(0x1p-64f), high = std::bit_cast<std::uint32_t>(0x1p64f);
      if (leaf.ends_with("scale"))
        check([&](size_t i) { return std::bit_cast<std::uint32_t>(v[i]) - low <= high - low; }, "a scale is in [2^-64, 2^64]");
    } else if constexpr (std::is_same_v<E, std::int8_t>) {
      if (leaf == "weight") {
        check([&](size_t i) { return v[i] != -128; }, "an int8 weight is in [-127, 127]");
        if (t.shape().size() == 2) weight_of = path.parent(), w8 = v, w8_out = t.shape()[0], w8_in = t.shape()[1];
      }
    } else if constexpr (std::is_same_v<E, std::int16_t>) {
      if (leaf == "weight") {
        check([&](size_t i) { return v[i] != -32768; }, "an int16 weight is in [-32767, 32767]");
        weight_of = path.parent(), w16 = true;
      }
    } else if constexpr (std::is_same_v<E, std::int32_t>) {
      if (leaf == "multiplier") {
        check([&](size_t i) { return v[i] == 0 || v[i] >= (std::int32_t(1) << 30); }, "a multiplier is 0 or in [2^30, 2^31)");
      } else if (leaf == "shift") {
        check([&](size_t i) { return v[i] >= -31 && v[i] <= 30; }, "a shift is in [-31, 30]");
      } else if (leaf == "table") {
        check([&](size_t i) { return v[i] >= -65536 && v[i] <= 65536; }, "an activation's knot is in [-65536, 65536]");
      } else if (leaf == "eps" && size == 2) {
        check([&](size_t i) { return i == 0 || (v[1] >= 0 && (v[1] < (1 << 30) || (v[1] == (1 << 30) && v[0] == 0))); },
              "eps (64 bits) is in [0, 2^62]");
      } else if (leaf == "bias" && w8 != nullptr && size == w8_out) {
        const std::int8_t* w = w8;
        const std::int64_t x = w8_in <= 516 ? 32768 : 128;
        const size_t in = w8_in;
        check(
            [&](size_t c) {
              std::int64_t sum = 0;
              for (size_t k = 0; k < in; ++k) sum += w[c * in + k] < 0 ? -w[c * in + k] : w[c * in + k];
              const std::int64_t b = v[c];
              return (b < 0 ? -b : b) + x * sum <= INT32_MAX;
            },
            "a bias b_c is within |b_c| + x·Σ_k|W_ck| < 2^31 (x = 32768 for layers of at most 516 inputs, else 128)");
      } else if (leaf == "bias" && w16) {
        check([&](size_t i) { return v[i] >= -(1 << 30) && v[i] <= (1 << 30); }, "a norm's bias is in [-2^30, 2^30]");
      }
    }
  }
};

// What visitor C found in the model (its member found).
template <class C, class Q>
auto found_by(const Q& model) {
  C check;
  for_each_param(check, model);
  return check.found;
}
}  // namespace detail

template <class Q>
OutOfBounds out_of_bounds(const Q& model) {
  return detail::found_by<detail::BoundsCheck>(model);
}

// A model's requantizations against the scales stored beside them. Each block's multipliers
// are a function of its stored scales (B::requants, quantized/linear.hpp: M_c = s_in·s_w[c]/s_out
// for QLinear, g/s_out for QScaleNorm, ...), and quantize sets them through that function; the
// first entry whose stored multiplier or shift is not kernels::quantize_multiplier(M_c) is
// returned: the tensor's dotted name, the entry, the stored and the recomputed value. Inside the
// bounds above a multiplier of 0 or 2^31 − 1 or a shift of −31 runs without overflow but computes
// another model; only the scales tell. Host side: it computes M_c in double (a core without an FPU
// checks its image with out_of_bounds alone).
struct RequantMismatch {
  Name tensor;
  size_t entry = 0;
  std::int32_t stored = 0, expected = 0;
  bool found = false;
  explicit constexpr operator bool() const { return found; }
};

namespace detail {
// requant_mismatch's visitor: shown each block (core/params.hpp's visit), it recomputes the block's
// Requants from its scales; the tensors themselves it skips.
struct RequantCheck {
  RequantMismatch found;
  template <class T>
  void operator()(const Path&, Init, const T&) {}
  template <class B>
  void block(const Path& at, const B& b) {
    if constexpr (HasRequants<const B>)
      B::requants(b, [&](const char* part, const auto& r, const auto& m) {
        const Path at_r = at / part;
        for (size_t c = 0; c < r.multiplier.size() && !found; ++c) {
          const kernels::Multiplier k = kernels::quantize_multiplier(m(c));
          if (r.multiplier(c) != k.q) found = {(at_r / "multiplier").name(), c, r.multiplier(c), k.q, true};
          else if (r.shift(c) != k.shift) found = {(at_r / "shift").name(), c, r.shift(c), std::int32_t(k.shift), true};
        }
      });
  }
};
}  // namespace detail

template <class Q>
RequantMismatch requant_mismatch(const Q& model) {
  return detail::found_by<detail::RequantCheck>(model);
}

}  // namespace stformer
