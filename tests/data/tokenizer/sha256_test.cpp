// Sha256 (nettle underneath) against the FIPS 180-4 / NIST example vectors, fed whole and in pieces,
// and update_field()'s length prefix against Python's hashlib of the same bytes.
#include "lmt/data/tokenizer/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace lmt::data {
namespace {

std::string sha256_of(const std::string& s) {
  Sha256 h;
  h.update(s);
  return h.hex_digest();
}

TEST(Sha256, MatchesTheNistVectors) {
  EXPECT_EQ(sha256_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_of(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, StreamingInPiecesEqualsOneShot) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  const std::string whole = sha256_of(data);
  for (size_t piece : {1, 3, 55, 56, 63, 64, 65, 200}) {
    Sha256 h;
    for (size_t i = 0; i < data.size(); i += piece) h.update(data.data() + i, std::min(piece, data.size() - i));
    EXPECT_EQ(h.hex_digest(), whole) << "piece " << piece;
  }
}

TEST(Sha256, FieldsAreLengthPrefixed) {
  // hashlib.sha256(struct.pack('<Q',2)+b'ab'+struct.pack('<Q',1)+b'c').hexdigest()
  Sha256 a;
  a.update_field("ab");
  a.update_field("c");
  Sha256 b;
  b.update_field("a");
  b.update_field("bc");
  const std::string da = a.hex_digest();
  EXPECT_EQ(da, "43ee655579de01ca739b3f95c1c2d3f46d353b2c0df818064ea594506cdb2617");
  EXPECT_NE(b.hex_digest(), da);
}

TEST(Sha256, DigestStartsANewStream) {
  Sha256 h;
  h.update("abc");
  h.hex_digest();
  EXPECT_EQ(h.hex_digest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace lmt::data
