// Losses, optimisers, schedules and clipping against plain double-precision computations of
// their definitions (SPEC "Training", PyTorch 1.13's torch.optim formulas), and a short
// training run that must learn.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numbers>
#include <thread>
#include <vector>

#include <stformer/stformer.hpp>
#include <stformer/train/parallel.hpp>

#include "util.hpp"

using namespace stformer;
using test::fill;

namespace {
template <class T, class Loss>
void check_grad(T& x, const T& grad, Loss&& loss) {
  for (size_t i = 0; i < x.size(); ++i) {
    float old = x.data()[i], h = 1e-3f;
    x.data()[i] = old + h;
    double up = loss(), hp = double(x.data()[i]) - old;
    x.data()[i] = old - h;
    double down = loss(), hm = double(old) - x.data()[i];
    x.data()[i] = old;
    CHECK(grad.data()[i] == doctest::Approx((up - down) / (hp + hm)).epsilon(1e-4).scale(1e-3));
  }
}
}  // namespace

TEST_CASE("losses: values and gradients") {
  Rng rng(21);
  Tensor<4, 1, 3> p, t, g;
  fill(p, rng);
  fill(t, rng);
  auto mse = [&] {
    double s = 0;
    for (size_t i = 0; i < p.size(); ++i) s += std::pow(double(p.data()[i]) - t.data()[i], 2);
    return s / double(p.size());
  };
  CHECK(mse_loss(p, t, g) == doctest::Approx(mse()).epsilon(1e-6));
  check_grad(p, g, mse);

  for (size_t c = 0; c < 3; ++c) p(2, 0, c) = t(2, 0, c);  // distance 0: gradient 0
  auto dist = [&] {
    double s = 0;
    for (size_t r = 0; r < 4; ++r) {
      double d = 0;
      for (size_t c = 0; c < 3; ++c) d += std::pow(double(p(r, 0, c)) - t(r, 0, c), 2);
      s += std::sqrt(d);
    }
    return s / 4;
  };
  CHECK(euclidean_loss(p, t, g) == doctest::Approx(dist()).epsilon(1e-6));
  for (size_t c = 0; c < 3; ++c) CHECK(g(2, 0, c) == 0.0f);
  for (size_t c = 0; c < 3; ++c) p(2, 0, c) += 0.5f;
  euclidean_loss(p, t, g);
  check_grad(p, g, dist);

  Tensor<2, 3, 5> z, gz, lp, glp;
  fill(z, rng);
  for (size_t c = 0; c < 5; ++c) z(1, 2, c) += 1000.0f;  // large logits: must stay finite
  IdTensor<6> target = {0, 4, 2, 3, 1, 4};
  auto ce = [&] {
    double s = 0;
    for (size_t r = 0; r < 6; ++r) {
      double m = -1e30, e = 0;
      for (size_t c = 0; c < 5; ++c) m = std::max(m, double(z.data()[r * 5 + c]));
      for (size_t c = 0; c < 5; ++c) e += std::exp(double(z.data()[r * 5 + c]) - m);
      s += m + std::log(e) - z.data()[r * 5 + size_t(target(r))];
    }
    return s / 6;
  };
  CHECK(cross_entropy(z, target, gz) == doctest::Approx(ce()).epsilon(1e-6));
  check_grad(z, gz, ce);
  lp = z;
  for (size_t r = 0; r < 6; ++r) kernels::log_softmax_row<5>(lp.data() + r * 5);
  CHECK(nll_loss(lp, target, glp) == doctest::Approx(ce()).epsilon(1e-5));
  CHECK(glp(0, 0, 0) == doctest::Approx(-1.0 / 6));
  target(3) = 5;
  CHECK_THROWS_AS(cross_entropy(z, target, gz), std::invalid_argument);

  // a vocabulary-sized row
  auto big = test::make<Tensor<1, 33278>>();
  auto gbig = test::make<Tensor<1, 33278>>();
  fill(*big, rng, 3.0f);
  IdTensor<1> t1 = {12345};
  double m = -1e30, e = 0;
  for (float v : *big) m = std::max(m, double(v));
  for (float v : *big) e += std::exp(double(v) - m);
  CHECK(cross_entropy(*big, t1, *gbig) == doctest::Approx(m + std::log(e) - (*big)(0, 12345)).epsilon(1e-6));
  double gs = 0;
  for (float v : *gbig) gs += v;
  CHECK(std::abs(gs) < 1e-5);  // softmax − onehot sums to 0
}

namespace {
// PyTorch 1.13's formulas, in double, on one flat parameter vector.
struct RefAdam {
  double b1, b2, eps, wd;
  bool decoupled;
  std::vector<double> m, v;
  int t = 0;
  void step(std::vector<double>& p, const std::vector<double>& grad, double lr) {
    if (m.empty()) m.assign(p.size(), 0), v.assign(p.size(), 0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decoupled)
        p[i] *= 1 - lr * wd;
      else
        g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};
struct RefSGD {
  double momentum, dampening, wd;
  bool nesterov;
  std::vector<double> buf;
  void step(std::vector<double>& p, const std::vector<double>& grad, double lr) {
    bool first = buf.empty();
    if (first) buf.assign(p.size(), 0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = grad[i] + wd * p[i];
      buf[i] = first ? d : momentum * buf[i] + (1 - dampening) * d;
      p[i] -= lr * (nesterov ? d + momentum * buf[i] : buf[i]);
    }
  }
};
template <class M>
std::vector<double> flat(const M& m) {
  std::vector<double> v;
  for_each_param([&](const Path&, Init, const auto& t) { v.insert(v.end(), t.begin(), t.end()); }, m);
  return v;
}
template <class M>
void check_same(const M& m, const std::vector<double>& want) {
  auto got = flat(m);
  REQUIRE(got.size() == want.size());
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]) / (1e-3 + std::abs(want[i])));
  CHECK(err < 1e-4);
}
}  // namespace

TEST_CASE("optimisers: SGD (momentum, Nesterov, decay), Adam, AdamW over 6 steps") {
  using M = FeedForward<9, 21>;  // 9·21 + 21 + 21·9 + 9 parameters, not a multiple of the vector width
  Rng rng(22);
  auto p = test::make<M>();
  auto g = test::make<M>();
  init_params(*p, rng);
  auto run = [&](auto& opt, auto& ref) {
    auto q = std::make_unique<M>(*p);
    auto want = flat(*q);
    for (int s = 0; s < 6; ++s) {
      test::randomize(*g, rng);
      float lr = 0.01f * float(s + 1);
      opt.step(*q, *g, lr);
      ref.step(want, flat(*g), lr);
    }
    check_same(*q, want);
  };
  SUBCASE("SGD momentum 0.9, Nesterov, weight decay 1e-4") {
    SGD<M> opt({.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true});
    RefSGD ref{0.9, 0, 1e-4, true, {}};
    run(opt, ref);
  }
  SUBCASE("SGD momentum 0.5, dampening 0.1") {
    SGD<M> opt({.momentum = 0.5f, .dampening = 0.1f});
    RefSGD ref{0.5, 0.1, 0, false, {}};
    run(opt, ref);
  }
  SUBCASE("Adam with L2 weight decay") {
    Adam<M> opt({.beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f});
    RefAdam ref{0.8, 0.99, 1e-6, 0.1, false, {}, {}};
    run(opt, ref);
  }
  SUBCASE("AdamW") {
    AdamW<M> opt(0.05f);
    RefAdam ref{0.9, 0.999, 1e-8, 0.05, true, {}, {}};
    run(opt, ref);
  }
}

TEST_CASE("schedules and gradient clipping") {
  constexpr double pi = std::numbers::pi;
  Schedule cosine{Schedule::cosine, 0.01f, 300};
  CHECK(cosine(0) == doctest::Approx(0.01));
  CHECK(cosine(150) == doctest::Approx(0.005));
  CHECK(cosine(100) == doctest::Approx(0.01 * (1 + std::cos(pi / 3)) / 2));
  CHECK(cosine(300) == doctest::Approx(0.0));
  Schedule warm{Schedule::warmup_cosine, 1e-3f, 1500, 500};
  CHECK(warm(0) == 0.0f);
  CHECK(warm(250) == doctest::Approx(5e-4));
  CHECK(warm(500) == doctest::Approx(1e-3));
  CHECK(warm(1000) == doctest::Approx(5e-4));
  CHECK(warm(1500) == doctest::Approx(0.0));
  CHECK(Schedule{Schedule::constant, 0.3f}(1234) == 0.3f);

  Linear<3, 4> g;
  g.weight.fill(1.0f);  // 12 ones and 4 twos: norm sqrt(12 + 16) = sqrt(28)
  g.bias.fill(2.0f);
  CHECK(clip_grad_norm(g, 10.0f) == doctest::Approx(std::sqrt(28.0)));
  CHECK(g.bias(0) == 2.0f);  // below max_norm: unchanged
  CHECK(clip_grad_norm(g, 1.0f) == doctest::Approx(std::sqrt(28.0)));
  CHECK(g.bias(0) == doctest::Approx(2.0 / (std::sqrt(28.0) + 1e-6)));
  double n2 = 0;
  for_each_param([&](const Path&, Init, const auto& t) { for (float x : t) n2 += x * x; }, g);
  CHECK(std::sqrt(n2) == doctest::Approx(1.0).epsilon(1e-5));
}

TEST_CASE("training learns: pointer model on small max-norm sets") {
  constexpr size_t B = 64, N = 10;
  using P = PointerModel<2, 16, 1, 32, 1>;
  auto p = test::make<P>();
  auto g = test::make<P>();
  auto a = test::make<TrainingOf<P, B, N>>();
  Rng rng(23);
  init_params(*p, rng);
  AdamW<P> opt(0.01f);
  Tensor<B, N, 2> x;
  IdTensor<B> target;
  Tensor<B, 1, N> dlogp;
  auto draw = [&] {
    for (size_t b = 0; b < B; ++b) {
      float sx = rng.normal(), sy = rng.normal(), best = -1;
      for (size_t i = 0; i < N; ++i) {
        x(b, i, 0) = rng.normal() + sx;
        x(b, i, 1) = rng.normal() + sy;
        float n = x(b, i, 0) * x(b, i, 0) + x(b, i, 1) * x(b, i, 1);
        if (n > best) best = n, target(b) = std::int32_t(i);
      }
    }
  };
  auto accuracy = [&] {
    size_t right = 0;
    for (size_t b = 0; b < B; ++b) {
      size_t arg = 0;
      for (size_t i = 1; i < N; ++i)
        if (a->at<"">().attn.logp(b, 0, i) > a->at<"">().attn.logp(b, 0, arg)) arg = i;
      right += arg == size_t(target(b));
    }
    return double(right) / B;
  };
  float first = 0, last = 0;
  for (int it = 0; it < 150; ++it) {
    draw();
    float loss = nll_loss(a->forward(*p, x), target, dlogp);
    if (it == 0) first = loss;
    last = loss;
    zero_grad(*g);
    a->backward(*p, *g, dlogp);
    opt.step(*p, *g, 0.005f);
  }
  draw();
  a->forward(*p, x);
  MESSAGE("loss " << first << " -> " << last << ", accuracy on fresh sets " << accuracy());
  CHECK(last < 0.5f * first);
  CHECK(accuracy() > 0.7);
}

// --- Data-parallel training: losses over chunks, the thread pool, the split passes ---------

TEST_CASE("losses over chunks: with `of` = the batch's rows, the chunks' losses and gradients add up to the batch's") {
  Rng rng(21);
  Tensor<8, 1, 5> logp, grad;
  Tensor<8, 1, 2> pred, target, pgrad;
  IdTensor<8> t;
  for (auto& v : logp) v = rng.normal();
  for (auto& v : pred) v = rng.normal();
  for (auto& v : target) v = rng.normal();
  for (size_t i = 0; i < 8; ++i) t(i) = std::int32_t(rng.below(5));
  float whole = cross_entropy(logp, t, grad), pwhole = euclidean_loss(pred, target, pgrad);
  float parts = 0, pparts = 0;
  for (size_t c = 0; c < 2; ++c) {
    Tensor<4, 1, 5> z, g;
    Tensor<4, 1, 2> p, q, pg;
    IdTensor<4> tc;
    std::copy_n(logp.data() + c * 20, 20, z.data());
    std::copy_n(pred.data() + c * 8, 8, p.data());
    std::copy_n(target.data() + c * 8, 8, q.data());
    std::copy_n(t.data() + c * 4, 4, tc.data());
    parts += cross_entropy(z, tc, g, 8);
    pparts += euclidean_loss(p, q, pg, 8);
    for (size_t i = 0; i < 20; ++i) CHECK(g.data()[i] == doctest::Approx(grad.data()[c * 20 + i]).epsilon(1e-6));
    for (size_t i = 0; i < 8; ++i) CHECK(pg.data()[i] == doctest::Approx(pgrad.data()[c * 8 + i]).epsilon(1e-6));
  }
  CHECK(parts == doctest::Approx(whole).epsilon(1e-6));
  CHECK(pparts == doctest::Approx(pwhole).epsilon(1e-6));
}

TEST_CASE("ThreadPool: task i runs once, on thread i % T, and a task's exception reaches the caller") {
  for (size_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (int round = 0; round < 3; ++round) {  // the same pool, several calls
      std::vector<int> runs(11, 0);
      std::vector<std::thread::id> who(11);
      pool.run(runs.size(), [&](size_t i) {
        ++runs[i];
        who[i] = std::this_thread::get_id();
      });
      for (size_t i = 0; i < runs.size(); ++i) {
        CHECK(runs[i] == 1);
        CHECK((who[i] == who[i % threads]));
        if (i < threads && i > 0) CHECK((who[i] != who[0]));
      }
      CHECK((who[0] == std::this_thread::get_id()));
    }
    CHECK_THROWS_AS(pool.run(4, [](size_t i) { if (i == 1) fail("task 1 failed"); }), std::invalid_argument);
    int after = 0;
    pool.run(4, [&](size_t) { std::atomic_ref<int>(after).fetch_add(1); });  // still usable
    CHECK(after == 4);
  }
}

// A pool whose threads cannot all start (the address space limited so that their stacks do not
// fit): an error that says so, not a deadlock. In a child process, killed after 20 s if it hangs.
// (x86-64 only, and not under AddressSanitizer or ThreadSanitizer: their shadow memory, and
// qemu-user running another architecture's build, need the address space themselves.)
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST_CASE("ThreadPool: threads that cannot start are reported as an error, never a deadlock") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::alarm(20);
    rlimit small{};
    ::getrlimit(RLIMIT_AS, &small);
    small.rlim_cur = 256u << 20;  // 256 MB: the process, and a few of the pool's 8 MB stacks
    ::setrlimit(RLIMIT_AS, &small);
    try {
      ThreadPool pool(200);
    } catch (const std::runtime_error& e) {
      std::_Exit(std::strstr(e.what(), "ThreadPool: could not start thread") ? 0 : 2);
    }
    std::_Exit(3);  // every thread started: the limit did not bite
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO("child status " << status);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif

TEST_CASE("ThreadPool: subnormal floats are flushed to zero in its tasks, on every thread, and not after run") {
  volatile float tiny = 1e-30f, scale = 1e-10f;  // volatile: computed at run time
  const auto product = [&] { return tiny * scale; };  // 1e-40: subnormal
  REQUIRE(product() != 0.0f);
  for (size_t threads : {1, 2}) {
    ThreadPool pool(threads);
    float in_task[4] = {1, 1, 1, 1};
    pool.run(4, [&](size_t i) { in_task[i] = product(); });
    for (float v : in_task) CHECK(v == 0.0f);
    CHECK(product() != 0.0f);  // the caller's mode is restored
  }
}

TEST_CASE("split passes: every element once for any number of parts; optimiser steps on a pool, and with clipping passed as grad_scale, equal serial ones bit for bit") {
  using Net = PointerModel<2, 16, 1, 64, 2>;
  auto ones = std::make_unique<Net>();
  for (size_t parts : {1, 2, 3, 7}) {
    zero_grad(*ones);
    for_each_param_part(Serial{}, parts, [](size_t, size_t, size_t n, float* p) { for (size_t i = 0; i < n; ++i) p[i] += 1; }, *ones);
    for_each_param([](const Path& name, Init, const auto& t) {
      for (float v : t) REQUIRE_MESSAGE(v == 1.0f, name.name().c_str());
    }, *ones);
  }
  Rng rng(4);
  auto p = std::make_unique<Net>(), q = std::make_unique<Net>(), g = std::make_unique<Net>();
  init_params(*p, rng);
  *q = *p;
  ThreadPool pool(2);
  AdamW<Net> a, b;
  SGD<Net> s(SGDOptions{.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true}), t(SGDOptions{.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true});
  auto r = std::make_unique<Net>(*p);  // clipping passed to the steps as grad_scale instead
  AdamW<Net> c;
  SGD<Net> u(SGDOptions{.momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = true});
  for (int step = 0; step < 3; ++step) {
    for_each_param([&](const Path&, Init, auto& x) { for (auto& v : x) v = rng.normal(); }, *g);
    auto h = std::make_unique<Net>(*g), k = std::make_unique<Net>(*g);
    double n2 = 0;
    for_each_param([&](const Path&, Init, const auto& x) { for (float v : x) n2 += double(v) * v; }, *g);
    const float scale = clip_scale(grad_norm(*k, pool, 2), 0.5f);
    CHECK(grad_norm(*k) == doctest::Approx(std::sqrt(n2)).epsilon(1e-6));
    CHECK(clip_grad_norm(*g, 0.5f, Serial{}, 2) == clip_grad_norm(*h, 0.5f, pool, 2));
    a.step(*p, *g, 1e-2f);
    b.step(*q, *h, 1e-2f, pool);
    c.step(*r, *k, 1e-2f, pool, scale);
    s.step(*p, *g, 1e-2f);
    t.step(*q, *h, 1e-2f, pool);
    u.step(*r, *k, 1e-2f, Serial{}, scale);
  }
  CHECK(test::tensors_differing(*p, *q) == 0);
  CHECK(test::tensors_differing(*p, *r) == 0);
}
