// No heap allocation in any forward pass: malloc, calloc, realloc, the aligned allocators and
// every global operator new are replaced by counting versions (forwarding to glibc's own),
// and the count must not move during the forward and backward passes of every block and of
// whole models, nor during their forward-only passes.
#include <doctest/doctest.h>

#include <cstdlib>
#include <new>

#include <stformer/stformer.hpp>
#include <stformer/train/parallel.hpp>

#include "language_model.hpp"
#include "max_value.hpp"
#include "util.hpp"

namespace {
bool counting = false;
std::size_t allocations = 0;
void note() {
  if (counting) ++allocations;
}
}  // namespace

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t s) {
  note();
  return __libc_calloc(n, s);
}
void* realloc(void* p, std::size_t n) {
  note();
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t a, std::size_t n) {
  note();
  return __libc_memalign(a, n);
}
void* memalign(std::size_t a, std::size_t n) {
  note();
  return __libc_memalign(a, n);
}
int posix_memalign(void** p, std::size_t a, std::size_t n) {
  note();
  *p = __libc_memalign(a, n);
  return *p ? 0 : ENOMEM;
}
void free(void* p) { __libc_free(p); }
}

void* operator new(std::size_t n) {
  note();
  if (void* p = __libc_malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  note();
  if (void* p = __libc_memalign(std::size_t(a), n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { __libc_free(p); }
void operator delete[](void* p) noexcept { __libc_free(p); }
void operator delete(void* p, std::size_t) noexcept { __libc_free(p); }
void operator delete[](void* p, std::size_t) noexcept { __libc_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { __libc_free(p); }

using namespace stformer;

namespace {
// Allocates block, gradients and activations first, then counts during forward(args...) and,
// where the block has one, backward (with the output as its incoming gradient).
template <class Block, class Acts, class... Args>
std::size_t allocations_in_forward(Args&... args) {
  auto p = test::make<Block>();
  auto g = test::make<Block>();
  auto a = test::make<Acts>();
  Rng rng(1);
  init_params(*p, rng);
  counting = true;
  allocations = 0;
  for (int i = 0; i < 2; ++i) {
    auto y = &a->forward(*p, args...);
    if constexpr (requires { a->backward(*p, *g, *y); }) {
      zero_grad(*g);
      a->backward(*p, *g, *y);
    }
  }
  counting = false;
  return allocations;
}

// The same for the training activations (Acts) and the forward-only pass (Infer).
template <class Block, size_t... Dims, class... Args>
std::size_t allocations_in_passes(Args&... args) {
  return allocations_in_forward<Block, TrainingOf<Block, Dims...>>(args...) + allocations_in_forward<Block, InferOf<Block, Dims...>>(args...);
}
}  // namespace

TEST_CASE("the counter sees allocations") {
  counting = true;
  allocations = 0;
  auto* v = new std::vector<int>(100);
  void* m = std::malloc(10);
  counting = false;
  CHECK(allocations >= 3);
  delete v;
  std::free(m);
}

TEST_CASE("no heap allocation during forward and backward passes, and forward-only passes (Infer)") {
  constexpr size_t B = 2, N = 20, M = 7, D = 32;
  Tensor<B, N, D> x;
  Tensor<B, M, D> m;
  Tensor<B, N, 2> pts;
  Tensor<B, N, 3> x3;
  Rng rng(3);
  test::fill(x, rng);
  test::fill(m, rng);
  test::fill(pts, rng);
  test::fill(x3, rng);
  KeyMask<B, N> keys = key_mask_from_lengths<B, N>({20, 5});
  Mask<B, N> mask{.causal = true, .keys = &keys};
  IdTensor<B, N> ids;
  ids.fill(3);

  CHECK(allocations_in_passes<ScaleNorm<D>, B, N>(x) == 0);
  CHECK(allocations_in_passes<Identity<D>, B, N>(x) == 0);
  CHECK(allocations_in_passes<Linear<3, D>, B, N>(x3) == 0);
  CHECK(allocations_in_passes<MultiHeadAttention<D, D, D, 4>, B, N, M>(x, m) == 0);
  CHECK(allocations_in_passes<FeedForward<D, 64>, B, N>(x) == 0);
  CHECK(allocations_in_passes<EncoderBlock<D, 4, 64>, B, N>(x, mask) == 0);
  CHECK(allocations_in_passes<DecoderBlock<D, 4, 64>, B, N, M>(x, m) == 0);
  CHECK(allocations_in_passes<MAB<D, 4>, B, N, M>(x, m) == 0);
  CHECK(allocations_in_passes<SAB<D, 4, Identity>, B, N>(x) == 0);
  CHECK(allocations_in_passes<ISAB<D, 4, 5>, B, N>(x) == 0);
  CHECK(allocations_in_passes<PMA<D, 4, 2>, B, N>(x) == 0);
  CHECK(allocations_in_passes<PointerAttention<D, D, 16>, B, N, N>(x, x) == 0);
  CHECK(allocations_in_passes<PositionalEncoding<N, D>, B, N>(x) == 0);
  CHECK(allocations_in_passes<Embedding<10, D>, B, N>(ids) == 0);
  // whole models
  CHECK(allocations_in_passes<PointerModel<2, 16, 1, 64, 2>, B, N>(pts) == 0);
  CHECK(allocations_in_passes<SetTransformer<2, 64, 4, 16, 2>, B, N>(pts) == 0);
  IdTensor<B, 32> window;
  window.fill(7);
  CHECK(allocations_in_passes<LanguageModel<1000, 32, 64, 4, 256, 2>, B>(window) == 0);
}

// Forward-only passes on a ThreadPool of 2 threads (started before counting) allocate nothing.
template <class Block, size_t... Dims, class X, class M>
std::size_t allocations_on_threads(const X& x, const M& mask) {
  auto p = test::make<Block>();
  auto a = test::make<InferOf<Block, Dims...>>();
  Rng rng(1);
  init_params(*p, rng);
  ThreadPool pool(2);
  counting = true;
  allocations = 0;
  for (int i = 0; i < 2; ++i) a->forward(*p, x, mask, pool);
  counting = false;
  return allocations;
}

TEST_CASE("no heap allocation in forward-only passes on two threads") {
  constexpr size_t B = 2, N = 20, D = 32;
  Tensor<B, N, D> x;
  Rng rng(4);
  test::fill(x, rng);
  CHECK(allocations_on_threads<EncoderBlock<D, 4, 64>, B, N>(x, Mask<B, N>{.causal = true}) == 0);
  IdTensor<B, 32> window;
  window.fill(7);
  CHECK(allocations_on_threads<LanguageModel<1000, 32, 64, 4, 256, 2>, B>(window, Mask<B, 32>{}) == 0);
}

// The bytes of a model and of its workspace are compile-time constants.
static_assert(sizeof(SetTransformer<2, 64, 4, 16, 2>) >= 4 * 63819);
static_assert(sizeof(TrainingOf<SetTransformer<2, 64, 4, 16, 2>, 1, 50>) > 0);
// A record keeps what backward reads and nothing it writes: a linear layer its input's address
// and its output, no room for dx; an encoder block of SPEC's pointer model at most 60,000 B
// (its backward's buffers, 29,200 B, are the workspace's).
static_assert(sizeof(ActsOf<Linear<5, 7>, 2, 3>) < sizeof(void*) + sizeof(Tensor<2, 3, 7>) + sizeof(Tensor<2, 3, 5>));
static_assert(sizeof(EncoderBlock<16, 1, 64>::Record<1, 50>) <= 60000);
static_assert(sizeof(WorkspaceOf<EncoderBlock<16, 1, 64>::Record<1, 50>>) <= 30000);

// An integer plan is never larger than the float plan of the same model: the int16 streams are
// half the float ones, a linear step's int32 accumulators at most a quarter of the float
// layer's input and output, and the float end (Dequantize) writes its output over its input.
// The models: SPEC's three, and the PyTorch tutorial's language model (nn.Embedding(1000, 64),
// the sinusoidal positions, two causal nn.TransformerEncoderLayer(64, 2, 200), nn.Linear(64,
// 1000)), whose head's phase dominates its pass.
namespace {
using TutorialLm = Sequential<Named<"encoder", Embedding<1000, 64>>, PositionalEncoding<32, 64>,
                              Named<"layers", Repeat<EncoderBlock<64, 2, 200, PostNorm<>>, 2>>, Named<"decoder", Linear<64, 1000>>>;
template <class M, size_t B, size_t N>
constexpr bool integer_plan_fits = sizeof(InferOf<Quantized<M>, B, N>) <= sizeof(InferOf<M, B, N>);
}  // namespace
static_assert(integer_plan_fits<TutorialLm, 1, 32> && integer_plan_fits<TutorialLm, 2, 32>);
static_assert(integer_plan_fits<PointerModel<2, 16, 1, 64, 2>, 1, 50> && integer_plan_fits<PointerModel<2, 16, 1, 64, 2>, 4, 50>);
static_assert(integer_plan_fits<SetTransformer<2, 64, 4, 16, 2>, 1, 50> && integer_plan_fits<SetTransformer<2, 64, 4, 16, 2>, 4, 50>);
static_assert(integer_plan_fits<LanguageModel<33278, 32, 128, 4, 512, 2>, 1, 32> && integer_plan_fits<LanguageModel<33278, 32, 128, 4, 512, 2>, 4, 32>);

TEST_CASE("no heap allocation in a whole training step (forward, loss, backward, clipping, optimiser)") {
  constexpr size_t B = 4, N = 50;
  using P = PointerModel<2, 16, 1, 64, 2>;
  using LM = LanguageModel<500, 32, 32, 4, 64, 2>;
  auto p = test::make<P>();
  auto g = test::make<P>();
  auto a = test::make<TrainingOf<P, B, N>>();
  auto adamw = std::make_unique<AdamW<P>>();
  auto sgd = std::make_unique<SGD<P>>(SGDOptions{.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true});
  auto lm = test::make<LM>();
  auto lg = test::make<LM>();
  auto la = test::make<TrainingOf<LM, B>>();
  auto adam = std::make_unique<Adam<LM>>();
  Rng rng(5);
  init_params(*p, rng);
  init_params(*lm, rng);
  Tensor<B, N, 2> x;
  test::fill(x, rng);
  IdTensor<B> target = {1, 2, 3, 4};
  Tensor<B, 1, N> dlogp;
  IdTensor<B, 32> window;
  window.fill(9);
  Tensor<B, 1, 500> dlogits;
  Schedule schedule{Schedule::warmup_cosine, 1e-3f, 100, 10};

  counting = true;
  allocations = 0;
  for (int step = 0; step < 3; ++step) {
    nll_loss(a->forward(*p, x), target, dlogp);
    zero_grad(*g);
    a->backward(*p, *g, dlogp);
    clip_grad_norm(*g, 1.0f);
    adamw->step(*p, *g, schedule(step));
    sgd->step(*p, *g, 0.01f);

    cross_entropy(la->forward(*lm, window), target, dlogits);
    zero_grad(*lg);
    la->backward(*lm, *lg, dlogits);
    adam->step(*lm, *lg, 1e-3f);
  }
  counting = false;
  CHECK(allocations == 0);
}

TEST_CASE("no heap allocation per iteration of the max-value training loop") {
  max_value::Run<max_value::PointerNet> pointer(1, 2);  // two threads (started here, not per step)
  max_value::Run<max_value::SetNet> set(1);
  max_value::TrainOptions o;
  o.iterations = test::slow() ? 1 : 3;
  o.report_every = 1;
  size_t reports = 0;
  std::function<void(int, float, double, double)> report = [&](int, float, double, double) { ++reports; };
  counting = true;
  allocations = 0;
  pointer.train(o, report);
  set.train(o, report);
  counting = false;
  CHECK(reports == size_t(2 * o.iterations));
  CHECK(allocations == 0);
}

TEST_CASE("no heap allocation per language-model training step and evaluation") {
  lm::Run<50, 8, 16, 2, 32, 1, 8> run(1, 2);  // V, L, D, H, F, blocks, batch; two threads
  std::vector<std::int32_t> stream(1000);
  for (size_t i = 0; i < stream.size(); ++i) stream[i] = std::int32_t((i * 7) % 50);
  lm::TrainOptions o;
  run.step(stream, o);  // the first step makes the shuffled order of the pass
  counting = true;
  allocations = 0;
  for (int s = 0; s < 5; ++s) run.step(stream, o);
  double nll = run.mean_nll(stream, 8, 200);
  counting = false;
  CHECK(std::isfinite(nll));
  CHECK(allocations == 0);
}
