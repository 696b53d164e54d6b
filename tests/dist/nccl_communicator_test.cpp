// The NCCL communicator (dist/nccl) on GPU memory, label gpu: in one process (a world of one, any
// machine with a GPU and NCCL) and as `mpirun -np 2` (nccl_communicator_test_2ranks: two GPUs). It
// is made the way the trainer makes it, dist::make_device_communicator("cuda", world), and checked
// against exact sums of small integers (exact in f32). The binary skips, saying why, without a GPU,
// without NCCL, or with fewer GPUs than ranks.
#include "lmt/dist/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lmt/dist/communicator.h"
#include "lmt/dist/device_communicator.h"
#include "lmt/dist/nccl/nccl_library.h"
#include "lmt/kernels/backend.h"
#include "lmt/kernels/registry.h"
#include "lmt/tensor/tensor.h"

namespace lmt::dist {
namespace {

Communicator* g_world = nullptr;  // main()'s: MPI under mpirun, else solo

// The cuda backend and the NCCL communicator over g_world, made once; skip reasons otherwise.
struct Setup {
  kernels::Backend* cuda = nullptr;
  std::unique_ptr<Communicator> nccl;
  std::string skip, failed;  // why there is none
};

Setup& setup() {
  static Setup s = [] {
    Setup r;
    auto be = kernels::find_backend("cuda");
    if (!be.ok()) {
      r.skip = be.status().ToString();
      return r;
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < g_world->world()) {
      r.skip = std::to_string(g_world->world()) + " ranks need as many GPUs; " + std::to_string(devices) + " visible";
      return r;
    }
    if (auto lib = nccl::library(); !lib.ok()) {
      r.skip = lib.status().ToString();
      return r;
    }
    r.cuda = *be;
    auto made = make_device_communicator("cuda", *g_world);
    if (!made.ok()) {
      r.failed = "making the NCCL communicator failed: " + made.status().ToString();
      return r;
    }
    r.nccl = std::move(*made);
    return r;
  }();
  return s;
}

#define SKIP_WITHOUT_NCCL() ASSERT_NE(setup().nccl, nullptr) << setup().failed

Tensor on_gpu(const std::vector<float>& host) {
  Tensor d({static_cast<int64_t>(host.size())}, DType::kF32, setup().cuda->allocator());
  Tensor h({static_cast<int64_t>(host.size())}, DType::kF32);
  std::copy(host.begin(), host.end(), h.as<float>());
  setup().cuda->copy(d, h);
  return d;
}

std::vector<float> to_host(const Tensor& d) {
  Tensor h(d.view().shape(), DType::kF32);
  setup().cuda->copy(h, d);
  return std::vector<float>(h.as<float>(), h.as<float>() + h.view().numel());
}

int rank() { return g_world->rank(); }
int world() { return g_world->world(); }

TEST(NcclCommunicator, IsTheDeviceCommunicatorOfTheWorld) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  EXPECT_STREQ(c.name(), "nccl");
  EXPECT_TRUE(c.device_buffers());
  EXPECT_EQ(c.rank(), rank());
  EXPECT_EQ(c.world(), world());
}

// x_r[i] = r + 1 + i: the sum over ranks is W(W+1)/2 + W·i.
std::vector<float> ramp(int64_t n, int r) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(r + 1 + i);
  return v;
}
float ramp_sum(int64_t i) { return static_cast<float>(world() * (world() + 1) / 2 + world() * i); }

TEST(NcclCommunicator, AllReduceSumsDeviceBuffersInOrderWithTheBackendsStream) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  const int64_t n = 1000;
  Tensor x = on_gpu(ramp(n, rank()));  // queued on the compute stream just before the collective
  ASSERT_TRUE(c.all_reduce_sum(x.as<float>(), n).ok());
  std::vector<float> got = to_host(x);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], ramp_sum(i)) << "element " << i;
  // Asynchronous: buckets of one buffer launched in turn, then waited for together.
  Tensor y = on_gpu(ramp(n, rank()));
  std::vector<std::unique_ptr<Request>> inflight;
  for (int64_t b = 0; b < n; b += 300)
    inflight.push_back(c.all_reduce_sum_async(y.as<float>() + b, std::min<int64_t>(300, n - b)));
  for (auto& r : inflight) ASSERT_TRUE(r->wait().ok());
  got = to_host(y);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], ramp_sum(i)) << "element " << i;
  // A healthy communicator has no background error (the stall watchdog polls this from its thread).
  Status background;
  std::thread([&] { background = c.async_error(); }).join();
  EXPECT_TRUE(background.ok()) << background.ToString();
}

// One count per rank: first + step · p (step 0: equal parts).
std::vector<int64_t> parts(int64_t first, int64_t step) {
  std::vector<int64_t> counts(static_cast<size_t>(world()));
  for (int p = 0; p < world(); ++p) counts[static_cast<size_t>(p)] = first + step * p;
  return counts;
}

// A buffer of the parts' total (offsets `off`) with only this rank's part set: 1000 · rank + i at
// element i, -1 elsewhere.
std::vector<float> own_part(const std::vector<int64_t>& off) {
  std::vector<float> mine(static_cast<size_t>(off.back()), -1.0f);
  for (int64_t i = off[static_cast<size_t>(rank())]; i < off[static_cast<size_t>(rank()) + 1]; ++i)
    mine[static_cast<size_t>(i)] = static_cast<float>(1000 * rank() + i);
  return mine;
}

TEST(NcclCommunicator, ReduceScatterWithEqualAndUnequalParts) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  for (bool equal : {true, false}) {
    const std::vector<int64_t> counts = equal ? parts(64, 0) : parts(37, 11);
    const std::vector<int64_t> off = offsets_of(counts);
    Tensor send = on_gpu(ramp(off.back(), rank()));
    Tensor recv = on_gpu(std::vector<float>(static_cast<size_t>(counts[static_cast<size_t>(rank())]), -1.0f));
    ASSERT_TRUE(c.reduce_scatter_sum(send.as<float>(), recv.as<float>(), counts).ok()) << "equal " << equal;
    const std::vector<float> got = to_host(recv);
    for (int64_t i = 0; i < counts[static_cast<size_t>(rank())]; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i)], ramp_sum(off[static_cast<size_t>(rank())] + i))
          << "equal " << equal << " element " << i;
  }
}

TEST(NcclCommunicator, AllGatherInPlaceWithEqualAndUnequalParts) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  for (bool equal : {true, false}) {
    const std::vector<int64_t> counts = equal ? parts(50, 0) : parts(13, 7);
    const std::vector<int64_t> off = offsets_of(counts);
    Tensor data = on_gpu(own_part(off));
    ASSERT_TRUE(c.all_gather(data.as<float>(), counts).ok());
    const std::vector<float> got = to_host(data);
    for (int p = 0; p < world(); ++p)
      for (int64_t i = off[static_cast<size_t>(p)]; i < off[static_cast<size_t>(p) + 1]; ++i)
        ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(1000 * p + i))
            << "equal " << equal << " element " << i;
  }
}

// The per-rank rooted path (grouped ncclReduce / ncclBroadcast) of unequal parts, forced for equal
// ones, so that one GPU runs it too.
TEST(NcclCommunicator, RootedPartsGiveTheSameResults) {
  SKIP_WITHOUT_NCCL();
  auto* nccl = dynamic_cast<nccl::NcclCommunicator*>(setup().nccl.get());
  ASSERT_NE(nccl, nullptr);
  nccl->use_rooted_parts(true);
  const std::vector<int64_t> counts = parts(96, 0);
  const std::vector<int64_t> off = offsets_of(counts);
  Tensor send = on_gpu(ramp(off.back(), rank()));
  Tensor recv = on_gpu(std::vector<float>(96, -1.0f));
  const Status rs = nccl->reduce_scatter_sum(send.as<float>(), recv.as<float>(), counts);
  Tensor data = on_gpu(own_part(off));
  const Status ag = nccl->all_gather(data.as<float>(), counts);
  nccl->use_rooted_parts(false);
  ASSERT_TRUE(rs.ok()) << rs.ToString();
  ASSERT_TRUE(ag.ok()) << ag.ToString();
  const std::vector<float> got = to_host(recv);
  for (int64_t i = 0; i < 96; ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], ramp_sum(off[static_cast<size_t>(rank())] + i)) << "element " << i;
  const std::vector<float> gathered = to_host(data);
  for (int p = 0; p < world(); ++p)
    for (int64_t i = off[static_cast<size_t>(p)]; i < off[static_cast<size_t>(p) + 1]; ++i)
      ASSERT_EQ(gathered[static_cast<size_t>(i)], static_cast<float>(1000 * p + i)) << "element " << i;
}

TEST(NcclCommunicator, BroadcastFromEveryRoot) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  for (int root = 0; root < world(); ++root) {
    Tensor data = on_gpu(ramp(100, rank() == root ? 50 + root : 0));
    ASSERT_TRUE(c.broadcast(data.as<float>(), 100 * 4, root).ok());
    const std::vector<float> got = to_host(data);
    for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(51 + root + i));
  }
}

TEST(NcclCommunicator, SendAndReceiveBetweenTwoRanks) {
  SKIP_WITHOUT_NCCL();
  if (world() < 2) GTEST_SKIP() << "needs two ranks (nccl_communicator_test_2ranks)";
  Communicator& c = *setup().nccl;
  Tensor data = on_gpu(ramp(256, rank() == 0 ? 7 : 0));
  if (rank() == 0) {
    ASSERT_TRUE(c.send_async(data.as<float>(), 256 * 4, 1)->wait().ok());
  } else if (rank() == 1) {
    ASSERT_TRUE(c.recv(data.as<float>(), 256 * 4, 0).ok());
    const std::vector<float> got = to_host(data);
    for (int64_t i = 0; i < 256; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(8 + i));
  }
}

// Expert parallelism's exchange: rank r sends (r+1)·(p+2) floats to rank p, valued 1000·r + 10·p + i;
// this rank's own part is a device copy, the others grouped ncclSend/ncclRecv (one GPU: the copy).
TEST(NcclCommunicator, AllToAllVMovesEachPeersPartOnTheGpu) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  const int P = world(), r = rank();
  std::vector<int64_t> send_n(static_cast<size_t>(P)), recv_n(static_cast<size_t>(P));
  std::vector<float> send;
  for (int p = 0; p < P; ++p) {
    send_n[static_cast<size_t>(p)] = (r + 1) * (p + 2);
    recv_n[static_cast<size_t>(p)] = (p + 1) * (r + 2);
    for (int64_t i = 0; i < send_n[static_cast<size_t>(p)]; ++i) send.push_back(static_cast<float>(1000 * r + 10 * p + i));
  }
  const std::vector<int64_t> recv_off = offsets_of(recv_n);
  Tensor d_send = on_gpu(send);
  Tensor d_recv = on_gpu(std::vector<float>(static_cast<size_t>(recv_off.back()), -1.0f));
  auto bytes = [](std::vector<int64_t> n) {
    for (int64_t& x : n) x *= static_cast<int64_t>(sizeof(float));
    return n;
  };
  const Status st = c.all_to_all_v(d_send.as<float>(), bytes(send_n), d_recv.as<float>(), bytes(recv_n));
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::vector<float> got = to_host(d_recv);
  for (int p = 0; p < P; ++p)
    for (int64_t i = 0; i < recv_n[static_cast<size_t>(p)]; ++i)
      ASSERT_EQ(got[static_cast<size_t>(recv_off[static_cast<size_t>(p)] + i)], static_cast<float>(1000 * p + 10 * r + i))
          << "from rank " << p << " element " << i;
}

// The pipeline's exchange: both ranks send to each other first and receive after, as one pair per
// rank (one NCCL group). As two separate NCCL calls this waits forever.
TEST(NcclCommunicator, SendRecvPairsBetweenTwoRanksWhoBothSendFirst) {
  SKIP_WITHOUT_NCCL();
  if (world() < 2) GTEST_SKIP() << "needs two ranks (nccl_communicator_test_2ranks)";
  if (rank() > 1) return;
  Communicator& c = *setup().nccl;
  const int peer = 1 - rank();
  Tensor out = on_gpu(ramp(1 << 20, 10 * rank())), in = on_gpu(std::vector<float>(1 << 20, -1.0f));
  const Status st = c.send_recv_async(out.as<float>(), (1 << 20) * 4, peer, in.as<float>(), (1 << 20) * 4, peer)->wait();
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::vector<float> got = to_host(in);
  const std::vector<float> want = ramp(1 << 20, 10 * peer);
  for (size_t i = 0; i < got.size(); i += 4099) ASSERT_EQ(got[i], want[i]) << "element " << i;
}

TEST(NcclCommunicator, HostBuffersGoThroughTheHostCommunicator) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  double d = rank() + 1.0;
  ASSERT_TRUE(c.all_reduce_sum(&d, 1).ok());
  EXPECT_EQ(d, world() * (world() + 1) / 2.0);
  std::vector<float> h = ramp(10, rank());
  ASSERT_TRUE(c.all_reduce_sum(h.data(), 10).ok());
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(h[static_cast<size_t>(i)], ramp_sum(i));
  EXPECT_TRUE(c.barrier().ok());
}

TEST(NcclCommunicator, MixedBuffersAreRefused) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  Tensor send = on_gpu(ramp(2 * world(), rank()));
  std::vector<float> recv(2);
  const Status st =
      c.reduce_scatter_sum(send.as<float>(), recv.data(), std::vector<int64_t>(static_cast<size_t>(world()), 2));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
}

TEST(NcclCommunicator, ASplitGroupHasItsOwnRanksAndReducesAmongThem) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  auto group = c.split(0, world() - 1 - rank());  // every rank, ranked in reverse
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  EXPECT_STREQ((*group)->name(), "nccl");
  EXPECT_EQ((*group)->world(), world());
  EXPECT_EQ((*group)->rank(), world() - 1 - rank());
  Tensor x = on_gpu(std::vector<float>(16, static_cast<float>((*group)->rank() + 1)));
  ASSERT_TRUE((*group)->all_reduce_sum(x.as<float>(), 16).ok());
  const std::vector<float> got = to_host(x);
  for (float v : got) EXPECT_EQ(v, static_cast<float>(world() * (world() + 1) / 2));
}

// The collective reads what the compute stream wrote just before it, and the compute stream's next
// op reads what the collective wrote, with no host wait in between: a large device-to-device copy
// is queued, then an out-of-place reduce-scatter of its result, then the copy back. On one rank the
// reduce-scatter is a copy, so without the ordering events its output would be the zeros it read.
TEST(NcclCommunicator, CollectivesAreOrderedWithTheComputeStream) {
  SKIP_WITHOUT_NCCL();
  Communicator& c = *setup().nccl;
  kernels::Backend& be = *setup().cuda;
  const int64_t part = int64_t{1} << 24, n = part * world();  // 64 MiB a rank
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>(i % 1000 + rank());
  Tensor filled = on_gpu(host);
  Tensor send({n}, DType::kF32, be.allocator()), recv({part}, DType::kF32, be.allocator());
  be.copy(send, filled);  // device to device: queued, not waited for
  ASSERT_TRUE(
      c.reduce_scatter_sum(send.as<float>(), recv.as<float>(), std::vector<int64_t>(static_cast<size_t>(world()), part))
          .ok());
  const std::vector<float> got = to_host(recv);
  const float ranks = static_cast<float>(world() * (world() - 1) / 2);
  for (int64_t i = 0; i < part; i += 4099) {
    const int64_t g = rank() * part + i;
    ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(world() * (g % 1000)) + ranks) << "element " << i;
  }
  ASSERT_EQ(got.back(), static_cast<float>(world() * ((rank() * part + part - 1) % 1000)) + ranks);
}

}  // namespace
}  // namespace lmt::dist

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = lmt::dist::make_communicator();
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 1;
  }
  lmt::dist::g_world = world->get();
  // Without a GPU, NCCL, or a GPU per rank the whole binary is skipped (ctest's SKIP_REGULAR_EXPRESSION
  // matches this line); a failure to make the communicator where all are present fails every test.
  const lmt::dist::Setup& s = lmt::dist::setup();
  if (!s.skip.empty()) {
    std::printf("nccl_communicator_test: skipped: %s\n", s.skip.c_str());
    (void)(*world)->barrier();
    return 0;
  }
  const int rc = RUN_ALL_TESTS();
  lmt::dist::setup().nccl.reset();  // before the MPI communicator it wraps
  // Every rank leaves together (a rank that skipped must not finalise MPI under a peer's collective).
  (void)(*world)->barrier();
  return rc;
}
