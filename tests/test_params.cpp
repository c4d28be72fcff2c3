// The parameter visitor: SPEC names and counts, initialisation statistics, reproducibility,
// lock-step visits over several objects of one type.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <stformer/stformer.hpp>

#include "util.hpp"

using namespace stformer;

namespace {
template <class T>
std::pair<double, double> mean_std(const T& t) {
  double s = 0, s2 = 0;
  for (float x : t) s += x, s2 += double(x) * x;
  double mean = s / double(t.size());
  return {mean, std::sqrt(s2 / double(t.size()) - mean * mean)};
}
}  // namespace

TEST_CASE("SPEC names and parameter counts") {
  auto pm = test::make<PointerModel<2, 16, 1, 64, 2>>();
  auto n = test::param_names(*pm);
  // proj 48; per encoder block 1 + 4·(256 + 16) + 1 + (1024 + 64 + 1024 + 16) = 3218;
  // sn_v 1, query 16, sn_q 1, pointer 2·(256 + 16)
  CHECK(param_count(*pm) == 48 + 2 * 3218 + 1 + 16 + 1 + 544);
  CHECK(n.front() == "proj.weight");
  CHECK(n[2] == "blocks.0.sn1.g");
  CHECK(n[3] == "blocks.0.attn.wq.weight");
  CHECK(std::find(n.begin(), n.end(), "blocks.1.ffn.fc2.bias") != n.end());
  CHECK(std::find(n.begin(), n.end(), "sn_v.g") != n.end());
  CHECK(std::find(n.begin(), n.end(), "query") != n.end());
  CHECK(n.back() == "pointer.wk.bias");

  auto sm = test::make<SetTransformer<2, 64, 4, 16, 2>>();
  auto s = test::param_names(*sm);
  CHECK(std::find(s.begin(), s.end(), "isab.inducing") != s.end());
  CHECK(std::find(s.begin(), s.end(), "isab.mab1.nkv.g") != s.end());
  CHECK(std::find(s.begin(), s.end(), "pool.seeds") != s.end());
  CHECK(std::find(s.begin(), s.end(), "pool.mab.fc.bias") != s.end());

  auto lm = test::make<LanguageModel<33278, 32, 128, 4, 512, 2>>();
  CHECK(param_count(*lm) == 9030661);  // SPEC's figure
  auto l = test::param_names(*lm);
  CHECK(l.front() == "embedding.weight");
  CHECK(std::find(l.begin(), l.end(), "blocks.0.attn.wq.weight") != l.end());
  CHECK(l.back() == "head.bias");

  auto dec = test::make<DecoderBlock<16, 2, 32>>();
  auto d = test::param_names(*dec);
  CHECK(d == std::vector<std::string>{
                 "sn1.g", "self_attn.wq.weight", "self_attn.wq.bias", "self_attn.wk.weight", "self_attn.wk.bias",
                 "self_attn.wv.weight", "self_attn.wv.bias", "self_attn.wo.weight", "self_attn.wo.bias", "sn2.g",
                 "cross_attn.wq.weight", "cross_attn.wq.bias", "cross_attn.wk.weight", "cross_attn.wk.bias",
                 "cross_attn.wv.weight", "cross_attn.wv.bias", "cross_attn.wo.weight", "cross_attn.wo.bias", "sn3.g",
                 "ffn.fc1.weight", "ffn.fc1.bias", "ffn.fc2.weight", "ffn.fc2.bias"});
}

TEST_CASE("initialisation follows SPEC: Xavier, Kaiming, normal, zeros, sqrt(D)") {
  auto m = test::make<MAB<256, 4>>();
  auto e = test::make<Embedding<300, 100>>();
  auto i = test::make<ISAB<256, 4, 64>>();
  Rng rng(42);
  init_params(*m, rng);
  init_params(*e, rng);
  init_params(*i, rng);
  const auto mp = test::params_by_name(*m);
  auto [m1, s1] = mean_std(mp.at("attn.wq.weight"));
  CHECK(std::abs(m1) < 0.01 * s1);
  CHECK(s1 == doctest::Approx(std::sqrt(2.0 / 512)).epsilon(0.02));  // Xavier: sqrt(2/(in+out))
  auto [m2, s2] = mean_std(mp.at("fc.weight"));
  CHECK(s2 == doctest::Approx(std::sqrt(2.0 / 256)).epsilon(0.02));  // Kaiming fan-in, gain √2
  auto [m3, s3] = mean_std(e->weight);
  CHECK(s3 == doctest::Approx(1.0).epsilon(0.02));
  auto [m4, s4] = mean_std(test::params_by_name(*i).at("inducing"));
  CHECK(s4 == doctest::Approx(std::sqrt(2.0 / (256 + 64))).epsilon(0.03));
  CHECK(mp.at("nq.g").at(0) == doctest::Approx(16.0));
  for (float b : mp.at("attn.wo.bias")) CHECK(b == 0.0f);
  for (float b : mp.at("fc.bias")) CHECK(b == 0.0f);
}

TEST_CASE("one seed, one model; visits in lock-step") {
  auto a = test::make<SetTransformer<2, 32, 4, 8, 2>>();
  auto b = test::make<SetTransformer<2, 32, 4, 8, 2>>();
  auto c = test::make<SetTransformer<2, 32, 4, 8, 2>>();
  Rng r1(7), r2(7), r3(8);
  init_params(*a, r1);
  init_params(*b, r2);
  init_params(*c, r3);
  size_t same = 0, differ = 0, tensors = 0;
  for_each_param(
      [&](const Path&, Init init, const auto& x, const auto& y, const auto& z) {
        ++tensors;
        same += std::equal(x.begin(), x.end(), y.begin());
        if (init.kind != Init::zeros && init.kind != Init::constant) differ += !std::equal(x.begin(), x.end(), z.begin());
      },
      *a, *b, *c);
  CHECK(same == tensors);
  CHECK(differ == 1 + 1 + 2 * 5 + 1 + 5 + 1);  // proj, inducing, 2 MABs·(wq wk wv wo fc), seeds, MAB, head
  CHECK(Path{} / "blocks" / 12 / "attn" == "blocks.12.attn");
}
