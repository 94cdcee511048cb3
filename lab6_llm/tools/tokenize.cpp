// mls-tokenize: trains a tokenizer (char or byte-level BPE) on a UTF-8 text file, reports its
// vocabulary, compression and training time, checks encode∘decode on the file, and optionally
// saves it (the bytes a checkpoint stores) or encodes a string with it.
//
//   mls-tokenize --data input.txt --kind bpe --vocab 512 --out tok.bin --show 10
//   mls-tokenize --load tok.bin --text "hello world"
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "mls/common/error.hpp"
#include "mls/common/timer.hpp"
#include "mls/llm/checkpoint.hpp"
#include "mls/llm/data.hpp"
#include "mls/llm/tokenizer.hpp"

using namespace mls::llm;

namespace {

/// A token's bytes, printable: non-printing bytes as \xNN.
std::string printable(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train, inspect and use lab 6's tokenizers."};
  std::string data, kind = "bpe", out, load, text;
  std::int64_t vocab = 512;
  int show = 0;
  app.add_option("--data", data, "UTF-8 text file to train on");
  app.add_option("--kind", kind, "char | bpe")->capture_default_str();
  app.add_option("--vocab", vocab, "BPE vocabulary size (>= 256)")->capture_default_str();
  app.add_option("--out", out, "save the tokenizer here (atomically)");
  app.add_option("--load", load, "load a saved tokenizer instead of training one");
  app.add_option("--text", text, "encode this text and print the ids and the pieces");
  app.add_option("--show", show, "print the first N BPE merges")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    MLS_CHECK(data.empty() != load.empty(), "mls-tokenize: give exactly one of --data FILE and --load FILE");
    std::unique_ptr<Tokenizer> tok;
    if (!load.empty()) {
      tok = load_tokenizer(read_file(load, "mls-tokenize --load"));
      std::printf("loaded %s tokenizer: %lld tokens\n", tok->kind().c_str(), static_cast<long long>(tok->vocab_size()));
    } else {
      const std::string corpus = read_text_file(data);
      mls::Timer timer;
      tok = train_tokenizer(kind, corpus, vocab);
      const double train_s = timer.seconds();
      timer.reset();
      const auto ids = tok->encode(corpus);
      const double encode_s = timer.seconds();
      const bool same = tok->decode(ids) == corpus;
      std::printf("%s tokenizer: %lld tokens, trained on %zu bytes in %.3f s\n", tok->kind().c_str(),
                  static_cast<long long>(tok->vocab_size()), corpus.size(), train_s);
      std::printf("the file: %zu tokens (%.2f bytes per token), encoded in %.3f s, decode(encode(file)) %s\n",
                  ids.size(), static_cast<double>(corpus.size()) / static_cast<double>(std::max<std::size_t>(ids.size(), 1)),
                  encode_s, same ? "== file" : "!= file (BUG)");
      if (!same) return 1;
    }
    if (show > 0 && tok->kind() == "bpe") {
      const auto merges = bpe_merges(*tok);
      for (int i = 0; i < show && i < static_cast<int>(merges.size()); ++i)
        std::printf("merge %4d: %5d + %5d -> %5d  '%s'\n", i, merges[static_cast<std::size_t>(i)].first,
                    merges[static_cast<std::size_t>(i)].second, 256 + i, printable(tok->decode({256 + i})).c_str());
    }
    if (!text.empty()) {
      const auto ids = tok->encode(text);
      std::printf("%zu ids:", ids.size());
      for (auto id : ids) std::printf(" %d", id);
      std::printf("\npieces:");
      for (auto id : ids) std::printf(" '%s'", printable(tok->decode({id})).c_str());
      std::printf("\n");
    }
    if (!out.empty()) {
      write_file_atomic(out, tok->serialize(), "mls-tokenize --out");
      std::printf("saved to %s\n", out.c_str());
    }
  } catch (const mls::Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
