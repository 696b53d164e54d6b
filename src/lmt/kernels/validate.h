// Argument validation shared by the kernel entry points (backend.cpp, moe.cpp): private to
// lmt_kernels. A failed check prints the op, the message and every named argument, then aborts.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "lmt/tensor/tensor_view.h"

namespace lmt::kernels::detail {

struct NamedArg {
  const char* name = nullptr;
  const TensorView* view = nullptr;
};

// The op being validated and its tensor arguments, for the error message.
class Ctx {
 public:
  template <typename... Rest>
  Ctx(const char* op, Rest... rest) : op_(op) {
    (add(rest), ...);
  }
  [[noreturn]] void fail(const std::string& msg) const {
    std::ostringstream s;
    s << "kernel '" << op_ << "': " << msg << "\n  arguments:";
    for (int i = 0; i < n_; ++i) s << " " << args_[i].name << "=" << args_[i].view->to_string();
    std::fprintf(stderr, "%s\n", s.str().c_str());
    std::fflush(stderr);
    std::abort();
  }
  void require(bool ok, const std::string& msg) const {
    if (!ok) fail(msg);
  }
  // Rank and dims must match; -1 matches any size.
  void shape(const char* name, const TensorView& v, std::initializer_list<int64_t> dims) const {
    bool ok = v.present() && v.rank() == static_cast<int>(dims.size());
    int i = 0;
    for (int64_t d : dims) {
      if (!ok) break;
      if (d >= 0 && v.dim(i) != d) ok = false;
      ++i;
    }
    if (!ok) {
      std::string want = "[";
      i = 0;
      for (int64_t d : dims) want += (i++ ? "," : "") + (d < 0 ? std::string("*") : std::to_string(d));
      want += "]";
      fail(std::string(name) + " must have shape " + want + ", got " + v.to_string());
    }
  }
  void dtype(const char* name, const TensorView& v, std::initializer_list<DType> allowed) const {
    for (DType t : allowed)
      if (v.dtype() == t) return;
    std::string want;
    for (DType t : allowed) want += (want.empty() ? "" : "|") + std::string(dtype_name(t));
    fail(std::string(name) + " must be " + want + ", got " + v.to_string());
  }
  void same_dtype(const char* na, const TensorView& a, const char* nb, const TensorView& b) const {
    require(a.dtype() == b.dtype(), std::string(na) + " and " + nb + " must share a dtype");
  }
  // An output that is the input's dtype, or bf16 for an f32 input (rounded once, as convert would).
  void out_dtype(const char* nin, const TensorView& in, const char* nout, const TensorView& out) const {
    require(out.dtype() == in.dtype() || (in.dtype() == DType::kF32 && out.dtype() == DType::kBF16),
            std::string(nout) + " must be " + nin + "'s dtype, or bf16 for an f32 " + nin);
  }
  void cpu(const TensorView& v) const {
    if (v.present()) require(v.device().is_host(), "tensor on a device this backend cannot reach");
  }

 private:
  void add(NamedArg a) {
    if (n_ < static_cast<int>(args_.size())) args_[n_++] = a;
  }
  const char* op_;
  std::array<NamedArg, 12> args_{};
  int n_ = 0;
};

#define LMT_ARG(x) NamedArg{#x, &x}

inline constexpr std::initializer_list<DType> kAct = {DType::kF32, DType::kF64};
inline constexpr std::initializer_list<DType> kGemmIn = {DType::kF32, DType::kBF16, DType::kF64};

// f64 inputs go with f64 outputs (ref tests); otherwise outputs are f32.
inline DType acc_dtype_for(DType in) { return in == DType::kF64 ? DType::kF64 : DType::kF32; }

}  // namespace lmt::kernels::detail
