// AdamW, the learning-rate schedule, token files and the batch plan.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "data/batches.hpp"
#include "data/dataset.hpp"
#include "optim/adamw.hpp"
#include "optim/schedule.hpp"

namespace st {
namespace {

TEST(AdamW, MatchesTheReferenceUpdateOverSeveralSteps) {
  const Gpt2Shape shape{1, 4, 1, 2, 3, 3};
  const ParamLayout layout = make_gpt2_layout(shape);
  AdamWSettings s{0.9, 0.95, 1e-8, 0.1, false, false};
  AdamW adamw(s, layout);
  std::vector<float> p(layout.total()), g(layout.total()), m(layout.total(), 0.f), v(layout.total(), 0.f);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  std::vector<double> rp(p.begin(), p.end()), rm(p.size(), 0.0), rv(p.size(), 0.0);
  const double lr = 0.01, scale = 0.5;
  for (int t = 1; t <= 3; ++t) {
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.05f * static_cast<float>((i * (t + 2)) % 5) - 0.1f;
    adamw.update(p, g, m, v, 0, lr, scale, t);
    for (std::size_t i = 0; i < rp.size(); ++i) {
      const double gi = static_cast<double>(g[i]) * scale;
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
      const double mhat = rm[i] / (1 - std::pow(0.9, t)), vhat = rv[i] / (1 - std::pow(0.95, t));
      const double decay = adamw.decays(i) ? 0.1 : 0.0;
      rp[i] = rp[i] * (1 - lr * decay) - lr * mhat / (std::sqrt(vhat) + 1e-8);
    }
  }
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], rp[i], 1e-6) << i;
}

TEST(AdamW, DecaysOnlyMatricesByDefault) {
  const Gpt2Shape shape{1, 4, 1, 2, 3, 3};
  const ParamLayout layout = make_gpt2_layout(shape);
  AdamW plain({0.9, 0.95, 1e-8, 0.1, false, false}, layout);
  EXPECT_TRUE(plain.decays(layout.tensor("block0.attn.qkv.w").offset));
  EXPECT_FALSE(plain.decays(layout.tensor("block0.attn.qkv.b").offset));
  EXPECT_FALSE(plain.decays(layout.tensor("block0.ln1.w").offset));
  EXPECT_FALSE(plain.decays(layout.tensor("wte").offset));
  AdamW all({0.9, 0.95, 1e-8, 0.1, true, true}, layout);
  EXPECT_TRUE(all.decays(layout.tensor("wte").offset));
  EXPECT_TRUE(all.decays(layout.tensor("lnf.b").offset));
}

TEST(AdamW, UpdatingShardsEqualsUpdatingTheWhole) {
  const Gpt2Shape shape{2, 8, 2, 4, 10, 10};
  const ParamLayout layout = make_gpt2_layout(shape);
  AdamW adamw({0.9, 0.95, 1e-8, 0.1, false, false}, layout);
  const std::size_t n = layout.total();
  std::vector<float> p(n), g(n), m(n, 0.f), v(n, 0.f);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = std::sin(static_cast<float>(i));
    g[i] = std::cos(static_cast<float>(i));
  }
  auto p2 = p, m2 = m, v2 = v;
  adamw.update(p, g, m, v, 0, 1e-2, 1.0, 1);
  // Three uneven shards, each updated on its own.
  const std::size_t cuts[] = {0, n / 3 + 1, 2 * n / 3 + 5, n};
  for (int s = 0; s < 3; ++s) {
    const std::size_t b = cuts[s], e = cuts[s + 1];
    adamw.update(std::span(p2).subspan(b, e - b), std::span<const float>(g).subspan(b, e - b),
                 std::span(m2).subspan(b, e - b), std::span(v2).subspan(b, e - b), b, 1e-2, 1.0, 1);
  }
  EXPECT_EQ(p, p2);
}

TEST(Schedule, WarmupThenCosineToMinimum) {
  OptimizerConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  o.schedule = "cosine";
  EXPECT_DOUBLE_EQ(learning_rate(o, 0, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 9, 110), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 110), 1.0);
  EXPECT_NEAR(learning_rate(o, 59, 110), 0.55, 0.01);
  EXPECT_DOUBLE_EQ(learning_rate(o, 109, 110), 0.1);
  o.schedule = "linear";
  EXPECT_NEAR(learning_rate(o, 109, 110), 0.1, 1e-12);
  o.schedule = "constant";
  EXPECT_DOUBLE_EQ(learning_rate(o, 50, 110), 1.0);
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("st_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

using Data = TempDir;

TEST_F(Data, TokenFileRoundTripAndAutoDetection) {
  std::vector<std::uint16_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>((i * 37) % 50257);
  write_token_file(path("t.bin"), tokens.data(), tokens.size());
  const TokenDataset d = TokenDataset::open(path("t.bin"), "auto");
  EXPECT_FALSE(d.byte_level());
  ASSERT_EQ(d.size(), tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(d[i], tokens[i]);
  EXPECT_EQ(d.max_token(), *std::max_element(tokens.begin(), tokens.end()));
}

TEST_F(Data, TextIsBytes) {
  std::ofstream(path("a.txt")) << "hello world\n";
  const TokenDataset d = TokenDataset::open(path("a.txt"), "auto");
  EXPECT_TRUE(d.byte_level());
  EXPECT_EQ(d.size(), 12u);
  EXPECT_EQ(d[0], 'h');
  EXPECT_EQ(d.max_token(), 'w');
  // Two symbols, equally frequent: entropy ln 2.
  std::ofstream(path("b.txt")) << "abababab";
  EXPECT_NEAR(TokenDataset::open(path("b.txt"), "text").unigram_entropy(0, 8), std::log(2.0), 1e-12);
}

TEST_F(Data, BadFilesAreNamed) {
  auto message = [&](const std::string& p, const std::string& format) -> std::string {
    try {
      TokenDataset::open(p, format);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(path("missing.bin"), "auto").find("cannot open data file '" + path("missing.bin") + "'"),
            std::string::npos);
  std::ofstream(path("empty.txt")).close();
  EXPECT_NE(message(path("empty.txt"), "auto").find("is empty"), std::string::npos);
  std::ofstream(path("text.txt")) << "not tokens";
  EXPECT_NE(message(path("text.txt"), "tokens").find("is not a token file"), std::string::npos);
  std::vector<std::uint16_t> tokens(100, 5);
  write_token_file(path("cut.bin"), tokens.data(), tokens.size());
  std::filesystem::resize_file(path("cut.bin"), 1024 + 150);
  EXPECT_NE(message(path("cut.bin"), "auto").find("truncated"), std::string::npos);
}

TEST_F(Data, SplitsAndSamplesAreDeterministicAndIndependentOfRanks) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  std::ofstream(path("c.txt")) << text;
  const TokenDataset d = TokenDataset::open(path("c.txt"), "text");
  const DataSplits s = split_data(d, 0.1, 16);
  EXPECT_EQ(s.train.end, 4500u);
  EXPECT_EQ(s.val.begin, 4500u);
  SequenceSampler sampler(d, s.train, 99, 0, 16);
  // 8 sequences drawn at once equal 8 drawn one at a time (as 8 ranks would).
  std::vector<int> all_t(8 * 16), all_y(8 * 16), one_t(16), one_y(16);
  sampler.fill(3, 0, 8, all_t.data(), all_y.data());
  std::set<int> starts;
  for (int k = 0; k < 8; ++k) {
    sampler.fill(3, k, 1, one_t.data(), one_y.data());
    for (int t = 0; t < 16; ++t) {
      ASSERT_EQ(one_t[t], all_t[k * 16 + t]);
      ASSERT_EQ(one_y[t], all_y[k * 16 + t]);
      if (t + 1 < 16) {
        ASSERT_EQ(one_y[t], one_t[t + 1]) << "targets are the next tokens";
      }
    }
    starts.insert(one_t[0] * 1000 + one_t[1] * 10 + one_t[2]);
  }
  EXPECT_GT(starts.size(), 1u) << "sequences of a batch should differ";
  // Too little data for a sequence is an error naming the file.
  EXPECT_THROW(split_data(d, 0.001, 16), Error);
}

TEST(BatchPlan, SplitsTheGlobalBatchOrRefuses) {
  DataConfig data;
  data.global_batch = 24;
  data.micro_batch = 4;
  const BatchPlan p = plan_batches(data, 128, 3, "deck.toml");
  EXPECT_EQ(p.accum_steps, 2);
  EXPECT_EQ(p.first_sequence(2), 16);
  data.micro_batch = 0;
  EXPECT_EQ(plan_batches(data, 128, 4, "deck.toml").micro_batch, 6);
  try {
    plan_batches(data, 128, 5, "deck.toml");
    FAIL() << "24 sequences cannot be split over 5 ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.scope(), ErrorScope::all_ranks);
    EXPECT_NE(std::string(e.what()).find("data.global_batch = 24 cannot be split over 5 ranks"), std::string::npos);
  }
  data.micro_batch = 5;
  EXPECT_THROW(plan_batches(data, 128, 2, "deck.toml"), Error);
}

}  // namespace
}  // namespace st
