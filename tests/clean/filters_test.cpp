// Every rule of the Gopher, C4 and FineWeb filters on hand-made documents right on both sides of its
// threshold (datatrove 0.10.1's definitions; the expected ratios are computed by hand in comments).
#include "lmt/clean/filters.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lmt::clean {
namespace {

// n words cycling through a fixed list (word lengths 3..7; "the", "and", "with" are stop words).
std::string words(int n, const std::vector<std::string>& pool = {"the", "garden", "with", "flowers", "and", "trees"}) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? " " : "") + pool[static_cast<size_t>(i) % pool.size()];
  return s;
}

Verdict quality(const std::string& text, const GopherQualityOptions& o = {}) {
  const U32 t = decode_utf8(text);
  return gopher_quality(t, split_words(t), o, nullptr);
}

TEST(GopherQuality, WordCount) {
  EXPECT_TRUE(quality(words(50)).keep);
  EXPECT_EQ(quality(words(49)).reason, "gopher_short_doc");
  GopherQualityOptions o;
  o.max_doc_words = 60;
  EXPECT_TRUE(quality(words(60), o).keep);
  EXPECT_EQ(quality(words(61), o).reason, "gopher_long_doc");
  // Punctuation-only words do not count: 49 words and 5 commas are still short.
  EXPECT_EQ(quality(words(49) + " , , , , ,").reason, "gopher_short_doc");
}

TEST(GopherQuality, MeanWordLength) {
  // 50 words of 3 letters: mean 3.0, not below 3. One "to" instead: (49*3+2)/50 = 2.98.
  EXPECT_TRUE(quality(words(50, {"the", "and"})).keep);
  EXPECT_EQ(quality(words(49, {"the", "and"}) + " to").reason, "gopher_below_avg_threshold");
  GopherQualityOptions o;
  o.min_stop_words = 0;
  EXPECT_TRUE(quality(words(50, {"abcdefghij"}), o).keep);  // mean 10.0
  EXPECT_EQ(quality(words(49, {"abcdefghij"}) + " abcdefghijk", o).reason, "gopher_above_avg_threshold");  // 10.02
}

TEST(GopherQuality, HashAndEllipsisRatio) {
  // '#' is a word of its own: 5 / 55 words = 0.091 <= 0.1; 6 / 56 = 0.107.
  EXPECT_TRUE(quality("# # # # # " + words(50)).keep);
  EXPECT_EQ(quality("# # # # # # " + words(50)).reason, "gopher_too_many_hashes");
  EXPECT_TRUE(quality("... ... ... ... ... " + words(50)).keep);
  EXPECT_EQ(quality("... ... ... ... ... ... " + words(50)).reason, "gopher_too_many_ellipsis");
}

TEST(GopherQuality, BulletAndEllipsisLines) {
  auto lines = [](int bullets, int ellipses) {
    std::string s;
    for (int i = 0; i < 10; ++i) {
      s += (i < bullets ? "- " : "") + words(5) + (i < ellipses ? "\u2026" : "") + "\n";
    }
    return s;
  };
  EXPECT_TRUE(quality(lines(9, 0)).keep);  // 0.9 is not above 0.9
  EXPECT_EQ(quality(lines(10, 0)).reason, "gopher_too_many_bullets");
  EXPECT_TRUE(quality(lines(0, 3)).keep);  // 0.3
  EXPECT_EQ(quality(lines(0, 4)).reason, "gopher_too_many_end_ellipsis");
}

TEST(GopherQuality, AlphaWordsAndStopWords) {
  auto with_numbers = [](int k) {
    std::string s = words(50);
    for (int i = 0; i < k; ++i) s += " 123";
    return s;
  };
  EXPECT_TRUE(quality(with_numbers(12)).keep);  // 50/62 = 0.806
  EXPECT_EQ(quality(with_numbers(13)).reason, "gopher_below_alpha_threshold");  // 50/63 = 0.794
  EXPECT_TRUE(quality(words(50, {"the", "garden", "of", "roses"})).keep);  // "the", "of"
  EXPECT_EQ(quality(words(50, {"the", "garden", "roses"})).reason, "gopher_enough_stop_words");
}

GopherRepetitionOptions only(const std::string& rule, double thr) {
  GopherRepetitionOptions o;
  o.dup_line_frac = o.dup_para_frac = o.dup_line_char_frac = o.dup_para_char_frac = 0;
  o.top_n_grams.clear();
  o.dup_n_grams.clear();
  if (rule == "dup_line_frac") o.dup_line_frac = thr;
  if (rule == "dup_para_frac") o.dup_para_frac = thr;
  if (rule == "dup_line_char_frac") o.dup_line_char_frac = thr;
  if (rule == "dup_para_char_frac") o.dup_para_char_frac = thr;
  if (rule == "top_2_gram") o.top_n_grams = {{2, thr}};
  if (rule == "dup_5_gram") o.dup_n_grams = {{5, thr}};
  return o;
}

Verdict repetition(const std::string& text, const GopherRepetitionOptions& o) {
  const U32 t = decode_utf8(text);
  return gopher_repetition(t, split_words(t), o, nullptr);
}

// 10 lines (or paragraphs): the last dups + 1 are the same line (dups duplicates), the others distinct.
std::string repeated(int dups, const std::string& sep) {
  std::string s;
  for (int i = 0; i < 10; ++i) s += (i ? sep : "") + (i >= 9 - dups ? std::string("line number zero") : "line number " + std::to_string(i + 100));
  return s;
}

TEST(GopherRepetition, DuplicateLinesAndParagraphs) {
  EXPECT_TRUE(repetition(repeated(3, "\n"), only("dup_line_frac", 0.3)).keep);
  EXPECT_EQ(repetition(repeated(4, "\n"), only("dup_line_frac", 0.3)).reason, "dup_line_frac");
  EXPECT_TRUE(repetition(repeated(3, "\n\n"), only("dup_para_frac", 0.3)).keep);
  EXPECT_EQ(repetition(repeated(4, "\n\n"), only("dup_para_frac", 0.3)).reason, "dup_para_frac");
}

TEST(GopherRepetition, DuplicateCharacters) {
  // "A\nB\nA" with |A| = 20: 20 / (42 + |B|) is 0.2 for |B| = 58 and 0.202 for |B| = 57.
  const std::string a(20, 'a');
  EXPECT_TRUE(repetition(a + "\n" + std::string(58, 'b') + "\n" + a, only("dup_line_char_frac", 0.2)).keep);
  EXPECT_EQ(repetition(a + "\n" + std::string(57, 'b') + "\n" + a, only("dup_line_char_frac", 0.2)).reason, "dup_line_char_frac");
  // Paragraphs: 20 / (44 + |B|) with "\n\n" separators.
  EXPECT_TRUE(repetition(a + "\n\n" + std::string(56, 'b') + "\n\n" + a, only("dup_para_char_frac", 0.2)).keep);
  EXPECT_EQ(repetition(a + "\n\n" + std::string(55, 'b') + "\n\n" + a, only("dup_para_char_frac", 0.2)).reason, "dup_para_char_frac");
}

// Distinct 5-letter words.
std::string distinct(int n, int from) {
  std::string s;
  for (int i = from; i < from + n; ++i) {
    std::string w = "aaaaa";
    for (int k = 4, v = i; k >= 0; --k, v /= 26) w[static_cast<size_t>(k)] = static_cast<char>('a' + v % 26);
    s += (s.empty() ? "" : " ") + w;
  }
  return s;
}

TEST(GopherRepetition, NGrams) {
  // "xxxxx yyyyy" three times between distinct words: top 2-gram chars = 11 * 3 = 33.
  const std::string t2 = distinct(10, 0) + " xxxxx yyyyy " + distinct(10, 20) + " xxxxx yyyyy " + distinct(10, 40) + " xxxxx yyyyy " + distinct(10, 60);
  const double r2 = 33.0 / static_cast<double>(t2.size());
  EXPECT_TRUE(repetition(t2, only("top_2_gram", r2 + 1e-9)).keep);
  EXPECT_EQ(repetition(t2, only("top_2_gram", r2 - 1e-9)).reason, "top_2_gram");
  // One 5-gram of 5-letter words repeated once: 25 duplicated characters ("".join).
  const std::string five = distinct(5, 500);
  const std::string t5 = distinct(20, 0) + " " + five + " " + distinct(20, 100) + " " + five + " " + distinct(20, 200);
  const double r5 = 25.0 / static_cast<double>(t5.size());
  EXPECT_TRUE(repetition(t5, only("dup_5_gram", r5 + 1e-9)).keep);
  EXPECT_EQ(repetition(t5, only("dup_5_gram", r5 - 1e-9)).reason, "duplicated_5_n_grams");
  EXPECT_EQ(repetition("", {}).reason, "empty");
}

Verdict c4(const std::string& text, std::string* out, const C4Options& o = {}) {
  U32 kept;
  const Verdict v = c4_quality(decode_utf8(text), o, &kept, nullptr);
  *out = encode_utf8(kept);
  return v;
}

TEST(C4, DropsLinesAndCountsSentences) {
  const std::string good = "The cat sat on the mat. It was warm.\nThe dog ran in the park. It was happy!\nBirds sang all day long.";
  std::string out;
  EXPECT_TRUE(c4(good, &out).keep);  // 5 sentences
  EXPECT_EQ(out, good);
  EXPECT_EQ(c4("The cat sat on the mat. It was warm.\nThe dog ran in the park. It was happy!", &out).reason, "too_few_sentences");
  const std::string mixed = good + "\nno terminal punctuation here\nTwo words.\nWe use cookies on this site.\n"
                                   "Enable JavaScript to view this page.\nWait for it...\nA cited claim is here.[1]\n" +
                            "A line with a " + std::string(1001, 'w') + " word.";
  EXPECT_TRUE(c4(mixed, &out).keep);
  EXPECT_EQ(out, good + "\nA cited claim is here.");
  EXPECT_EQ(c4(good + "\nLorem ipsum dolor sit amet.", &out).reason, "lorem_ipsum");
  EXPECT_EQ(c4(good + "\nThe function {return x;} is fine.", &out).reason, "curly_bracket");
  C4Options o;
  o.filter_no_terminal_punct = false;
  EXPECT_TRUE(c4(good + "\nno terminal punctuation here", &out, o).keep);
  EXPECT_EQ(out, good + "\nno terminal punctuation here");
}

Verdict fineweb(const std::string& text, const FineWebOptions& o = {}) {
  const U32 t = decode_utf8(text);
  return fineweb_quality(t, split_words(t), o, nullptr);
}

// n lines of more than 30 characters, distinct; the first `punct` end in '.'.
std::string long_lines(int n, int punct) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? "\n" : "") + ("this is line number " + std::to_string(1000 + i) + " of the text") + (i < punct ? "." : "");
  return s;
}

TEST(FineWeb, LinePunctuationRatio) {
  EXPECT_TRUE(fineweb(long_lines(25, 3)).keep);  // 3/25 = 0.12
  EXPECT_EQ(fineweb(long_lines(25, 2)).reason, "line_punct_ratio");  // 0.08
  FineWebOptions o;
  o.line_punct_exclude_zero = true;
  EXPECT_TRUE(fineweb(long_lines(25, 0), o).keep);
  EXPECT_EQ(fineweb("\n \n").reason, "empty");
}

TEST(FineWeb, ShortLineRatio) {
  auto text = [](int short_lines) {
    std::string s;
    for (int i = 0; i < 100; ++i)
      s += (i ? "\n" : "") + (i < short_lines ? "short line " + std::to_string(i) + "." : "this is the long line number " + std::to_string(i) + ".");
    return s;
  };
  EXPECT_TRUE(fineweb(text(67)).keep);  // 0.67
  EXPECT_EQ(fineweb(text(68)).reason, "short_line_ratio");
}

TEST(FineWeb, DuplicateCharsAndListRatio) {
  const std::string base = long_lines(20, 20);
  const std::string dup = "this is line number 1000 of the text.";  // a repeat of line 0 (37 characters)
  const std::string t = base + "\n" + dup;
  const double r = 37.0 / static_cast<double>(t.size() - 20);  // 20 newlines
  FineWebOptions o;
  o.char_duplicates_ratio = r + 1e-9;
  EXPECT_TRUE(fineweb(t, o).keep);
  o.char_duplicates_ratio = r - 1e-9;
  EXPECT_EQ(fineweb(t, o).reason, "char_dup_ratio");
  // 10 lines of 3 words: 9 newlines / 30 words = 0.3; one line of 2 words: 9/29.
  FineWebOptions l;
  l.line_punct_thr = 0;
  l.short_line_thr = 1;
  std::string s;
  for (int i = 0; i < 10; ++i) s += (i ? "\n" : "") + ("alpha beta gamma" + std::to_string(i));
  EXPECT_TRUE(fineweb(s, l).keep);
  s.replace(s.find("alpha beta gamma9"), 17, "alpha gamma9");
  EXPECT_EQ(fineweb(s, l).reason, "list_ratio");
}

TEST(Text, WordsLinesAndRoundTrip) {
  const U32 t = decode_utf8("Don't stop, (please) the U.S. end.");
  std::vector<std::string> got;
  for (U32View w : split_words(t)) got.push_back(encode_utf8(w));
  EXPECT_EQ(got, (std::vector<std::string>{"Do", "n't", "stop", ",", "(", "please", ")", "the", "U.S.", "end", "."}));
  // spaCy (datatrove's "en" tokenizer) keeps an inner '@' in its token: e-mail addresses and
  // WikiText's number/hyphen markers are one word each.
  // Inner ',' splits only between letters, ':' only before a letter (spaCy's infixes; the outputs
  // are what spaCy 3's blank English tokenizer gives).
  got.clear();
  const U32 wiki = decode_utf8("New @-@ York 1 @,@ 000 3 @.@ 5 mail a@b.com a,b 1,000 a,1 1,a a:b 1:30 a:1");
  for (U32View w : split_words(wiki)) got.push_back(encode_utf8(w));
  EXPECT_EQ(got, (std::vector<std::string>{"New", "@-@", "York", "1", "@,@", "000", "3", "@.@", "5", "mail", "a@b.com", "a", ",", "b",
                                           "1,000", "a,1", "1,a", "a", ":", "b", "1:30", "a:1"}));
  EXPECT_EQ(py_splitlines(U"a\r\nb\rc\n\nd\n").size(), 5u);  // a b c "" d
  const std::string bad = "ok \xff\xfe caf\xc3\xa9";
  EXPECT_EQ(encode_utf8(decode_utf8(bad)), bad);
  EXPECT_TRUE(py_isalpha(U'\u00e9'));
  EXPECT_FALSE(py_isalpha(U'7'));
  EXPECT_TRUE(is_punctuation(U'\u2026'));
  EXPECT_TRUE(is_terminal_punctuation(U'\u3002'));
  EXPECT_EQ(count_sentences(U"One. Two! Three? \"Four.\" Five"), 5);
}

}  // namespace
}  // namespace lmt::clean
