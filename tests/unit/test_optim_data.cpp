// AdamW, the learning-rate schedule, data files and shards, batch loaders and the batch plan.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "temp_dir.hpp"
#include "core/error.hpp"
#include "data/batches.hpp"
#include "data/data_paths.hpp"
#include "data/dataset.hpp"
#include "exec/exec.hpp"
#include "optim/adamw.hpp"
#include "random_values.hpp"
#include "optim/schedule.hpp"

namespace st {
namespace {

TEST(AdamW, MatchesTheReferenceUpdateOverSeveralSteps) {
  const ModelShape shape{1, 4, 1, 2, 3, 3};
  const ParamLayout layout = make_layout(shape);
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
  const ModelShape shape{1, 4, 1, 2, 3, 3};
  const ParamLayout layout = make_layout(shape);
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
  const ModelShape shape{2, 8, 2, 4, 10, 10};
  const ParamLayout layout = make_layout(shape);
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

// The one-launch update (Exec::adamw over AdamW::append_tiles) against the per-range loop
// (AdamW::update), bit for bit: the buffers are laid out as a sharded strategy's, each segment's
// parameters, gradients and state at their own offsets with gaps between, and the token table
// (300 x 256) is longer than a tile, so it is split.
struct OneLaunchCase {
  ParamLayout layout = make_layout(ModelShape{2, 256, 4, 16, 300, 300});
  AdamW adamw{AdamWSettings{0.9, 0.95, 1e-8, 0.1, false, true}, layout};
  std::vector<std::pair<std::size_t, std::size_t>> segments;  // [begin, end) in the flat layout
  std::size_t param_gap = 7, grad_gap = 3, state_gap = 11;   // elements between segments in each buffer
  OneLaunchCase() {
    for (const Segment& segment : layout.segments())
      segments.emplace_back(segment.offset, segment.offset + segment.size);
  }
  // Where segment k starts in a buffer whose segments are `gap` elements apart.
  std::size_t at(std::size_t k, std::size_t gap) const { return segments[k].first + k * gap; }
  std::size_t length(std::size_t gap) const { return layout.total() + segments.size() * gap; }
  std::vector<AdamWTile> tiles() const {
    std::vector<AdamWTile> out;
    for (std::size_t k = 0; k < segments.size(); ++k)
      adamw.append_tiles(out, segments[k].first, segments[k].second - segments[k].first, at(k, param_gap),
                         at(k, grad_gap), at(k, state_gap));
    return out;
  }
};

TEST(AdamW, OneLaunchOverTilesEqualsThePerRangeLoopBitForBit) {
  using testing_support::random_values;
  OneLaunchCase c;
  const std::size_t n = c.layout.total();
  const std::vector<AdamWTile> tiles = c.tiles();
  std::size_t longest = 0;
  for (const AdamWTile& t : tiles) longest = std::max<std::size_t>(longest, t.count);
  ASSERT_EQ(longest, kAdamWTileElements) << "the token table should fill a tile";
  ASSERT_GT(tiles.size(), c.layout.all_tensors().size());

  // The reference: flat buffers, one range at a time.
  std::vector<float> p = random_values<float>(n, 1), m(n, 0.f), v(n, 0.f);
  // The one launch: the same values at the segments' offsets, NaN in the gaps (never touched).
  const float gap = std::nanf("");
  std::vector<float> tp(c.length(c.param_gap), gap), tg(c.length(c.grad_gap), gap);
  std::vector<float> tm(c.length(c.state_gap), gap), tv(c.length(c.state_gap), gap);
  auto scatter = [&](const std::vector<float>& from, std::vector<float>& to, std::size_t spacing) {
    for (std::size_t k = 0; k < c.segments.size(); ++k)
      std::copy(from.begin() + static_cast<std::ptrdiff_t>(c.segments[k].first),
                from.begin() + static_cast<std::ptrdiff_t>(c.segments[k].second),
                to.begin() + static_cast<std::ptrdiff_t>(c.at(k, spacing)));
  };
  scatter(p, tp, c.param_gap);
  scatter(m, tm, c.state_gap);
  scatter(v, tv, c.state_gap);
  const double lrs[] = {3e-3, 1e-2, 6e-3};
  const float scales[] = {1.0f, 0.37f, 0.81f};
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_values<float>(n, 10u + static_cast<unsigned>(t));
    scatter(g, tg, c.grad_gap);
    c.adamw.update(p, g, m, v, 0, lrs[t - 1], scales[t - 1], t);
    host_exec().adamw(c.adamw.step_constants(lrs[t - 1], t), tiles.data(), tiles.size(), tp.data(),
                      Buffer::of(std::span<const float>(tg)), tm.data(), tv.data(), &scales[t - 1]);
  }
  std::vector<float> back_p(n), back_m(n), back_v(n);
  for (std::size_t k = 0; k < c.segments.size(); ++k)
    for (std::size_t i = c.segments[k].first; i < c.segments[k].second; ++i) {
      back_p[i] = tp[c.at(k, c.param_gap) + i - c.segments[k].first];
      back_m[i] = tm[c.at(k, c.state_gap) + i - c.segments[k].first];
      back_v[i] = tv[c.at(k, c.state_gap) + i - c.segments[k].first];
    }
  EXPECT_EQ(0, std::memcmp(back_p.data(), p.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(back_m.data(), m.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(back_v.data(), v.data(), n * sizeof(float)));
  std::size_t untouched = 0;
  for (float x : tp) untouched += std::isnan(x) ? 1 : 0;
  EXPECT_EQ(untouched, c.segments.size() * c.param_gap);
}

TEST(AdamW, OneLaunchReadsBf16GradientsAsTheirWidenedValues) {
  using testing_support::random_values;
  OneLaunchCase c;
  c.param_gap = c.grad_gap = c.state_gap = 0;
  const std::size_t n = c.layout.total();
  const std::vector<AdamWTile> tiles = c.tiles();
  std::vector<Bf16> g16(n);
  std::vector<float> g(n);
  const std::vector<float> drawn = random_values<float>(n, 5);
  for (std::size_t i = 0; i < n; ++i) {
    g16[i] = to_bf16(drawn[i]);
    g[i] = to_float(g16[i]);
  }
  std::vector<float> p = random_values<float>(n, 6), m(n, 0.f), v(n, 0.f);
  auto p2 = p, m2 = m, v2 = v;
  const float scale = 0.5f;
  c.adamw.update(p, g, m, v, 0, 1e-2, scale, 1);
  host_exec().adamw(c.adamw.step_constants(1e-2, 1), tiles.data(), tiles.size(), p2.data(),
                    Buffer::of(std::span<const Bf16>(g16)), m2.data(), v2.data(), &scale);
  EXPECT_EQ(0, std::memcmp(p.data(), p2.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(v.data(), v2.data(), n * sizeof(float)));
}

TEST(AdamW, ANanClipFactorLeavesEveryWeightAndStateAsItIs) {
  OneLaunchCase c;
  c.param_gap = c.grad_gap = c.state_gap = 0;
  const std::size_t n = c.layout.total();
  const std::vector<AdamWTile> tiles = c.tiles();
  std::vector<float> p = testing_support::random_values<float>(n, 3), g(n, 1.0f), m(n, 0.25f), v(n, 0.5f);
  const auto p0 = p, m0 = m, v0 = v;
  const float skip = clip_factor(std::nan(""), 1.0, 1.0);
  host_exec().adamw(c.adamw.step_constants(1e-2, 1), tiles.data(), tiles.size(), p.data(),
                    Buffer::of(std::span<const float>(g)), m.data(), v.data(), &skip);
  EXPECT_EQ(p, p0);
  EXPECT_EQ(m, m0);
  EXPECT_EQ(v, v0);
}

TEST(StepScalars, ClipFactorIsTheHostFormulaAndNanWhereAValueIsNotFinite) {
  const double clip = 1.0;
  for (double norm : {0.0, 0.5, 1.0, 1.0000001, 3.7, 1e30}) {
    const double want = clip > 0 && norm > clip ? clip / (norm + 1e-6) : 1.0;
    EXPECT_EQ(clip_factor(2.5, norm * norm, clip), static_cast<float>(want)) << norm;
  }
  EXPECT_EQ(clip_factor(2.5, 100.0, 0.0), 1.0f) << "clip 0: no clipping";
  EXPECT_TRUE(std::isnan(clip_factor(std::nan(""), 1.0, clip)));
  EXPECT_TRUE(std::isnan(clip_factor(HUGE_VAL, 1.0, clip)));
  EXPECT_TRUE(std::isnan(clip_factor(2.5, HUGE_VAL, clip)));
  EXPECT_TRUE(std::isnan(clip_factor(2.5, std::nan(""), clip)));
}

TEST(Schedule, WarmupThenCosineToMinimum) {
  OptimizerConfig o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  o.schedule = LrSchedule::cosine;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 9, 110), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 110), 1.0);
  EXPECT_NEAR(learning_rate(o, 59, 110), 0.55, 0.01);
  EXPECT_DOUBLE_EQ(learning_rate(o, 109, 110), 0.1);
  o.schedule = LrSchedule::linear;
  EXPECT_NEAR(learning_rate(o, 109, 110), 0.1, 1e-12);
  o.schedule = LrSchedule::constant;
  EXPECT_DOUBLE_EQ(learning_rate(o, 50, 110), 1.0);
}

using Data = TempDirTest;

TEST_F(Data, TokenFileRoundTripAndAutoDetection) {
  std::vector<std::uint16_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>((i * 37) % 50257);
  write_token_file(path("t.bin"), tokens.data(), tokens.size());
  const TokenDataset d = TokenDataset::open(path("t.bin"), DataFormat::automatic);
  EXPECT_FALSE(d.byte_level());
  ASSERT_EQ(d.size(), tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(d[i], tokens[i]);
  EXPECT_EQ(d.max_token(0, d.size()), *std::max_element(tokens.begin(), tokens.end()));
}

TEST_F(Data, TextIsBytes) {
  std::ofstream(path("a.txt")) << "hello world\n";
  const TokenDataset d = TokenDataset::open(path("a.txt"), DataFormat::automatic);
  EXPECT_TRUE(d.byte_level());
  EXPECT_EQ(d.size(), 12u);
  EXPECT_EQ(d[0], 'h');
  EXPECT_EQ(d.max_token(0, d.size()), 'w');
  // Two symbols, equally frequent: entropy ln 2.
  std::ofstream(path("b.txt")) << "abababab";
  EXPECT_NEAR(TokenDataset::open(path("b.txt"), DataFormat::text).unigram_entropy(0, 8), std::log(2.0), 1e-12);
}

TEST_F(Data, BadFilesAreNamed) {
  auto message = [&](const std::string& p, DataFormat format) -> std::string {
    try {
      TokenDataset::open(p, format);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(
      message(path("missing.bin"), DataFormat::automatic).find("cannot open data file '" + path("missing.bin") + "'"),
      std::string::npos);
  std::ofstream(path("empty.txt")).close();
  EXPECT_NE(message(path("empty.txt"), DataFormat::automatic).find("is empty"), std::string::npos);
  std::ofstream(path("text.txt")) << "not tokens";
  EXPECT_NE(message(path("text.txt"), DataFormat::tokens).find("is not a token file"), std::string::npos);
  std::vector<std::uint16_t> tokens(100, 5);
  write_token_file(path("cut.bin"), tokens.data(), tokens.size());
  std::filesystem::resize_file(path("cut.bin"), 1024 + 150);
  EXPECT_NE(message(path("cut.bin"), DataFormat::automatic).find("truncated"), std::string::npos);
}

TEST_F(Data, SplitsAndSamplesAreDeterministicAndIndependentOfRanks) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  std::ofstream(path("c.txt")) << text;
  const TokenDataset d = TokenDataset::open(path("c.txt"), DataFormat::text);
  const DataSplits s = split_data(d, 0.1, 16);
  EXPECT_EQ(s.train.end, 4500u);
  EXPECT_EQ(s.val.begin, 4500u);
  BatchLoader loader(s.train, DataOrder::random, 99, 0, 16, 8, "training");
  for (int k = 0; k < 4; ++k) loader.next_batch();  // batch 3
  // 8 sequences drawn at once equal 8 drawn one at a time (as 8 ranks would).
  std::vector<int> all_t(8 * 16), all_y(8 * 16), one_t(16), one_y(16);
  loader.fill(0, 8, all_t.data(), all_y.data());
  std::set<int> starts;
  for (int k = 0; k < 8; ++k) {
    loader.fill(k, 1, one_t.data(), one_y.data());
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
  // A loader sought to batch 3 draws batch 3 again.
  BatchLoader again(s.train, DataOrder::random, 99, 0, 16, 8, "training");
  again.seek({3, 0, 0});
  again.next_batch();
  std::vector<int> re_t(8 * 16), re_y(8 * 16);
  again.fill(0, 8, re_t.data(), re_y.data());
  EXPECT_EQ(re_t, all_t);
  // Too little data for a sequence is an error naming the file.
  EXPECT_THROW(split_data(d, 0.001, 16), Error);
}

// Three token files, and one file holding their concatenation.
class Shards : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    const std::size_t sizes[3] = {1000, 37, 2500};
    std::vector<std::uint16_t> all;
    for (int k = 0; k < 3; ++k) {
      std::vector<std::uint16_t> part(sizes[k]);
      for (std::size_t i = 0; i < part.size(); ++i) part[i] = static_cast<std::uint16_t>((all.size() + i) * 7919 % 50257);
      write_token_file(path("shard_" + std::to_string(k) + ".bin"), part.data(), part.size());
      all.insert(all.end(), part.begin(), part.end());
    }
    write_token_file(path("all.bin"), all.data(), all.size());
    expected_ = std::vector<int>(all.begin(), all.end());
  }
  std::vector<std::string> shard_paths() const {
    return {path("shard_0.bin"), path("shard_1.bin"), path("shard_2.bin")};
  }
  std::vector<int> expected_;
};

TEST_F(Shards, AreReadAsTheirConcatenation) {
  const TokenDataset d = TokenDataset::open(shard_paths(), DataFormat::automatic);
  ASSERT_EQ(d.size(), expected_.size());
  ASSERT_EQ(d.shards().size(), 3u);
  EXPECT_EQ(d.shards()[1].begin, 1000u);
  EXPECT_EQ(d.shards()[2].begin, 1037u);
  EXPECT_EQ(d.shard_of(999), 0u);
  EXPECT_EQ(d.shard_of(1000), 1u);
  EXPECT_EQ(d.shard_of(1036), 1u);
  EXPECT_EQ(d.shard_of(1037), 2u);
  for (std::size_t i = 0; i < d.size(); ++i) ASSERT_EQ(d[i], expected_[i]) << i;
  // A copy across both boundaries.
  std::vector<int> window(100);
  d.copy(990, window.size(), window.data());
  EXPECT_TRUE(std::equal(window.begin(), window.end(), expected_.begin() + 990));
  // A scan limited to a range that spans two files finds what a scan of the concatenation finds.
  const auto from_expected = [&](int limit, std::size_t begin, std::size_t end) -> std::optional<std::size_t> {
    const auto hit = std::find_if(expected_.begin() + static_cast<std::ptrdiff_t>(begin),
                                  expected_.begin() + static_cast<std::ptrdiff_t>(end), [&](int t) { return t >= limit; });
    if (hit == expected_.begin() + static_cast<std::ptrdiff_t>(end)) return std::nullopt;
    return static_cast<std::size_t>(hit - expected_.begin());
  };
  for (const int limit : {40000, 49000, 50200})
    EXPECT_EQ(d.first_token_at_least(limit, 1020, 1100), from_expected(limit, 1020, 1100)) << limit;
  const int largest = *std::max_element(expected_.begin(), expected_.end());
  EXPECT_EQ(d.max_token(0, d.size()), largest);
  const auto first = d.first_token_at_least(largest, 0, d.size());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(static_cast<std::size_t>(std::find(expected_.begin(), expected_.end(), largest) - expected_.begin()), *first);
  EXPECT_FALSE(d.first_token_at_least(largest + 1, 0, d.size()).has_value());
}

TEST_F(Shards, LoadersDrawTheSameSequencesAsFromTheConcatenation) {
  const TokenDataset shards = TokenDataset::open(shard_paths(), DataFormat::automatic);
  const TokenDataset whole = TokenDataset::open(path("all.bin"), DataFormat::automatic);
  for (const DataOrder order : {DataOrder::random, DataOrder::sequential}) {
    const DataSplits a = split_data(shards, 0.1, 16), b = split_data(whole, 0.1, 16);
    BatchLoader la(a.train, order, 5, 0, 16, 12, "training"), lb(b.train, order, 5, 0, 16, 12, "training");
    std::vector<int> ta(12 * 16), ya(12 * 16), tb(12 * 16), yb(12 * 16);
    for (int k = 0; k < 40; ++k) {  // sequential: past the end of the split and around again
      la.next_batch();
      lb.next_batch();
      la.fill(0, 12, ta.data(), ya.data());
      lb.fill(0, 12, tb.data(), yb.data());
      ASSERT_EQ(ta, tb) << order << " batch " << k;
      ASSERT_EQ(ya, yb) << order << " batch " << k;
    }
  }
}

TEST_F(Shards, SequentialOrderReadsOnAndStartsOverAtTheEnd) {
  const TokenDataset d = TokenDataset::open(shard_paths(), DataFormat::automatic);
  const Split train{&d, 0, 3000};
  BatchLoader loader(train, DataOrder::sequential, 1, 0, 10, 40, "training");  // 400 tokens per batch
  std::vector<int> t(40 * 10), y(40 * 10);
  for (int k = 0; k < 7; ++k) {
    // 3000 tokens hold 7 batches of 400 (+1 for the last target): the 8th starts over.
    EXPECT_EQ(loader.next_start(), static_cast<std::size_t>(k * 400));
    loader.next_batch();
    loader.fill(0, 40, t.data(), y.data());
    ASSERT_TRUE(std::equal(t.begin(), t.end(), expected_.begin() + k * 400)) << k;
    ASSERT_TRUE(std::equal(y.begin(), y.end(), expected_.begin() + k * 400 + 1)) << k;
    loader.fill(39, 1, t.data(), y.data());
    ASSERT_EQ(t[0], expected_[static_cast<std::size_t>(k * 400 + 390)]) << "sequence 39 of batch " << k;
  }
  EXPECT_EQ(loader.position().epoch, 1);
  EXPECT_EQ(loader.position().offset, 0u);
  EXPECT_EQ(loader.position().batches, 7);
  // Seeking restores a place in the middle of a file.
  BatchLoader resumed(train, DataOrder::sequential, 1, 0, 10, 40, "training");
  resumed.seek({3, 1200, 0});
  resumed.next_batch();
  resumed.fill(0, 40, t.data(), y.data());
  EXPECT_TRUE(std::equal(t.begin(), t.end(), expected_.begin() + 1200));
  // A batch bigger than the split is refused, naming it.
  try {
    BatchLoader too_big(Split{&d, 0, 300}, DataOrder::sequential, 1, 0, 10, 40, "validation");
    FAIL() << "401 tokens do not fit in 300";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("401 tokens per step, but the validation part of"), std::string::npos) << e.what();
  }
}

TEST_F(Shards, TextAndTokenFilesDoNotMix) {
  std::ofstream(path("t.txt")) << "some text";
  try {
    TokenDataset::open({path("shard_0.bin"), path("t.txt")}, DataFormat::automatic);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data file '" + path("t.txt") + "' is text but '" + path("shard_0.bin") +
                                         "' is a token file"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Shards, GlobsExpandInNameOrderAndRefuseMistakes) {
  std::ofstream(path("shard_10.bin")) << "x";
  EXPECT_EQ(expand_data_paths({path("shard_*.bin")}, "data.path"),
            (std::vector<std::string>{path("shard_0.bin"), path("shard_1.bin"), path("shard_10.bin"), path("shard_2.bin")}));
  // A list keeps its order; each entry expands in place.
  EXPECT_EQ(expand_data_paths({path("all.bin"), path("shard_[12].bin")}, "data.path"),
            (std::vector<std::string>{path("all.bin"), path("shard_1.bin"), path("shard_2.bin")}));
  auto message = [](const std::vector<std::string>& entries) -> std::string {
    try {
      expand_data_paths(entries, "data.val_path");
    } catch (const Error& e) {
      EXPECT_EQ(e.scope(), ErrorScope::all_ranks);
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message({path("none_*.bin")}), "data.val_path: '" + path("none_*.bin") + "' matches no file");
  std::filesystem::create_directories(path("shard_dir.bin"));
  EXPECT_NE(message({path("shard_d*")}).find("matches the directory"), std::string::npos);
  EXPECT_EQ(message({path("shard_0.bin"), path("shard_?.bin")}),
            "data.val_path names '" + path("shard_0.bin") + "' twice");
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
