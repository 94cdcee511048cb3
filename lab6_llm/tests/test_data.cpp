// Lab 6 data: text files split into train/val with seeded random windows, position/seek, and the
// generated tasks (sorting, addition) with masks, held-out splits and exact-match scoring.
#include <set>

#include "lab6_helpers.hpp"
#include "mls/llm/data.hpp"

using namespace mls::llm;
using llm_test::require_error;

namespace {

/// Checks that every row of a text batch is a window of `split`: targets are inputs shifted by one.
void check_windows(const Batch& b, const std::vector<std::int32_t>& split) {
  for (std::int64_t r = 0; r < b.B; ++r) {
    std::vector<std::int32_t> window(b.inputs.begin() + r * b.T, b.inputs.begin() + (r + 1) * b.T);
    window.push_back(b.targets[static_cast<std::size_t>((r + 1) * b.T - 1)]);
    for (std::int64_t t = 0; t + 1 < b.T; ++t)
      REQUIRE(b.targets[static_cast<std::size_t>(r * b.T + t)] == b.inputs[static_cast<std::size_t>(r * b.T + t + 1)]);
    bool found = false;
    for (std::size_t s = 0; s + window.size() <= split.size() && !found; ++s)
      found = std::equal(window.begin(), window.end(), split.begin() + static_cast<std::ptrdiff_t>(s));
    REQUIRE(found);
  }
  for (float m : b.mask) REQUIRE(m == 1.0f);
}

std::string task_text(const GeneratedTask& task, const std::vector<std::int32_t>& ids) {
  return task.tokenizer().decode(ids);
}

}  // namespace

// ---- text --------------------------------------------------------------------------------------

TEST_CASE("text data: 90/10 split and windows of the right split", "[lab6][data]") {
  const std::string text = llm_test::random_words(2000, 1);
  auto tok = train_char_tokenizer(text);
  TextData data(text, *tok, 16, 42);
  const auto all = tok->encode(text);
  const auto n = all.size();
  const auto n_val = n / 10;
  REQUIRE(data.train_tokens().size() == n - n_val);
  REQUIRE(data.val_tokens().size() == n_val);
  MLS_OBSERVE(data.train_tokens().size());
  MLS_OBSERVE(data.val_tokens());
  CHECK(std::equal(data.train_tokens().begin(), data.train_tokens().end(), all.begin()));
  CHECK(std::equal(data.val_tokens().begin(), data.val_tokens().end(), all.begin() + static_cast<std::ptrdiff_t>(n - n_val)));
  const Batch b = data.next_train(4, 16);
  MLS_CHECK_EQ(b.B, 4);
  MLS_CHECK_EQ(b.T, 16);
  mls::testing::observe("B, T, inputs", std::vector<std::int64_t>{b.B, b.T, static_cast<std::int64_t>(b.inputs.size())});
  MLS_OBSERVE(b.mask);
  MLS_CHECK_EQ(b.inputs.size(), 64);
  check_windows(b, data.train_tokens());
  check_windows(data.next_val(3, 8), data.val_tokens());
  check_windows(data.next_train(2, 1), data.train_tokens());
}

TEST_CASE("text data: windows cover the split uniformly", "[lab6][data]") {
  // Tokens 0..n-1 in order: the first input of each row is its start.
  std::string text;
  for (int i = 0; i < 200; ++i) text += static_cast<char>('0' + i % 10);
  auto tok = train_char_tokenizer("0123456789");
  TextData data(text, *tok, 4, 3);
  std::set<std::int64_t> starts;
  std::vector<int> hist(10, 0);
  for (int i = 0; i < 200; ++i) {
    const Batch b = data.next_train(8, 4);
    for (std::int64_t r = 0; r < 8; ++r) ++hist[static_cast<std::size_t>(b.inputs[static_cast<std::size_t>(r * 4)])];
  }
  MLS_OBSERVE(std::vector<double>(hist.begin(), hist.end()), {0.0, 120.0});  // each build in (100, 220)
  for (int h : hist) CHECK((h > 100 && h < 220));  // 1600 draws over 10 values
}

TEST_CASE("text data: seeded, and seek restores the stream exactly", "[lab6][data]") {
  const std::string text = llm_test::random_words(3000, 2);
  auto tok = train_bpe_tokenizer(text, 300);
  TextData a(text, *tok, 12, 7), b(text, *tok, 12, 7), c(text, *tok, 12, 8);
  std::vector<Batch> seen;
  for (int i = 0; i < 5; ++i) {
    seen.push_back(a.next_train(4, 12));
    if (i % 2) seen.push_back(a.next_val(2, 12));
  }
  const std::uint64_t pos = a.position();
  MLS_OBSERVE(position_train(pos));
  MLS_OBSERVE(position_val(pos));
  MLS_CHECK_EQ(position_train(pos), 5);
  MLS_CHECK_EQ(position_val(pos), 2);
  const Batch next_a = a.next_train(4, 12), next_va = a.next_val(2, 12);
  // Same seed: the same batches; another seed: others.
  CHECK(b.next_train(4, 12).inputs == seen[0].inputs);
  CHECK(c.next_train(4, 12).inputs != seen[0].inputs);
  // A fresh source sought to `pos` continues exactly where `a` was.
  TextData d(text, *tok, 12, 7);
  d.seek(pos);
  CHECK(d.position() == pos);
  const Batch next_d = d.next_train(4, 12), next_vd = d.next_val(2, 12);
  CHECK(next_d.inputs == next_a.inputs);
  CHECK(next_d.targets == next_a.targets);
  CHECK(next_vd.inputs == next_va.inputs);
  d.seek(0);
  CHECK(d.next_train(4, 12).inputs == seen[0].inputs);
}

TEST_CASE("text data: errors name the sizes", "[lab6][data]") {
  auto tok = train_char_tokenizer("abcdefghij");
  require_error([&] { TextData("", *tok, 8, 0); }, "the text is empty");
  require_error([&] { TextData("abcdefghij", *tok, 8, 0); },
                "the text has 10 tokens, split into 9 train and 1 val tokens; each split needs more than block_size + 1 = 9");
  require_error([&] { TextData("ab\xff", *tok, 8, 0); }, "TextData: invalid UTF-8: byte 0xff at byte offset 2");
  require_error([&] { TextData("abcxyz", *tok, 1, 0); }, "character 'x' (U+0078) at byte offset 3");
  std::string text;
  for (int i = 0; i < 30; ++i) text += "abcdefghij";
  TextData data(text, *tok, 8, 0);
  require_error([&] { data.next_train(2, 9); }, "T = 9 exceeds the block size 8");
  require_error([&] { data.next_train(0, 8); }, "batch size B = 0");
  require_error([&] { data.next_val(1, 0); }, "sequence length T = 0");
  require_error([&] { TextData(text, *tok, 8, 0, 1.5); }, "val_fraction = 1.5");
}

// ---- given: files and positions ----------------------------------------------------------------

TEST_CASE("text files: read, empty, missing, not UTF-8", "[lab6][data_files]") {
  llm_test::TempDir dir("data");
  llm_test::write_file(dir.file("ok.txt"), "h\xc3\xa9llo\n");
  MLS_OBSERVE(read_text_file(dir.file("ok.txt")));
  MLS_CHECK_EQ(read_text_file(dir.file("ok.txt")), std::string("h\xc3\xa9llo\n"));
  llm_test::write_file(dir.file("empty.txt"), "");
  require_error([&] { read_text_file(dir.file("empty.txt")); }, "empty.txt' is empty");
  require_error([&] { read_text_file(dir.file("missing.txt")); }, "missing.txt': no such file");
  // A missing text names the shipped excerpt and where the whole tiny-shakespeare is.
  require_error([&] { read_text_file(dir.file("missing.txt")); }, kShippedText);
  require_error([&] { read_text_file(dir.file("missing.txt")); }, kTinyShakespeareUrl);
  llm_test::write_file(dir.file("bin.dat"), std::string("abc\x00\xff", 5));
  require_error([&] { read_text_file(dir.file("bin.dat")); }, "bin.dat': invalid UTF-8: byte 0xff at byte offset 4");
  require_error([&] { read_text_file(dir.path.string()); }, "is a directory");
}

TEST_CASE("positions pack train and val counts", "[lab6][data_files]") {
  MLS_CHECK_EQ(pack_position(0, 0), 0);
  const std::uint64_t p = pack_position(123456789, 4321);
  MLS_OBSERVE(p);
  MLS_OBSERVE(position_train(p));
  MLS_OBSERVE(position_val(p));
  MLS_CHECK_EQ(position_train(p), 123456789);
  MLS_CHECK_EQ(position_val(p), 4321);
  require_error([] { pack_position(std::uint64_t{1} << 40, 0); }, "pack_position");
  require_error([] { pack_position(0, std::uint64_t{1} << 24); }, "pack_position");
}

// ---- generated tasks ---------------------------------------------------------------------------

TEST_CASE("sort task: problems, worked example", "[lab6][data]") {
  SortTask task(4, 0);
  MLS_CHECK_EQ(task.vocab_size(), 12);
  MLS_CHECK_EQ(task.prompt_len(), 5);
  MLS_CHECK_EQ(task.answer_len(), 4);
  MLS_CHECK_EQ(task.seq_len(), 8);
  MLS_CHECK_EQ(task.space_size(), 10000);
  const Problem p = task.problem(3142);
  MLS_OBSERVE(task.vocab_size());
  MLS_OBSERVE(task.space_size());
  MLS_OBSERVE(task_text(task, p.prompt));
  MLS_OBSERVE(task_text(task, p.answer));
  MLS_OBSERVE(task_text(task, task.problem(7).answer));
  MLS_CHECK_EQ(task_text(task, p.prompt), std::string("3142="));
  MLS_CHECK_EQ(task_text(task, p.answer), std::string("1234"));
  MLS_CHECK_EQ(task_text(task, task.problem(7).prompt), std::string("0007="));
  MLS_CHECK_EQ(task_text(task, task.problem(7).answer), std::string("0007"));
}

TEST_CASE("addition task: problems, worked example", "[lab6][data]") {
  AdditionTask task(3, 0);
  MLS_CHECK_EQ(task.prompt_len(), 8);
  MLS_CHECK_EQ(task.answer_len(), 4);
  MLS_CHECK_EQ(task.space_size(), 1000000);
  const Problem p = task.problem(123 * 1000 + 456);
  MLS_OBSERVE(task_text(task, p.prompt));
  MLS_OBSERVE(task_text(task, p.answer));
  MLS_CHECK_EQ(task_text(task, p.prompt), std::string("123+456="));
  MLS_CHECK_EQ(task_text(task, p.answer), std::string("9750"));  // 579, reversed, 4 digits
  const Problem q = task.problem(999 * 1000 + 999);
  MLS_CHECK_EQ(task_text(task, q.answer), std::string("8991"));  // 1998 reversed
  // Every problem of a small task against plain arithmetic.
  AdditionTask small(1, 0);
  for (std::uint64_t i = 0; i < small.space_size(); ++i) {
    const Problem r = small.problem(i);
    const std::string ans = task_text(small, r.answer);
    MLS_OBSERVE(ans);
    // The oracle: plain arithmetic, after the code ran.
    MLS_ORACLE_CHECK(CHECK(std::stoi(std::string(ans.rbegin(), ans.rend())) == static_cast<int>(i / 10 + i % 10)));
  }
}

TEST_CASE("tasks: held-out split is disjoint and about 10%", "[lab6][data_files]") {
  SortTask task(4, 0);
  std::int64_t n_val = 0;
  for (std::uint64_t i = 0; i < task.space_size(); ++i) n_val += task.is_val(i);
  MLS_OBSERVE(static_cast<double>(n_val), {0.0, 400.0});  // each build in (800, 1200)
  MLS_ORACLE_CHECK(CHECK((n_val > 800 && n_val < 1200)));
  mls::Rng rng(5, "t");
  std::set<std::vector<std::int32_t>> train, val;
  for (int i = 0; i < 300; ++i) {
    train.insert(task.sample(rng, false).prompt);
    val.insert(task.sample(rng, true).prompt);
  }
  for (const auto& v : val) CHECK(train.count(v) == 0);
}

TEST_CASE("tasks: batches mask the answer and come from the right split", "[lab6][data]") {
  for (const char* name : {"sort", "add"}) {
    auto task = make_task(name, 3, 11);
    const std::int64_t T = task->seq_len() + 2;  // two padding positions
    const Batch b = task->next_train(6, T);
    const Batch v = task->next_val(6, T);
    MLS_OBSERVE(b.mask);
    MLS_OBSERVE(v.mask);
    MLS_OBSERVE(b.inputs);
    MLS_OBSERVE(v.inputs);
    for (const Batch* batch : {&b, &v}) {
      for (std::int64_t r = 0; r < batch->B; ++r) {
        std::vector<std::int32_t> seq;
        for (std::int64_t t = 0; t < task->seq_len(); ++t) {
          const auto k = static_cast<std::size_t>(r * T + t);
          seq.push_back(batch->inputs[k]);
          if (t + 1 < task->seq_len()) CHECK(batch->targets[k] == batch->inputs[k + 1]);
          // The oracle: the mask counts the answer's targets only (the masks are observed above).
          MLS_ORACLE_CHECK(CHECK(batch->mask[k] == (t >= task->prompt_len() - 1 ? 1.0f : 0.0f)));
        }
        seq.push_back(batch->targets[static_cast<std::size_t>(r * T + task->seq_len() - 1)]);
        MLS_ORACLE_CHECK(for (std::int64_t t = task->seq_len(); t < T; ++t)
                             CHECK(batch->mask[static_cast<std::size_t>(r * T + t)] == 0.0f));
        // Recover the problem index from the prompt digits and check the answer and the split.
        std::uint64_t index = 0;
        for (std::int64_t t = 0; t + 1 < task->prompt_len(); ++t)
          if (seq[static_cast<std::size_t>(t)] >= 1 && seq[static_cast<std::size_t>(t)] <= 10)
            index = index * 10 + static_cast<std::uint64_t>(seq[static_cast<std::size_t>(t)] - 1);
        const Problem p = task->problem(index);
        std::vector<std::int32_t> expect = p.prompt;
        expect.insert(expect.end(), p.answer.begin(), p.answer.end());
        CHECK(seq == expect);
        CHECK(task->is_val(index) == (batch == &v));
      }
    }
  }
}

TEST_CASE("tasks: seek restores the stream", "[lab6][data]") {
  SortTask a(5, 3), b(5, 3);
  for (int i = 0; i < 3; ++i) a.next_train(4, 10);
  a.next_val(4, 10);
  const auto pos = a.position();
  const Batch na = a.next_train(4, 10);
  b.seek(pos);
  MLS_OBSERVE(position_train(pos));  // batches drawn so far: 3 train, 1 val
  MLS_OBSERVE(position_val(pos));
  MLS_OBSERVE(na.mask);
  CHECK(b.next_train(4, 10).inputs == na.inputs);
  require_error([&] { a.next_train(4, 9); }, "T = 9 is shorter than a problem: prompt 6 + answer 5 - 1 = 10 tokens");
}

TEST_CASE("tasks: exact match with an oracle, a wrong and a partial generator", "[lab6][data_files]") {
  AdditionTask task(2, 0);
  const GreedyFn oracle = [&](const std::vector<std::int32_t>& prompt, int n_new) {
    CHECK(n_new == 3);
    std::uint64_t index = 0;
    for (std::int32_t id : prompt)
      if (id >= 1 && id <= 10) index = index * 10 + static_cast<std::uint64_t>(id - 1);
    return task.problem(index).answer;
  };
  MLS_OBSERVE(exact_match(task, oracle, 50));
  MLS_CHECK_EQ(exact_match(task, oracle, 50), 1.0);
  MLS_CHECK_EQ(exact_match(task, oracle, 50, false), 1.0);
  const GreedyFn zeros = [](const std::vector<std::int32_t>&, int n_new) { return std::vector<std::int32_t>(static_cast<std::size_t>(n_new), 0); };
  MLS_CHECK_EQ(exact_match(task, zeros, 20), 0.0);
  // Right only when the first digit of a is even: about half.
  const GreedyFn half = [&](const std::vector<std::int32_t>& prompt, int n_new) {
    return (prompt[0] - 1) % 2 == 0 ? oracle(prompt, n_new) : std::vector<std::int32_t>{};
  };
  const double h = exact_match(task, half, 400);
  MLS_OBSERVE(h, {0.0, 0.3});  // each build in (0.35, 0.65)
  MLS_ORACLE_CHECK(CHECK((h > 0.35 && h < 0.65)));
  require_error([&] { exact_match(task, oracle, 0); }, "n_problems = 0");
  require_error([] { make_task("reverse", 3, 0); }, "unknown task 'reverse'");
  require_error([] { SortTask(1, 0); }, "n_digits = 1, expected 2..18");
  require_error([] { AdditionTask(10, 0); }, "n_digits = 10, expected 1..9");
  require_error([&] { task.problem(10000); }, "problem 10000 outside [0, 10000)");
}
