// The JSON the program writes (metrics lines, checkpoint phases, timelines) is valid JSON whatever
// text it holds: a strict parser reads every file back, with the values that were written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "temp_dir.hpp"
#include "ckpt/phase_log.hpp"
#include "core/error.hpp"
#include "core/json_text.hpp"
#include "core/timeline.hpp"
#include "deck/parse.hpp"
#include "train/report.hpp"
#include "train/run_dir.hpp"

namespace st {
namespace {

using Json = nlohmann::ordered_json;

// Text a run may hold in a path or a name: quotes, a backslash, control characters, characters of
// two and four bytes, and bytes that are no UTF-8 (a lone 0xff, a sequence cut short, a stray
// continuation byte).
const std::string kHostile = "q\"b\\s\nt\tc\x01\x1b\x7f \xc3\xa9\xf0\x9f\x98\x80 \xff|\xe2\x82 |\x80|end";
// What a reader gets back: the same text, with U+FFFD (EF BF BD) for each piece that is no UTF-8.
const std::string kReadBack = "q\"b\\s\nt\tc\x01\x1b\x7f \xc3\xa9\xf0\x9f\x98\x80 \xef\xbf\xbd|\xef\xbf\xbd |\xef\xbf\xbd|end";

// Parses strictly (nlohmann throws on anything that is not JSON), keeping the order of keys.
Json parse(const std::string& text) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "): " << text;
    return nullptr;
  }
}

std::vector<std::string> keys(const Json& object) {
  std::vector<std::string> out;
  for (const auto& item : object.items()) out.push_back(item.key());
  return out;
}

TEST(JsonText, AnyTextIsOneAsciiLineOfJson) {
  std::string text;
  EXPECT_NO_THROW(text = json_text({{"text", kHostile}}));
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_TRUE(byte >= 0x20 && byte < 0x7f) << "byte " << static_cast<int>(byte) << " in " << text;
  }
  EXPECT_EQ(parse(text)["text"], kReadBack);
}

TEST(JsonText, NumbersReadBackAndNonFiniteOnesAreNull) {
  const double inf = std::numeric_limits<double>::infinity();
  const Json back = parse(json_text({{"sum", 0.1 + 0.2},
                                     {"tiny", 4.9e-324},
                                     {"bytes", std::numeric_limits<std::uint64_t>::max()},
                                     {"nan", std::nan("")},
                                     {"inf", inf},
                                     {"minus_inf", -inf}}));
  EXPECT_EQ(back["sum"].get<double>(), 0.1 + 0.2);
  EXPECT_EQ(back["tiny"].get<double>(), 4.9e-324);
  EXPECT_EQ(back["bytes"].get<std::uint64_t>(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_TRUE(back["nan"].is_null());
  EXPECT_TRUE(back["inf"].is_null());
  EXPECT_TRUE(back["minus_inf"].is_null());
}

TEST(StepMetrics, FieldsInOrderAndADivergedLossIsNull) {
  StepRecord r;
  r.step = 7;
  r.steps = 9;
  r.loss = std::nan("");
  r.lr = 3e-4;
  r.grad_norm = std::numeric_limits<double>::infinity();
  r.seconds = 0.25;
  r.tokens_per_second = 4096;
  r.mfu = 0.375;
  r.exposed_comm_seconds = 0.0625;
  r.memory_bytes = 5'000'000'000ull;  // beyond 32 bits
  r.comm_intra_bytes = 1000;
  r.comm_inter_bytes = 24;
  r.comm_tensor_bytes = 600;
  r.elapsed_seconds = 1.5;
  r.eta_seconds = 0.5;
  const Json row = parse(json_text(step_metrics(r)));
  // The names tools/plot_metrics.py and the end-to-end tests read, in this order.
  EXPECT_EQ(keys(row), (std::vector<std::string>{"kind", "step", "loss", "lr", "grad_norm", "ms", "tokens_per_s", "mfu",
                                                  "memory_bytes", "comm_bytes", "comm_intra_bytes", "comm_inter_bytes",
                                                  "comm_tensor_bytes", "comm_pipeline_bytes", "exposed_comm_ms",
                                                  "elapsed_s", "eta_s", "tokens", "peak_bytes"}));
  EXPECT_EQ(row["kind"], "train");
  EXPECT_EQ(row["step"], 7);
  EXPECT_TRUE(row["loss"].is_null());
  EXPECT_TRUE(row["grad_norm"].is_null());
  EXPECT_EQ(row["lr"].get<double>(), 3e-4);
  EXPECT_EQ(row["ms"].get<double>(), 250.0);
  EXPECT_EQ(row["exposed_comm_ms"].get<double>(), 62.5);
  EXPECT_EQ(row["memory_bytes"].get<std::uint64_t>(), 5'000'000'000ull);
  EXPECT_EQ(row["comm_bytes"], 1024);
  EXPECT_EQ(row["comm_tensor_bytes"], 600);
  // The step line names the tensor group's share only when there is one.
  EXPECT_NE(step_line(r).find("| comm 1.00 KiB (tensor 600 B, inter-node 24 B), 62.5 ms exposed |"), std::string::npos)
      << step_line(r);
  // A pipeline's point-to-point bytes count in the total and are named apart.
  r.comm_pipeline_bytes = 2048;
  EXPECT_EQ(parse(json_text(step_metrics(r)))["comm_bytes"], 3072);
  EXPECT_NE(step_line(r).find("| comm 3.00 KiB (tensor 600 B, inter-node 24 B, pipeline 2.00 KiB), 62.5 ms exposed |"),
            std::string::npos)
      << step_line(r);
  r.comm_pipeline_bytes = 0;
  r.comm_tensor_bytes = 0;
  EXPECT_NE(step_line(r).find("| comm 1.00 KiB (inter-node 24 B), 62.5 ms exposed |"), std::string::npos)
      << step_line(r);
  r.comm_inter_bytes = 0;
  EXPECT_NE(step_line(r).find("| comm 1000 B, 62.5 ms exposed | ETA "), std::string::npos) << step_line(r);
  // A diverged step says nan and inf, whatever the NaN's sign bit.
  EXPECT_NE(step_line(r).find("| loss nan |"), std::string::npos) << step_line(r);
  EXPECT_NE(step_line(r).find("| norm inf |"), std::string::npos) << step_line(r);
  EXPECT_EQ(row["eta_s"].get<double>(), 0.5);
}

TEST(StepLine, FitsInOneLineOfAWideTerminal) {
  // A long GPU run's line: five-digit steps, a million tokens a second, its measured peak and
  // share, a GiB sent, hours to go. It stays under 160 characters, so that it does not wrap.
  StepRecord r;
  r.step = 12345;
  r.steps = 100000;
  r.loss = 3.2841;
  r.lr = 6e-4;
  r.grad_norm = 12.345;
  r.seconds = 0.5123;
  r.tokens_per_second = 1023456;
  r.mfu = 0.456;
  r.largest_peak_bytes = 65'700'000'000ull;
  r.peak_share = 0.44;
  r.comm_intra_bytes = 1'320'000'000;
  r.exposed_comm_seconds = 0.1234;
  r.eta_seconds = 12 * 3600 + 5 * 60;
  const std::string line = step_line(r);
  EXPECT_LT(line.size(), 160u) << line;
  EXPECT_EQ(line, "step 12345/100000 | loss 3.2841 | lr 6.0e-04 | norm 12.3 | 512.3 ms | 1.02M tok/s | MFU 45.6% | "
                  "mem 61.2 GiB 44% | comm 1.23 GiB, 123 ms exposed | ETA 12h 05m");
  // With a GPU's GEMM share, a tensor group and a second node it is longer, but not by much.
  r.mfu_of_measured_gemm = 0.612;
  r.comm_tensor_bytes = 500'000'000;
  r.comm_inter_bytes = 400'000'000;
  EXPECT_LT(step_line(r).size(), 210u) << step_line(r);
}

TEST(PhaseLog, PhasesInOrderAddUpToTheTotal) {
  PhaseLog log;
  log.add("layout", 0.5);
  log.add("write", 0.25);
  log.add("layout", 0.125);  // marked twice: the two add up
  const Json phases = parse(json_text(log.json()));
  EXPECT_EQ(keys(phases), (std::vector<std::string>{"layout", "write"}));
  EXPECT_EQ(phases["layout"].get<double>(), 0.625);
  EXPECT_EQ(phases["write"].get<double>(), 0.25);
  EXPECT_EQ(phases["layout"].get<double>() + phases["write"].get<double>(), log.total());
}

TEST(Timeline, ChromeTraceWithAnyTrackName) {
  Timeline timeline(true);
  timeline.record("compute", "forward block0", 0.0, 2.0);
  timeline.record(kHostile, "all_gather " + kHostile, 1.26, 3.0, 4096);
  const Json trace = parse(timeline.json(3));
  EXPECT_EQ(keys(trace), (std::vector<std::string>{"displayTimeUnit", "traceEvents"}));
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  const Json& events = trace["traceEvents"];
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0], Json({{"ph", "M"}, {"name", "process_name"}, {"pid", 3}, {"args", {{"name", "rank 3"}}}}));
  EXPECT_EQ(events[1], Json({{"ph", "M"}, {"name", "thread_name"}, {"pid", 3}, {"tid", 0}, {"args", {{"name", "compute"}}}}));
  EXPECT_EQ(events[2], Json({{"ph", "M"}, {"name", "thread_name"}, {"pid", 3}, {"tid", 1}, {"args", {{"name", kReadBack}}}}));
  EXPECT_EQ(events[3], Json({{"ph", "X"}, {"pid", 3}, {"tid", 0}, {"ts", 0.0}, {"dur", 2.0}, {"name", "forward block0"}}));
  // Times in tenths of a microsecond: 1.26 us starts it, 1.74 us long.
  EXPECT_EQ(events[4], Json({{"ph", "X"}, {"pid", 3}, {"tid", 1}, {"ts", 1.3}, {"dur", 1.7},
                             {"name", "all_gather " + kReadBack}, {"args", {{"bytes", 4096}}}}));
}

using RunDirectoryTest = TempDirTest;

TEST_F(RunDirectoryTest, EveryMetricsLineIsJsonWithTheTimeFirst) {
  const Config config = parse_deck("[run]\nsteps = 10\n[data]\npath = \"corpus.txt\"\n", "deck.toml",
                                   {"run.out_dir=" + toml_string((dir_ / "run").string(), "the test's directory")});
  {
    RunDirectory run(config, true);
    StepRecord r;
    r.step = 1;
    r.loss = std::nan("");
    run.metric(step_metrics(r));
    run.metric({{"kind", "val"}, {"step", 1}, {"val_loss", -std::numeric_limits<double>::infinity()}});
    EXPECT_NO_THROW(run.metric({{"kind", "checkpoint"}, {"path", (dir_ / kHostile).string()}}));
    EXPECT_NO_THROW(run.metric({{"kind", "sample"}, {"text", kHostile}}));
    EXPECT_NO_THROW(run.metric(Json::object()));
    EXPECT_THROW(run.metric(Json::array({1, 2})), Error);  // a line of metrics is an object
  }
  std::ifstream in(dir_ / "run" / "metrics.jsonl");
  std::vector<Json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(parse(line));
  ASSERT_EQ(rows.size(), 5u);
  for (const Json& row : rows) {
    ASSERT_TRUE(row.is_object());
    EXPECT_EQ(keys(row).front(), "time");
    const std::string time = row["time"];
    EXPECT_TRUE(time.size() == 24 && time[10] == 'T' && time.back() == 'Z') << time;
  }
  EXPECT_EQ(keys(rows[0])[1], "kind");
  EXPECT_EQ(rows[0]["kind"], "train");
  EXPECT_TRUE(rows[0]["loss"].is_null());
  EXPECT_TRUE(rows[1]["val_loss"].is_null());
  EXPECT_EQ(rows[2]["path"], (dir_ / kReadBack).string());
  EXPECT_EQ(rows[3]["text"], kReadBack);
  EXPECT_EQ(keys(rows[4]), std::vector<std::string>{"time"});
}

}  // namespace
}  // namespace st
