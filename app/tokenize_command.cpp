#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "app/commands.hpp"
#include "comm/agree.hpp"
#include "comm/group.hpp"
#include "comm/values.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "data/mapped_file.hpp"
#include "data/text_encoding.hpp"
#include "data/token_writer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace st::app {

std::string default_gpt2_files() { return ST_DEFAULT_GPT2_FILES; }

int tokenize_command(const TokenizeRequest& request, World& world) {
  MPI_Comm comm = world.comm();
  // The words are data.tokenizer's and data.tokenizer_pattern's (the command line checked them).
  const std::optional<TokenizerKind> kind = choice_from_name<TokenizerKind>(request.tokenizer);
  const std::optional<TokenizerPattern> pattern = choice_from_name<TokenizerPattern>(request.pattern);
  ST_REQUIRE(kind && pattern, "--tokenizer or --tokenizer-pattern was not checked");
  const std::vector<std::string> files = request.tokenizer_files.empty() && *kind == TokenizerKind::gpt2
                                             ? std::vector<std::string>{default_gpt2_files()}
                                             : request.tokenizer_files;
  std::unique_ptr<Tokenizer> tokenizer;
  std::optional<MappedFile> input;
  agreed(comm, [&] {
    tokenizer = make_tokenizer(*kind, files, *pattern);
    input.emplace(request.input);
  });
  const std::string_view text(reinterpret_cast<const char*>(input->data()), input->size());

  // Encoding alone is timed (the slowest rank's): the throughput a benchmark compares.
  barrier(comm);
  Stopwatch clock;
  const std::vector<std::uint32_t> tokens = encode_rank_share(text, request.separator, *tokenizer, comm);
  const double seconds = max_over(clock.seconds(), comm);
  const std::size_t token_bytes = token_file_bytes(*tokenizer);
  // The output's directory is made if it is missing (rank 0; every rank hears whether it could be).
  agreed(comm, [&] {
    const std::filesystem::path dir = std::filesystem::path(request.output).parent_path();
    std::error_code ec;
    if (world.is_root() && !dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      std::filesystem::create_directories(dir, ec);
      if (ec) throw Error("cannot create the output's directory " + dir.string() + ": " + ec.message());
    }
  });
  const std::vector<WrittenShard> written =
      write_token_shards(request.output, tokens, token_bytes, request.shard_tokens, comm);

  if (world.is_root()) {
    std::uint64_t total = 0;
    for (const auto& w : written) total += w.tokens;
    char line[512];
    std::snprintf(line, sizeof line, "encoded %s (%zu bytes) into %llu tokens on %d rank(s) in %.3f s (%.2f MB/s)",
                  request.input.c_str(), text.size(), static_cast<unsigned long long>(total), world.size(), seconds,
                  static_cast<double>(text.size()) / seconds / 1e6);
    std::cout << line << "\n"
              << "tokenizer: " << tokenizer->description() << "\n"
              << (request.separator.empty() ? std::string("documents: none (the text is one stream)")
                                            : "documents: separated by lines \"" + request.separator +
                                                  "\", each preceded by token " +
                                                  std::to_string(tokenizer->document_start()))
              << "\n";
    if (request.separator.empty() && world.size() > 1 && !tokenizer->cuts_streams_at_line_breaks())
      std::cout << "note: the stream was encoded by rank 0 alone (this tokenizer puts a prefix before the text or "
                   "its pieces may reach across lines, so it cannot be cut); --separator shares documents among ranks\n";
    const std::string width = token_bytes == 2 ? " uint16 tokens\n" : " uint32 tokens\n";
    for (const auto& w : written) std::cout << "wrote " << w.path << ": " << w.tokens << width;
  }
  return kExitOk;
}

}  // namespace st::app
