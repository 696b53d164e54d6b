// LMT_CHECK / LMT_DCHECK: invariants that only a bug can break (never user input; see status.h).
//
//   LMT_CHECK(n % g == 0) << "n=" << n << " g=" << g;
//
// On failure prints "file:line: check failed: <expr> <message>" to stderr and aborts. LMT_CHECK is
// always on; LMT_DCHECK compiles to nothing in release builds unless LMT_ENABLE_DCHECK is defined,
// so it may sit in hot loops.
#pragma once

#include <sstream>

namespace lmt::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* expr);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `LMT_CHECK(x) << a << b;` be a single expression of type void.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace lmt::internal

#define LMT_CHECK(cond)                                                   \
  (cond) ? (void)0                                                        \
         : ::lmt::internal::Voidify() &                                   \
               ::lmt::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define LMT_CHECK_OP(a, op, b) \
  LMT_CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define LMT_CHECK_EQ(a, b) LMT_CHECK_OP(a, ==, b)
#define LMT_CHECK_NE(a, b) LMT_CHECK_OP(a, !=, b)
#define LMT_CHECK_LT(a, b) LMT_CHECK_OP(a, <, b)
#define LMT_CHECK_LE(a, b) LMT_CHECK_OP(a, <=, b)
#define LMT_CHECK_GT(a, b) LMT_CHECK_OP(a, >, b)
#define LMT_CHECK_GE(a, b) LMT_CHECK_OP(a, >=, b)

#if defined(NDEBUG) && !defined(LMT_ENABLE_DCHECK)
#define LMT_DCHECK(cond) \
  while (false) LMT_CHECK(cond)
#else
#define LMT_DCHECK(cond) LMT_CHECK(cond)
#endif
