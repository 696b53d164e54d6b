// Data, tensor, pipeline and expert parallelism on a device backend, on any machine: under `mpirun -np 2` (ctest registers it
// so; alone it runs as world 1) the trainer trains backend "mpi_device" — the cpu kernels on a
// pretend GPU, cuda:5, whose memory host code cannot touch (common/pretend_device.h), so every
// device path of the trainer and DataParallel runs as on a GPU (no shared-memory storage, the ZeRO-2
// scratch from the backend's allocator, checkpoints staged through the host and read after their
// fence; its copy kernel, like cuda's, refuses two host views, which a sharded checkpoint once handed
// it) — over the device communicator registered for it, which forwards to MPI with the device memory
// open, counts the calls it got and checks that every gradient reduction reads and writes the
// backend's memory.
// The same run on backend "cpu" over the MPI world (MPI messages too: no shared-memory storage) must
// give the same losses and parameters bit for bit: the kernels and the reductions are the same, only
// the path through the trainer differs. It is the CPU stand-in for
// NCCL (nccl_communicator_test, label gpu, runs the real one on GPUs).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mpi_trainer_runs.h"
#include "common/pretend_device.h"
#include "common/stall_reports.h"
#include "lmt/dist/device_communicator.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt {
namespace {
namespace fs = std::filesystem;

dist::Communicator* g_comm = nullptr;
constexpr int64_t kVocab = 64;

LMT_REGISTER_BACKEND(mpi_device, [] { return std::make_unique<test::PretendDeviceBackend>("mpi_device", 5); });

std::atomic<int64_t> g_forwarded{0};        // f32 collectives the device communicator got
std::atomic<int64_t> g_host_reductions{0};  // f32 reductions of buffers outside the device memory
std::atomic<int64_t> g_device_exchanges{0};  // all_to_all_v calls on device memory (NCCL's send/recv)
std::atomic<int64_t> g_device_pairs{0};      // send_recv_async calls on device memory (one NCCL group)
std::atomic<int64_t> g_device_collectives{0};  // f32 sums, gathers and reduce-scatters of device memory

// Counts a collective whose buffers all lie in the device memory.
void count_on_device(std::initializer_list<const void*> buffers) {
  for (const void* p : buffers)
    if (!test::PretendDeviceMemory::owns(p)) return;
  ++g_device_collectives;
}

// A gradient reduction must read and write device memory (NCCL reduces nothing else).
int64_t reduction(std::initializer_list<const void*> buffers) {
  for (const void* p : buffers)
    if (p != nullptr && !test::PretendDeviceMemory::owns(p)) ++g_host_reductions;
  return ++g_forwarded;
}

// A request in flight keeps the pretend device's memory open (MPI may move its data in any later
// MPI call) until it is waited for.
class OpenRequest final : public dist::Request {
 public:
  explicit OpenRequest(std::unique_ptr<dist::Request> r) : r_(std::move(r)) {}
  Status wait() override { return r_->wait(); }
  bool test() override { return r_->test(); }

 private:
  test::DeviceAccess open_;
  std::unique_ptr<dist::Request> r_;
};

// The device communicator of "mpi_device": every call forwarded to the MPI communicator it wraps,
// with the device memory open to MPI, as NCCL reaches the GPU's.
class ForwardingCommunicator final : public dist::Communicator {
 public:
  ForwardingCommunicator(dist::Communicator* host, std::unique_ptr<dist::Communicator> owned)
      : host_(host), owned_(std::move(owned)) {}
  int rank() const override { return host_->rank(); }
  int world() const override { return host_->world(); }
  const char* name() const override { return "forwarded"; }
  bool device_buffers() const override { return true; }
  Status all_reduce_sum(float* d, int64_t n) override {
    reduction({d});
    count_on_device({d});
    return call([&] { return host_->all_reduce_sum(d, n); });
  }
  std::unique_ptr<dist::Request> all_reduce_sum_async(float* d, int64_t n) override {
    reduction({d});
    return async([&] { return host_->all_reduce_sum_async(d, n); });
  }
  Status all_reduce_sum(double* d, int64_t n) override { return call([&] { return host_->all_reduce_sum(d, n); }); }
  Status reduce_scatter_sum(const float* s, float* r, const std::vector<int64_t>& c) override {
    reduction({s, r});
    count_on_device({s, r});
    return call([&] { return host_->reduce_scatter_sum(s, r, c); });
  }
  std::unique_ptr<dist::Request> reduce_scatter_sum_async(const float* s, float* r,
                                                          const std::vector<int64_t>& c) override {
    reduction({s, r});
    return async([&] { return host_->reduce_scatter_sum_async(s, r, c); });
  }
  Status all_gather(float* d, const std::vector<int64_t>& c) override {
    ++g_forwarded;
    count_on_device({d});
    return call([&] { return host_->all_gather(d, c); });
  }
  std::unique_ptr<dist::Request> all_gather_async(float* d, const std::vector<int64_t>& c) override {
    ++g_forwarded;
    return async([&] { return host_->all_gather_async(d, c); });
  }
  std::unique_ptr<dist::Request> all_gather_async(uint16_t* d, const std::vector<int64_t>& c) override {
    return async([&] { return host_->all_gather_async(d, c); });
  }
  Status broadcast(void* d, int64_t b, int root) override { return call([&] { return host_->broadcast(d, b, root); }); }
  Status all_to_all_v(const void* s, const std::vector<int64_t>& sb, void* r, const std::vector<int64_t>& rb) override {
    if (test::PretendDeviceMemory::owns(s) && test::PretendDeviceMemory::owns(r)) ++g_device_exchanges;
    return call([&] { return host_->all_to_all_v(s, sb, r, rb); });
  }
  std::unique_ptr<dist::Request> send_async(const void* d, int64_t b, int p) override {
    return async([&] { return host_->send_async(d, b, p); });
  }
  std::unique_ptr<dist::Request> recv_async(void* d, int64_t b, int p) override {
    return async([&] { return host_->recv_async(d, b, p); });
  }
  std::unique_ptr<dist::Request> send_recv_async(const void* s, int64_t sb, int to, void* r, int64_t rb,
                                                 int from) override {
    if ((s == nullptr || test::PretendDeviceMemory::owns(s)) && (r == nullptr || test::PretendDeviceMemory::owns(r)))
      ++g_device_pairs;
    return async([&] { return host_->send_recv_async(s, sb, to, r, rb, from); });
  }
  Status recv(void* d, int64_t b, int p) override { return call([&] { return host_->recv(d, b, p); }); }
  Status barrier() override { return host_->barrier(); }
  StatusOr<std::unique_ptr<dist::SymmetricBuffer>> allocate_symmetric(int64_t b) override {
    return host_->allocate_symmetric(b);
  }
  StatusOr<std::unique_ptr<dist::Communicator>> split(int color, int key) override {
    LMT_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> g, host_->split(color, key));
    dist::Communicator* raw = g.get();
    return std::unique_ptr<dist::Communicator>(std::make_unique<ForwardingCommunicator>(raw, std::move(g)));
  }
  void abort(int code) override { host_->abort(code); }
  Status async_error() const override {
    return g_background_error ? Internal("a pretend background error", "none") : Status::Ok();
  }
  static inline std::atomic<bool> g_background_error{false};  // what NCCL's ncclCommGetAsyncError would find

 private:
  template <typename F>
  static Status call(F f) {
    const test::DeviceAccess open;
    return f();
  }
  template <typename F>
  static std::unique_ptr<dist::Request> async(F f) {
    const test::DeviceAccess open;  // the request opens it again for as long as it lives
    return std::make_unique<OpenRequest>(f());
  }

  dist::Communicator* host_;
  std::unique_ptr<dist::Communicator> owned_;
};

StatusOr<std::unique_ptr<dist::Communicator>> forwarding(dist::Communicator& host) {
  return std::unique_ptr<dist::Communicator>(std::make_unique<ForwardingCommunicator>(&host, nullptr));
}
[[maybe_unused]] const bool kRegistered = dist::register_device_communicator("mpi_device", &forwarding);

class DeviceDistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { root_ = test::make_shared_run_root(*g_comm, "lmt_device_dist", kVocab); }
  static void TearDownTestSuite() { test::remove_shared_run_root(*g_comm, root_); }

  static config::Config recipe(const std::string& backend, int zero, int64_t steps, const std::string& dtype = "fp32") {
    config::Config c = config::Config::defaults();
    std::vector<std::string> kvs = {"model.n_layers=2",     "model.d_model=32",        "model.n_heads=4",
                                    "model.n_kv_heads=2",   "model.head_dim=8",        "model.ffn_hidden=64",
                                    "model.max_seq_len=64", "train.seq_len=32",        "train.micro_batch=2",
                                    "optim.lr=3e-3",        "schedule.warmup_steps=2", "eval.batches=2",
                                    "eval.every=3",         "checkpoint.every=3",      "checkpoint.async=false",
                                    "dist.bucket_mb=0.01",  "dist.shared_memory=false"};
    kvs.insert(kvs.end(), {"train.dtype=" + dtype, "runtime.backend=" + backend, "train.zero=" + std::to_string(zero),
                           "train.max_steps=" + std::to_string(steps), "data.path=" + (root_ / "data").string()});
    for (const std::string& kv : kvs) EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
    return c;
  }

  // The run on `backend` to its end: its losses (metrics.jsonl) and full parameters.
  static std::pair<std::map<int64_t, double>, std::vector<float>> train(const config::Config& c,
                                                                        const std::string& name) {
    const fs::path run = root_ / name;
    auto t = test::make_trainer(c, run, g_comm);
    EXPECT_TRUE(t);
    if (!t) return {};
    Status s = t->run();
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(g_comm->barrier().ok());
    return {test::losses_of(run), test::full_params_of(*t)};
  }

  void same_as_cpu(int zero, const std::string& dtype) {
    const std::string tag = "z" + std::to_string(zero) + dtype;
    const int64_t before = g_forwarded, host_before = g_host_reductions;
    auto [dev_losses, dev_params] = train(recipe("mpi_device", zero, 5, dtype), "device_" + tag);
    if (g_comm->world() > 1) {  // the gradients went through the device communicator, in device memory
      EXPECT_GT(g_forwarded - before, 0);
      EXPECT_EQ(g_host_reductions - host_before, 0);
    }
    auto [cpu_losses, cpu_params] = train(recipe("cpu", zero, 5, dtype), "cpu_" + tag);
    ASSERT_EQ(dev_losses.size(), 5u);
    EXPECT_EQ(dev_losses, cpu_losses);  // bit for bit: the same kernels and the same sums
    EXPECT_EQ(dev_params, cpu_params);
  }

  // A model-parallel layout (`extra`) on the device backend, with ZeRO 0 in fp32 and ZeRO-1 in bf16:
  // its exchanges went through the device communicator in device memory (`exchanges` grew), its
  // losses and parameters equal the cpu run's bit for bit, and stopped after the step-3 checkpoint
  // (the whole model gathered through the host) and resumed (each rank's part scattered back), it
  // gives the uninterrupted losses.
  void model_parallel_like_cpu(const std::vector<std::string>& extra, const std::string& tag,
                               const std::atomic<int64_t>& exchanges) {
    for (const auto& [zero, dtype] : {std::pair{0, std::string("fp32")}, std::pair{1, std::string("bf16")}}) {
      SCOPED_TRACE("zero " + std::to_string(zero) + " " + dtype);
      auto with = [&](const std::string& backend) {
        config::Config c = recipe(backend, zero, 4, dtype);
        for (const std::string& kv : extra) EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
        return c;
      };
      const std::string name = tag + "_z" + std::to_string(zero) + dtype;
      const int64_t before = exchanges;
      auto [dev_losses, dev_params] = train(with("mpi_device"), "device_" + name);
      EXPECT_GT(exchanges - before, 0) << "nothing went through the device communicator in device memory";
      auto [cpu_losses, cpu_params] = train(with("cpu"), "cpu_" + name);
      ASSERT_EQ(dev_losses.size(), 4u);
      EXPECT_EQ(dev_losses, cpu_losses);
      EXPECT_EQ(dev_params, cpu_params);
      EXPECT_EQ(stopped_and_resumed(with("mpi_device"), root_ / ("resumed_" + name)), dev_losses);
    }
  }

  // The losses of `c`'s run at `run`, stopped after its step-3 checkpoint and resumed to the end.
  static std::map<int64_t, double> stopped_and_resumed(const config::Config& c, const fs::path& run) {
    {
      auto t = test::make_trainer(c, run, g_comm);
      EXPECT_TRUE(t && t->run(/*stop_after=*/3).ok());
    }
    EXPECT_TRUE(g_comm->barrier().ok());
    {
      auto t = test::make_trainer(c, run, g_comm, /*resume=*/true);
      EXPECT_TRUE(t);
      if (t) {
        const Status s = t->run();
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
    }
    EXPECT_TRUE(g_comm->barrier().ok());
    return test::losses_of(run);
  }

  static fs::path root_;
};
fs::path DeviceDistTest::root_;

TEST_F(DeviceDistTest, Zero0OnTheDeviceCommunicatorEqualsTheCpuRun) { same_as_cpu(0, "fp32"); }
TEST_F(DeviceDistTest, Zero1OnTheDeviceCommunicatorEqualsTheCpuRun) { same_as_cpu(1, "fp32"); }
TEST_F(DeviceDistTest, Zero2OnTheDeviceCommunicatorEqualsTheCpuRun) { same_as_cpu(2, "fp32"); }
TEST_F(DeviceDistTest, Bf16Zero1OnTheDeviceCommunicatorEqualsTheCpuRun) { same_as_cpu(1, "bf16"); }

// A sharded (ZeRO-1) run stopped after its step-3 checkpoint and resumed on the same ranks gives
// the uninterrupted run's losses exactly.
TEST_F(DeviceDistTest, AShardedRunResumesExactly) {
  auto whole = train(recipe("mpi_device", 1, 5), "whole").first;
  EXPECT_EQ(stopped_and_resumed(recipe("mpi_device", 1, 5), root_ / "stopped"), whole);
}

// A background error of the gradients' communicator (NCCL's, which leaves its collectives waiting
// forever) reaches the trainer's stall handler within about a second, naming it; by default that
// ends the rank with status 4 (stall_watchdog.h). Here the handler records it.
TEST_F(DeviceDistTest, ABackgroundCommunicatorErrorEndsTheRun) {
  if (g_comm->world() < 2) GTEST_SKIP() << "needs mpirun -np 2";
  auto t = test::make_trainer(recipe("mpi_device", 1, 4), root_ / "background_error", g_comm);
  ASSERT_TRUE(t);
  test::StallReports stalls;
  t->set_stall_handler(stalls.handler());
  t->set_fault_injector([](int64_t step, model::Transformer&) {
    if (step != 2) return;
    ForwardingCommunicator::g_background_error = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // the watchdog polls once a second
    ForwardingCommunicator::g_background_error = false;
  });
  ASSERT_TRUE(t->run().ok());
  ASSERT_TRUE(g_comm->barrier().ok());
  const std::vector<std::string> reports = stalls.got();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("the gradients' communicator (forwarded) failed: a pretend background error"),
            std::string::npos)
      << reports[0];
}

// What a device backend does not do over several processes (ZeRO 3) is refused before anything is
// written.
TEST_F(DeviceDistTest, ZeroThreeIsRefusedBeforeWriting) {
  if (g_comm->world() < 2) GTEST_SKIP() << "needs mpirun -np 2";
  config::Config z3 = recipe("mpi_device", 3, 2);
  test::expect_refused_before_writing(z3, root_ / "refused_z3", g_comm, "train.zero = 3");
}

// Tensor parallelism on a device backend: each rank holds half of every layer's heads and hidden
// units and half of the vocabulary; the blocks' sums run on device memory through the device
// communicator, the embedding of this rank's rows through backend ops, and the loss's row
// statistics come to the combine in device memory (the pretend backend hands them over so, with
// the memory closed to host code, as cuda's kernel does).
TEST_F(DeviceDistTest, TensorParallelismOnTheDeviceCommunicatorEqualsTheCpuRun) {
  if (g_comm->world() < 2) GTEST_SKIP() << "needs mpirun -np 2";
  model_parallel_like_cpu({"parallel.tp=2", "model.qk_norm=true"}, "tp", g_device_collectives);
}

// MoE layers under tensor parallelism: every expert split like the dense FFN, the routing computed
// redundantly, the expert outputs and the routing weights' gradient summed over the group on the
// device.
TEST_F(DeviceDistTest, TensorParallelMixtureOfExpertsOnTheDeviceCommunicatorEqualsTheCpuRun) {
  if (g_comm->world() < 2) GTEST_SKIP() << "needs mpirun -np 2";
  model_parallel_like_cpu({"parallel.tp=2", "model.moe.num_experts=4", "model.moe.top_k=2", "model.moe.expert_ffn=32",
                           "model.moe.balance=aux_loss", "model.moe.aux_loss_coef=0.01"},
                          "tp_moe", g_device_collectives);
}

// With sequence parallelism the residual stream is split by rows too: the sub-blocks all-gather and
// reduce-scatter it in device memory.
TEST_F(DeviceDistTest, SequenceParallelismOnTheDeviceCommunicatorEqualsTheCpuRun) {
  if (g_comm->world() < 2) GTEST_SKIP() << "needs mpirun -np 2";
  model_parallel_like_cpu({"parallel.tp=2", "parallel.sp=true"}, "sp", g_device_collectives);
}

// Pipeline parallelism on a device backend: two stages, 1F1B over 3 micro-batches, the activations
// and their gradients sent between the stages in device memory as send/receive pairs (one NCCL group
// on a GPU; separate NCCL calls would deadlock where both neighbours send first).
TEST_F(DeviceDistTest, PipelineParallelismOnTheDeviceCommunicatorEqualsTheCpuRun) {
  if (g_comm->world() < 2) GTEST_SKIP() << "needs mpirun -np 2";
  model_parallel_like_cpu({"parallel.pp=2", "train.grad_accum=3"}, "pp", g_device_pairs);
}

// Expert parallelism on a device backend: each rank holds and computes half of every MoE layer's
// experts and the routed rows travel through the device communicator's all_to_all_v in device
// memory (NCCL's grouped send/recv on a GPU).
TEST_F(DeviceDistTest, ExpertParallelismOnTheDeviceCommunicatorEqualsTheCpuRun) {
  if (g_comm->world() < 2) GTEST_SKIP() << "needs mpirun -np 2";
  model_parallel_like_cpu({"model.moe.num_experts=4", "model.moe.top_k=2", "model.moe.expert_ffn=32",
                           "model.moe.balance=aux_loss", "model.moe.aux_loss_coef=0.01", "parallel.ep=2"},
                          "ep", g_device_exchanges);
}

}  // namespace
}  // namespace lmt

int main(int argc, char** argv) { return lmt::test::mpi_test_main(argc, argv, &lmt::g_comm); }
