// Graceful stop on SIGTERM / SIGINT (docs/RELIABILITY.md).
//
// install_stop_handlers() makes the first SIGTERM or SIGINT only set a flag, which long-running
// loops poll at safe points (the trainer: after a step, then it checkpoints and exits with
// kExitStopped). A second SIGINT (Ctrl-C twice) restores the default action and re-raises it, so the
// process dies at once; a second SIGTERM is ignored while the first is being handled. Clusters send
// SIGTERM and then wait a grace period before SIGKILL (Slurm preemption, Kubernetes eviction).
// Async-signal-safe: the handler only stores to a lock-free atomic and calls signal()/raise().
#pragma once

namespace lmt {

// Exit status of a run stopped by a signal after writing its checkpoint: resume it with --resume.
inline constexpr int kExitStopped = 3;

// Installs the handlers (idempotent). Until then a signal has its default action.
void install_stop_handlers();
// The signal number that asked to stop (SIGTERM or SIGINT), or 0.
int stop_requested();
// Clears the flag (tests that raise a signal themselves).
void reset_stop_request();
// Name of a signal number: "SIGTERM", "SIGINT", else "a signal".
const char* stop_signal_name(int sig);

}  // namespace lmt
