// The input deck: types, defaults, overrides, and the messages a user sees for each mistake.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/text.hpp"
#include "deck/parse.hpp"
#include "deck/schema.hpp"

namespace st {
namespace {

const char* kMinimal = R"(
[run]
steps = 10
[data]
path = "corpus.txt"
)";

// The message parse_deck raises for this deck, or "" if it parses.
std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_deck(text, "deck.toml", overrides);
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.scope(), ErrorScope::all_ranks) << "deck errors are seen by every rank alike";
    return e.what();
  }
}

TEST(Deck, MinimalDeckTakesDefaults) {
  const Config c = parse_deck(kMinimal, "deck.toml", {});
  EXPECT_EQ(c.run.steps, 10);
  EXPECT_EQ(c.data.path, std::vector<std::string>{"corpus.txt"});
  EXPECT_TRUE(c.data.val_path.empty());
  EXPECT_EQ(c.data.tokenizer, TokenizerKind::byte);
  EXPECT_EQ(c.data.order, DataOrder::random);
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.parallel.strategy, StrategyKind::ddp);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_EQ(c.origin.at("run.steps"), "deck.toml:3");
  EXPECT_EQ(c.origin.at("model.n_layer"), "default");
  EXPECT_EQ(c.resolved.size(), deck_schema().size());
}

TEST(Deck, IntegersAreAcceptedWhereRealsAreExpected) {
  const Config c = parse_deck(std::string(kMinimal) + "[optimizer]\nlr = 1\n", "deck.toml", {});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1.0);
}

TEST(Deck, UnknownKeySuggestsTheClosestOne) {
  const std::string e = error_of("[run]\nsetps = 10\n[data]\npath = \"x\"\n");
  EXPECT_NE(e.find("deck.toml:2: unknown key 'setps' in [run]; did you mean 'steps'?"), std::string::npos) << e;
  EXPECT_NE(e.find("missing required key run.steps"), std::string::npos) << e;
}

TEST(Deck, UnknownSectionSuggestsTheClosestOne) {
  const std::string e = error_of(std::string(kMinimal) + "[optimiser]\nlr = 1e-3\n");
  EXPECT_NE(e.find("unknown section [optimiser]; did you mean [optimizer]?"), std::string::npos) << e;
}

TEST(Deck, KeyOutsideAnySectionIsNamed) {
  const std::string e = error_of(std::string("steps = 3\n") + kMinimal);
  EXPECT_NE(e.find("deck.toml:1: 'steps' is outside any section"), std::string::npos) << e;
  EXPECT_NE(e.find("run.steps under [run]"), std::string::npos) << e;
}

TEST(Deck, WrongTypeNamesKeyValueAndWhatIsAllowed) {
  const std::string e = error_of("[run]\nsteps = \"ten\"\n[data]\npath = \"x\"\n");
  EXPECT_NE(e.find("deck.toml:2: run.steps = \"ten\": expected an integer in [1, 2^53], got a string"),
            std::string::npos)
      << e;
}

TEST(Deck, OutOfRangeValueNamesTheRange) {
  const std::string e = error_of(std::string(kMinimal) + "[optimizer]\nbeta1 = 1.5\n");
  EXPECT_NE(e.find("deck.toml:7: optimizer.beta1 = 1.5: out of range, expected a number in [0, 0.999999]"),
            std::string::npos)
      << e;
}

TEST(Deck, ChoiceListsTheAllowedValues) {
  const std::string e = error_of(std::string(kMinimal) + "[optimizer]\nschedule = \"cosin\"\n");
  EXPECT_NE(e.find("optimizer.schedule = \"cosin\": expected one of \"cosine\", \"linear\", \"constant\" (did you "
                   "mean \"cosine\"?)"),
            std::string::npos)
      << e;
}

TEST(Deck, MissingRequiredKeyIsNamed) {
  const std::string e = error_of("[run]\nsteps = 5\n");
  EXPECT_NE(e.find("missing required key data.path"), std::string::npos) << e;
}

TEST(Deck, MalformedTomlGivesFileAndLine) {
  const std::string e = error_of("[run]\nsteps = 5\n[data\npath = \"x\"\n");
  EXPECT_NE(e.find("malformed TOML in deck.toml:3"), std::string::npos) << e;
}

TEST(Deck, DuplicateKeyIsRejected) {
  const std::string e = error_of("[run]\nsteps = 5\nsteps = 6\n[data]\npath = \"x\"\n");
  EXPECT_NE(e.find("malformed TOML"), std::string::npos) << e;
}

TEST(Deck, AllProblemsAreReportedTogetherInFileOrder) {
  const std::string e = error_of("[run]\nsteps = -1\nseeed = 1\n[data]\npath = 3\n");
  EXPECT_NE(e.find("has 3 errors"), std::string::npos) << e;
  EXPECT_LT(e.find("deck.toml:2"), e.find("deck.toml:3"));
  EXPECT_LT(e.find("deck.toml:3"), e.find("deck.toml:5"));
}

TEST(Deck, OverridesWinAndAreTyped) {
  const Config c = parse_deck(kMinimal, "deck.toml",
                              {"run.steps=42", "optimizer.lr=3e-4", "data.path=other.txt", "data.format=\"text\""});
  EXPECT_EQ(c.run.steps, 42);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.data.path, std::vector<std::string>{"other.txt"});
  EXPECT_EQ(c.data.format, DataFormat::text);
  EXPECT_EQ(c.origin.at("run.steps"), "--set");
}

TEST(Deck, DataPathsAreAStringOrAList) {
  const Config one = parse_deck("[run]\nsteps = 1\n[data]\npath = \"shards/train_*.bin\"\n", "deck.toml", {});
  EXPECT_EQ(one.data.path, std::vector<std::string>{"shards/train_*.bin"});
  EXPECT_EQ(one.resolved.at("data.path"), "[\"shards/train_*.bin\"]");
  const Config list = parse_deck(
      "[run]\nsteps = 1\n[data]\npath = [\"a.bin\", \"b/*.bin\"]\nval_path = \"v.bin\"\ntokenizer = \"gpt2\"\n"
      "tokenizer_files = [\"enc.json\", \"vocab.bpe\"]\norder = \"sequential\"\n",
      "deck.toml", {});
  EXPECT_EQ(list.data.path, (std::vector<std::string>{"a.bin", "b/*.bin"}));
  EXPECT_EQ(list.resolved.at("data.path"), "[\"a.bin\", \"b/*.bin\"]");
  EXPECT_EQ(list.data.val_path, std::vector<std::string>{"v.bin"});
  EXPECT_EQ(list.data.tokenizer_files, (std::vector<std::string>{"enc.json", "vocab.bpe"}));
  EXPECT_EQ(list.data.order, DataOrder::sequential);
  // --set takes a TOML array, or one path without quotes.
  const Config set = parse_deck(kMinimal, "deck.toml", {"data.path=[\"x.bin\", \"y.bin\"]", "data.val_path=v/*.bin"});
  EXPECT_EQ(set.data.path, (std::vector<std::string>{"x.bin", "y.bin"}));
  EXPECT_EQ(set.data.val_path, std::vector<std::string>{"v/*.bin"});
  const std::string e = error_of("[run]\nsteps = 1\n[data]\npath = [\"a.bin\", 3]\n");
  EXPECT_NE(e.find("deck.toml:4: data.path = ["), std::string::npos) << e;
  EXPECT_NE(e.find("expected a string or an array of strings, got an array holding an integer"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of("[run]\nsteps = 1\n[data]\npath = []\n").find("data.path is empty"), std::string::npos);
  EXPECT_NE(error_of("[run]\nsteps = 1\n[data]\npath = [\"a\", \"\"]\n").find("data.path holds an empty path"),
            std::string::npos);
}

TEST(Deck, DataKeysThatContradictEachOtherAreNamed) {
  const std::string base = "[run]\nsteps = 1\n[data]\npath = \"a.txt\"\n";
  EXPECT_NE(error_of(base + "val_path = \"v.txt\"\nval_fraction = 0.2\n")
                .find("data.val_fraction splits data.path for validation; this deck names data.val_path for that"),
            std::string::npos);
  EXPECT_EQ(error_of(base + "val_path = \"v.txt\"\n"), "");
  EXPECT_NE(error_of(base + "tokenizer = \"gpt2\"\n").find("data.tokenizer = \"gpt2\" needs data.tokenizer_files"),
            std::string::npos);
  EXPECT_NE(error_of(base + "tokenizer_files = \"gpt2/\"\n")
                .find("data.tokenizer_files applies to data.tokenizer = \"gpt2\", \"hf\" or \"tiktoken\" only (this deck has \"byte\")"),
            std::string::npos);
  EXPECT_NE(error_of(base + "tokenizer = \"bpe\"\n").find("one of \"byte\", \"gpt2\""), std::string::npos);
}

TEST(Deck, BadOverridesAreNamed) {
  EXPECT_NE(error_of(kMinimal, {"run.stpes=3"}).find("--set run.stpes=3: unknown key 'run.stpes'; did you mean 'run.steps'?"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"optimizer.warmup=10"})
                .find("--set optimizer.warmup=10: unknown key 'optimizer.warmup'; did you mean 'optimizer.warmup_steps'?"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"model.lr=1e-3"}).find("did you mean 'optimizer.lr'?"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"run.steps=many"}).find("--set run.steps=many: 'many' is not a TOML value"),
            std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"steps"}).find("expected section.key=value"), std::string::npos);
}

TEST(Deck, CombinationsAreChecked) {
  const std::string e = error_of(std::string(kMinimal) + "[model]\nd_model = 100\nn_head = 3\n");
  EXPECT_NE(e.find("model.d_model = 100 is not divisible by model.n_head = 3"), std::string::npos) << e;
}

TEST(Deck, FromFileNeedsAFileAndDefersTheShapeCheckToIt) {
  EXPECT_NE(error_of(kMinimal, {"model.from_file=true"})
                .find("model.from_file = true takes the model's shape from model.init_from's file, but model.init_from "
                      "is empty"),
            std::string::npos);
  // The deck's n_head need not divide its d_model yet: the file's values replace them.
  EXPECT_EQ(error_of(kMinimal, {"model.from_file=true", "model.init_from=gpt2.bin", "model.n_head=12"}), "");
  EXPECT_NE(error_of(kMinimal, {"model.n_head=12"}).find("is not divisible by model.n_head = 12"), std::string::npos);
}

TEST(Deck, AutoStrategyIsAcceptedForThePlannerToResolve) {
  EXPECT_EQ(error_of(kMinimal, {"parallel.strategy=auto"}), "");
  EXPECT_EQ(parse_deck(kMinimal, "deck.toml", {"parallel.strategy=auto"}).parallel.strategy, StrategyKind::automatic);
}

// A llama deck takes every device a GPT-2 deck takes, "auto" left for the device choice.
TEST(Deck, LlamaTakesEveryDeviceAsGpt2Does) {
  for (const char* device : {"auto", "cpu", "cuda"}) {
    const std::vector<std::string> sets{"model.arch=\"llama\"", std::string("parallel.device=\"") + device + "\""};
    EXPECT_EQ(error_of(kMinimal, sets), "") << device;
    EXPECT_EQ(name_of(parse_deck(kMinimal, "deck.toml", sets).parallel.device), device);
  }
}

TEST(Deck, EveryStrategyAndPrecisionIsAccepted) {
  for (const char* strategy : {"ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"})
    for (const char* precision : {"fp32", "bf16"}) {
      const Config c = parse_deck(kMinimal, "deck.toml",
                                  {std::string("parallel.strategy=") + strategy, std::string("parallel.precision=") + precision});
      EXPECT_EQ(name_of(c.parallel.strategy), strategy);
      EXPECT_EQ(name_of(c.parallel.precision), precision);
    }
}

TEST(Deck, ParallelChoicesAreParsedIntoTheirEnums) {
  const Config c = parse_deck(kMinimal, "deck.toml",
                              {"parallel.strategy=fsdp", "parallel.precision=bf16", "parallel.collectives=two_level",
                               "parallel.intra_node=mpi"});
  EXPECT_EQ(c.parallel.strategy, StrategyKind::fsdp);
  EXPECT_EQ(zero_stage(c.parallel.strategy), 3);  // zero3 by another name
  EXPECT_EQ(c.parallel.precision, Precision::bf16);
  EXPECT_EQ(c.parallel.collectives, Collectives::two_level);
  EXPECT_EQ(c.parallel.intra_node, IntraNode::mpi);
  const Config d = parse_deck(kMinimal, "deck.toml", {});
  EXPECT_EQ(d.parallel.collectives, Collectives::automatic);
  EXPECT_EQ(d.parallel.intra_node, IntraNode::shm);
  EXPECT_EQ(zero_stage(StrategyKind::zero1), 1);
  EXPECT_EQ(zero_stage(StrategyKind::automatic), -1);
  // The schema's allowed values are the tables' words.
  EXPECT_EQ(choice_names<Collectives>(), (std::vector<std::string>{"auto", "flat", "two_level"}));
  EXPECT_FALSE(choice_from_name<StrategyKind>("zero4").has_value());
}

TEST(Deck, ModelAndTokenizerChoicesAreParsedIntoTheirEnums) {
  const Config d = parse_deck(kMinimal, "deck.toml", {});
  EXPECT_EQ(d.model.arch, Arch::gpt2);
  EXPECT_EQ(d.model.rope_scaling, RopeScaling::none);
  EXPECT_EQ(d.data.tokenizer_pattern, TokenizerPattern::automatic);
  const Config c = parse_deck(kMinimal, "deck.toml",
                              {"model.arch=llama", "model.rope_scaling=llama3", "data.tokenizer=tiktoken",
                               "data.tokenizer_files=cl100k_base.tiktoken", "data.tokenizer_pattern=cl100k"});
  EXPECT_EQ(c.model.arch, Arch::llama);
  EXPECT_EQ(c.model.rope_scaling, RopeScaling::llama3);
  EXPECT_EQ(c.data.tokenizer, TokenizerKind::tiktoken);
  EXPECT_EQ(c.data.tokenizer_pattern, TokenizerPattern::cl100k);
  EXPECT_EQ(c.resolved.at("data.tokenizer_pattern"), "\"cl100k\"");
  // A word outside the table is the deck's error; the cross-key checks name the deck's words.
  std::string e =
      error_of(kMinimal, {"data.tokenizer=hf", "data.tokenizer_files=t.json", "data.tokenizer_pattern=o200k"});
  EXPECT_NE(e.find("data.tokenizer_pattern = \"o200k\": expected one of \"auto\", \"gpt2\", \"cl100k\""),
            std::string::npos)
      << e;
  e = error_of(kMinimal, {"data.tokenizer_pattern=gpt2"});
  EXPECT_NE(e.find("data.tokenizer_pattern applies to data.tokenizer = \"hf\" or \"tiktoken\" only (this deck has "
                   "\"byte\")"),
            std::string::npos)
      << e;
  e = error_of(kMinimal, {"model.arch=llama", "model.rope_factor=4"});
  EXPECT_NE(e.find("model.rope_factor applies to model.rope_scaling = \"llama3\" only (this deck has \"none\")"),
            std::string::npos)
      << e;
  e = error_of(kMinimal, {"data.tokenizer=hf"});
  EXPECT_NE(e.find("data.tokenizer = \"hf\" needs data.tokenizer_files = [tokenizer.json] or [its directory] (it "
                   "names 0)"),
            std::string::npos)
      << e;
}

TEST(Deck, ShardGroupBelongsToHsdp) {
  const std::string e = error_of(kMinimal, {"parallel.strategy=zero3", "parallel.shard_group=2"});
  EXPECT_NE(e.find("parallel.shard_group applies to parallel.strategy = \"hsdp\" only (this deck has \"zero3\")"),
            std::string::npos)
      << e;
  EXPECT_EQ(parse_deck(kMinimal, "deck.toml", {"parallel.strategy=hsdp", "parallel.shard_group=2"}).parallel.shard_group, 2);
}

// The resolved values (resolved.toml, the settings table) are TOML whatever a string holds: each
// reads back as the same value.
TEST(Deck, ResolvedStringsReadBackAsTheSameValues) {
  const std::string dir = "runs/a \"quoted\" b\\c\td";
  const std::string file = "x \"y\".txt";
  const Config c = parse_deck(kMinimal, "deck.toml",
                              {"run.out_dir=" + toml_string(dir, "test"), "data.path=[" + toml_string(file, "test") +
                                                                              ", \"plain.txt\"]"});
  ASSERT_EQ(c.run.out_dir, dir);
  const Config again = parse_deck(kMinimal, "deck.toml",
                                  {"run.out_dir=" + c.resolved.at("run.out_dir"), "data.path=" + c.resolved.at("data.path")});
  EXPECT_EQ(again.run.out_dir, dir) << c.resolved.at("run.out_dir");
  EXPECT_EQ(again.data.path, (std::vector<std::string>{file, "plain.txt"})) << c.resolved.at("data.path");
}

// resolved.toml and a checkpoint's stored settings: the text parses back to the same values, --set
// overrides included, and says where each came from (a default is commented out).
TEST(Deck, ResolvedDeckTextParsesBackToTheSameSettings) {
  const Config c = parse_deck(kMinimal, "deck.toml",
                              {"model.n_layer=3", "data.val_fraction=0.2", "optimizer.lr=0.1", "optimizer.beta2=0.999"});
  const std::string text = resolved_deck_text(c);
  EXPECT_NE(text.find("n_layer = 3   # --set\n"), std::string::npos) << text;
  EXPECT_NE(text.find("steps = 10   # deck.toml:3"), std::string::npos) << text;
  EXPECT_NE(text.find("# d_model = "), std::string::npos) << "defaults are commented out\n" << text;
  const Config again = parse_deck(text, "resolved.toml", {});
  EXPECT_EQ(again.resolved, c.resolved) << text;
  EXPECT_EQ(again.model.n_layer, 3);
  EXPECT_EQ(again.data.val_fraction, 0.2);  // exactly: the shortest text that reads back as the double
  EXPECT_EQ(again.optimizer.lr, 0.1);
  EXPECT_EQ(again.optimizer.beta2, 0.999);
}

// parallel.stage_blocks: an array of integers, from the deck or --set, written back to
// resolved.toml as one; anything else named with what it takes.
TEST(Deck, IntegerArraysParseCheckAndReadBack) {
  const Config c = parse_deck(std::string(kMinimal) + "[parallel]\npipeline = 2\nstage_blocks = [3, 1]\n", "deck.toml", {});
  EXPECT_EQ(c.parallel.stage_blocks, (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(parse_deck(kMinimal, "deck.toml", {"parallel.stage_blocks=[5,4,2,1]"}).parallel.stage_blocks,
            (std::vector<std::int64_t>{5, 4, 2, 1}));
  EXPECT_TRUE(parse_deck(kMinimal, "deck.toml", {}).parallel.stage_blocks.empty());
  const std::string text = resolved_deck_text(c);
  EXPECT_NE(text.find("stage_blocks = [3, 1]   # deck.toml:8"), std::string::npos) << text;
  EXPECT_EQ(parse_deck(text, "resolved.toml", {}).parallel.stage_blocks, c.parallel.stage_blocks);
  for (const char* wrong : {"[3, \"a\"]", "[3, 0]", "3"}) {
    const std::string e = error_of(std::string(kMinimal) + "[parallel]\nstage_blocks = " + wrong + "\n");
    EXPECT_NE(e.find("deck.toml:7: parallel.stage_blocks = "), std::string::npos) << e;
    EXPECT_NE(e.find("expected an array of integers in [1, 65536]"), std::string::npos) << e;
  }
}

// A key under the name another trainer gives it (Hugging Face, nanoGPT, Megatron) is pointed to
// the deck's key, in the deck and on the command line.
TEST(Deck, OtherTrainersNamesSuggestTheDecksKey) {
  EXPECT_EQ(key_for_other_name("learning_rate"), "optimizer.lr");
  EXPECT_EQ(key_for_other_name("n_embd"), "model.d_model");
  EXPECT_EQ(key_for_other_name("max_steps"), "run.steps");
  EXPECT_EQ(key_for_other_name("no_such_thing"), "");
  std::string e = error_of(std::string(kMinimal) + "[optimizer]\nlearning_rate = 1e-3\n");
  EXPECT_NE(e.find("unknown key 'learning_rate' in [optimizer]; did you mean 'lr'?"), std::string::npos) << e;
  e = error_of(std::string(kMinimal) + "[optimizer]\nmax_steps = 10\n");
  EXPECT_NE(e.find("did you mean 'run.steps under [run]'?"), std::string::npos) << e;
  e = error_of(kMinimal, {"optimizer.learning_rate=1e-3"});
  EXPECT_NE(e.find("unknown key 'optimizer.learning_rate'; did you mean 'optimizer.lr'?"), std::string::npos) << e;
}

TEST(Deck, TomlStringHoldsAnyUnicodeText) {
  // A path as a --set value: quotes, backslashes, every kind of control character, and
  // characters of two, three and four bytes (a four-byte one is no pair of \u escapes in TOML).
  const std::string path = "a \"b\" c\\d\n\t\r\b\f\x01\x1b\x7f \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80.txt";
  const std::string quoted = toml_string(path, "--data");
  EXPECT_EQ(quoted.front(), '"');
  EXPECT_EQ(quoted.find('\n'), std::string::npos) << "one line: " << quoted;
  const Config c = parse_deck(kMinimal, "deck.toml", {"data.path=" + quoted});
  EXPECT_EQ(c.data.path, std::vector<std::string>{path});
  // Bytes that are not UTF-8 cannot be in a deck: a clear error, not a deck that fails to parse.
  try {
    toml_string("runs/x\xff.bin", "--data");
    ADD_FAILURE() << "a path that is not UTF-8 was quoted";
  } catch (const Error& e) {
    EXPECT_EQ(e.scope(), ErrorScope::all_ranks);
    EXPECT_STREQ(e.what(), "--data 'runs/x\\xff.bin' is not UTF-8 text, which a deck cannot hold");
  }
}

TEST(Deck, EveryDefaultIsValid) {
  // fill_defaults raises a this-rank Error for an invalid default; the minimal deck exercises all.
  EXPECT_NO_THROW(parse_deck(kMinimal, "deck.toml", {}));
  for (const auto& key : deck_schema()) EXPECT_FALSE(key.doc.empty()) << key.full_name();
}

TEST(Deck, ReferenceDocumentIsUpToDate) {
  std::ifstream in(ST_SOURCE_DIR "/docs/deck.md");
  ASSERT_TRUE(in) << "docs/deck.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), deck_reference_markdown())
      << "docs/deck.md differs from the schema: regenerate it with `build/shardtrain deck-doc > docs/deck.md`";
}

TEST(Text, ClosestMatch) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(closest_match("setps", {"steps", "seed", "log_every"}), "steps");
  EXPECT_EQ(closest_match("zzzzzz", {"steps", "seed"}), "");
  // Shortened names, and names under the wrong section.
  const std::vector<std::string> keys = {"optimizer.warmup_steps", "optimizer.lr", "run.steps", "model.n_layer"};
  EXPECT_EQ(closest_match("optimizer.warmup", keys), "optimizer.warmup_steps");
  EXPECT_EQ(closest_match("warmup", {"warmup_steps", "lr"}), "warmup_steps");
  EXPECT_EQ(closest_match("model.lr", keys), "optimizer.lr");
  EXPECT_EQ(closest_match("data.steps", keys), "run.steps");
  EXPECT_EQ(closest_match("model.n_layers", keys), "model.n_layer");
  EXPECT_EQ(closest_match("parallel.zzzzzz", keys), "");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

TEST(Text, DurationsTimestampsAndNumbers) {
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(60), "1m 00s");
  EXPECT_EQ(format_duration(725), "12m 05s");
  EXPECT_EQ(format_duration(3 * 3600 + 2 * 60 + 29), "3h 02m");
  EXPECT_EQ(format_duration(2 * 86400 + 4 * 3600 + 100), "2d 04h");
  EXPECT_EQ(format_duration(-5), "0s");
  const std::string now = utc_timestamp();
  ASSERT_EQ(now.size(), 24u) << now;
  for (const std::size_t i : {4u, 7u}) EXPECT_EQ(now[i], '-') << now;
  for (const std::size_t i : {13u, 16u}) EXPECT_EQ(now[i], ':') << now;
  EXPECT_EQ(now[10], 'T');
  EXPECT_EQ(now[19], '.');
  EXPECT_EQ(now.back(), 'Z');
  EXPECT_GE(now.substr(0, 4), "2024");
  // Numbers read back as the same double, in the fewest digits that do.
  for (const double x : {0.1, 4.2151822498475155, 1e-300, -3.0, 6e-4, 0.1 + 0.2})
    EXPECT_EQ(std::stod(format_shortest(x)), x) << format_shortest(x);
  EXPECT_EQ(format_shortest(0.1), "0.1");
  EXPECT_EQ(format_shortest(6e-4), "6e-04");
  EXPECT_EQ(format_shortest(0.1 + 0.2), "0.30000000000000004");
}

}  // namespace
}  // namespace st
