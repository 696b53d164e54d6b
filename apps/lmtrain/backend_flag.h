// `--backend NAME` on every command that computes (train, eval, generate, bench matmul|attention|
// model|train): the kernel backend by its registry name (kernels/registry.h), "cpu" unless given.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "lmt/base/status.h"
#include "lmt/kernels/registry.h"

namespace lmt::cli {

// Adds the flag to `cmd`, writing into `name` (which holds the default: "cpu", or empty for train,
// where an absent flag leaves the recipe's runtime.backend). The help lists the registered names.
inline CLI::Option* add_backend_flag(CLI::App* cmd, std::string& name, const std::string& default_text = "cpu") {
  return cmd->add_option("--backend", name, "kernel backend: " + kernels::backend_names_text() + " (default " + default_text + ")");
}

// The backend the flag names; an unknown name is an error naming the flag and the registered names.
inline StatusOr<kernels::Backend*> backend_from_flag(const std::string& name) {
  StatusOr<kernels::Backend*> b = kernels::find_backend(name);
  if (!b.ok()) return b.status().WithContext("--backend");
  return b;
}

}  // namespace lmt::cli
