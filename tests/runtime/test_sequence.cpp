// One answer token by token (runtime/sequence.h), on the byte tokenizer of
// the tiny model (token 3 + b is byte b): the text released as it comes, held
// back while it may begin a stop string or a UTF-8 character, and each way
// an answer ends.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "runtime/model.h"
#include "runtime/sequence.h"

namespace lr {
namespace {

struct Bytes {
  test::TempDir t;
  Model m;
  Bytes() {
    test::TinySpec s;
    s.tokenizer = true;
    m = load_model(test::write_tiny(t, s, "tiny.gguf"), std::nullopt);
  }
};

// Logits that make greedy sampling pick byte b.
std::vector<float> pick(int vocab, unsigned char b) {
  std::vector<float> l(size_t(vocab), 0.f);
  l[3 + b] = 10.f;
  return l;
}

GenParams greedy(int max_tokens) {
  GenParams g;
  g.sampling.temperature = 0;
  g.max_tokens = max_tokens;
  return g;
}

// Feeds `text` byte by byte; returns what each step released.
std::vector<Sequence::Step> feed(Sequence& s, const std::string& text, int vocab,
                                 bool room = true) {
  std::vector<Sequence::Step> out;
  for (unsigned char c : text) {
    out.push_back(s.next(pick(vocab, c).data(), vocab, room));
    if (out.back().finish != Finish::None) break;
  }
  return out;
}

TEST(Sequence, StopStringIsHeldBackThenCut) {
  Bytes b;
  const int V = b.m.tokenizer->n_vocab();
  GenParams g = greedy(100);
  g.stop = {"cd", ""};  // an empty stop string is ignored
  Sequence s(*b.m.tokenizer, {1, 5, 6}, g);
  auto st = feed(s, "abcd", V);
  ASSERT_EQ(st.size(), 4u);
  EXPECT_EQ(st[0].text, "a");
  EXPECT_EQ(st[1].text, "b");
  EXPECT_EQ(st[2].text, "");  // "c" may begin "cd"
  EXPECT_EQ(st[3].text, "");
  EXPECT_EQ(st[3].finish, Finish::Stop);
  EXPECT_EQ(s.text(), "ab");
  EXPECT_EQ(st[2].id, 3 + 'c');
  // "c" then "e": the held "c" goes out with the "e".
  Sequence s2(*b.m.tokenizer, {1}, g);
  auto st2 = feed(s2, "ace", V);
  EXPECT_EQ(st2[1].text, "");
  EXPECT_EQ(st2[2].text, "ce");
  EXPECT_EQ(st2[2].finish, Finish::None);
}

TEST(Sequence, Utf8CharactersGoOutWhole) {
  Bytes b;
  const int V = b.m.tokenizer->n_vocab();
  Sequence s(*b.m.tokenizer, {1}, greedy(100));
  auto st = feed(s, "\xC3\xA9!", V);  // é, then !
  EXPECT_EQ(st[0].text, "");
  EXPECT_EQ(st[1].text, "\xC3\xA9");
  EXPECT_EQ(st[2].text, "!");
}

TEST(Sequence, LengthStopTokenAndAFullContextEndIt) {
  Bytes b;
  const int V = b.m.tokenizer->n_vocab();
  Sequence len(*b.m.tokenizer, {1}, greedy(3));
  auto st = feed(len, "abcdef", V);
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[2].finish, Finish::Length);
  EXPECT_EQ(len.text(), "abc");
  EXPECT_EQ(len.generated().size(), 3u);
  // No room to feed the token back: the answer ends with it.
  Sequence full(*b.m.tokenizer, {1}, greedy(100));
  auto one = feed(full, "xy", V, /*room=*/false);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].finish, Finish::Length);
  EXPECT_EQ(one[0].text, "x");
  // A stop token ends it without its text; it counts as generated.
  GenParams g = greedy(100);
  g.stop_tokens = {3 + 'z'};
  Sequence stop(*b.m.tokenizer, {1}, g);
  auto s3 = feed(stop, "abz", V);
  ASSERT_EQ(s3.size(), 3u);
  EXPECT_EQ(s3[2].finish, Finish::Stop);
  EXPECT_EQ(stop.text(), "ab");
  EXPECT_EQ(stop.generated().size(), 3u);
}

// The repetition penalty sees the prompt (llama.cpp): a prompt of "a" makes
// greedy sampling leave "a" for the runner-up.
TEST(Sequence, RepeatPenaltyLooksAtThePrompt) {
  Bytes b;
  const int V = b.m.tokenizer->n_vocab();
  GenParams g = greedy(10);
  g.sampling.repeat_penalty = 4.f;
  std::vector<float> l(size_t(V), 0.f);
  l[3 + 'a'] = 8.f;
  l[3 + 'b'] = 3.f;
  Sequence with(*b.m.tokenizer, {3 + 'a'}, g);
  EXPECT_EQ(with.next(l.data(), V, true).id, 3 + 'b');  // 8 / 4 = 2 < 3
  Sequence without(*b.m.tokenizer, {3 + 'c'}, g);
  EXPECT_EQ(without.next(l.data(), V, true).id, 3 + 'a');
}

}  // namespace
}  // namespace lr
